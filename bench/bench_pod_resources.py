"""Benchmark: what asking the kubelet who holds which GPU costs the agent per sample.

What it measures, against the fake kubelet (a real gRPC server on a unix socket; first in its own
process, as the kubelet is, then in this one, where it competes for the GIL; its handler returns
a prebuilt answer, as a real kubelet answers List from memory):
- `List` alone: PodResourcesClient.fetch() with its allocatable answer cached, i.e. one unary
  gRPC round trip over the socket plus reading the answer into plain data;
- apply_allocation alone: mapping that answer onto a NodeSample (pure Python);
- PodAttribution.annotate: both, what the sample loop pays each sample.

Scenarios: 8 GPUs, exclusive (16 pods of one container, 8 holding a GPU each, 8 holding none,
plus a NIC resource per container that is skipped), and 8 GPUs time-sliced 4 ways
(16 containers holding a replica each).

Run: `.venv/bin/python bench/bench_pod_resources.py [--calls N]`. Prints the median (and p10/p90)
wall time over N calls in µs for each step, and this process's CPU time per call.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuextender.agent.fakes.kubelet import FakeKubelet, fake_gpu_uuid
from gpuextender.agent.model.readings import GpuReading, NodeSample
from gpuextender.agent.sources.allocation import apply_allocation
from gpuextender.agent.sources.pod_resources import PodAttribution, PodResourcesClient

NODE = "bench-node"
GPUS = 8
CONTAINERS = 16


def exclusive() -> dict[str, Any]:
    pods = [
        {
            "namespace": "ml",
            "name": f"pod-{i}",
            "containers": [
                {
                    "name": "main",
                    "devices": {
                        **({"nvidia.com/gpu": [{"gpu": i}]} if i < GPUS else {}),
                        "example.com/nic": [f"vf{i}"],
                    },
                }
            ],
        }
        for i in range(CONTAINERS)
    ]
    return {"allocatable": {"nvidia.com/gpu": [{"gpus": GPUS}]}, "pods": pods}


def time_sliced() -> dict[str, Any]:
    pods = [
        {
            "namespace": "ml",
            "name": f"pod-{i}",
            "containers": [{"name": "main", "devices": {"nvidia.com/gpu": [{"gpu": i % GPUS, "replica": i // GPUS}]}}],
        }
        for i in range(CONTAINERS)
    ]
    return {"allocatable": {"nvidia.com/gpu": [{"gpus": GPUS, "replicas": 4}]}, "pods": pods}


UUIDS = [fake_gpu_uuid(NODE, i) for i in range(GPUS)]


def node_sample() -> NodeSample:
    """A fresh sample, as NVML's reader hands over each interval."""
    gpus = [GpuReading(index=i, uuid=UUIDS[i]) for i in range(GPUS)]
    return NodeSample(sample_time=time.time(), duration_s=0.001, gpus=gpus)


def measure(calls: int, step: Callable[[], Any]) -> tuple[list[float], float]:
    """Wall µs of each call, and this process's CPU µs per call (all its threads, gRPC's too)."""
    for _ in range(min(50, calls)):  # warm-up: channel connected, caches filled
        step()
    times = []
    cpu_started = time.process_time()
    for _ in range(calls):
        started = time.perf_counter()
        step()
        times.append((time.perf_counter() - started) * 1e6)
    return times, (time.process_time() - cpu_started) * 1e6 / calls


def report(label: str, measured: tuple[list[float], float]) -> None:
    times, cpu = measured
    deciles = statistics.quantiles(times, n=10)
    print(
        f"  {label:<32} median {statistics.median(times):7.1f} µs  p10 {deciles[0]:7.1f}  p90 {deciles[-1]:7.1f}"
        f"  | CPU {cpu:7.1f} µs/call"
    )


def fake_kubelet_process(sock: str, scenario: dict[str, Any], directory: str) -> subprocess.Popen[bytes]:
    path = Path(directory) / "kubelet.yaml"
    path.write_text(yaml.safe_dump(scenario))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuextender.agent.fakes.kubelet",
            "--socket",
            sock,
            "--scenario",
            str(path),
            "--node",
            NODE,
        ],
        cwd=Path(__file__).resolve().parent.parent,
        stderr=subprocess.DEVNULL,
    )
    client = PodResourcesClient(sock)
    deadline = time.monotonic() + 30
    while client.fetch().problem:
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise SystemExit("the fake kubelet did not start")
        time.sleep(0.05)
    client.close()
    return process


def run(label: str, sock: str, calls: int, expected_holders: int) -> None:
    print(label)
    client = PodResourcesClient(sock)
    answer = client.fetch()
    assert answer.problem == "", answer.problem
    report("List (PodResourcesClient.fetch)", measure(calls, client.fetch))
    sample = node_sample()
    report("apply_allocation", measure(calls, lambda: apply_allocation(sample, answer)))
    assert sum(len(g.holders) for g in sample.gpus) == expected_holders
    attribution = PodAttribution(sock)
    report("PodAttribution.annotate", measure(calls, lambda: attribution.annotate(node_sample())))
    client.close()
    attribution.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="gx-bench-", dir="/tmp")  # short: unix socket paths are <= 107 bytes
    scenarios = (("exclusive", exclusive(), GPUS), ("time-sliced x4", time_sliced(), CONTAINERS))
    try:
        sock = f"{directory}/kubelet.sock"
        for name, scenario, holders in scenarios:
            process = fake_kubelet_process(sock, scenario, directory)
            try:
                run(
                    f"{name}: {GPUS} GPUs, {CONTAINERS} containers, fake kubelet in its own process, "
                    f"{args.calls} calls",
                    sock,
                    args.calls,
                    holders,
                )
            finally:
                process.terminate()
                process.wait(timeout=10)
        with FakeKubelet(sock, uuid_seed=NODE) as kubelet:
            for name, scenario, holders in scenarios:
                kubelet.load(scenario)
                run(f"{name}: fake kubelet in this process (its CPU counted too)", sock, args.calls, holders)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
