"""gpu-agent on the real NVML (no --fake) streaming to a gpu-extender on loopback (real-GPU only).

The extender reads a one-Node inventory written here (this machine's GPUs, as the device plugin
would advertise them); the agent runs without a kubelet (--pod-resources-socket ''). A 1-GPU pod
is filtered and prioritized through the extender's HTTP API, as kube-scheduler would, under each
load asked for (bench/gpu_load.py), and the agent's /metrics is parsed back.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.gpu.loads import Load

NODE = "gpu-real"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(url: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    _, text = http(url)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def wait_for(what: str, check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


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
) -> dict[str, Any]:
    """Start both, wait for the node's data, then per load: filter + prioritize + the extender's
    idle count. Returns what was seen (the caller asserts)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        gpu_count = pynvml.nvmlDeviceGetCount()
        product = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    finally:
        pynvml.nvmlShutdown()
    work = Path(tempfile.mkdtemp(prefix="gx-real-"))
    inventory(work, gpu_count, product)
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    extender_url = f"http://127.0.0.1:{http_port}"
    agent_url = f"http://127.0.0.1:{metrics_port}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(work / f"{name}.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT, cwd=root)
        procs.append(proc)
        return proc

    result: dict[str, Any] = {"node": NODE, "gpus": gpu_count, "product": product}
    try:
        start(
            "gpu-extender",
            [
                "gpuextender.extender",
                "--http-addr",
                f"127.0.0.1:{http_port}",
                "--grpc-addr",
                f"127.0.0.1:{grpc_port}",
                "--inventory",
                str(work),
                "--prioritize-answer",
                "full",
                *extender_args,
            ],
        )
        wait_for("gpu-extender /healthz", lambda: http(f"{extender_url}/healthz")[0] == 200)
        agent = start(
            "gpu-agent",
            [
                "gpuextender.agent",
                "--node-name",
                NODE,
                "--extender",
                f"127.0.0.1:{grpc_port}",
                "--metrics-addr",
                f"127.0.0.1:{metrics_port}",
                "--pod-resources-socket",
                "",
                "--gfd-labels-file",
                "",
                "--control-dir",
                str(work / "control"),
                *agent_args,
            ],
        )
        started = time.monotonic()
        wait_for(
            "the agent's report to reach the extender",
            lambda: scrape(f"{extender_url}/metrics").get(("gpu_extender_nodes_with_data", ())) == 1.0,
        )
        result["first_report_s"] = round(time.monotonic() - started, 2)
        for mode in loads:
            load = Load(root, mode, load_seconds + 10)
            try:
                time.sleep(load_seconds)  # utilization's window, the agent's interval and heartbeat
                result[mode] = _decide(extender_url)
            finally:
                load.stop()
        metrics = scrape(f"{agent_url}/metrics")
        result["agent_metric_names"] = sorted({name for name, _ in metrics})
        result["agent_dcgm_series"] = {
            name: value
            for (name, labels), value in metrics.items()
            if name.startswith("DCGM_") and ("gpu", "0") in labels
        }
        status = Path(f"/proc/{agent.pid}/status").read_text().splitlines()
        result["agent_rss_kib"] = {
            line.split(":")[0]: int(line.split()[1]) for line in status if line.startswith(("VmRSS", "VmHWM"))
        }
        result["agent_log_tail"] = (work / "gpu-agent.log").read_text(errors="replace").splitlines()[-15:]
        return result
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        result["extender_log_tail"] = (work / "gpu-extender.log").read_text(errors="replace").splitlines()[-10:]


def _decide(extender_url: str) -> dict[str, Any]:
    args = {"Pod": pod(1), "NodeNames": [NODE]}
    status, filtered = http(f"{extender_url}/filter", args)
    _, prioritized = http(f"{extender_url}/prioritize", args)
    _, explained = http(f"{extender_url}/explain", args)
    metrics = scrape(f"{extender_url}/metrics")
    nodes = json.loads(explained).get("nodes") or [{}]
    keep = ("idleGpus", "meanUtilization", "result", "reasonCode", "reason", "score", "data")
    return {
        "filter_status": status,
        "filter": json.loads(filtered),
        "prioritize": json.loads(prioritized),
        "explain": {k: nodes[0].get(k) for k in keep},
        "idle_gpus": metrics.get(("gpu_extender_node_idle_gpus", (("node", NODE),))),
    }
