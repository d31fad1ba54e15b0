"""The whole path with real processes on loopback: fake-NVML agents -> gRPC ->
gpu-extender -> kube-scheduler's extender HTTP API, fed the captured requests."""

from __future__ import annotations

import ctypes
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.harness import (
    FIXTURES,
    ROOT,
    Cluster,
    cluster,
    fixture_bytes,
    free_port,
    metric,
    post_json,
    request_for,
    scrape,
    url,
    wait_until,
)

SCENARIOS = FIXTURES / "scenarios"

# The captured requests name gpu-node-1..3: give each a different load.
NODE_SCENARIOS = {"gpu-node-1": "busy8.yaml", "gpu-node-2": "idle8.yaml", "gpu-node-3": "half8.yaml"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One extender (full 0-10 answers) with three agents, shared by the read-only tests."""
    with cluster(tmp_path_factory.mktemp("live")) as c:
        extender = c.extender("--prioritize-answer", "full")
        for node, scenario in NODE_SCENARIOS.items():
            c.agent(node, SCENARIOS / scenario, extender)
        c.agent("gpu-node-4", SCENARIOS / "lost.yaml", extender)
        wait_until(
            "4 nodes with data", lambda: metric(scrape(url(extender, "/metrics")), "gpu_extender_nodes_with_data") == 4
        )
        yield c


def _extender(c: Cluster):
    return c.procs[0]


def test_filter_passes_idle_nodes_and_rejects_busy_ones_with_a_reason(live: Cluster) -> None:
    ext = _extender(live)
    status, answer = post_json(url(ext, "/filter"), fixture_bytes("filter-request-nodecache-true.json"))
    assert status == 200
    assert sorted(answer["NodeNames"]) == ["gpu-node-2", "gpu-node-3"]
    assert answer["FailedNodes"] == {"gpu-node-1": "gpu-extender: too few idle GPUs (InsufficientIdleGPUs)"}
    assert answer["FailedAndUnresolvableNodes"] == {}
    assert answer["Error"] == ""
    # filter answers, then records: any later call is answered after its metrics and log line.
    samples = scrape(url(ext, "/metrics"))
    assert metric(samples, "gpu_extender_filter_nodes_total", result="failed") >= 1
    line = "filter default/gpu-b1 needs 2 GPU: 2 passed (gpu-node-2, gpu-node-3), 1 failed: gpu-node-1: "
    assert line + "InsufficientIdleGPUs" in ext.log()


def test_prioritize_orders_by_idle_gpus_then_utilization(live: Cluster) -> None:
    ext = _extender(live)
    body = request_for(["gpu-node-1", "gpu-node-3", "gpu-node-2", "node-without-agent"], gpus=2)
    status, answer = post_json(url(ext, "/prioritize"), body)
    assert status == 200
    scores = {entry["Host"]: entry["Score"] for entry in answer}
    assert all(type(s) is int and 0 <= s <= 10 for s in scores.values()), answer
    # idle 8 > idle 4 > unknown (assumed data never competes with a fresh fit) = not enough idle
    assert scores["gpu-node-2"] > scores["gpu-node-3"] > scores["node-without-agent"] == scores["gpu-node-1"] == 0
    assert scores["gpu-node-2"] == 10


def test_node_strategy_annotation_changes_the_ranking(live: Cluster) -> None:
    ext = _extender(live)
    args = json.loads(request_for(["gpu-node-2", "gpu-node-3"], gpus=2))
    spread = {e["Host"]: e["Score"] for e in post_json(url(ext, "/prioritize"), json.dumps(args).encode())[1]}
    assert spread["gpu-node-2"] > spread["gpu-node-3"]  # 8 idle beats 4 idle
    args["Pod"]["metadata"]["annotations"] = {"gpu-extender.io/node-strategy": "binpack"}
    packed = {e["Host"]: e["Score"] for e in post_json(url(ext, "/prioritize"), json.dumps(args).encode())[1]}
    assert packed["gpu-node-3"] > packed["gpu-node-2"]  # fewest idle GPUs that still fit
    args["Pod"]["metadata"]["annotations"] = {"gpu-extender.io/node-strategy": "bin-pack"}
    typo = {e["Host"]: e["Score"] for e in post_json(url(ext, "/prioritize"), json.dumps(args).encode())[1]}
    assert typo == spread and "gpu-extender.io/node-strategy='bin-pack' is not one of" in ext.log()
    # A hostile annotation (huge, or not a string) is logged cut short, never echoed whole.
    for value in ("x" * 100_000, {"deep": [[[]]]}):
        args["Pod"]["metadata"]["annotations"] = {"gpu-extender.io/node-strategy": value}
        hostile = {e["Host"]: e["Score"] for e in post_json(url(ext, "/prioritize"), json.dumps(args).encode())[1]}
        assert hostile == spread
    log = ext.log()
    assert "node-strategy='xxxx" in log and "... (100000 characters) is not one of" in log
    assert "node-strategy=a JSON object is not one of" in log and "x" * 1_000 not in log


@pytest.mark.parametrize("mode", ["true", "false"])
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_captured_scheduler_requests_get_answers_kube_scheduler_decodes(live: Cluster, verb: str, mode: str) -> None:
    """Each request body captured from kube-scheduler v1.35.4, as it is."""
    ext = _extender(live)
    raw = fixture_bytes(f"{verb}-request-nodecache-{mode}.json")
    request = json.loads(raw)
    status, answer = post_json(url(ext, f"/{verb}"), raw)
    assert status == 200
    captured = json.loads(fixture_bytes(f"{verb}-response-nodecache-{mode}.json"))
    if verb == "prioritize":
        assert isinstance(answer, list)
        assert {e["Host"] for e in answer} <= set(_names(request))
        for entry in answer:  # Go field casing; int64 scores (a float would void the whole answer)
            assert set(entry) == {"Host", "Score"} and type(entry["Score"]) is int
        assert {k.lower() for e in captured for k in e} == {k.lower() for e in answer for k in e}
        return
    allowed = {"NodeNames", "Nodes", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert set(answer) <= allowed
    assert {k.lower() for k in captured} <= {k.lower() for k in answer}
    assert answer["Error"] == ""
    failed = set(answer["FailedNodes"]) | set(answer["FailedAndUnresolvableNodes"])
    if mode == "true":  # names in, names out; Nodes must not be sent
        assert "Nodes" not in answer
        passed = set(answer["NodeNames"])
    else:  # full Nodes in: the passing Node objects come back exactly as received, NodeNames absent
        assert answer.get("NodeNames") is None
        assert answer["Nodes"]["metadata"] == request["Nodes"]["metadata"]
        by_name = {n["metadata"]["name"]: n for n in request["Nodes"]["items"]}
        for node in answer["Nodes"]["items"]:
            assert node == by_name[node["metadata"]["name"]]
        passed = {n["metadata"]["name"] for n in answer["Nodes"]["items"]}
    assert passed | failed == set(_names(request)) and not passed & failed  # every node accounted for once
    assert passed == {"gpu-node-2", "gpu-node-3"}


def _names(request: dict) -> list[str]:
    if request.get("NodeNames") is not None:
        return request["NodeNames"]
    return [n["metadata"]["name"] for n in request["Nodes"]["items"]]


def test_lost_gpu_is_reported_unhealthy_and_the_agent_keeps_running(live: Cluster) -> None:
    ext = _extender(live)
    agent = next(p for p in live.procs if p.name == "agent-gpu-node-4")
    samples = wait_until(
        "GPU 1 unhealthy",
        lambda: (
            (s := scrape(url(agent, "/metrics")))
            and metric(s, "gpu_agent_gpu_healthy", **_gpu_labels(s, "1")) == 0.0
            and s
        ),
    )
    assert metric(samples, "gpu_agent_gpu_healthy", **_gpu_labels(samples, "0")) == 1.0
    assert metric(samples, "gpu_agent_nvml_errors_total", call="nvmlDeviceGetUtilizationRates", error="GpuIsLost")
    count_before = metric(samples, "gpu_agent_sample_duration_seconds_count")
    wait_until(
        "more samples",
        lambda: metric(scrape(url(agent, "/metrics")), "gpu_agent_sample_duration_seconds_count") > count_before,
    )
    assert agent.alive()
    assert "GPU 1: nvmlDeviceGetUtilizationRates failed with NVML error GpuIsLost" in agent.log()

    # 3 healthy idle GPUs left: a 3-GPU pod fits, a 4-GPU pod cannot, and preemption cannot help.
    wait_until(
        "extender sees 3 idle",
        lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node="gpu-node-4") == 3,
    )
    _, three = post_json(url(ext, "/filter"), request_for(["gpu-node-4"], gpus=3))
    assert three["NodeNames"] == ["gpu-node-4"]
    _, four = post_json(url(ext, "/filter"), request_for(["gpu-node-4"], gpus=4))
    assert four["NodeNames"] == [] and four["FailedNodes"] == {}
    assert four["FailedAndUnresolvableNodes"]["gpu-node-4"].endswith("(InsufficientHealthyGPUs)")


def _gpu_labels(samples, gpu: str) -> dict[str, str]:
    for (name, labels), _ in samples.items():
        d = dict(labels)
        if name == "gpu_agent_gpu_healthy" and d["gpu"] == gpu:
            return d
    raise KeyError(gpu)


BAD_BODIES = [
    (b"", "malformed_json"),
    (b"{not json", "malformed_json"),
    (b"\xff\xfe", "malformed_json"),
    (b"[]", "wrong_type"),
    (b'{"NodeNames": ["gpu-node-1"]}', "missing_pod"),
    (b'{"Pod": null, "NodeNames": ["gpu-node-1"]}', "missing_pod"),
    (b'{"Pod": "gpu-b1", "NodeNames": ["gpu-node-1"]}', "wrong_type"),
    (b'{"Pod": {}, "NodeNames": "gpu-node-1"}', "wrong_type"),
    (b'{"Pod": {}, "NodeNames": [1, 2]}', "wrong_type"),
    (b'{"Pod": {}, "Nodes": {"items": "x"}}', "wrong_type"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', "wrong_type"),
    (b'{"Pod": {}, "NodeNames": null, "Nodes": null}', "missing_nodes"),
    (b'{"Pod": {}, "pod": {}, "NodeNames": []}', "duplicate_key"),
    (b'{"Pod": {"spec": {"containers": {}}}, "NodeNames": []}', "wrong_type"),
    (
        b'{"Pod": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "two"}}}]}}, "NodeNames": []}',
        "bad_quantity",
    ),
    (
        b'{"Pod": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}}, "NodeNames": []}',
        "bad_quantity",
    ),
]


@pytest.mark.parametrize("verb", ["filter", "prioritize", "explain"])
def test_bad_bodies_get_400_with_a_reason_and_the_server_keeps_serving(live: Cluster, verb: str) -> None:
    ext = _extender(live)
    good = fixture_bytes(f"{'filter' if verb == 'explain' else verb}-request-nodecache-true.json")
    for body, reason in BAD_BODIES:
        if verb == "explain" and reason == "missing_nodes":
            continue  # /explain without candidates explains every known node (test below)
        status, answer = post_json(url(ext, f"/{verb}"), body)
        assert status == 400, body
        assert answer["reason"] == reason, (body, answer)
        assert answer["error"]
        assert post_json(url(ext, f"/{verb}"), good)[0] == 200
    samples = scrape(url(ext, "/metrics"))
    assert metric(samples, "gpu_extender_bad_requests_total", verb=verb, reason="malformed_json") >= 3
    assert "refused request" in ext.log() and "Traceback" not in ext.log()


@pytest.mark.parametrize("body", [b'{"Pod": %s}', b'{"Pod": %s, "NodeNames": null, "Nodes": null}'])
def test_explain_without_candidates_explains_every_node_with_data(live: Cluster, body: bytes) -> None:
    pod = orjson.loads(fixture_bytes("filter-request-nodecache-true.json"))["Pod"]
    status, answer = post_json(url(_extender(live), "/explain"), body % orjson.dumps(pod))
    assert status == 200, answer
    # No inventory here: the candidates are the four nodes whose agents report, best first.
    assert answer["candidates"] == {"source": "every known node", "known": 4, "explained": 4}
    assert sorted(n["node"] for n in answer["nodes"]) == ["gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"]
    assert answer["nodes"][0]["node"] == "gpu-node-2" and answer["nodes"][0]["result"] == "pass"
    status, answer = post_json(url(_extender(live), "/filter"), body % orjson.dumps(pod))
    assert status == 400 and answer["reason"] == "missing_nodes"  # the scheduler verbs still need candidates


def test_oversized_body_gets_413_and_large_node_lists_are_accepted(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender("--max-body-bytes", str(256 * 1024))
        big = request_for([f"node-{i:05d}" for i in range(20000)])  # ~300 KB
        status, answer = post_json(url(ext, "/filter"), big)
        assert status == 413 and answer["reason"] == "too_large"
        assert "--max-body-bytes" in answer["error"]
        assert post_json(url(ext, "/filter"), request_for(["a", "b"]))[0] == 200

        def full_nodes(count: int) -> bytes:
            args = json.loads(fixture_bytes("filter-request-nodecache-false.json"))
            template = args["Nodes"]["items"][0]
            items = []
            for i in range(count):
                node = json.loads(json.dumps(template))
                node["metadata"]["name"] = f"gpu-{i:05d}"
                items.append(node)
            args["Nodes"]["items"] = items
            return json.dumps(args).encode()

        # Default limit (2 MiB, sized for nodeCacheCapable: true): a 500-node full-Node request
        # (well over aiohttp's 1 MiB default) is served.
        default = c.extender()
        body = full_nodes(500)
        assert 1024**2 < len(body) <= 2 * 1024**2
        status, answer = post_json(url(default, "/filter"), body)
        # All 500 pass (no agent data, so all on assumed data); the answer echoes the --shortlist best.
        assert status == 200 and len(answer["Nodes"]["items"]) == 100 and not answer["FailedNodes"]
        # A 5,000-node full-Node request (~20 MB) is served once --max-body-bytes is raised for it;
        # with --shortlist 0 every passing Node is echoed back.
        raised = c.extender("--max-body-bytes", str(32 * 1024**2), "--shortlist", "0")
        body = full_nodes(5000)
        assert len(body) > 1024**2 * 10
        status, answer = post_json(url(raised, "/filter"), body)
        assert status == 200 and len(answer["Nodes"]["items"]) == 5000


def test_killed_agent_turns_stale_and_the_stale_policy_decides(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        common = ("--stale-after", "1.5", "--no-fit-policy", "reject")
        fail_open = c.extender(*common, "--stale-policy", "fail-open")
        fail_closed = c.extender(*common, "--stale-policy", "fail-closed")
        agent = c.agent("gpu-node-9", SCENARIOS / "busy8.yaml", fail_open, fail_closed)
        for ext in (fail_open, fail_closed):
            wait_until(
                "data", lambda ext=ext: metric(scrape(url(ext, "/metrics")), "gpu_extender_nodes_with_data") == 1
            )
            _, fresh = post_json(url(ext, "/filter"), request_for(["gpu-node-9"]))
            assert fresh["FailedNodes"]["gpu-node-9"].endswith("(InsufficientIdleGPUs)")

        agent.stop(signal.SIGKILL)
        wait_until(
            "data older than the TTL",
            lambda: (
                metric(scrape(url(fail_closed, "/metrics")), "gpu_extender_node_data_age_seconds", node="gpu-node-9")
                > 1.6
            ),
        )

        _, opened = post_json(url(fail_open, "/filter"), request_for(["gpu-node-9"]))
        assert opened["NodeNames"] == ["gpu-node-9"] and opened["FailedNodes"] == {}  # like no data: all idle
        _, closed = post_json(url(fail_closed, "/filter"), request_for(["gpu-node-9"]))
        assert closed["NodeNames"] == []
        assert closed["FailedNodes"] == {"gpu-node-9": "gpu-extender: node GPU data is stale (StaleGPUData)"}
        assert "agent for node gpu-node-9 disconnected" in fail_closed.log()


def test_agents_outlive_an_extender_restart_and_come_back_within_seconds(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender()
        agents = [c.agent(n, SCENARIOS / "idle8.yaml", ext) for n in ("node-a", "node-b")]
        wait_until("2 nodes", lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_nodes_with_data") == 2)

        ext.stop(signal.SIGKILL)
        # Down: agents stay up and healthy, their stream gauge drops to 0.
        target = f"127.0.0.1:{ext.ports['grpc']}"
        for agent in agents:
            wait_until(
                "stream down",
                lambda a=agent: metric(scrape(url(a, "/metrics")), "gpu_agent_stream_connected", extender=target) == 0,
            )
        time.sleep(2)
        assert all(a.alive() for a in agents)

        started = time.monotonic()
        back = c.extender(http_port=ext.ports["http"], grpc_port=ext.ports["grpc"])
        wait_until(
            "agents back",
            lambda: metric(scrape(url(back, "/metrics")), "gpu_extender_nodes_with_data") == 2,
            timeout=10,
        )
        print(f"agents back {time.monotonic() - started:.2f}s after the extender was ready")
        for agent in agents:
            samples = scrape(url(agent, "/metrics"))
            assert metric(samples, "gpu_agent_stream_connected", extender=target) == 1
            assert metric(samples, "gpu_agent_stream_reconnects_total", extender=target) >= 2
            assert f"stream to extender {target} down" in agent.log()


def _nvml_loadable() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_nvml_loadable(), reason="this machine has libnvidia-ml.so.1")
def test_agent_without_nvml_exits_with_a_one_line_cause() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuextender.agent",
            "--node-name",
            "gpu-node-1",
            "--metrics-addr",
            f"127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-agent: cannot load NVML: libnvidia-ml.so.1 was not found")
    assert "--fake" in lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics-addr", "127.0.0.1:0"], "no node name"),
        (["--node-name", "Bad_Name"], "not a valid Kubernetes node name"),
        (["--node-name", "n1", "--fake", "/nonexistent.yaml"], "cannot read"),
        (["--node-name", "n1", "--extender", "nohost"], "expected HOST:PORT"),
    ],
)
def test_agent_config_errors_are_one_clear_line(args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpuextender.agent", *args], capture_output=True, text=True, timeout=30, cwd=ROOT
    )
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("taken_port", ["http", "grpc"])
def test_extender_with_a_port_taken_exits_cleanly_with_the_cause(taken_port: str) -> None:
    """Everything started before the failing listener (the ingest workers, inventory tasks) is
    stopped again: the cause, exit 2, no traceback or unclosed-resource noise. The gRPC port is
    held by the extender before any ingest worker starts (port_guard.py): none is started."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = {"http": free_port(), "grpc": free_port(), taken_port: taken.getsockname()[1]}
        result = start_extender(ports["http"], ports["grpc"])
    assert result.returncode == 2, result.stderr
    assert "gpu-extender: cannot listen" in result.stderr
    if taken_port == "grpc":
        assert f"gRPC address 127.0.0.1:{ports['grpc']} is not available" in result.stderr, result.stderr
        assert "ingest worker" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "Unclosed" not in result.stderr, result.stderr


def test_a_second_extender_on_the_same_grpc_address_is_refused(tmp_path: Path) -> None:
    """grpc sets SO_REUSEPORT unless told not to: a second extender on a running one's gRPC port
    used to start silently and take a share of the agents' streams (issue 26). Now it cannot
    listen, says so in one line, and exits 2; the first keeps serving."""
    with cluster(tmp_path) as c:
        first = c.extender()
        grpc_port = first.ports["grpc"]
        result = start_extender(free_port(), grpc_port)
        assert result.returncode == 2, result.stderr
        assert "gpu-extender: cannot listen" in result.stderr and str(grpc_port) in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
        assert first.alive()


def start_extender(http_port: int, grpc_port: int) -> subprocess.CompletedProcess[str]:
    """Run a plain extender on these loopback ports until it exits (here: because it cannot listen)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuextender.extender",
            "--http-addr",
            f"127.0.0.1:{http_port}",
            "--grpc-addr",
            f"127.0.0.1:{grpc_port}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )


def test_demo_runs_and_shows_decisions() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The demo removes its temporary directory (logs, sockets) when it ends well.
    work = next(line.split()[1].rstrip("/") for line in result.stdout.splitlines() if line.startswith("logs: "))
    assert f"removed {work}/" in result.stdout and not Path(work).exists()
    quarantined, _, cleared = result.stdout.partition("after the clear, the same request again:")
    assert cleared, result.stdout

    def table(text: str) -> dict[str, list[str]]:
        return {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("gpu-node-")}

    # columns: NODE, IDLE/TOTAL, HEALTHY, MEAN UTIL, FILTER verdict..., SCORE
    rows = table(quarantined)
    # gpu-node-1: 7 of its GPUs held by training pods, 1 free: allocation, not load, rules it out.
    assert rows["gpu-node-1"][4] == "FAIL" and "(InsufficientFreeGPUs)" in rows["gpu-node-1"]
    # gpu-node-2's GPU 5 is quarantined by the scripted XID 79 and its GPU 0 is held by a quiet
    # notebook pod: two GPUs less, still the best node.
    assert rows["gpu-node-2"][1:3] == ["6/8", "7"] and rows["gpu-node-2"][4] == "pass"
    assert rows["gpu-node-2"][-1] == "8"
    assert rows["gpu-node-3"][1:3] == ["3/8", "7"] and rows["gpu-node-3"][4] == "pass"  # GPU 7 lost
    assert "GPU 5 on node gpu-node-2 quarantined: XID 79 (clear with: gpu-agent --clear-xid 5 " in quarantined
    assert "or restart the agent)" in quarantined
    assert "GPU 7 on node gpu-node-3 unhealthy" in quarantined
    # Allocation from the fake kubelets, and the allocated-but-idle pod (--idle-window 2 s).
    lines = [line.split() for line in quarantined.splitlines()]
    assert ["gpu-node-1", "ml/train-llm-0", "GPU", "0,1,2,3"] in lines
    assert ["gpu-node-3", "serving/llm-server-0", "GPU", "0,1,2,3"] in lines
    idle = quarantined.partition("allocated but idle")[2]
    assert "--idle-window 2" in idle and "600 s" in idle
    assert any(
        line.split()[:2] == ["gpu-node-2", "research/notebook-alice"] and "GPU 0 (idle for" in line
        for line in idle.splitlines()
    ), idle
    assert "ml/train-llm-0" not in idle
    assert "IDLE GPUS above leaves such a GPU out" in idle
    # `gpu-agent --clear-xid 5` lifts the quarantine: the GPU counts again, and the score with it.
    answer = quarantined.partition("clearing the quarantine")[2]
    assert "$ gpu-agent --clear-xid 5 --control-dir " in answer and "cleared XID 79" in answer, answer
    rows = table(cleared)
    assert rows["gpu-node-2"][1:3] == ["7/8", "8"] and rows["gpu-node-2"][-1] == "9"  # GPU 0 stays held


def test_both_programs_export_prometheus_metrics(live: Cluster) -> None:
    ext = _extender(live)
    post_json(url(ext, "/filter"), fixture_bytes("filter-request-nodecache-true.json"))
    post_json(url(ext, "/prioritize"), fixture_bytes("prioritize-request-nodecache-true.json"))
    samples = scrape(url(ext, "/metrics"))
    for verb in ("filter", "prioritize"):
        assert metric(samples, "gpu_extender_request_duration_seconds_count", verb=verb) >= 1
        assert metric(samples, "gpu_extender_requests_total", verb=verb, code="200") >= 1
    assert metric(samples, "gpu_extender_filter_failures_total", reason="InsufficientIdleGPUs") >= 1
    assert metric(samples, "gpu_extender_filter_nodes_total", result="passed") >= 2
    assert metric(samples, "gpu_extender_connected_agents") == 4
    assert 0 <= metric(samples, "gpu_extender_node_data_age_seconds", node="gpu-node-2") < 5
    assert not any(name.endswith("_created") for name, _ in samples)

    agent = next(p for p in live.procs if p.name == "agent-gpu-node-3")
    samples = scrape(url(agent, "/metrics"))
    gpus = {
        dict(labels)["gpu"]: dict(labels)
        for (name, labels), _ in samples.items()
        if name == "gpu_agent_gpu_utilization_percent"
    }
    assert sorted(gpus, key=int) == [str(i) for i in range(8)]
    labels = gpus["0"]
    assert labels["node"] == "gpu-node-3" and labels["model"] == "NVIDIA H100 80GB HBM3"
    assert labels["uuid"].startswith("GPU-")
    assert metric(samples, "gpu_agent_gpu_utilization_percent", **labels) == 60
    assert metric(samples, "gpu_agent_gpu_memory_total_bytes", **labels) == 80 * 1024**3
    assert metric(samples, "gpu_agent_gpu_temperature_celsius", **labels) == 35
    assert metric(samples, "gpu_agent_gpu_power_watts", **labels) == 70
    assert metric(samples, "gpu_agent_nvml_ok", node="gpu-node-3") == 1
    assert metric(samples, "gpu_agent_sample_duration_seconds_count") >= 1
    assert metric(samples, "gpu_agent_stream_connected", extender=f"127.0.0.1:{ext.ports['grpc']}") == 1
