"""Benchmark: gpu-extender's scheduler verbs, POST /filter and POST /prioritize.

What it measures: the latency kube-scheduler sees for one GPU pod, per verb, at
100, 1,000 and 5,000 candidate nodes (nodeCacheCapable: true, `NodeNames`) and
at 1,000 nodes with full Node objects (nodeCacheCapable: false, `Nodes`); at
20,000 nodes (`NodeNames`) when asked for (`--scenario names-20000`).

How:
1. starts the real `gpu-extender` as a subprocess on free 127.0.0.1 ports
   (`--stale-after 100000 --forget-after 200000 --log-level warning`) and waits
   for /readyz;
2. loads GPU state for 5,000 nodes (20,000 for names-20000) `node-00001`... through the real gRPC
   contract (grpc.aio): one short StreamNodeReports stream per node (one
   NodeReport with 8 GPUs, read its ack, close), 64 streams at a time over one
   channel. Node mix: a third busy (7 of 8 GPUs at 90 % utilization / 85 %
   memory), a third idle, a third partly busy; a few have a lost GPU and a very
   few report a node-level NVML error;
3. per scenario, strictly sequentially (one request in flight, as the
   scheduler's extender client does), over one keep-alive connection:
   filter with the fixture's 2-GPU Pod and all N candidates in a shuffled order
   (the scheduler rotates its start index), then prioritize for the same pod
   with the nodes that filter passed (what kube-scheduler sends; `--prioritize-nodes
   all` sends all N instead). Warm-up requests are not counted.

Timing is client-side and includes encoding the request body and decoding the
answer on the client (as the Go scheduler pays both). Every answer is checked:
HTTP 200, the right shape (filter: NodeNames or Nodes + FailedNodes; prioritize:
a list of {"Host", "Score"} with integer scores), and filter's verdict for each
node against the state that was loaded; any deviation aborts the run.

Run: `.venv/bin/python bench/bench_extender.py [--quick] [--scenario NAME ...]`
(or everything through `bench/run_all.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import random
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from gpuextender.extender.settings import DEFAULT_SHORTLIST
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (
    OUT_DIR,
    REPO_ROOT,
    BackgroundLoad,
    BenchError,
    ExtenderAddrs,
    ManagedProcess,
    exit_on_sigterm,
    extender_process,
    percentile,
    scrape,
    tree_memory_kib,
    wait_http_ok,
)

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "extender-requests"
GPUS_PER_NODE = 8
GPU_MEMORY_BYTES = 80 * 1024**3
POD_GPUS = 2  # what the fixture's Pod requests
LOAD_CONCURRENCY = 64
SEED = 20261122
# The 0.2 facts an agent on an 8-GPU NVLink node sends with every report: two NVLink islands of
# four GPUs, one per NUMA node. Busy GPUs are held by a pod (the kubelet's allocation).
ISLANDS = pb.Topology(
    links=[
        pb.GpuLink(a=a, b=b, nvlinks=12, pcie=pb.PCIE_NODE)
        if (a < 4) == (b < 4)
        else pb.GpuLink(a=a, b=b, pcie=pb.PCIE_SYSTEM)
        for a in range(GPUS_PER_NODE)
        for b in range(a + 1, GPUS_PER_NODE)
    ]
)
HELD_AT_UTILIZATION = 40  # a GPU this busy is held by a pod; quieter ones are free
JSON_HEADERS = {"Content-Type": "application/json", "Accept-Encoding": "gzip"}
# The extender's idle rule at its defaults (--idle-max-utilization 30, --idle-max-memory 50).
IDLE_MAX_UTILIZATION = 30.0
IDLE_MAX_MEMORY = 50.0


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    mode: str  # "names" (NodeNames) or "nodes" (full Node objects)
    nodes: int
    iterations: int
    warmup: int


SCENARIOS = (
    Scenario("names-100", "names", 100, iterations=1_000, warmup=20),
    Scenario("names-1000", "names", 1_000, iterations=500, warmup=20),
    Scenario("names-5000", "names", 5_000, iterations=300, warmup=20),
    Scenario("nodes-1000", "nodes", 1_000, iterations=100, warmup=10),
)
# Run only when named (`--scenario names-20000`): loading 20,000 nodes takes a minute.
ON_REQUEST = (Scenario("names-20000", "names", 20_000, iterations=200, warmup=10),)
QUICK_ITERATIONS = {
    "names-100": (40, 5),
    "names-1000": (30, 5),
    "names-5000": (20, 5),
    "nodes-1000": (10, 3),
    "names-20000": (10, 3),
}


# -- the simulated fleet -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuState:
    utilization: int
    memory_percent: float
    healthy: bool = True


@dataclass(frozen=True, slots=True)
class NodeState:
    name: str
    kind: str  # busy, idle, partial
    gpus: tuple[GpuState, ...]
    node_error: str = ""

    def idle_healthy(self) -> int:
        return sum(
            1
            for g in self.gpus
            if g.healthy and g.utilization < IDLE_MAX_UTILIZATION and g.memory_percent < IDLE_MAX_MEMORY
        )

    def verdict(self, needed: int) -> str:
        """What filter must say: "pass", "soft" (FailedNodes) or "unresolvable"."""
        if self.node_error or sum(g.healthy for g in self.gpus) < needed:
            return "unresolvable"
        return "pass" if self.idle_healthy() >= needed else "soft"


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def make_fleet(count: int, seed: int = SEED) -> list[NodeState]:
    """Deterministic node states; the first N of a larger fleet are the same nodes."""
    rng = random.Random(seed)
    fleet = []
    for i in range(1, count + 1):
        kind = ("busy", "idle", "partial")[i % 3]
        busy = GpuState(90, 85.0)
        if kind == "busy":  # most GPUs saturated, one free: fails a 2-GPU pod
            gpus = [busy] * (GPUS_PER_NODE - 1) + [GpuState(rng.randint(0, 5), rng.uniform(0.5, 3))]
        elif kind == "idle":
            gpus = [GpuState(rng.randint(0, 10), rng.uniform(0.5, 8)) for _ in range(GPUS_PER_NODE)]
        else:  # 2..6 GPUs busy at various loads, the rest idle
            n_busy = rng.randint(2, 6)
            gpus = [GpuState(rng.randint(40, 100), rng.uniform(55, 95)) for _ in range(n_busy)]
            gpus += [GpuState(rng.randint(0, 15), rng.uniform(0.5, 20)) for _ in range(GPUS_PER_NODE - n_busy)]
            rng.shuffle(gpus)
        node_error = ""
        if i % 97 == 5:  # a lost GPU
            lost = rng.randrange(GPUS_PER_NODE)
            gpus[lost] = GpuState(0, 0.0, healthy=False)
        if i % 499 == 7:  # NVML unusable on the whole node
            node_error = "DriverNotLoaded"
        fleet.append(NodeState(node_name(i), kind, tuple(gpus), node_error))
    return fleet


def node_report(node: NodeState, sample_time: float) -> pb.NodeReport:
    """The NodeReport an agent on this node would send (8 GPUs, proto3 optional readings)."""
    gpus = []
    if not node.node_error:
        for index, g in enumerate(node.gpus):
            gpu = pb.GpuSample(
                index=index,
                uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node.name}.{index}')}",
                name="NVIDIA H100 80GB HBM3",
                pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0",
                healthy=g.healthy,
            )
            gpu.compute_capability.major, gpu.compute_capability.minor = 9, 0
            gpu.sharing.mode, gpu.sharing.replicas = pb.SHARING_EXCLUSIVE, 1
            gpu.health = pb.HEALTH_HEALTHY if g.healthy else pb.HEALTH_UNHEALTHY
            if g.utilization >= HELD_AT_UTILIZATION:
                gpu.holders.add(
                    namespace="llm",
                    pod=f"{node.name}-engine",
                    container="engine",
                    resource_name="nvidia.com/gpu",
                    device_id=gpu.uuid,
                )
            if g.healthy:
                reserved = 512 * 1024**2
                used = int(GPU_MEMORY_BYTES * g.memory_percent / 100)
                gpu.memory_total_bytes = GPU_MEMORY_BYTES
                gpu.memory_used_bytes = used
                gpu.memory_reserved_bytes = reserved
                gpu.memory_free_bytes = max(0, GPU_MEMORY_BYTES - reserved - used)
                gpu.utilization_gpu_percent = g.utilization
                gpu.utilization_memory_percent = g.utilization // 2
                gpu.temperature_celsius = 34 + g.utilization * 2 // 5
                gpu.power_watts = 70.0 + 6.2 * g.utilization
            else:
                gpu.unhealthy_reasons.append("GpuIsLost")
            gpus.append(gpu)
    report = pb.NodeReport(
        node_name=node.name,
        sequence=1,
        agent_version="bench",
        driver_version="550.127.05",
        gpus=gpus,
        node_error=node.node_error,
        allocation_source=pb.ALLOCATION_KUBELET,
    )
    if gpus:
        report.topology.CopyFrom(ISLANDS)
    report.sample_time.seconds = int(sample_time)
    report.sample_time.nanos = int((sample_time - int(sample_time)) * 1e9)
    return report


async def load_fleet(grpc_target: str, fleet: list[NodeState], concurrency: int = LOAD_CONCURRENCY) -> float:
    """Send each node's report on its own short stream (the extender binds a
    stream to one node name), `concurrency` streams at a time over one channel.
    Returns the seconds it took."""
    now = time.time()
    reports = [node_report(n, now) for n in fleet]
    started = time.perf_counter()
    async with grpc.aio.insecure_channel(grpc_target) as channel:
        await asyncio.wait_for(channel.channel_ready(), timeout=10)
        stub = pb_grpc.GpuStateServiceStub(channel)
        gate = asyncio.Semaphore(concurrency)

        async def send(report: pb.NodeReport) -> None:
            async with gate:
                # Sampled as it is sent: 20,000 reports take longer than the extender's clock-skew bound.
                sampled = time.time()
                report.sample_time.seconds = int(sampled)
                report.sample_time.nanos = int((sampled - int(sampled)) * 1e9)
                call = stub.StreamNodeReports(timeout=30)
                await call.write(report)
                ack = await call.read()
                await call.done_writing()
                rest = await call.read()
                if ack is grpc.aio.EOF or ack.status != pb.ReportAck.ACCEPTED or ack.sequence != report.sequence:
                    raise BenchError(f"report for {report.node_name} not accepted: {ack!r}")
                if rest is not grpc.aio.EOF:
                    raise BenchError(f"unexpected second ack for {report.node_name}: {rest!r}")
                code = await call.code()
                if code != grpc.StatusCode.OK:
                    raise BenchError(f"stream for {report.node_name} ended with {code}: {await call.details()}")

        await asyncio.gather(*(send(r) for r in reports))
    return time.perf_counter() - started


# -- requests and answer checks ---------------------------------------------------


def encode(payload: Any) -> bytes:
    """Compact JSON, as Go's encoding/json writes it."""
    return json.dumps(payload, separators=(",", ":")).encode()


def load_pod() -> dict[str, Any]:
    return json.loads((FIXTURES / "filter-request-nodecache-true.json").read_text())["Pod"]


def make_node_objects(names: list[str]) -> list[dict[str, Any]]:
    """Clones of the fixture's first Node object (8 allocatable GPUs), one per name."""
    template = json.loads((FIXTURES / "filter-request-nodecache-false.json").read_text())["Nodes"]["items"][0]
    nodes = []
    for name in names:
        node = copy.deepcopy(template)
        node["metadata"]["name"] = name
        node["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"node.{name}"))
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        for address in node["status"].get("addresses", []):
            if address.get("type") == "Hostname":
                address["address"] = name
        nodes.append(node)
    return nodes


def filter_body(pod: dict[str, Any], mode: str, order: list[Any]) -> dict[str, Any]:
    if mode == "names":
        return {"Pod": pod, "Nodes": None, "NodeNames": order}
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": order}, "NodeNames": None}


def _fail(verb: str, problem: str, raw: bytes) -> BenchError:
    snippet = raw[:300].decode(errors="replace")
    return BenchError(f"{verb}: {problem}; answer starts: {snippet!r}")


def _decode(verb: str, raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise _fail(verb, f"answer is not JSON ({exc})", raw) from None


def check_filter(
    status: int,
    raw: bytes,
    doc: Any,
    mode: str,
    sent: list[str],
    expected: dict[str, str],
    shortlist: int = DEFAULT_SHORTLIST,
) -> list[str]:
    """Validate a filter answer; return the passed node names. With more than `shortlist` nodes
    that must pass, exactly `shortlist` of them are answered and the rest are left out (the
    extender's --shortlist, its default here); failures are always all answered."""
    if status != 200:
        raise _fail("filter", f"HTTP {status}", raw)
    if not isinstance(doc, dict):
        raise _fail("filter", "answer is not a JSON object", raw)
    if doc.get("Error"):
        raise _fail("filter", f"Error={doc['Error']!r}", raw)
    if mode == "names":
        passed = doc.get("NodeNames")
        if not isinstance(passed, list) or not all(isinstance(n, str) for n in passed):
            raise _fail("filter", "NodeNames is not a list of strings", raw)
    else:
        nodes = doc.get("Nodes")
        if not isinstance(nodes, dict) or not isinstance(nodes.get("items"), list):
            raise _fail("filter", "Nodes is not a NodeList with items", raw)
        passed = [n["metadata"]["name"] for n in nodes["items"]]
    failed = doc.get("FailedNodes")
    unresolvable = doc.get("FailedAndUnresolvableNodes") or {}
    if not isinstance(failed, dict) or not isinstance(unresolvable, dict):
        raise _fail("filter", "FailedNodes / FailedAndUnresolvableNodes are not objects", raw)
    got = {**{n: "pass" for n in passed}, **{n: "soft" for n in failed}, **{n: "unresolvable" for n in unresolvable}}
    must_pass = sum(1 for n in sent if expected[n] == "pass")
    held_back = must_pass - len(passed) if shortlist and must_pass > shortlist else 0
    if len(passed) + len(failed) + len(unresolvable) != len(got) or len(got) + held_back != len(sent):
        raise _fail(
            "filter",
            f"{len(sent)} nodes sent, answer accounts for {len(got)} "
            f"(+{held_back} held back by --shortlist {shortlist})",
            raw,
        )
    if held_back and len(passed) != shortlist:
        raise _fail("filter", f"{len(passed)} nodes answered as passing, --shortlist is {shortlist}", raw)
    wrong = [(n, got.get(n), expected[n]) for n in sent if got.get(n, "pass" if held_back else None) != expected[n]]
    if wrong:
        raise _fail("filter", f"{len(wrong)} wrong verdicts, e.g. (node, got, expected) {wrong[:3]}", raw)
    return passed


def check_prioritize(status: int, raw: bytes, doc: Any, sent: list[str], mixed: bool = True) -> None:
    """`mixed`: the nodes sent differ in GPU state, so an answer where all score the same is wrong."""
    if status != 200:
        raise _fail("prioritize", f"HTTP {status}", raw)
    if not isinstance(doc, list):
        raise _fail("prioritize", "answer is not a JSON list", raw)
    known = set(sent)
    for entry in doc:
        if not isinstance(entry, dict) or set(entry) != {"Host", "Score"}:
            raise _fail("prioritize", f"entry {entry!r} is not {{Host, Score}}", raw)
        score = entry["Score"]
        if type(score) is not int or not 0 <= score <= 10:
            raise _fail("prioritize", f"Score {score!r} is not an integer in 0..10", raw)
        if entry["Host"] not in known:
            raise _fail("prioritize", f"Host {entry['Host']!r} was not sent", raw)
    if mixed and len(sent) > 1 and not doc:
        raise _fail("prioritize", "all nodes scored the same on a mixed fleet", raw)


# -- measurement ------------------------------------------------------------------


@dataclass(slots=True)
class VerbStats:
    verb: str
    nodes_sent: int  # candidates in the request
    iterations: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    req_per_s: float  # back-to-back, one in flight: 1 / mean latency
    request_bytes: int
    response_bytes: int
    server_mean_ms: float  # the extender's own histogram (handler only), for comparison


@dataclass(slots=True)
class ScenarioResult:
    name: str
    mode: str
    nodes: int
    passed: int
    failed_soft: int
    failed_unresolvable: int
    wall_s: float
    background_cores: float  # CPU used by other processes on the machine meanwhile (cores)
    verbs: list[VerbStats] = field(default_factory=list)


@dataclass(slots=True)
class ExtenderBenchResult:
    nodes_loaded: int
    load_s: float
    extender_rss_after_load_kib: int
    extender_rss_end_kib: int
    extender_hwm_end_kib: int
    prioritize_nodes: str
    scenarios: list[ScenarioResult] = field(default_factory=list)


def _stats(
    verb: str, latencies_ns: list[int], nodes_sent: int, req_bytes: int, resp_bytes: int, server_mean_ms: float
) -> VerbStats:
    ms = sorted(x / 1e6 for x in latencies_ns)
    mean = sum(ms) / len(ms)
    return VerbStats(
        verb=verb,
        nodes_sent=nodes_sent,
        iterations=len(ms),
        p50_ms=percentile(ms, 50),
        p99_ms=percentile(ms, 99),
        max_ms=ms[-1],
        mean_ms=mean,
        req_per_s=1000.0 / mean if mean > 0 else float("inf"),
        request_bytes=req_bytes,
        response_bytes=resp_bytes,
        server_mean_ms=server_mean_ms,
    )


def _server_totals(metrics: dict[str, float], verb: str) -> tuple[float, float]:
    base = "gpu_extender_request_duration_seconds"
    label = f'{{verb="{verb}"}}'
    return metrics.get(f"{base}_sum{label}", 0.0), metrics.get(f"{base}_count{label}", 0.0)


async def run_scenario(
    session: aiohttp.ClientSession,
    process: ManagedProcess,
    addrs: ExtenderAddrs,
    scenario: Scenario,
    fleet: list[NodeState],
    pod: dict[str, Any],
    *,
    prioritize_all: bool,
    progress: bool = True,
) -> ScenarioResult:
    nodes = fleet[: scenario.nodes]
    names = [n.name for n in nodes]
    expected = {n.name: n.verdict(POD_GPUS) for n in nodes}
    items: list[Any] = names if scenario.mode == "names" else make_node_objects(names)
    rng = random.Random(f"{SEED}-{scenario.name}")
    orders = []  # shuffled outside the timed region; cycled through
    for _ in range(16):
        order = list(items)
        rng.shuffle(order)
        orders.append(order)
    filter_url = f"{addrs.base_url}/filter"
    prioritize_url = f"{addrs.base_url}/prioritize"
    filter_ns: list[int] = []
    prioritize_ns: list[int] = []
    sizes = {"filter_req": 0, "filter_resp": 0, "prio_req": 0, "prio_resp": 0}
    prioritize_sent = 0
    verdicts: tuple[int, int, int] = (0, 0, 0)
    metrics_before: dict[str, float] = {}
    # Keep the client's own garbage collector out of the timings: everything built
    # so far (fleet, node objects, shuffled orders) is moved out of its reach.
    gc.collect()
    gc.freeze()
    started = time.perf_counter()
    background = BackgroundLoad(process.pid)
    total = scenario.warmup + scenario.iterations
    for it in range(total):
        if it == scenario.warmup:
            metrics_before = await scrape(session, f"{addrs.base_url}/metrics")
        order = orders[it % len(orders)]
        sent_names = order if scenario.mode == "names" else [n["metadata"]["name"] for n in order]

        # filter: encode, POST, read, decode -- all timed, as the scheduler pays them
        t0 = time.perf_counter_ns()
        body = encode(filter_body(pod, scenario.mode, order))
        async with session.post(filter_url, data=body, headers=JSON_HEADERS) as resp:
            status = resp.status
            raw = await resp.read()
        doc = _decode("filter", raw) if status == 200 else None
        t1 = time.perf_counter_ns()
        passed = check_filter(status, raw, doc, scenario.mode, sent_names, expected)
        assert isinstance(doc, dict)  # check_filter raised otherwise

        # prioritize: the nodes that passed (the scheduler's feasible list), same pod
        if scenario.mode == "names":
            candidates: list[Any] = order if prioritize_all else doc["NodeNames"]
        else:
            candidates = order if prioritize_all else doc["Nodes"]["items"]
        prio_names = sent_names if prioritize_all else passed
        t2 = time.perf_counter_ns()
        prio_body = encode(filter_body(pod, scenario.mode, candidates))
        async with session.post(prioritize_url, data=prio_body, headers=JSON_HEADERS) as resp:
            prio_status = resp.status
            prio_raw = await resp.read()
        prio_doc = _decode("prioritize", prio_raw) if prio_status == 200 else None
        t3 = time.perf_counter_ns()
        # A shortlist holds the best nodes: they may all score the same (an empty compact answer).
        shortlisted = len(passed) < sum(1 for n in sent_names if expected[n] == "pass")
        check_prioritize(prio_status, prio_raw, prio_doc, prio_names, mixed=prioritize_all or not shortlisted)

        if it >= scenario.warmup:
            filter_ns.append(t1 - t0)
            prioritize_ns.append(t3 - t2)
        if it == 0:
            sizes = {
                "filter_req": len(body),
                "filter_resp": len(raw),
                "prio_req": len(prio_body),
                "prio_resp": len(prio_raw),
            }
            prioritize_sent = len(prio_names)
            counts = list(expected.values())
            verdicts = (counts.count("pass"), counts.count("soft"), counts.count("unresolvable"))
    wall = time.perf_counter() - started
    background_cores = background.cores()
    if progress:
        print(
            f"  {scenario.name}: {total} filter+prioritize pairs ({scenario.warmup} warm-up) in {wall:.1f}s",
            file=sys.stderr,
            flush=True,
        )
    metrics_after = await scrape(session, f"{addrs.base_url}/metrics")
    server_ms = {}
    for verb in ("filter", "prioritize"):
        s0, c0 = _server_totals(metrics_before, verb)
        s1, c1 = _server_totals(metrics_after, verb)
        server_ms[verb] = 1000.0 * (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan")
    result = ScenarioResult(
        scenario.name, scenario.mode, scenario.nodes, *verdicts, wall_s=wall, background_cores=background_cores
    )
    result.verbs.append(
        _stats("filter", filter_ns, len(names), sizes["filter_req"], sizes["filter_resp"], server_ms["filter"])
    )
    result.verbs.append(
        _stats(
            "prioritize", prioritize_ns, prioritize_sent, sizes["prio_req"], sizes["prio_resp"], server_ms["prioritize"]
        )
    )
    return result


async def _bench(
    process: ManagedProcess, addrs: ExtenderAddrs, scenarios: list[Scenario], *, prioritize_all: bool
) -> ExtenderBenchResult:
    fleet_size = max(s.nodes for s in scenarios)
    fleet = make_fleet(fleet_size)
    pod = load_pod()
    # One connection, kept alive, like the scheduler's http.Client to one extender.
    connector = aiohttp.TCPConnector(limit=1, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await wait_http_ok(session, f"{addrs.base_url}/readyz", process)
        print(
            f"loading {fleet_size} nodes over gRPC ({LOAD_CONCURRENCY} streams at a time)...",
            file=sys.stderr,
            flush=True,
        )
        load_s = await load_fleet(addrs.grpc_target, fleet)
        metrics = await scrape(session, f"{addrs.base_url}/metrics")
        have = metrics.get("gpu_extender_nodes_with_data")
        if have != float(fleet_size):
            raise BenchError(f"extender reports gpu_extender_nodes_with_data {have}, expected {fleet_size}")
        rss_after_load = tree_memory_kib(process.pid).get("VmRSS", 0)
        result = ExtenderBenchResult(
            nodes_loaded=fleet_size,
            load_s=load_s,
            extender_rss_after_load_kib=rss_after_load,
            extender_rss_end_kib=0,
            extender_hwm_end_kib=0,
            prioritize_nodes="all candidates" if prioritize_all else "the nodes filter passed",
        )
        for scenario in scenarios:
            process.check_alive()
            result.scenarios.append(
                await run_scenario(session, process, addrs, scenario, fleet, pod, prioritize_all=prioritize_all)
            )
        mem = tree_memory_kib(process.pid)
        result.extender_rss_end_kib = mem.get("VmRSS", 0)
        result.extender_hwm_end_kib = mem.get("VmHWM", 0)
    return result


def select_scenarios(names: list[str] | None, quick: bool) -> list[Scenario]:
    known = SCENARIOS + ON_REQUEST
    chosen = list(SCENARIOS) if not names else [s for s in known if s.name in names]
    unknown = set(names or ()) - {s.name for s in known}
    if unknown:
        raise BenchError(f"unknown scenario(s) {sorted(unknown)}; known: {[s.name for s in known]}")
    if quick:
        chosen = [Scenario(s.name, s.mode, s.nodes, *QUICK_ITERATIONS[s.name]) for s in chosen]
    return chosen


def run(
    scenario_names: list[str] | None = None, *, quick: bool = False, prioritize_all: bool = False
) -> ExtenderBenchResult:
    """Start the extender, run the scenarios, stop the extender (always)."""
    scenarios = select_scenarios(scenario_names, quick)
    # nodes-1000 sends ~3.4 MB of full Nodes: above the 2 MiB default, sized for names mode.
    process, addrs = extender_process("extender-bench", ["--max-body-bytes", str(8 * 1024**2)])
    with process:
        return asyncio.run(_bench(process, addrs, scenarios, prioritize_all=prioritize_all))


def format_table(result: ExtenderBenchResult) -> str:
    head = (
        f"{'scenario':<11} {'nodes':>6} {'verb':<10} {'sent':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'req/s':>7} {'req KB':>8} {'resp KB':>8} {'server ms':>9} {'bg cores':>8}"
    )
    lines = [head, "-" * len(head)]
    for sc in result.scenarios:
        for v in sc.verbs:
            lines.append(
                f"{sc.name:<11} {sc.nodes:>6} {v.verb:<10} {v.nodes_sent:>5} {v.p50_ms:>8.2f} {v.p99_ms:>8.2f} "
                f"{v.max_ms:>8.2f} {v.req_per_s:>7.0f} {v.request_bytes / 1024:>8.1f} "
                f"{v.response_bytes / 1024:>8.1f} {v.server_mean_ms:>9.2f} {sc.background_cores:>8.2f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few iterations: a smoke check, not a measurement")
    parser.add_argument(
        "--scenario",
        action="append",
        choices=[s.name for s in SCENARIOS + ON_REQUEST],
        help="run only this scenario (repeatable; names-20000 runs only when named)",
    )
    parser.add_argument(
        "--prioritize-nodes",
        choices=("passed", "all"),
        default="passed",
        help="prioritize gets the nodes filter passed (kube-scheduler) or all N",
    )
    parser.add_argument("--json", type=Path, help="also write the raw results as JSON here")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    try:
        result = run(args.scenario, quick=args.quick, prioritize_all=args.prioritize_nodes == "all")
    except BenchError as exc:
        print(f"bench_extender: FAILED: {exc}", file=sys.stderr)
        return 1
    print(
        f"loaded {result.nodes_loaded} nodes over gRPC in {result.load_s:.2f}s; "
        f"extender RSS {result.extender_rss_end_kib / 1024:.0f} MiB (peak {result.extender_hwm_end_kib / 1024:.0f})"
    )
    print(format_table(result))
    if args.json:
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(asdict(result), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
