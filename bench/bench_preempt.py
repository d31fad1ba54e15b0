"""Benchmark: kube-scheduler's preempt verb (ProcessPreemption, issue 51) at 5,000 nodes, in-process.

Target (issue 51): ProcessPreemption p99 <= 10 ms for 500 candidate nodes of 10 victims each
(DefaultPreemption's sample at 5,000 nodes: minCandidateNodesPercentage 10 %); 100 candidates
(its minimum sample, minCandidateNodesAbsolute) is run beside it for the ratio.

What it builds, on the real code (wired as tests/extender/scheduler/test_preempt_verb.py's `Fleet`):
- a GpuState of 5,000 nodes of 8 GPUs, one agent report each carrying the kubelet's allocation
  (`pb.ALLOCATION_KUBELET`, per-GPU `holders`), the extender's default flags (`build_config`) and an
  InventoryView with 8 allocatable GPUs per node;
- a PodLedger with every bound GPU pod (loaded with one replace_all, as the watch's LIST), the
  ledger given to `SchedulerApi` as the extender wires it. Every GPU of every node
  is in use, by low-priority pods (priority 10 or 20, distinct start times) or outside Kubernetes;
  by kind, over the node's index:
    full        8 one-GPU pods (some of their GPUs busy, some idle but held);
    mixed       two 2-GPU pods and four one-GPU pods;
    failing     8 one-GPU pods, GPU 0 (GPUs 0-1 on every other one) failing (XID 79: unhealthy),
                whose pods are the newest (kube-scheduler's first victims);
    outside-2   GPUs 0-1 busy outside Kubernetes (no pod holds them), 6 one-GPU pods;
    outside-5   GPUs 0-4 busy outside Kubernetes, 3 one-GPU pods;
  plus CPU-only pods (not in the ledger: it keeps only pods that request GPUs).
- bodies as kube-scheduler sends them with nodeCacheCapable: true (`"NodeNameToVictims": null,
  "NodeNameToMetaVictims": {node: {"Pods": [{"UID": ...}], "NumPDBViolations": 0}}`), the
  preemptor the fixture's Pod (tests/fixtures/extender-requests/) at priority 1000 asking for 8 GPUs
  (or 4). Victims per candidate as kube-scheduler's dry run picks them with its own integer count
  of nvidia.com/gpu (GPUs busy outside Kubernetes count free; failing ones count): the least
  important GPU pods (lowest priority, then latest start) until the pod fits, then CPU-only pods up
  to 10 victims (the preemptor's CPU and memory). Candidates are a random sample of the 5,000 nodes;
  8 different samples per variant, cycled.

What it times, per call, as the HTTP handler (http_api.build_app's `preempt`) makes it, from body
bytes to answer bytes, the collector tuned as at start-up (app._tune_gc) and paused as the handler
pauses it: `parse_preemption_args` + `SchedulerApi.answer_preempt` (collector paused), then
`wire.encode(answer)`; and, separately, the `record()` step the server runs once the answer is sent
(metrics, the INFO log line to /dev/null at the extender's default --log-level info, the plan kept
for explain). R rounds (default 3) of N calls (default 100) per variant, the variants' order
rotating per round; p50 / p99 / max over all of a variant's calls, the p99 of each round, and the
cores other processes kept busy meanwhile (/proc/stat less this process: on a small shared VM, the
first thing to read next to a tail). Then each step of the call timed alone (median ms: orjson.loads,
parse, answer_preempt, encode, record) for where the time goes. Raw figures: bench/out/preempt.json.

Every answer is checked outside the timed region against the fleet: each candidate's action
(kept / extended / dropped) is the one its kind implies for the pod's size, an answered node names
at least one victim, kept victims are kube-scheduler's, extended ones add only lower-priority GPU
pods of that node. Any deviation aborts the run. For the 8-GPU pod nothing can be extended
(kube-scheduler already names every GPU pod of a node it proposes), so its split is kept / dropped;
the 4-GPU pod has all three.

Last, the memory the plans kept for explain hold (preemption_record.py keeps each preemptor's latest
plan, at most MAX_PODS of them and MAX_NODES candidates in all): tracemalloc over 20 distinct
preemptors at 500 candidates, and what that makes at the bound.

`--heartbeats`: before each timed call, every candidate node of its body gets its next report, reading
as the last (a heartbeat: new summary objects, `GpuState.ingest`), outside the timed region, and
each answer is checked after it: a call a heartbeat after the node's last, where the kept tables go
on over reports that read alike (preempt_victims.room_key). Without it, the nodes' summaries stay the
same objects between calls (a preemption storm within one heartbeat).

`--profile` then runs cProfile over 100 calls of the 500-candidate 8-GPU variant and prints the
top functions by own and cumulative time.

Run: `.venv/bin/python bench/bench_preempt.py [--nodes 5000] [--candidates 500,100] [--gpus 8,4]
[--rounds 3] [--calls 100] [--heartbeats] [--profile] [--quick]` (not part of `./dev.sh bench`'s
run_all.py, like bench_groups.py).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import datetime as dt
import gc
import json
import logging
import os
import pstats
import random
import statistics
import sys
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_extender import encode as go_json
from bench_extender import load_pod
from benchlib import OUT_DIR, BackgroundLoad, BenchError, machine_facts, percentile

from gpuextender.common.logs import configure_logging
from gpuextender.extender.app import _tune_gc as tune_gc
from gpuextender.extender.decide.preempt_victims import ACTIONS, DROPPED, EXTENDED, KEPT
from gpuextender.extender.flags import build_config
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi, collector_paused
from gpuextender.extender.scheduler.preemption_record import MAX_NODES, MAX_PODS, RecentPreemptions
from gpuextender.extender.scheduler.wire import BYTES_PER_CONTAINER, encode, parse_preemption_args
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from gpuextender.v1 import gpu_state_pb2 as pb

NOW = 1000.0  # the extender's clock, fixed: every report fresh
GIB = 1024**3
GPUS = 8
VICTIMS = 10  # per candidate (issue 51's shape)
HIGH, LOWS = 1000, (10, 20)
NS = "batch"
SAMPLES = 8  # different candidate samples per variant, cycled
SEED = 20261207
TARGET_P99_MS = 10.0
TARGET_CANDIDATES = 500
STARTED = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)
KINDS = ("full", "mixed", "failing", "outside-2", "outside-5")
# The action each kind's candidates must get, per pod size (module docstring).
EXPECTED = {
    8: {"full": KEPT, "mixed": KEPT, "failing": DROPPED, "outside-2": DROPPED, "outside-5": DROPPED},
    4: {"full": KEPT, "mixed": KEPT, "failing": EXTENDED, "outside-2": EXTENDED, "outside-5": DROPPED},
}


@dataclass(frozen=True, slots=True)
class GpuPod:
    name: str
    gpus: tuple[int, ...]  # the GPU indices the kubelet gave it
    priority: int
    started: float  # Unix seconds
    uid: str


def uid_of(name: str) -> str:
    """A UID as the API server writes it (a UUID), the same every run."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{NS}/{name}"))


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    kind: str
    states: tuple[str, ...]  # per GPU: idle, busy, failing
    pods: tuple[GpuPod, ...]
    cpu_pods: tuple[str, ...]  # UIDs of CPU-only pods (victims for CPU and memory; not in the ledger)

    def holder(self, index: int) -> GpuPod | None:
        return next((p for p in self.pods if index in p.gpus), None)

    def k8s_free(self) -> int:
        """GPUs kube-scheduler counts free: allocatable less its pods' requests."""
        return GPUS - sum(len(p.gpus) for p in self.pods)


def kind_of(i: int) -> str:
    if i % 50 == 49:
        return "outside-5"
    return {6: "mixed", 7: "failing", 8: "outside-2"}.get(i % 10, "full")


def make_node(i: int) -> NodeSpec:
    name = f"node-{i:05d}"
    kind = kind_of(i)
    if kind == "mixed":
        layout: list[tuple[int, ...]] = [(0, 1), (2, 3), (4,), (5,), (6,), (7,)]
    elif kind == "outside-2":
        layout = [(g,) for g in range(2, GPUS)]
    elif kind == "outside-5":
        layout = [(g,) for g in range(5, GPUS)]
    else:
        layout = [(g,) for g in range(GPUS)]
    failing = {0, 1} if kind == "failing" and i % 20 == 17 else {0} if kind == "failing" else set()
    pods = []
    for k, gpus in enumerate(layout):
        # Distinct start times; the failing GPUs' pods the newest and of the lowest priority.
        hours = 100 + ((i * 7 + k * 13) % 90)
        if failing & set(gpus):
            hours = k
        prio = LOWS[0] if failing & set(gpus) else LOWS[(i + k) % 2]
        started = (STARTED - dt.timedelta(hours=hours)).timestamp()
        pods.append(GpuPod(f"{name}-p{k}", gpus, prio, started, uid_of(f"{name}-p{k}")))
    states = []
    for g in range(GPUS):
        if g in failing:
            states.append("failing")
        elif any(g in p.gpus for p in pods):
            states.append("idle" if (i + g) % 3 == 0 else "busy")  # idle but held, or running work
        else:
            states.append("busy")  # busy outside Kubernetes: no pod holds it
    cpu = tuple(uid_of(f"{name}-cpu{k}") for k in range(VICTIMS))
    return NodeSpec(name, kind, tuple(states), tuple(pods), cpu)


def node_report(node: NodeSpec) -> pb.NodeReport:
    r = pb.NodeReport(node_name=node.name, sequence=1, agent_version="bench", allocation_source=pb.ALLOCATION_KUBELET)
    r.sample_time.seconds = int(NOW)
    for i, state in enumerate(node.states):
        device = f"GPU-{node.name}-{i}"
        g = r.gpus.add(index=i, uuid=device, name="NVIDIA H100 80GB HBM3", healthy=state != "failing")
        if state == "failing":
            g.unhealthy_reasons.append("XidCriticalError79")
        else:
            busy = state == "busy"
            g.utilization_gpu_percent = 95 if busy else 0
            g.memory_total_bytes = 80 * GIB
            g.memory_used_bytes = int(80 * GIB * (0.6 if busy else 0.01))
        holder = node.holder(i)
        if holder is not None:
            g.holders.add(
                namespace=NS, pod=holder.name, container="main", resource_name="nvidia.com/gpu", device_id=device
            )
    return r


def pod_object(node: NodeSpec, p: GpuPod) -> dict[str, Any]:
    """A bound pod as the watch's LIST gives it (the fields the ledger reads, and a few more)."""
    started = dt.datetime.fromtimestamp(p.started, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    gpus = str(len(p.gpus))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": p.name, "namespace": NS, "uid": p.uid, "labels": {"app": "train"}},
        "spec": {
            "nodeName": node.name,
            "priority": p.priority,
            "priorityClassName": f"low-{p.priority}",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train:1.0",
                    "resources": {
                        "limits": {"nvidia.com/gpu": gpus, "cpu": "8"},
                        "requests": {"nvidia.com/gpu": gpus, "cpu": "8"},
                    },
                }
            ],
        },
        "status": {"phase": "Running", "startTime": started},
    }


def k8s_victims(node: NodeSpec, gpus: int) -> tuple[str, ...]:
    """kube-scheduler's victims for a pod of `gpus` GPUs (its dry run reprieves the most important
    pods first: the victims are the least important), then CPU-only pods up to VICTIMS."""
    need = max(0, gpus - node.k8s_free())
    chosen: list[str] = []
    for p in sorted(node.pods, key=lambda p: (p.priority, -p.started)):
        if need <= 0:
            break
        chosen.append(p.uid)
        need -= len(p.gpus)
    return tuple(chosen) + node.cpu_pods[: max(0, VICTIMS - len(chosen))]


def preemptor(gpus: int) -> dict[str, Any]:
    pod = copy.deepcopy(load_pod())
    pod["metadata"]["name"] = f"preemptor-{gpus}"
    pod["metadata"]["uid"] = uid_of(f"preemptor-{gpus}")
    for section in ("limits", "requests"):
        pod["spec"]["containers"][0]["resources"][section]["nvidia.com/gpu"] = str(gpus)
    pod["spec"]["priority"] = HIGH
    pod["spec"]["priorityClassName"] = "high"
    return pod


def body(pod: dict[str, Any], nodes: list[NodeSpec], gpus: int) -> bytes:
    meta = {n.name: {"Pods": [{"UID": uid} for uid in k8s_victims(n, gpus)], "NumPDBViolations": 0} for n in nodes}
    return go_json({"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": meta})


@dataclass
class World:
    api: SchedulerApi
    ledger: PodLedger
    nodes: dict[str, NodeSpec]
    max_candidates: int
    max_containers: int
    build_s: float


def build(count: int) -> World:
    started = time.perf_counter()
    config = build_config(["--log-level", "info"])
    nodes = [make_node(i) for i in range(count)]
    view = InventoryView(node_labels={n.name: {} for n in nodes}, allocatable_gpus={n.name: GPUS for n in nodes})
    state = GpuState(config.idle_rule)
    ledger = PodLedger(tuple(config.api.gpu_resources), clock=lambda: NOW)
    api = SchedulerApi(
        state,
        ExtenderMetrics(state),
        config.api,
        inventory=lambda: view,
        clock=lambda: NOW,
        sources=ClusterSources(ledger=ledger),
    )
    for n in nodes:
        state.ingest(node_report(n), NOW)
    ledger.replace_all(POD_KIND, [pod_object(n, p) for n in nodes for p in n.pods])
    expected_pods = sum(len(n.pods) for n in nodes)
    if len(ledger) != expected_pods:
        raise BenchError(f"ledger holds {len(ledger)} pods, expected {expected_pods}")
    settings = api.settings
    return World(
        api,
        ledger,
        {n.name: n for n in nodes},
        settings.max_candidates,
        settings.max_body_bytes // BYTES_PER_CONTAINER,
        time.perf_counter() - started,
    )


@dataclass
class Variant:
    candidates: int
    gpus: int
    bodies: list[bytes]
    uid: str
    split: Counter[str]  # actions over one pass through the bodies (per call: / len(bodies))
    nodes: list[list[str]]  # each body's candidate nodes

    @property
    def name(self) -> str:
        return f"{self.candidates}x{self.gpus}"


def call(world: World, raw: bytes) -> tuple[bytes, Any, float, float]:
    """One call as the server makes it: (answer bytes, the record step, ms to the answer, ms of record)."""
    t0 = time.perf_counter()
    with collector_paused():
        args = parse_preemption_args(raw, max_candidates=world.max_candidates, max_containers=world.max_containers)
        answer, record = world.api.answer_preempt(args)
        del args
    out = encode(answer)
    t1 = time.perf_counter()
    with collector_paused():  # http_api._recorded: the loop's next step after the answer is sent
        record()
    t2 = time.perf_counter()
    return out, answer, (t1 - t0) * 1000, (t2 - t1) * 1000


def check(world: World, v: Variant, raw: bytes, out: bytes) -> Counter[str]:
    """The answer and the kept plan against what the fleet implies (module docstring)."""
    answer = json.loads(out)["NodeNameToMetaVictims"]
    sent = json.loads(raw)["NodeNameToMetaVictims"]
    found = world.api.preemptions.latest(v.uid, NOW)
    if found is None or len(found.plan.nodes) != len(sent):
        raise BenchError(f"{v.name}: no plan kept for every candidate")
    split: Counter[str] = Counter()
    for plan in found.plan.nodes:
        node = world.nodes[plan.node]
        want = EXPECTED[v.gpus][node.kind]
        proposed = tuple(p["UID"] for p in sent[plan.node]["Pods"])
        if plan.action != want:
            raise BenchError(f"{v.name}: {plan.node} ({node.kind}) {plan.action}, expected {want}: {plan.why}")
        split[plan.action] += 1
        got = tuple(p["UID"] for p in answer.get(plan.node, {}).get("Pods", ()))
        if plan.action == DROPPED:
            if plan.node in answer:
                raise BenchError(f"{v.name}: {plan.node} dropped but answered")
            continue
        if not got:
            raise BenchError(f"{v.name}: {plan.node} answered with no victim")
        if got[: len(proposed)] != proposed or (plan.action == KEPT and got != proposed):
            raise BenchError(f"{v.name}: {plan.node}: victims {got} do not start with kube-scheduler's {proposed}")
        lower = {p.uid for p in node.pods if p.priority < HIGH}
        if not set(got[len(proposed) :]) <= lower or (plan.action == EXTENDED and len(got) == len(proposed)):
            raise BenchError(f"{v.name}: {plan.node}: added victims {got[len(proposed) :]} are not its GPU pods")
    if len(answer) != sum(1 for p in found.plan.nodes if p.answered):
        raise BenchError(f"{v.name}: answered {len(answer)} nodes, the plan keeps another count")
    return split


def variants(world: World, candidates: list[int], sizes: list[int]) -> list[Variant]:
    rng = random.Random(SEED)
    names = sorted(world.nodes)
    out = []
    for c in candidates:
        samples = [rng.sample(names, c) for _ in range(SAMPLES)]
        for g in sizes:
            pod = preemptor(g)
            bodies = [body(pod, [world.nodes[n] for n in s], g) for s in samples]
            v = Variant(c, g, bodies, pod["metadata"]["uid"], Counter(), samples)
            for raw in bodies:  # warm-up and the answers' check, outside the timed calls
                out_bytes, _, _, _ = call(world, raw)
                v.split += check(world, v, raw, out_bytes)
            out.append(v)
    return out


@contextmanager
def quiet_logs() -> Iterator[None]:
    """The extender's INFO log lines formatted as in production, written to /dev/null."""
    with open(os.devnull, "w") as sink:
        configure_logging("info")
        handler = logging.getLogger().handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(sink)
        try:
            yield
        finally:
            logging.getLogger().handlers[:] = []


def summary(ms: list[float]) -> dict[str, float]:
    s = sorted(ms)
    return {"p50": percentile(s, 50), "p99": percentile(s, 99), "max": s[-1], "n": len(s)}


def run(
    nodes: int, candidates: list[int], sizes: list[int], rounds: int, calls: int, heartbeats: bool = False
) -> tuple[dict[str, Any], World, list[Variant]]:
    print(f"building {nodes} nodes...", file=sys.stderr, flush=True)
    world = build(nodes)
    vs = variants(world, candidates, sizes)
    reports = {name: node_report(n) for name, n in world.nodes.items()} if heartbeats else {}
    tune_gc()  # as the extender at start-up: the fleet frozen out of collections
    took: dict[str, list[list[float]]] = {v.name: [] for v in vs}
    recorded: dict[str, list[float]] = {v.name: [] for v in vs}
    others: dict[str, list[float]] = {v.name: [] for v in vs}
    for r in range(rounds):
        for v in vs[r % len(vs) :] + vs[: r % len(vs)]:
            samples = []
            background = BackgroundLoad()
            for k in range(calls):
                raw = v.bodies[k % len(v.bodies)]
                for name in v.nodes[k % len(v.bodies)] if heartbeats else ():
                    world.api.state.ingest(reports[name], NOW)  # (the same readings: a heartbeat)
                out, answer, ms, rec_ms = call(world, raw)
                del answer
                if heartbeats:
                    check(world, v, raw, out)
                samples.append(ms)
                recorded[v.name].append(rec_ms)
            took[v.name].append(samples)
            others[v.name].append(background.cores())
        print(f"  round {r + 1}/{rounds}: {calls} calls per variant", file=sys.stderr, flush=True)
    result: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine_facts(),
        "nodes": nodes,
        "pods": len(world.ledger),
        "kinds": dict(Counter(n.kind for n in world.nodes.values())),
        "build_s": round(world.build_s, 1),
        "rounds": rounds,
        "calls": calls,
        "heartbeats": heartbeats,
        "variants": {},
    }
    for v in vs:
        whole = [x for r in took[v.name] for x in r]
        result["variants"][v.name] = {
            "candidates": v.candidates,
            "gpus": v.gpus,
            "body_kib": round(sum(len(b) for b in v.bodies) / len(v.bodies) / 1024, 1),
            "split": {a: round(v.split[a] / len(v.bodies), 1) for a in ACTIONS if v.split[a]},
            "call_ms": summary(whole),
            "round_p99_ms": [percentile(sorted(r), 99) for r in took[v.name]],
            "record_ms": summary(recorded[v.name]),
            "other_cores": round(statistics.mean(others[v.name]), 2),
        }
    return result, world, vs


def report(result: dict[str, Any]) -> list[str]:
    m = result["machine"]
    kinds = ", ".join(f"{k} {result['kinds'].get(k, 0)}" for k in KINDS)
    lines = [
        f"{result['date_utc']}; {m['cpu']}, {m['cores']} cores; Python {sys.version.split()[0]}",
        f"{result['nodes']} nodes ({kinds}), {result['pods']} bound GPU pods in the ledger; built in "
        f"{result['build_s']} s; {result['rounds']} rounds x {result['calls']} calls per variant"
        + ("; every candidate re-reported (a heartbeat) before each call" if result["heartbeats"] else ""),
        "",
        f"{'variant':<9} {'body KiB':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}  {'p99 per round':<20} "
        f"{'record p50/p99/max ms':<22} {'other cores':>11}  split per call",
    ]
    vs = result["variants"]
    for name, d in vs.items():
        c, rec = d["call_ms"], d["record_ms"]
        rounds = " ".join(f"{x:.2f}" for x in d["round_p99_ms"])
        split = ", ".join(f"{a} {n:g}" for a, n in d["split"].items())
        lines.append(
            f"{name:<9} {d['body_kib']:>8.1f} {c['p50']:>7.2f} {c['p99']:>7.2f} {c['max']:>7.2f}  {rounds:<20} "
            f"{rec['p50']:.2f} / {rec['p99']:.2f} / {rec['max']:.2f}     {d['other_cores']:>11.2f}  {split}"
        )
    if "phases_ms" in result:
        lines += ["", "steps of one call, each timed alone (median ms; parse includes its orjson.loads):"]
        for name, ph in result["phases_ms"].items():
            lines.append(f"  {name:<9} " + "  ".join(f"{k} {ms:.2f}" for k, ms in ph.items()))
        lines.append("")
    if "plan_memory" in result:
        mem = result["plan_memory"]
        lines += [
            f"plans kept for explain: {mem['mib_per_plan']:.2f} MiB per preemptor at {mem['candidates']} candidates "
            f"x {VICTIMS} victims; {mem['mib_at_bound']:.1f} MiB at the bound ({mem['max_nodes']} candidates in all, "
            f"at most {mem['max_pods']} preemptors)",
            "",
        ]
    by = {(d["candidates"], d["gpus"]): d for d in vs.values()}
    small = min(d["candidates"] for d in vs.values())
    for (c, g), d in sorted(by.items(), reverse=True):
        base = by.get((small, g))
        if c != small and base is not None:
            lines.append(
                f"ratio {c}/{small} candidates, {g}-GPU pod: p50 {d['call_ms']['p50'] / base['call_ms']['p50']:.2f}x, "
                f"p99 {d['call_ms']['p99'] / base['call_ms']['p99']:.2f}x"
            )
    for (c, g), d in sorted(by.items(), reverse=True):
        if c == TARGET_CANDIDATES:
            verdict = "PASS" if d["call_ms"]["p99"] <= TARGET_P99_MS else "MISS"
            lines.append(
                f"target: p99 <= {TARGET_P99_MS:g} ms at {c} candidates x {VICTIMS} victims, {g}-GPU pod: "
                f"{d['call_ms']['p99']:.2f} ms {verdict}"
            )
    return lines


def phases(world: World, v: Variant, repeat: int) -> dict[str, float]:
    """Median ms of each step of the call, each timed on its own (`repeat` times over the variant's
    bodies, the collector paused as in the call): what the whole call's time is made of."""
    api = world.api
    took: dict[str, list[float]] = {k: [] for k in ("orjson.loads", "parse", "answer_preempt", "encode", "record")}
    for k in range(repeat):
        raw = v.bodies[k % len(v.bodies)]
        with collector_paused():
            t0 = time.perf_counter()
            orjson.loads(raw)
            t1 = time.perf_counter()
            args = parse_preemption_args(raw, max_candidates=world.max_candidates, max_containers=world.max_containers)
            t2 = time.perf_counter()
            answer, record = api.answer_preempt(args)
            t3 = time.perf_counter()
            encode(answer)
            t4 = time.perf_counter()
            record()
            t5 = time.perf_counter()
        for key, ms in zip(took, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
            took[key].append(ms * 1000)
    return {key: round(statistics.median(ms), 3) for key, ms in took.items()}


def plan_memory(world: World, candidates: int, gpus: int, preemptors: int = 20) -> dict[str, float]:
    """What the plans kept for explain hold (preemption_record.RecentPreemptions, at most MAX_PODS
    preemptors): tracemalloc's growth over `preemptors` distinct preemptors' calls, answered and
    recorded, the call's own objects gone."""
    rng = random.Random(f"{SEED}-memory")
    names = sorted(world.nodes)
    bodies = []
    for k in range(preemptors):
        pod = preemptor(gpus)
        pod["metadata"]["name"] = f"memory-{k}"
        pod["metadata"]["uid"] = uid_of(f"memory-{k}")
        bodies.append(body(pod, [world.nodes[n] for n in rng.sample(names, candidates)], gpus))
    held = world.api.preemptions
    world.api.preemptions = RecentPreemptions(max_nodes=candidates * preemptors)
    for raw in bodies * 2:  # the nodes' facts and tables the preempt verb keeps (preempt_facts.py) are no plan's
        call(world, raw)
    world.api.preemptions = RecentPreemptions(max_nodes=candidates * preemptors)  # every plan stays
    kept = len(world.api.preemptions)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for raw in bodies:
        call(world, raw)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    added = len(world.api.preemptions) - kept
    world.api.preemptions = held
    if added != preemptors:
        raise BenchError(f"{added} plans kept for {preemptors} preemptors")
    per_plan = used / preemptors
    return {
        "candidates": candidates,
        "mib_per_plan": round(per_plan / 2**20, 3),
        "max_pods": MAX_PODS,
        "max_nodes": MAX_NODES,
        "mib_at_bound": round(min(per_plan * MAX_PODS, per_plan / candidates * MAX_NODES) / 2**20, 1),
    }


def profile(world: World, raw: bytes, calls: int, top: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call(world, raw)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs()
    print(f"\ncProfile, {calls} calls (answer and record), by own time:")
    stats.sort_stats("tottime").print_stats(top)
    print("by cumulative time:")
    stats.sort_stats("cumulative").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--candidates", default="500,100", help="candidate counts, comma-separated")
    p.add_argument("--gpus", default="8,4", help="the preemptor's GPUs per variant, comma-separated (8 or 4)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=100, help="calls per round and variant")
    p.add_argument("--profile", action="store_true", help="then cProfile 100 calls of the first variant")
    p.add_argument("--top", type=int, default=20, help="functions the profile lists")
    p.add_argument("--quick", action="store_true", help="1 round of 20 calls per variant")
    p.add_argument(
        "--heartbeats", action="store_true", help="each call's candidate nodes re-reported before it (docstring)"
    )
    args = p.parse_args(argv)
    candidates = [int(x) for x in args.candidates.split(",")]
    sizes = [int(x) for x in args.gpus.split(",")]
    if not set(sizes) <= set(EXPECTED):
        p.error(f"--gpus: one of {sorted(EXPECTED)}")
    if max(candidates) > args.nodes:
        p.error("--candidates: at most --nodes")
    rounds, calls = (1, 20) if args.quick else (args.rounds, args.calls)
    with quiet_logs():
        result, world, vs = run(args.nodes, candidates, sizes, rounds, calls, args.heartbeats)
        result["phases_ms"] = {v.name: phases(world, v, 10 if args.quick else 40) for v in vs}
        result["plan_memory"] = plan_memory(world, max(candidates), sizes[0], 5 if args.quick else 20)
        print("\n".join(report(result)))
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        (OUT_DIR / "preempt.json").write_text(json.dumps(result, indent=1))
        if args.profile:
            profile(world, vs[0].bodies[0], 100, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
