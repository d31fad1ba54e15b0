"""Benchmark: filter + prioritize for an OME pod with 8 AcceleratorClasses and 50
ServingRuntimes loaded, against the real `gpu-extender` (same method as
bench_extender.py: sequential, loopback, keep-alive, client-side timing).

The inventory (written to bench/out/classes-inventory/): 8 classes, each selecting
one GPU product; 50 ClusterServingRuntimes listing 4 classes each; one
InferenceService per policy; N Nodes spread over the 8 products. GPU state for
every node streams in over gRPC as in bench_extender.py. The pod is the engine of
an InferenceService with policy Cheapest, so each call runs the class plan, the
runtime check, the class filter and the availability-aware class ranking.

Compared with the skeleton's path (a plain GPU pod, no OME labels) measured on the
same extender, interleaved request by request (target: within 1.5x).
Run: `.venv/bin/python bench/bench_classes.py [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_extender import encode, load_fleet, load_pod, make_fleet
from benchlib import OUT_DIR, BenchError, extender_process, percentile, wait_http_ok

PRODUCTS = [f"NVIDIA-GPU-MODEL-{i}" for i in range(8)]
CLASSES = [f"class-{i}" for i in range(8)]
RUNTIMES = 50
NODE_COUNTS = (1_000, 5_000)
TARGET_RATIO = 1.5


def write_inventory(directory: Path, nodes: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    docs: list[dict[str, Any]] = []
    for i, (name, product) in enumerate(zip(CLASSES, PRODUCTS, strict=True)):
        docs.append(
            {
                "apiVersion": "ome.io/v1beta1",
                "kind": "AcceleratorClass",
                "metadata": {"name": name},
                "spec": {
                    "vendor": "nvidia",
                    "family": "hopper",
                    "discovery": {"nodeSelector": {"nvidia.com/gpu.product": product}},
                    "capabilities": {
                        "memoryGB": f"{24 + 8 * i}Gi",
                        "computeCapability": "9.0",
                        "memoryBandwidthGBps": str(1000 + 300 * i),
                        "performance": {"fp16Tflops": 300 + 80 * i},
                    },
                    "cost": {"perHour": f"{1 + 0.5 * i:.2f}"},
                },
            }
        )
    for r in range(RUNTIMES):
        listed = [CLASSES[(r + k) % 8] for k in range(4)]
        docs.append(
            {
                "apiVersion": "ome.io/v1beta1",
                "kind": "ClusterServingRuntime",
                "metadata": {"name": f"rt-{r}"},
                "spec": {
                    "supportedModelFormats": [
                        {
                            "name": "safetensors",
                            "autoSelect": True,
                            "modelFormat": {"name": "safetensors", "version": "1.0.0"},
                        }
                    ],
                    "modelSizeRange": {"min": "1B", "max": "80B"},
                    "acceleratorRequirements": {"acceleratorClasses": listed},
                },
            }
        )
    docs.append(
        {
            "apiVersion": "ome.io/v1beta1",
            "kind": "ClusterBaseModel",
            "metadata": {"name": "model-8b"},
            "spec": {"modelFormat": {"name": "safetensors", "version": "1.0.0"}, "modelParameterSize": "8B"},
        }
    )
    for policy in ("FirstAvailable", "Cheapest", "BestFit", "MostCapable"):
        docs.append(
            {
                "apiVersion": "ome.io/v1beta1",
                "kind": "InferenceService",
                "metadata": {"name": f"isvc-{policy.lower()}", "namespace": "llm"},
                "spec": {
                    "model": {"name": "model-8b"},
                    "runtime": {"name": "rt-7"},
                    "acceleratorSelector": {"policy": policy},
                },
            }
        )
    (directory / "ome.yaml").write_text("\n---\n".join(json.dumps(d) for d in docs))
    node_docs = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "kind": "Node",
                "metadata": {"name": n, "labels": {"nvidia.com/gpu.product": PRODUCTS[i % 8]}},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            }
            for i, n in enumerate(nodes)
        ],
    }
    (directory / "nodes.json").write_text(json.dumps(node_docs))


def ome_pod(policy: str) -> dict[str, Any]:
    """bench_extender's 2-GPU fixture pod, relabelled as the engine of an InferenceService."""
    pod = load_pod()
    pod["metadata"]["namespace"] = "llm"
    pod["metadata"]["labels"] = {
        "ome.io/inferenceservice": f"isvc-{policy.lower()}",
        "component": "engine",
        "serving-runtime": "rt-7",
    }
    return pod


async def _pair(
    session: aiohttp.ClientSession, base: str, pod: dict[str, Any], order: list[str], check: bool
) -> tuple[float, float, list[str]]:
    """One filter + prioritize exchange, as kube-scheduler makes it: (filter ms, prioritize ms, passed)."""
    t0 = time.perf_counter()
    async with session.post(f"{base}/filter", data=encode({"Pod": pod, "Nodes": None, "NodeNames": order})) as r:
        answer = json.loads(await r.read()) if r.status == 200 else None
    t1 = time.perf_counter()
    if not isinstance(answer, dict) or not isinstance(answer.get("NodeNames"), list):
        raise BenchError(f"filter answered {r.status}: {answer!r:.300}")
    passed = answer["NodeNames"]
    if check and (not passed or len(answer["FailedAndUnresolvableNodes"]) < len(order) // 2):
        raise BenchError("expected the class rules to reject the nodes of classes outside rt-7's list")
    async with session.post(f"{base}/prioritize", data=encode({"Pod": pod, "Nodes": None, "NodeNames": passed})) as r:
        scores = json.loads(await r.read()) if r.status == 200 else None
    t2 = time.perf_counter()
    if not isinstance(scores, list) or not all(type(s.get("Score")) is int for s in scores):
        raise BenchError(f"prioritize answered {r.status}: {scores!r:.300}")
    return (t1 - t0) * 1000, (t2 - t1) * 1000, passed


def _stats(values: list[float]) -> dict[str, Any]:
    values.sort()
    return {"p50_ms": percentile(values, 50), "p99_ms": percentile(values, 99), "n": len(values)}


async def measure(
    session: aiohttp.ClientSession, base: str, pod: dict[str, Any], names: list[str], iterations: int, warmup: int
) -> dict[str, Any]:
    """The OME pod and the skeleton's plain GPU pod, interleaved on the same extender (the
    order alternating each iteration), so the ratio compares the two paths at the same
    moments of a noisy host instead of two runs minutes apart."""
    rng = random.Random(len(names))
    orders = [rng.sample(names, len(names)) for _ in range(8)]
    plain = load_pod()
    timings: dict[str, dict[str, list[float]]] = {
        "classes": {"filter": [], "prioritize": []},
        "skeleton": {"filter": [], "prioritize": []},
    }
    passed: list[str] = []
    gc.collect()
    gc.freeze()
    for it in range(warmup + iterations):
        order = orders[it % len(orders)]
        runs = [("classes", pod), ("skeleton", plain)]
        for label, p in runs if it % 2 == 0 else runs[::-1]:
            f_ms, p_ms, ok = await _pair(session, base, p, order, check=label == "classes")
            if label == "classes":
                passed = ok
            if it >= warmup:
                timings[label]["filter"].append(f_ms)
                timings[label]["prioritize"].append(p_ms)
    out: dict[str, Any] = {"nodes": len(names), "passed": len(passed)}
    out.update({verb: _stats(values) for verb, values in timings["classes"].items()})
    out["skeleton"] = {verb: _stats(values) for verb, values in timings["skeleton"].items()}
    return out


async def _bench(quick: bool) -> list[dict[str, Any]]:
    fleet = make_fleet(max(NODE_COUNTS))
    directory = OUT_DIR / "classes-inventory"
    write_inventory(directory, [n.name for n in fleet])
    process, addrs = extender_process("extender-classes", ["--inventory", str(directory)])
    results = []
    with process:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
            await wait_http_ok(session, f"{addrs.base_url}/readyz", process)
            await load_fleet(addrs.grpc_target, fleet)
            for count in NODE_COUNTS:
                iterations, warmup = (20, 5) if quick else ((400, 20) if count <= 1_000 else (200, 20))
                names = [n.name for n in fleet[:count]]
                results.append(await measure(session, addrs.base_url, ome_pod("Cheapest"), names, iterations, warmup))
                process.check_alive()
    return results


def run(quick: bool = False) -> list[dict[str, Any]]:
    return asyncio.run(_bench(quick))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few iterations: a smoke check")
    args = parser.parse_args(argv)
    try:
        results = run(args.quick)
    except BenchError as exc:
        print(f"bench_classes: FAILED: {exc}", file=sys.stderr)
        return 1
    for r in results:
        for label, figures in (("classes", r), ("skeleton", r["skeleton"])):
            print(
                f"{label}-{r['nodes']}: filter p50 {figures['filter']['p50_ms']:.2f} p99 "
                f"{figures['filter']['p99_ms']:.2f} ms; prioritize p50 {figures['prioritize']['p50_ms']:.2f} "
                f"p99 {figures['prioritize']['p99_ms']:.2f} ms"
            )
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "classes.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
