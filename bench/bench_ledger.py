"""The bound-pod ledger at scale (issue 16): 5,000 GPU nodes x 8 bound pods (40,000 pods) and a churn
of 100 pod changes per second. In-process, on the real code: pod JSON as the API server sends it in
watch events, decoded with orjson and fed to PodLedger.upsert exactly as kube_watch does; the
GpuState takes them off what the nodes offer on every change; SchedulerApi answers filter and
prioritize at 5,000 names.

Measured, side by side in one run:
- ledger memory: tracemalloc's growth while the 40,000 pods are loaded (the slim records, the
  per-node index, the offered summaries that change);
- watch CPU: per pod event (decode + slim + upsert + the offered summary rebuilt), and what 100
  events/s cost as a share of one core (the HTTP transport of the watch is not counted);
- filter and prioritize at 5,000 names (sequential, in-process, alternating variants per round):
  the same fleet and pod without the ledger, with 40,000 pods the agents already attribute
  (steady state), and with 40,000 pods none is attributed yet (the worst case: every node has
  8 pending pods); p50 over every call, p99 the median of the rounds' p99s, and their ratios. The
  garbage collector is tuned as the extender tunes it (gpuextender/extender/app.py).

Run: `.venv/bin/python bench/bench_ledger.py [--quick]`.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson
from benchlib import OUT_DIR, rounds_latency_ms

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.app import _tune_gc as tune_gc
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import parse_extender_args
from gpuextender.extender.settings import (
    ApiSettings,
    DecisionPolicy,
)
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from gpuextender.v1 import gpu_state_pb2 as pb

NOW = 1000.0
GIB = 1024**3


def pod_json(i: int, node: str, phase: str = "Running") -> bytes:
    """A bound pod as a watch event's object: the size of a real one (labels, env, probes)."""
    return orjson.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"llm-{i:05d}",
                "namespace": f"team-{i % 40}",
                "uid": f"uid-{i:08d}",
                "resourceVersion": str(100000 + i),
                "creationTimestamp": "2026-11-25T10:00:00Z",
                "labels": {
                    "app": "llm",
                    "ome.io/inferenceservice": f"isvc-{i % 300}",
                    "component": "engine",
                    "pod-template-hash": "5d9c7f8b6",
                },
                "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-25T09:00:00Z"},
            },
            "spec": {
                "nodeName": node,
                "schedulerName": "gpu-scheduler",
                "serviceAccountName": "default",
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/llm:1.2.3",
                        "args": ["--model", "/models/llama", "--tensor-parallel-size", "1"],
                        "env": [{"name": f"VAR_{k}", "value": "x" * 20} for k in range(8)],
                        "resources": {
                            "limits": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"},
                            "requests": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"},
                        },
                        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
                    }
                ],
            },
            "status": {
                "phase": phase,
                "podIP": "10.0.0.1",
                "hostIP": "10.1.0.1",
                "conditions": [{"type": t, "status": "True"} for t in ("PodScheduled", "Initialized", "Ready")],
            },
        }
    )


def node_report(name: str, holders: list[str]) -> pb.NodeReport:
    """8 idle GPUs, GPU i held by pod holders[i] (namespace/name) when given; allocation known."""
    r = pb.NodeReport(node_name=name, sequence=1, agent_version="bench", allocation_source=pb.ALLOCATION_KUBELET)
    r.sample_time.seconds = 1000
    for i in range(8):
        g = r.gpus.add(
            index=i,
            uuid=f"GPU-{name}-{i}",
            name="NVIDIA H100 80GB HBM3",
            healthy=True,
            utilization_gpu_percent=2 if i % 2 else 60,
            memory_total_bytes=80 * GIB,
            memory_used_bytes=GIB,
        )
        if i < len(holders):
            ns, pod = holders[i].split("/")
            g.holders.add(
                namespace=ns, pod=pod, container="main", resource_name="nvidia.com/gpu", device_id=f"GPU-{name}-{i}"
            )
    return r


def world(
    nodes: int, pods_per_node: int, attributed: bool, with_ledger: bool
) -> tuple[SchedulerApi, PodLedger, list[bytes]]:
    state = GpuState(IdleRule())
    ledger = PodLedger(("nvidia.com/gpu",), clock=lambda: NOW)
    api = SchedulerApi(
        state,
        ExtenderMetrics(state),
        ApiSettings(DecisionPolicy(), shortlist=100),
        clock=lambda: NOW,
        sources=ClusterSources(ledger=ledger if with_ledger else None),
    )
    events = []
    for n in range(nodes):
        name = f"node-{n:05d}"
        keys = []
        for k in range(pods_per_node):
            i = n * pods_per_node + k
            events.append(pod_json(i, name))
            keys.append(f"team-{i % 40}/llm-{i:05d}")
        state.ingest(node_report(name, keys if attributed else []), NOW)
    ledger.replace_all(POD_KIND, [])
    return api, ledger, events


def load(ledger: PodLedger, events: list[bytes]) -> float:
    """The LIST (and every relist after a 410): decode each item, one replace_all."""
    started = time.process_time()
    ledger.replace_all(POD_KIND, [orjson.loads(raw) for raw in events])
    return time.process_time() - started


def churn_cost(ledger: PodLedger, events: list[bytes], changes: int) -> float:
    """CPU seconds per event of status changes to pods already in the ledger (phase flips)."""
    rng = random.Random(1)
    picked = [orjson.loads(events[rng.randrange(len(events))]) for _ in range(changes)]
    flipped = []
    for obj in picked:
        obj["status"]["phase"] = "Pending" if obj["status"]["phase"] == "Running" else "Running"
        flipped.append(orjson.dumps(obj))
    started = time.process_time()
    for raw in flipped:
        ledger.upsert(POD_KIND, orjson.loads(raw))
    return (time.process_time() - started) / changes


def request(names: list[str]) -> bytes:
    pod = {
        "metadata": {"name": "new", "namespace": "ml", "uid": "u-new"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
    }
    return orjson.dumps({"Pod": pod, "NodeNames": names})


def time_calls(api: SchedulerApi, body: bytes, calls: int) -> tuple[list[float], list[float]]:
    f_times, p_times = [], []
    for _ in range(calls):
        t0 = time.perf_counter()
        answer = api.filter(parse_extender_args(body))
        t1 = time.perf_counter()
        api.prioritize(
            parse_extender_args(orjson.dumps({"Pod": orjson.loads(body)["Pod"], "NodeNames": answer["NodeNames"]}))
        )
        t2 = time.perf_counter()
        f_times.append(t1 - t0)
        p_times.append(t2 - t1)
    return f_times, p_times


TARGET_RATIO = 1.1  # issue 16: filter/prioritize p99 with the ledger <= 1.1x without, same run


def run(quick: bool = False) -> dict[str, Any]:
    nodes, per_node = (500, 8) if quick else (5000, 8)
    calls, rounds = (20, 2) if quick else (300, 7)
    gc.collect()

    # Memory: the ledger's records and index, and the offered summaries they change.
    api, ledger, events = world(nodes, per_node, attributed=False, with_ledger=True)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    load(ledger, events)
    gc.collect()
    ledger_bytes = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    # CPU of the LIST, without tracemalloc's own cost: the same pods into a fresh world's ledger.
    timed_api, timed_ledger, timed_events = world(nodes, per_node, attributed=False, with_ledger=True)
    load_cpu = load(timed_ledger, timed_events)
    del timed_api, timed_ledger, timed_events
    per_event = churn_cost(ledger, events, 5000)

    variants = {
        "no ledger": world(nodes, per_node, attributed=True, with_ledger=False)[0],
        "ledger, attributed": None,
        "ledger, all pending": api,
    }
    steady, steady_ledger, steady_events = world(nodes, per_node, attributed=True, with_ledger=True)
    load(steady_ledger, steady_events)
    variants["ledger, attributed"] = steady
    del events, steady_events
    tune_gc()  # as the extender runs: start-up objects frozen out of collections, young ones less often
    body = request([f"node-{n:05d}" for n in range(nodes)])
    results: dict[str, dict[str, list[list[float]]]] = {k: {"filter": [], "prioritize": []} for k in variants}
    for r in range(rounds):
        order = list(variants)[r % len(variants) :] + list(variants)[: r % len(variants)]
        for key in order:
            v = variants[key]
            assert v is not None
            time_calls(v, body, 3)  # warm
            f, pr = time_calls(v, body, calls)
            results[key]["filter"].append(f)
            results[key]["prioritize"].append(pr)

    out: dict[str, Any] = {
        "nodes": nodes,
        "pods": nodes * per_node,
        "ledger_pods": len(ledger),
        "ledger_mib": round(ledger_bytes / 2**20, 1),
        "ledger_bytes_per_pod": round(ledger_bytes / max(1, len(ledger))),
        "load_cpu_us_per_pod": round(load_cpu / len(ledger) * 1e6, 1),
        "churn_cpu_us_per_event": round(per_event * 1e6, 1),
        "churn_100_per_s_core_percent": round(per_event * 100 * 100, 2),
        "latency_ms": rounds_latency_ms(results),
    }
    base_f, base_p = out["latency_ms"]["no ledger"]["filter"], out["latency_ms"]["no ledger"]["prioritize"]
    out["ratios_p99"] = {
        k: {
            "filter": round(d["filter"]["p99"] / base_f["p99"], 2),
            "prioritize": round(d["prioritize"]["p99"] / base_p["p99"], 2),
        }
        for k, d in out["latency_ms"].items()
    }
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "ledger.json").write_text(json.dumps(out, indent=1))
    return out


def report(out: dict[str, Any]) -> list[str]:
    lines = [
        f"ledger: {out['ledger_pods']} pods on {out['nodes']} nodes: {out['ledger_mib']} MiB (tracemalloc: records, "
        f"index and the offered summaries they change; {out['ledger_bytes_per_pod']} B/pod)",
        f"watch CPU: list {out['load_cpu_us_per_pod']} us/pod; churn {out['churn_cpu_us_per_event']} us/event: "
        f"100 changes/s = {out['churn_100_per_s_core_percent']} % of a core (decode + slim + upsert + offered "
        "summary)",
        f"{'variant':<22} {'filter p50/p99 ms':>18} {'prioritize p50/p99 ms':>22} {'p99 ratio f/p':>14}",
    ]
    for k, d in out["latency_ms"].items():
        ratio = out["ratios_p99"][k]
        lines.append(
            f"{k:<22} {d['filter']['p50']:>8.2f} / {d['filter']['p99']:<7.2f} {d['prioritize']['p50']:>10.2f} / "
            f"{d['prioritize']['p99']:<9.2f} {ratio['filter']:>6.2f} / {ratio['prioritize']:<5.2f}"
        )
    return lines


def markdown(out: dict[str, Any]) -> list[str]:
    return [
        "## The bound-pod ledger at scale",
        "",
        "`bench/bench_ledger.py`, in-process on the real code: 5,000 GPU nodes x 8 bound pods (40,000 pods as "
        "the API server sends them in watch events: decoded with orjson, fed to PodLedger as kube_watch does), "
        "a churn of pod changes (phase flips), and filter + prioritize at 5,000 names, side by side: no "
        "ledger, the 40,000 pods already attributed by the agents (steady state), and none attributed yet "
        "(every node with 8 pending pods; the worst case). The watch's HTTP transport is not counted.",
        "",
        "```",
        *report(out),
        "```",
    ]


def attributed_ratio_ok(out: dict[str, Any]) -> bool:
    r = out["ratios_p99"]["ledger, attributed"]
    return r["filter"] <= TARGET_RATIO and r["prioritize"] <= TARGET_RATIO


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 nodes, fewer calls")
    args = parser.parse_args(argv)
    print("\n".join(report(run(args.quick))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
