"""Hostile HTTP input against the real gpu-extender process (issue 8).

A seeded mutation fuzz over the captured kube-scheduler requests, plus one regression
test per finding: hostile quantities, GPU totals at 2**31, Nodes too deep to echo,
compressed bodies, clients hanging up or stalling mid-body, the body and candidate
bounds, and 1,000 calls arriving at once. The extender must answer each request with
200 or a 4xx naming a reason, never a 5xx, and answer the captured requests as before.
How long each body within the limits holds the event loop is a duration, measured by
bench/bench_hostile_http.py (bench/RESULTS.md), not asserted here: a test that times
the loop fails on a busy machine (it did, in CI) without the code changing.

GPU_EXTENDER_FUZZ_CASES (default 3000) and GPU_EXTENDER_FUZZ_SEED change the fuzz run.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuextender.extender.model.pod_gpus import MAX_GPU_COUNT
from gpuextender.extender.scheduler.wire import (
    BYTES_PER_CONTAINER,
    EXPLAIN_MAX_CANDIDATES,
    MAX_BIND_FIELD_CHARS,
    MAX_VICTIMS_PER_NODE,
    PREEMPT_MAX_CANDIDATES,
)
from gpuextender.extender.settings import DEFAULT_MAX_BODY_BYTES, MAX_CANDIDATES
from tests.harness import FIXTURES, Cluster, Proc, cluster, fixture_bytes, metric, scrape, url, wait_until
from tests.hostile_bodies import Mutator, compact, fixture, full_nodes_request, names_request, worst_bodies

SCENARIOS = FIXTURES / "scenarios"
NODE_SCENARIOS = {"gpu-node-1": "busy8.yaml", "gpu-node-2": "idle8.yaml", "gpu-node-3": "half8.yaml"}
VERBS = ("filter", "prioritize", "explain")
FUZZ_CASES = int(os.environ.get("GPU_EXTENDER_FUZZ_CASES", "3000"))
FUZZ_SEED = int(os.environ.get("GPU_EXTENDER_FUZZ_SEED", "20261123"))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One extender with its default limits and three streaming agents."""
    with cluster(tmp_path_factory.mktemp("hostile")) as c:
        ext = c.extender()
        for node, scenario in NODE_SCENARIOS.items():
            c.agent(node, SCENARIOS / scenario, ext)
        wait_until(
            "3 nodes with data", lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_nodes_with_data") == 3
        )
        yield c


def _ext(c: Cluster) -> Proc:
    return c.procs[0]


class Client:
    """One keep-alive HTTP/1.1 connection, as kube-scheduler's extender client keeps."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.port, self.timeout = port, timeout
        self.conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        sent_headers = {"Content-Type": "application/json", **(headers or {})}
        for attempt in range(2):  # once more on a fresh connection if the server closed the idle one
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                self.conn.request("POST", path, body=body, headers=sent_headers)
                response = self.conn.getresponse()
                data = response.read()
            except (ConnectionError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
                continue
            if response.will_close:
                self.close()
            return response.status, dict(response.getheaders()), data
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _check_answer(status: int, data: bytes, what: str) -> None:
    assert 200 <= status < 500, f"{what}: HTTP {status}: {data[:300]!r}"
    answer = json.loads(data)
    if status != 200:
        assert answer["reason"] and answer["error"], (what, answer)
        assert len(answer["error"]) < 1000, (what, len(answer["error"]))  # never the whole input


def _good_answers(client: Client) -> dict[str, Any]:
    answers = {}
    for name in ("filter-request-nodecache-true.json", "filter-request-nodecache-false.json"):
        for verb in VERBS:
            status, _, data = client.post(f"/{verb}", fixture_bytes(name))
            assert status == 200, (verb, name, data[:300])
            answer = json.loads(data)
            if verb == "explain":  # ages move on; the decision must not
                for node in answer["nodes"]:
                    node.pop("dataAgeSeconds")
            answers[f"{verb} {name}"] = answer
    return answers


def _no_server_errors(ext: Proc) -> None:
    samples = scrape(url(ext, "/metrics"))
    for verb in VERBS:
        assert not metric(samples, "gpu_extender_requests_total", verb=verb, code="500"), verb
    log = ext.log()
    assert "Traceback" not in log and "Logging error" not in log and "internal error" not in log, log[-3000:]


# -- the fuzz -------------------------------------------------------------------------------------


def test_fuzzed_and_limit_sized_bodies_get_200_or_4xx(live: Cluster) -> None:
    ext = _ext(live)
    client = Client(ext.ports["http"])
    before = _good_answers(client)

    containers = DEFAULT_MAX_BODY_BYTES // BYTES_PER_CONTAINER
    near_limit = worst_bodies(DEFAULT_MAX_BODY_BYTES, MAX_CANDIDATES, containers)
    exact = compact(names_request(["gpu-node-2"]))
    near_limit["exactly the limit"] = exact + b" " * (DEFAULT_MAX_BODY_BYTES - len(exact))
    near_limit["one byte over the limit (413)"] = exact + b" " * (DEFAULT_MAX_BODY_BYTES + 1 - len(exact))
    special = [(f"/{verb}", body, name) for name, body in near_limit.items() for verb in VERBS]
    # /explain has its own, lower candidate bound: its worst bodies at that bound too.
    special += [
        ("/explain", body, f"{name} (explain's bound)")
        for name, body in worst_bodies(DEFAULT_MAX_BODY_BYTES, EXPLAIN_MAX_CANDIDATES, containers).items()
    ]
    every, specials = max(1, FUZZ_CASES // (len(special) + 1)), len(special)

    mutator = Mutator(FUZZ_SEED)
    statuses: dict[int, int] = {}
    at_limit: dict[tuple[str, str], int] = {}  # (name, path) -> status, for the bodies at the bounds
    for i in range(FUZZ_CASES + len(special)):
        if i >= FUZZ_CASES and not special:
            break
        if special and (i % every == every - 1 or i >= FUZZ_CASES):  # the rest after a small FUZZ_CASES
            path, body, what = special.pop()
            at_limit[(what, path)] = -1
        else:
            path, body, what = f"/{VERBS[i % 3]}", mutator.body(), f"fuzz case {i} (seed {FUZZ_SEED})"
        status, _, data = client.post(path, body)
        statuses[status] = statuses.get(status, 0) + 1
        _check_answer(status, data, f"{what} on {path}")
        if (what, path) in at_limit:
            at_limit[(what, path)] = status
    print(f"{FUZZ_CASES} cases: {statuses}")
    # The body limit is inclusive: a byte more is 413, never a byte less.
    assert {at_limit[("exactly the limit", f"/{v}")] for v in VERBS} == {200}, at_limit
    assert {at_limit[("one byte over the limit (413)", f"/{v}")] for v in VERBS} == {413}, at_limit
    assert len(at_limit) == specials and -1 not in at_limit.values(), at_limit  # every one was sent
    assert statuses.get(200) and statuses.get(400) and statuses.get(413), statuses
    assert _good_answers(client) == before
    _no_server_errors(ext)


def _preempt(victims: Any) -> bytes:
    """A preempt request (nodeCacheCapable: true) for the captured pod, with `victims` as its candidates."""
    pod = fixture("filter-request-nodecache-true.json")["Pod"]
    return compact({"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims})


def test_preempt_bodies_at_the_limits_get_200_or_4xx(live: Cluster) -> None:
    """The preempt verb's bounds, each at and one past its value, and shapes kube-scheduler never sends:
    200 or a 4xx with the reason, never a 500, and the server answers the next call as before."""
    ext = _ext(live)
    client = Client(ext.ports["http"])
    before = _good_answers(client)

    def candidates(n: int, victims: int = 1) -> dict[str, Any]:
        return {
            f"node-{i}": {"Pods": [{"UID": f"uid-{i}-{k}"} for k in range(victims)], "NumPDBViolations": 0}
            for i in range(n)
        }

    small = _preempt({"gpu-node-1": {"Pods": [{"UID": "u"}]}})
    cases: list[tuple[str, bytes, int, str | None]] = [
        ("the preempt candidate bound", _preempt(candidates(PREEMPT_MAX_CANDIDATES)), 200, None),
        ("one candidate past it", _preempt(candidates(PREEMPT_MAX_CANDIDATES + 1)), 400, "too_many_nodes"),
        ("the victims bound", _preempt(candidates(1, MAX_VICTIMS_PER_NODE)), 200, None),
        ("one victim past it", _preempt(candidates(1, MAX_VICTIMS_PER_NODE + 1)), 400, "too_many_victims"),
        ("exactly the body limit", small + b" " * (DEFAULT_MAX_BODY_BYTES - len(small)), 200, None),
        ("one byte over the body limit", small + b" " * (DEFAULT_MAX_BODY_BYTES + 1 - len(small)), 413, "too_large"),
        ("a UID at its bound", _preempt({"n": {"Pods": [{"UID": "u" * MAX_BIND_FIELD_CHARS}]}}), 200, None),
        ("a UID past it", _preempt({"n": {"Pods": [{"UID": "u" * (MAX_BIND_FIELD_CHARS + 1)}]}}), 400, "wrong_type"),
        ("victims that are not objects", _preempt({"n": {"Pods": [[], "u", 7, None]}}), 400, "wrong_type"),
        ("candidates as a list", _preempt([{"n": {}}]), 400, "wrong_type"),
        ("one UID many times", _preempt({"n": {"Pods": [{"UID": "u"}] * MAX_VICTIMS_PER_NODE}}), 200, None),
        (
            "empty objects past the container bound",
            _preempt({"n": {"Pods": [{}] * (DEFAULT_MAX_BODY_BYTES // BYTES_PER_CONTAINER)}}),
            400,
            "too_complex",
        ),
    ]
    for what, body, status, reason in cases:
        got, _, data = client.post("/preempt", body)
        _check_answer(got, data, what)
        assert got == status, (what, got, data[:300])
        if reason is not None:
            assert json.loads(data)["reason"] == reason, (what, data[:300])
    after = _good_answers(client)
    # explain now also shows the pod's latest preempt call (the last body answered), nothing else changed.
    last = after["explain filter-request-nodecache-true.json"]["preemption"].pop("lastCall")
    assert [c["node"] for c in last["candidates"]] == ["n"], last
    assert after == before
    assert not metric(scrape(url(ext, "/metrics")), "gpu_extender_requests_total", verb="preempt", code="500")
    _no_server_errors(ext)


# -- item 1: quantities ---------------------------------------------------------------------------


def _with_gpus(*amounts: object, names: list[str] | None = None) -> bytes:
    """The captured names-mode request; its containers ask for `amounts` GPUs (limits only)."""
    args = names_request(names or ["gpu-node-1", "gpu-node-2", "gpu-node-3", "node-without-agent"])
    template = args["Pod"]["spec"]["containers"][0]
    containers = []
    for amount in amounts:
        container = json.loads(json.dumps(template))
        container["resources"]["requests"].pop("nvidia.com/gpu")
        container["resources"]["limits"]["nvidia.com/gpu"] = amount
        containers.append(container)
    args["Pod"]["spec"]["containers"] = containers
    return compact(args)


@pytest.mark.parametrize("value", ["1e999999", "1e999999Ei", "9" * 5000, "1" + "0" * 4400])
def test_a_hostile_quantity_is_refused_at_once(live: Cluster, value: str) -> None:
    """ "1e999999" once froze the extender ~26 s per 2.3 KB request; "1e999999Ei" was a 500; a
    quantity of >4,300 digits broke the log line ("--- Logging error ---")."""
    ext = _ext(live)
    client = Client(ext.ports["http"])
    body = _with_gpus(value, value, value)
    for verb in VERBS:
        status, _, data = client.post(f"/{verb}", body)
        assert status == 400 and json.loads(data)["reason"] == "bad_quantity", data[:300]
        assert len(json.loads(data)["error"]) < 300
    nodes = fixture("filter-request-nodecache-false.json")
    nodes["Nodes"]["items"][0]["status"]["allocatable"]["nvidia.com/gpu"] = value
    status, _, data = client.post("/filter", compact(nodes))
    assert status == 400 and json.loads(data)["reason"] == "bad_quantity"
    _no_server_errors(ext)


def test_gpu_totals_are_bounded_at_2_31(live: Cluster) -> None:
    """2**31 is served by every verb, also on a node without data (a pod above ~1.8e308 GPUs
    once overflowed a float there) and by /explain (which could not encode ints above 2**64);
    one more is refused."""
    ext = _ext(live)
    client = Client(ext.ports["http"])
    at_bound = _with_gpus(2**30, "1Gi")
    for verb in VERBS:
        status, _, data = client.post(f"/{verb}", at_bound)
        assert status == 200, (verb, data[:300])
    status, _, data = client.post("/explain", at_bound)
    assert json.loads(data)["gpusNeeded"] == MAX_GPU_COUNT
    over_bound = (
        _with_gpus(2**30, "1Gi", 1),
        _with_gpus("2147483649"),
        _with_gpus("2e308", "2e308"),
        _with_gpus(2**64 - 1),
    )
    for over in over_bound:
        for verb in VERBS:
            status, _, data = client.post(f"/{verb}", over)
            assert status == 400 and json.loads(data)["reason"] in ("too_many_gpus", "bad_quantity"), data[:300]
    nodes = fixture("filter-request-nodecache-false.json")
    nodes["Nodes"]["items"][0]["status"]["allocatable"]["nvidia.com/gpu"] = str(MAX_GPU_COUNT)
    assert client.post("/filter", compact(nodes))[0] == 200
    nodes["Nodes"]["items"][0]["status"]["allocatable"]["nvidia.com/gpu"] = str(MAX_GPU_COUNT + 1)
    status, _, data = client.post("/filter", compact(nodes))
    assert status == 400 and json.loads(data)["reason"] == "too_many_gpus"
    _no_server_errors(ext)


# -- item 2: 500s that are 400s ---------------------------------------------------------------------


def _deep(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_nodes_nested_too_deep_to_echo_get_400(live: Cluster) -> None:
    """orjson writes at most 254 levels; a Node sits at level 4 of the filter answer."""
    ext = _ext(live)
    client = Client(ext.ports["http"])
    args = full_nodes_request(2)
    args["Nodes"]["items"][0]["x"] = _deep(250)
    status, _, data = client.post("/filter", json.dumps(args).encode())
    assert status == 200 and len(json.loads(data)["Nodes"]["items"]) == 2, data[:300]
    args["Nodes"]["items"][0]["x"] = _deep(251)
    for verb in VERBS:
        status, _, data = client.post(f"/{verb}", json.dumps(args).encode())
        assert status == 400 and json.loads(data)["reason"] == "too_deep", (verb, data[:300])
    _no_server_errors(ext)


def _raw_request(port: int, head: bytes, body: bytes = b"", timeout: float = 10.0) -> bytes:
    """Send `head` + `body` on a new socket and read until the server closes or 0.5 s of quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head + body)
        return _read_answer(s)


def _read_answer(s: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + _length(data):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n")[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def _head(path: str, length: int, *extra: str) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {length}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_client_hanging_up_mid_body_is_counted_as_499_without_a_traceback(live: Cluster) -> None:
    ext = _ext(live)
    port = ext.ports["http"]
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(_head("/filter", 1000) + b'{"Pod": {}')
            time.sleep(0.05)
    wait_until(
        "3 hang-ups counted",
        lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_requests_total", verb="filter", code="499") == 3,
    )
    assert "hung up before its request body was complete" in ext.log()
    _no_server_errors(ext)


# -- item 3: compressed bodies ----------------------------------------------------------------------


def _rss_kib(proc: Proc) -> int:
    for line in Path(f"/proc/{proc.popen.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_compressed_bodies_are_refused_with_415_before_reading(live: Cluster) -> None:
    ext = _ext(live)
    port = ext.ports["http"]
    # Only the headers are sent: the answer comes without the body (a body read would wait for it).
    answer = _raw_request(port, _head("/filter", 2_100_000, "Content-Encoding: gzip"))
    assert answer.startswith(b"HTTP/1.1 415 "), answer[:300]
    assert b"Accept-Encoding: identity" in answer and b'"reason":"unsupported_encoding"' in answer
    answer = _raw_request(port, _head("/filter", 2_100_000, "Content-Encoding: identity", "Content-Encoding: gzip"))
    assert answer.startswith(b"HTTP/1.1 415 "), answer[:300]  # a second header counts too

    client = Client(port)
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip: 256 MiB of zeros in ~260 KB
    zeros = bytes(1 << 20)
    payload = b"".join(bomb.compress(zeros) for _ in range(256)) + bomb.flush()
    rss_before = _rss_kib(ext)
    for encoding, body in (
        ("gzip", payload),
        ("deflate", b"\x00garbage, not deflate"),
        ("br", b"x"),
        ("gzip, identity", gzip.compress(fixture_bytes("filter-request-nodecache-true.json"))),
    ):
        for verb in VERBS:
            status, _headers, data = client.post(f"/{verb}", body, {"Content-Encoding": encoding})
            assert status == 415 and json.loads(data)["reason"] == "unsupported_encoding", (encoding, data[:300])
    assert _rss_kib(ext) - rss_before < 64 * 1024  # the bomb was never inflated
    good = fixture_bytes("filter-request-nodecache-true.json")
    assert client.post("/filter", good, {"Content-Encoding": "identity"})[0] == 200
    _no_server_errors(ext)


# -- item 4: bounds on one call -----------------------------------------------------------------------


def test_the_body_limit_is_exact_and_a_declared_excess_is_refused_unread(live: Cluster) -> None:
    ext = _ext(live)
    client = Client(ext.ports["http"])
    body = compact(names_request(["gpu-node-2"]))
    at_limit = body + b" " * (DEFAULT_MAX_BODY_BYTES - len(body))
    assert client.post("/filter", at_limit)[0] == 200
    status, _, data = client.post("/filter", at_limit + b" ")
    assert status == 413 and json.loads(data)["reason"] == "too_large"
    # Chunked (no Content-Length): refused once the limit is passed.
    for extra, expected in ((b"", 200), (b" ", 413)):
        conn = http.client.HTTPConnection("127.0.0.1", ext.ports["http"], timeout=30)
        conn.request(
            "POST",
            "/filter",
            body=iter([at_limit[: 1 << 20], at_limit[1 << 20 :] + extra]),
            headers={"Content-Type": "application/json"},
            encode_chunked=True,
        )
        assert conn.getresponse().status == expected
        conn.close()
    # A declared excess is answered before any of the body is sent.
    answer = _raw_request(ext.ports["http"], _head("/filter", DEFAULT_MAX_BODY_BYTES + 1))
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    _no_server_errors(ext)


def test_candidate_nodes_are_bounded_at_max_candidates(live: Cluster) -> None:
    ext = _ext(live)
    client = Client(ext.ports["http"])
    for verb in VERBS:
        bound = EXPLAIN_MAX_CANDIDATES if verb == "explain" else MAX_CANDIDATES
        names = [f"node-{i:05d}" for i in range(bound)]
        assert client.post(f"/{verb}", compact(names_request(names)))[0] == 200
        status, _, data = client.post(f"/{verb}", compact(names_request([*names, "one-more"])))
        assert status == 400 and json.loads(data)["reason"] == "too_many_nodes"
    _no_server_errors(ext)


def _fd_count(proc: Proc) -> int:
    return len(os.listdir(f"/proc/{proc.popen.pid}/fd"))


def test_half_sent_bodies_get_408_and_their_connections_are_closed(tmp_path: Path) -> None:
    """400 half-sent bodies were once held open 9 s and more (fds 17 -> 417)."""
    with cluster(tmp_path) as c:
        ext = c.extender("--body-read-timeout", "1")
        port = ext.ports["http"]
        baseline = _fd_count(ext)
        body = fixture_bytes("filter-request-nodecache-true.json")
        stalled = []
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", port), timeout=15)
            s.sendall(_head("/filter", len(body)) + body[: len(body) // 2])
            stalled.append(s)
        for s in stalled:
            answer = _read_answer(s)
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
            assert b'"reason":"body_timeout"' in answer
            assert s.recv(1) == b""  # closed by the server
            s.close()
        wait_until("the stalled connections' fds are released", lambda: _fd_count(ext) <= baseline + 2)
        # A body sent in two parts well within the timeout is served.
        with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
            s.sendall(_head("/filter", len(body)) + body[:100])
            time.sleep(0.2)
            s.sendall(body[100:])
            assert _read_answer(s).startswith(b"HTTP/1.1 200 ")
        samples = scrape(url(ext, "/metrics"))
        assert metric(samples, "gpu_extender_bad_requests_total", verb="filter", reason="body_timeout") == 100
        _no_server_errors(ext)


# -- item 5 (issue item 9): many calls at once ----------------------------------------------------------


def test_a_thousand_concurrent_filters_are_all_answered(live: Cluster) -> None:
    """At aiohttp's default listen backlog (128) such a burst overflowed the accept queue and
    the kernel reset connections (243 of 1,000 unanswered while agents streamed)."""
    ext = _ext(live)
    body = fixture_bytes("filter-request-nodecache-true.json")
    count = 1000
    for _ in range(2):  # at a backlog of 128 the first burst lost ~150 connections here
        start = threading.Barrier(count)
        results: list[object] = []

        def call(start: threading.Barrier = start, results: list[object] = results) -> None:
            start.wait()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", ext.ports["http"], timeout=60)
                conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
                results.append(conn.getresponse().status)
                conn.close()
            except Exception as exc:
                results.append(repr(exc))

        threads = [threading.Thread(target=call, daemon=True) for _ in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(results) == count and set(results) == {200}, {r: results.count(r) for r in set(results)}
    _no_server_errors(ext)
