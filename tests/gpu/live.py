"""gpu-agent on the real NVML (no --fake) streaming to a gpu-extender on loopback (real-GPU only).

The extender reads a one-Node inventory written here (this machine's GPUs, as the device plugin
would advertise them); the agent runs without a kubelet (--pod-resources-socket ''). A 1-GPU pod
is filtered and prioritized through the extender's HTTP API, as kube-scheduler would, under each
load asked for (bench/gpu_load.py), and the agent's /metrics is parsed back. The processes are
started and stopped by the suite's harness (tests/harness.py).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.gpu.loads import Load
from tests.harness import Proc, cluster, free_port, metric, post_json, scrape, url, wait_until

NODE = "gpu-real"


def pod(gpus: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": "real-gpu-check", "namespace": "default", "uid": "7e57c0de-0000-4000-8000-000000000001"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/cuda:12",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}},
                }
            ]
        },
    }


def inventory(directory: Path, gpu_count: int, product: str) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "labels": {
                "kubernetes.io/hostname": NODE,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product.replace(" ", "-"),
                "nvidia.com/gpu.count": str(gpu_count),
            },
        },
        "status": {"allocatable": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": str(gpu_count), "pods": "110"}},
    }
    (directory / "nodes.yaml").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [node]}))


def run_agent_and_extender(
    root: Path,
    *,
    loads: tuple[str, ...] = ("idle",),
    extender_args: tuple[str, ...] = (),
    agent_args: tuple[str, ...] = (),
    load_seconds: float = 6.0,
    gpus: tuple[int, str] | None = None,
) -> dict[str, Any]:
    """Start both, wait for the node's data, then per load: filter + prioritize + the extender's
    idle count. Returns what was seen (the caller asserts). `gpus` (count, NVML name) is read from
    NVML when not given; `agent_args` are added to the agent's (tests/e2e runs this path on
    `--fake`, so it works the day a GPU is lent)."""
    if gpus is None:
        gpus = _nvml_gpus()
    gpu_count, product = gpus
    work = Path(tempfile.mkdtemp(prefix="gx-real-"))
    inventory(work, gpu_count, product)
    result: dict[str, Any] = {"node": NODE, "gpus": gpu_count, "product": product}
    with cluster(work) as c:
        ext = c.extender("--inventory", str(work), "--prioritize-answer", "full", *extender_args)
        metrics_port = free_port()
        args = ["--node-name", NODE, "--extender", f"127.0.0.1:{ext.ports['grpc']}"]
        args += ["--metrics-addr", f"127.0.0.1:{metrics_port}", "--pod-resources-socket", ""]
        args += ["--gfd-labels-file", "", "--control-dir", str(work / "control"), *agent_args]
        started = time.monotonic()
        agent = c.spawn("gpu-agent", "gpuextender.agent", args, {"metrics": metrics_port})
        wait_until(
            "the agent's report to reach the extender",
            lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_nodes_with_data") == 1.0,
            timeout=30.0,
        )
        result["first_report_s"] = round(time.monotonic() - started, 2)
        for mode in loads:
            load = Load(root, mode, load_seconds + 10)
            try:
                time.sleep(load_seconds)  # utilization's window, the agent's interval and heartbeat
                result[mode] = _decide(ext)
            finally:
                load.stop()
        result.update(_agent_facts(agent))
    return result


def _nvml_gpus() -> tuple[int, str]:
    import pynvml

    pynvml.nvmlInit()
    try:
        return pynvml.nvmlDeviceGetCount(), pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    finally:
        pynvml.nvmlShutdown()


def _agent_facts(agent: Proc) -> dict[str, Any]:
    metrics = scrape(url(agent, "/metrics"))
    status = Path(f"/proc/{agent.popen.pid}/status").read_text().splitlines()
    return {
        "agent_metric_names": sorted({name for name, _ in metrics}),
        "agent_dcgm_series": {
            name: value
            for (name, labels), value in metrics.items()
            if name.startswith("DCGM_") and ("gpu", "0") in labels
        },
        "agent_rss_kib": {
            line.split(":")[0]: int(line.split()[1]) for line in status if line.startswith(("VmRSS", "VmHWM"))
        },
        "agent_log_tail": agent.log().splitlines()[-15:],
    }


def _decide(ext: Proc) -> dict[str, Any]:
    args = json.dumps({"Pod": pod(1), "NodeNames": [NODE]}).encode()
    status, filtered = post_json(url(ext, "/filter"), args)
    _, prioritized = post_json(url(ext, "/prioritize"), args)
    _, explained = post_json(url(ext, "/explain"), args)
    nodes = explained.get("nodes") or [{}]
    keep = ("idleGpus", "meanUtilization", "result", "reasonCode", "reason", "score", "data")
    return {
        "filter_status": status,
        "filter": filtered,
        "prioritize": prioritized,
        "explain": {k: nodes[0].get(k) for k in keep},
        "idle_gpus": metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=NODE),
    }
