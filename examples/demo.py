"""Local demo: the whole path on one machine, no GPU and no cluster.

Starts gpu-extender (with the Nodes in examples/demo/inventory/), a fake kubelet per node
(examples/demo/kubelet/: which pod holds which GPU, served on a PodResources unix socket), then
three gpu-agents on simulated GPUs (examples/demo/scenarios/: a busy node, an idle node whose
GPU 5 hits a critical XID 79 two seconds in, a half-busy node whose GPU 7 is lost two seconds
in). It waits until the extender has their live data, and replays the request a real
kube-scheduler v1.35 sent for a 2-GPU pod (tests/fixtures/extender-requests/). It prints which
nodes passed, which failed and why, and the scores; the GPUs the agents took out of service;
which pod holds which GPU and which pods hold GPUs that sit idle (the agents run with
--idle-window 2 s so this shows at once; the default is 10 minutes), all read from the agents'
/metrics. Last it lifts the XID quarantine with `gpu-agent --clear-xid`, as an operator would
after checking the GPU, and replays the request again: the GPU counts once more.

Run it with `./dev.sh demo` (or `.venv/bin/python examples/demo.py`).
`--keep-running` leaves everything up so you can curl the endpoints yourself.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo"
REQUESTS = ROOT / "tests" / "fixtures" / "extender-requests"
NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3")
IDLE_WINDOW_S = 2  # gpu-agent --idle-window; its default is 600 s (10 minutes)
IDLE_THRESHOLD_PERCENT = 1  # gpu-agent --idle-threshold (its default)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def short_temp_dir() -> Path:
    """A fresh private directory for logs, sockets and control dirs. A unix socket path must fit
    in 108 bytes: where $TMPDIR is long (macOS), use /tmp instead."""
    path = tempfile.mkdtemp(prefix="gx-")
    if len(path) > 60 and os.path.isdir("/tmp"):
        os.rmdir(path)
        path = tempfile.mkdtemp(prefix="gx-", dir="/tmp")
    return Path(path)


def http(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def scrape(url: str) -> Samples:
    _, text = http(url)
    samples = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def series(samples: Samples, metric: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(labels), value) for (name, labels), value in samples.items() if name == metric]


def unix_socket_accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
    return True


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
    parser.add_argument(
        "--keep-logs",
        action="store_true",
        help="keep the temporary directory of logs and sockets (removed at exit otherwise, unless the demo failed)",
    )
    options = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupted)  # `kill` stops the demo's processes too, as Ctrl-C does

    work = short_temp_dir()  # logs, kubelet sockets, the agents' --control-dir
    http_port, grpc_port = free_port(), free_port()
    extender_url = f"http://127.0.0.1:{http_port}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, args: list[str]) -> None:
        log_file = open(work / f"{name}.log", "wb")
        procs.append(subprocess.Popen([sys.executable, "-m", *args], stdout=log_file, stderr=subprocess.STDOUT))

    def extender_idle(node: str) -> float | None:
        return scrape(f"{extender_url}/metrics").get(("gpu_extender_node_idle_gpus", (("node", node),)))

    ok = False
    try:
        print(f"starting gpu-extender on {extender_url} (agents stream to 127.0.0.1:{grpc_port})")
        start(
            "gpu-extender",
            [
                "gpuextender.extender",
                "--http-addr",
                f"127.0.0.1:{http_port}",
                "--grpc-addr",
                f"127.0.0.1:{grpc_port}",
                "--inventory",
                str(DEMO / "inventory"),
                "--prioritize-answer",
                "full",
            ],
        )
        kubelet_sockets = {node: work / f"{node}.sock" for node in NODES}
        for node, sock in kubelet_sockets.items():
            print(
                f"starting a fake kubelet for {node}: PodResources on {sock}, "
                f"pods from examples/demo/kubelet/{node}.yaml"
            )
            start(
                f"kubelet-{node}",
                [
                    "gpuextender.agent.fakes.kubelet",
                    "--socket",
                    str(sock),
                    "--scenario",
                    str(DEMO / "kubelet" / f"{node}.yaml"),
                    "--node",
                    node,
                ],
            )
        # Up, but not Ready until every GPU node's agent has reported (--readiness-grace).
        wait_for("gpu-extender /healthz", lambda: http(f"{extender_url}/healthz")[0] == 200)
        for node, sock in kubelet_sockets.items():
            wait_for(f"the fake kubelet of {node}", lambda sock=sock: unix_socket_accepts(sock))

        agent_ports = {}
        for node in NODES:
            agent_ports[node] = free_port()
            print(f"starting gpu-agent for {node} on fake GPUs from examples/demo/scenarios/{node}.yaml")
            start(
                node,
                [
                    "gpuextender.agent",
                    "--fake",
                    str(DEMO / "scenarios" / f"{node}.yaml"),
                    "--node-name",
                    node,
                    "--extender",
                    f"127.0.0.1:{grpc_port}",
                    "--metrics-addr",
                    f"127.0.0.1:{agent_ports[node]}",
                    "--pod-resources-socket",
                    str(kubelet_sockets[node]),
                    "--control-dir",
                    str(work / f"ctl-{node}"),
                    "--idle-window",
                    str(IDLE_WINDOW_S),
                    "--idle-threshold",
                    str(IDLE_THRESHOLD_PERCENT),
                ],
            )
        wait_for(
            "all three agents to report",
            lambda: scrape(f"{extender_url}/metrics").get(("gpu_extender_nodes_with_data", ())) == 3.0,
        )
        wait_for("gpu-extender /readyz", lambda: http(f"{extender_url}/readyz")[0] == 200)
        # Scripted 2 s after each agent starts: gpu-node-3's GPU 7 is lost, gpu-node-2's GPU 5
        # gets XID 79. Wait until the extender counts both GPUs out (idle 4 -> 3; 7 -> 6 on
        # gpu-node-2, whose GPU 0 a notebook pod holds: allocated GPUs are not idle capacity).
        wait_for("GPU 7 on gpu-node-3 to be reported lost", lambda: extender_idle("gpu-node-3") == 3.0)
        wait_for("XID 79 on GPU 5 of gpu-node-2 to reach the extender", lambda: extender_idle("gpu-node-2") == 6.0)
        # The notebook pod on gpu-node-2 holds GPU 0 and never uses it.
        wait_for(
            f"a GPU allocated but idle for {IDLE_WINDOW_S} s",
            lambda: any(
                value >= 1
                for _, value in series(
                    scrape(f"http://127.0.0.1:{agent_ports['gpu-node-2']}/metrics"), "gpu_agent_pod_idle_gpus"
                )
            ),
        )

        body = (REQUESTS / "filter-request-nodecache-true.json").read_bytes()
        pod = json.loads(body)["Pod"]["metadata"]
        print(
            f"\nreplaying kube-scheduler's request for pod {pod['namespace']}/{pod['name']} "
            f"(2 x nvidia.com/gpu, nodeCacheCapable: true)\n"
        )
        filter_body, prioritize_body = replay(extender_url, body)
        print_table(extender_url, agent_ports, json.loads(filter_body), json.loads(prioritize_body))
        print(
            "\nIDLE GPUS: healthy, idle (utilization < 30 % and memory < 50 %) and held by no pod / GPUs NVML sees; "
            "MEAN UTIL: over GPUs that report it.\nSCORE: 0-10, more idle GPUs first, then lower utilization "
            "(the formula and why: gpuextender/extender/decide/README.md).\n"
        )
        quarantined = print_unhealthy(agent_ports, work)

        print("\nraw answers, as kube-scheduler decodes them:")
        print(f"  POST /filter     -> {filter_body.decode()}")
        print(f"  POST /prioritize -> {prioritize_body.decode()}")

        print_allocation(agent_ports)

        for node, gpu in quarantined:
            control_dir = work / f"ctl-{node}"
            print(
                f"\nclearing the quarantine, as an operator would after checking the GPU:\n"
                f"  $ gpu-agent --clear-xid {gpu} --control-dir {control_dir}"
            )
            before = extender_idle(node) or 0.0
            answer = subprocess.run(
                [sys.executable, "-m", "gpuextender.agent", "--clear-xid", gpu, "--control-dir", str(control_dir)],
                capture_output=True,
                text=True,
                timeout=30,
            )
            for line in (answer.stdout + answer.stderr).strip().splitlines():
                print(f"  {line}")
            wait_for(
                f"GPU {gpu} of {node} to count again",
                lambda node=node, before=before: (extender_idle(node) or 0.0) > before,
            )
        if quarantined:
            print("\nafter the clear, the same request again:\n")
            filter_body, prioritize_body = replay(extender_url, body)
            print_table(extender_url, agent_ports, json.loads(filter_body), json.loads(prioritize_body))

        print(f"\nlogs: {work}/ (gpu-extender.log has one decision line per filter call)")
        ok = True
        if options.keep_running:
            print(f"\nstill running; try: curl -s {extender_url}/metrics | grep gpu_extender_   (Ctrl-C stops)")
            for node, port in agent_ports.items():
                print(f"  {node}'s agent: curl -s http://127.0.0.1:{port}/metrics | grep -e gpu_agent_ -e DCGM_FI_")
            while True:
                time.sleep(3600)
        return 0
    except KeyboardInterrupt:
        ok = True
        return 0
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        if ok and not options.keep_logs:
            shutil.rmtree(work, ignore_errors=True)
            print(f"removed {work}/ (--keep-logs keeps it)")
        else:
            print(f"logs kept in {work}/", file=sys.stderr)


def _interrupted(*_: object) -> None:
    raise KeyboardInterrupt


def replay(extender_url: str, body: bytes) -> tuple[bytes, bytes]:
    status, filter_body = http(f"{extender_url}/filter", body)
    assert status == 200, filter_body
    status, prioritize_body = http(f"{extender_url}/prioritize", body)
    assert status == 200, prioritize_body
    return filter_body, prioritize_body


def print_table(extender_url: str, agent_ports: dict[str, int], filtered: dict, scores: list[dict]) -> None:
    extender = scrape(f"{extender_url}/metrics")
    score_of = {s["Host"]: s["Score"] for s in scores}
    failed = {**filtered.get("FailedNodes", {}), **filtered.get("FailedAndUnresolvableNodes", {})}
    print(f"{'NODE':<12} {'IDLE GPUS':>9} {'HEALTHY':>7} {'MEAN UTIL':>9}  {'FILTER':<68} {'SCORE':>5}")
    for node, port in agent_ports.items():
        agent = scrape(f"http://127.0.0.1:{port}/metrics")
        health = [v for _, v in series(agent, "gpu_agent_gpu_healthy")]
        utils = [v for _, v in series(agent, "gpu_agent_gpu_utilization_percent")]
        idle = int(extender.get(("gpu_extender_node_idle_gpus", (("node", node),)), 0))
        verdict = "pass" if node in filtered.get("NodeNames", []) else f"FAIL {failed.get(node, '?')}"
        mean = f"{sum(utils) / len(utils):.0f}%" if utils else "n/a"
        print(
            f"{node:<12} {idle:>4}/{len(health):<4} {int(sum(health)):>7} {mean:>9}  {verdict:<68} "
            f"{score_of.get(node, 0):>5}"
        )


def print_unhealthy(agent_ports: dict[str, int], work: Path) -> list[tuple[str, str]]:
    """One line per GPU an agent reports unhealthy; returns the (node, GPU index) quarantined by an XID."""
    quarantined = []
    for node, port in agent_ports.items():
        agent = scrape(f"http://127.0.0.1:{port}/metrics")
        # DCGM_FI_DEV_XID_ERRORS: the last critical XID since the agent started (one series per holder pod).
        xids = {labels["gpu"]: int(value) for labels, value in series(agent, "DCGM_FI_DEV_XID_ERRORS") if value}
        nvml_errors = sorted({labels["error"] for labels, _ in series(agent, "gpu_agent_nvml_errors_total")})
        for labels, healthy in sorted(series(agent, "gpu_agent_gpu_healthy"), key=lambda s: int(s[0]["gpu"])):
            gpu = labels["gpu"]
            if healthy:
                continue
            if gpu in xids:
                quarantined.append((node, gpu))
                print(
                    f"GPU {gpu} on node {node} quarantined: XID {xids[gpu]} (clear with: gpu-agent --clear-xid "
                    f"{gpu} --control-dir {work / f'ctl-{node}'} or restart the agent)"
                )
            else:
                print(
                    f"GPU {gpu} on node {node} unhealthy: NVML calls on it fail ({', '.join(nvml_errors) or '?'}); "
                    "it counts again once they work"
                )
    return quarantined


def print_allocation(agent_ports: dict[str, int]) -> None:
    """Who holds which GPU, and the pods whose GPUs sit idle, as each agent's /metrics says."""
    print(
        "\nwho holds which GPU (each agent asks its node's kubelet, PodResources API; here a fake kubelet;\n"
        "read from the pod/namespace labels of the agents' dcgm-exporter-named DCGM_FI_DEV_* series):"
    )
    idle_lines = []
    for node, port in agent_ports.items():
        agent = scrape(f"http://127.0.0.1:{port}/metrics")
        held: dict[str, set[int]] = defaultdict(set)
        for labels, _ in series(agent, "DCGM_FI_DEV_XID_ERRORS"):  # present for every GPU, held or not
            if labels["pod"]:
                held[f"{labels['namespace']}/{labels['pod']}"].add(int(labels["gpu"]))
        every = {int(labels["gpu"]) for labels, _ in series(agent, "gpu_agent_gpu_healthy")}
        free = every - set().union(*held.values())
        for pod, gpus in sorted(held.items()):
            print(f"  {node:<12} {pod:<26} GPU {','.join(map(str, sorted(gpus)))}")
        if free:
            print(f"  {node:<12} {'(no pod)':<26} GPU {','.join(map(str, sorted(free)))}")
        idle_s = {int(labels["gpu"]): value for labels, value in series(agent, "gpu_agent_gpu_idle_seconds")}
        for labels, count in series(agent, "gpu_agent_pod_idle_gpus"):
            if count < 1:
                continue
            pod = f"{labels['namespace']}/{labels['pod']}"
            idle_gpus = sorted(g for g in held[pod] if idle_s.get(g, 0.0) >= IDLE_WINDOW_S)
            detail = ", ".join(f"GPU {g} (idle for {idle_s[g]:.0f} s)" for g in idle_gpus)
            idle_lines.append(f"  {node:<12} {pod:<26} {int(count)} of its {len(held[pod])} GPU(s) idle: {detail}")
    print(
        f"\nallocated but idle (gpu_agent_pod_idle_gpus: utilization <= {IDLE_THRESHOLD_PERCENT} % for "
        f"{IDLE_WINDOW_S} s while the pod held it;\nthe demo's agents run with --idle-window {IDLE_WINDOW_S}, "
        "the default is 600 s = 10 minutes):"
    )
    print("\n".join(idle_lines) if idle_lines else "  none")
    print(
        "(IDLE GPUS above leaves such a GPU out: with the kubelet's allocation, a held GPU is never spare\n"
        " capacity however quiet; gpu-extender counts it in gpu_extender_node_allocated_idle_gpus and\n"
        " gpu_extender_namespace_allocated_idle_gpus instead)"
    )


if __name__ == "__main__":
    sys.exit(main())
