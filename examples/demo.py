"""Local demo: the whole path on one machine, no GPU and no cluster.

Starts gpu-extender (with the Nodes in examples/demo/inventory/), then three
gpu-agents on simulated GPUs (examples/demo/scenarios/: one busy node, one idle
node, one half-busy node whose GPU 7 is lost two seconds in), waits until the
extender has their live data, and replays the request a real kube-scheduler
v1.35 sent for a 2-GPU pod (tests/fixtures/extender-requests/). It prints which
nodes passed, which failed and why, and the scores.

Run it with `./dev.sh demo` (or `.venv/bin/python examples/demo.py`).
`--keep-running` leaves everything up so you can curl the endpoints yourself.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo"
REQUESTS = ROOT / "tests" / "fixtures" / "extender-requests"
NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    _, text = http(url)
    samples = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def wait_for(what: str, check, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"demo: timed out waiting for {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep-running", action="store_true", help="leave the extender and agents running")
    options = parser.parse_args()

    logs = Path(tempfile.mkdtemp(prefix="gpu-extender-demo-"))
    http_port, grpc_port = free_port(), free_port()
    extender_url = f"http://127.0.0.1:{http_port}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, args: list[str]) -> None:
        log_file = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
        procs.append(subprocess.Popen([sys.executable, "-m", *args], stdout=log_file, stderr=subprocess.STDOUT))

    try:
        print(f"starting gpu-extender on {extender_url} (agents stream to 127.0.0.1:{grpc_port})")
        start("gpu-extender", [
            "gpuextender.extender", "--http-addr", f"127.0.0.1:{http_port}", "--grpc-addr", f"127.0.0.1:{grpc_port}",
            "--inventory", str(DEMO / "inventory"), "--prioritize-answer", "full",
        ])  # fmt: skip
        # Up, but not Ready until every GPU node's agent has reported (--readiness-grace).
        wait_for("gpu-extender /healthz", lambda: http(f"{extender_url}/healthz")[0] == 200)

        agent_ports = {}
        for node in NODES:
            agent_ports[node] = free_port()
            print(f"starting gpu-agent for {node} on fake GPUs from examples/demo/scenarios/{node}.yaml")
            start(node, [
                "gpuextender.agent", "--fake", str(DEMO / "scenarios" / f"{node}.yaml"), "--node-name", node,
                "--extender", f"127.0.0.1:{grpc_port}", "--metrics-addr", f"127.0.0.1:{agent_ports[node]}",
            ])  # fmt: skip
        wait_for(
            "all three agents to report",
            lambda: scrape(f"{extender_url}/metrics").get(("gpu_extender_nodes_with_data", ())) == 3.0,
        )
        wait_for("gpu-extender /readyz", lambda: http(f"{extender_url}/readyz")[0] == 200)
        # gpu-node-3's GPU 7 is scripted to be lost 2 s after its agent starts.
        wait_for("GPU 7 on gpu-node-3 to be reported lost", lambda: any(
            name == "gpu_agent_gpu_healthy" and dict(labels)["gpu"] == "7" and value == 0.0
            for (name, labels), value in scrape(f"http://127.0.0.1:{agent_ports['gpu-node-3']}/metrics").items()
        ))  # fmt: skip
        time.sleep(1.2)  # one more report interval, so the extender has that report too

        body = (REQUESTS / "filter-request-nodecache-true.json").read_bytes()
        pod = json.loads(body)["Pod"]["metadata"]
        print(f"\nreplaying kube-scheduler's request for pod {pod['namespace']}/{pod['name']} "
              f"(2 x nvidia.com/gpu, nodeCacheCapable: true)\n")  # fmt: skip
        status, filter_body = http(f"{extender_url}/filter", body)
        assert status == 200, filter_body
        status, prioritize_body = http(f"{extender_url}/prioritize", body)
        assert status == 200, prioritize_body
        print_table(extender_url, agent_ports, json.loads(filter_body), json.loads(prioritize_body))

        print("\nraw answers, as kube-scheduler decodes them:")
        print(f"  POST /filter     -> {filter_body.decode()}")
        print(f"  POST /prioritize -> {prioritize_body.decode()}")
        print(f"\nlogs: {logs}/ (gpu-extender.log has one decision line per filter call)")
        if options.keep_running:
            print(f"\nstill running; try: curl -s {extender_url}/metrics | grep gpu_extender_   (Ctrl-C stops)")
            while True:
                time.sleep(3600)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


def print_table(extender_url: str, agent_ports: dict[str, int], filtered: dict, scores: list[dict]) -> None:
    extender = scrape(f"{extender_url}/metrics")
    score_of = {s["Host"]: s["Score"] for s in scores}
    failed = {**filtered.get("FailedNodes", {}), **filtered.get("FailedAndUnresolvableNodes", {})}
    print(f"{'NODE':<12} {'IDLE GPUS':>9} {'HEALTHY':>7} {'MEAN UTIL':>9}  {'FILTER':<60} {'SCORE':>5}")
    for node, port in agent_ports.items():
        agent = scrape(f"http://127.0.0.1:{port}/metrics")
        health = [v for (name, _), v in agent.items() if name == "gpu_agent_gpu_healthy"]
        utils = [v for (name, _), v in agent.items() if name == "gpu_agent_gpu_utilization_percent"]
        idle = int(extender.get(("gpu_extender_node_idle_gpus", (("node", node),)), 0))
        verdict = "pass" if node in filtered.get("NodeNames", []) else f"FAIL {failed.get(node, '?')}"
        mean = f"{sum(utils) / len(utils):.0f}%" if utils else "n/a"
        print(f"{node:<12} {idle:>4}/{len(health):<4} {int(sum(health)):>7} {mean:>9}  {verdict:<60} "
              f"{score_of.get(node, 0):>5}")  # fmt: skip
    print("\nIDLE GPUS: idle and healthy (utilization < 30 % and memory < 50 %) / GPUs NVML sees; "
          "MEAN UTIL: over GPUs that report it.\nSCORE: 0-10, more idle GPUs first, then lower utilization "
          "(formula in gpuextender/extender/decision.py).")

if __name__ == "__main__":
    sys.exit(main())
