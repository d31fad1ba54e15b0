"""Ingest hardening (issue 8) over real grpc.aio channels on loopback: reports ordered by receipt,
implausible sample times refused, sequences increasing per stream, every string and list bounded,
nodes outside the inventory held in a bounded set, and each stream paced."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import pynvml
import pytest
from prometheus_client import generate_latest

from gpuextender.agent.sampling.sample_loop import MIN_INTERVAL_S
from gpuextender.agent.sources.nvml_errors import ErrorGroup, classify, known_error_names
from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.ingest.limits import (
    MAX_REPORT_BYTES,
    REPORT_BURST,
    REPORTS_PER_SECOND,
    ReportPacer,
    UnknownNodes,
)
from gpuextender.extender.ingest.report_checks import (
    MAX_AGENT_VERSION_CHARS,
    MAX_DRIVER_VERSION_CHARS,
    MAX_GPU_NAME_CHARS,
    MAX_GPUS_PER_NODE,
    MAX_NODE_ERROR_CHARS,
    MAX_PCI_BUS_ID_CHARS,
    MAX_UNHEALTHY_REASON_CHARS,
    MAX_UNHEALTHY_REASONS,
    MAX_UUID_CHARS,
    clock_skew_problem,
    report_problem,
)
from gpuextender.extender.ingest.service import IngestLimits, IngestService, add_to_server
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.extender.builders import GIB, gpu, report
from tests.harness import metric, parse_metrics

WALL = 1_700_000_000.0  # the extender's wall clock in these tests (Unix seconds)
ACCEPTED, REJECTED = pb.ReportAck.ACCEPTED, pb.ReportAck.REJECTED


def at(node: str, offset_ns: int, seq: int, gpus: list[pb.GpuSample] | None = None) -> pb.NodeReport:
    """A report sampled `offset_ns` nanoseconds from WALL."""
    r = report(node, gpus if gpus is not None else [gpu(0)], seq=seq)
    r.sample_time.seconds, r.sample_time.nanos = divmod(int(WALL) * 10**9 + offset_ns, 10**9)
    return r


@dataclass
class Rig:
    state: GpuState
    metrics: ExtenderMetrics
    port: int
    now: list[float] = field(default_factory=lambda: [100.0])  # the monotonic clock

    def metric(self, name: str, **labels: str) -> float | None:
        return metric(parse_metrics(generate_latest(self.metrics.registry).decode()), name, **labels)

    async def exchange(self, *reports: pb.NodeReport) -> list[pb.ReportAck]:
        """One stream: write each report, read its ack; every ACCEPTED report must be the stored one."""
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            call = pb_grpc.GpuStateServiceStub(channel).StreamNodeReports()
            acks = []
            for r in reports:
                await call.write(r)
                ack = await call.read()
                assert ack is not grpc.aio.EOF
                if ack.status == ACCEPTED:  # never acked without being stored
                    stored = self.state.summary(r.node_name)
                    assert stored is not None and stored.sequence == r.sequence
                else:
                    assert ack.reason
                acks.append(ack)
            await call.done_writing()
            assert await call.read() is grpc.aio.EOF
            return acks


@asynccontextmanager
async def rig(**options: Any) -> AsyncIterator[Rig]:
    state = GpuState(IdleRule())
    metrics = ExtenderMetrics(state)
    server = grpc.aio.server()
    box = Rig(state, metrics, 0)
    service = IngestService(state, metrics.ingest, clock=lambda: box.now[0], wall_clock=lambda: WALL, **options)
    add_to_server(service, server)
    box.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield box
    finally:
        await server.stop(None)


def run(test: Callable[[Rig], Any], **options: Any) -> None:
    async def scenario() -> None:
        async with rig(**options) as r:
            await test(r)

    asyncio.run(scenario())


async def until(what: str, check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait (in the server's loop) until `check()`; a hang guard, not a timing assertion."""
    async with asyncio.timeout(timeout_s):
        while not check():
            await asyncio.sleep(0.005)


# -- A: ordering by receipt, clock skew, sequences --------------------------------------------------

SKEW_NS = 30 * 10**9


@pytest.mark.parametrize(
    ("offset_ns", "words"),
    [(SKEW_NS, None), (SKEW_NS + 1, "30s ahead of"), (-SKEW_NS, None), (-SKEW_NS - 1, "30s behind")],
    ids=["ahead-at-bound", "ahead-past-bound", "behind-at-bound", "behind-past-bound"],
)
def test_clock_skew_is_bounded_exactly(offset_ns: int, words: str | None) -> None:
    problem = clock_skew_problem(at("n", offset_ns, 1), WALL, 30.0)
    if words is None:
        assert problem is None
    else:
        assert problem is not None and words in problem and "--max-clock-skew 30s" in problem


def test_a_stepped_clock_gets_the_same_reason_every_report() -> None:
    """The agent logs a rejection when its reason changes: a clock 45.2 s off must not say so anew
    with every report's few milliseconds of jitter."""
    reasons = {
        clock_skew_problem(at("n", 45_200_000_000 + jitter_ms * 10**6, 1), WALL, 30.0) for jitter_ms in range(0, 200, 7)
    }
    assert len(reasons) == 1 and "45s ahead of" in reasons.pop()


def test_a_future_dated_report_is_rejected_and_later_reports_are_stored() -> None:
    """The repro: one report 45 s ahead (an NTP step on the node) used to block the node."""

    async def test(r: Rig) -> None:
        acks = await r.exchange(
            at("gpu-node-1", 0, 1),
            at("gpu-node-1", 45 * 10**9, 2),
            at("gpu-node-1", 10**9, 3),
            at("gpu-node-1", 2 * 10**9, 4),
        )
        assert [a.status for a in acks] == [ACCEPTED, REJECTED, ACCEPTED, ACCEPTED]
        assert "45s ahead of the extender's clock" in acks[1].reason and "NTP" in acks[1].reason
        assert r.state.summary("gpu-node-1").sequence == 4
        assert r.metric("gpu_extender_reports_rejected_total", reason="clock_skew") == 1
        assert r.metric("gpu_extender_reports_total", result="accepted") == 3

    run(test)


def test_the_report_received_last_wins_whatever_its_sample_time() -> None:
    async def test(r: Rig) -> None:
        # Both within the bound (exactly at it): the second is 60 s older by the node's clock.
        acks = await r.exchange(at("gpu-node-1", SKEW_NS, 1, [gpu(0, 90, 90)]), at("gpu-node-1", -SKEW_NS, 2))
        assert [a.status for a in acks] == [ACCEPTED, ACCEPTED]
        summary = r.state.summary("gpu-node-1")
        assert (summary.sequence, summary.idle_gpus) == (2, 1)
        # A new stream (the agent restarted: its sequence starts at 1 again) is stored too.
        assert [a.status for a in await r.exchange(at("gpu-node-1", 0, 1, [gpu(0, 90, 90)]))] == [ACCEPTED]
        assert (r.state.summary("gpu-node-1").sequence, r.state.summary("gpu-node-1").idle_gpus) == (1, 0)

    run(test)


def test_within_a_stream_the_sequence_must_increase() -> None:
    async def test(r: Rig) -> None:
        acks = await r.exchange(*(at("gpu-node-1", 0, seq) for seq in (0, 5, 5, 4, 6, 8)))
        assert [a.status for a in acks] == [REJECTED, ACCEPTED, REJECTED, REJECTED, ACCEPTED, ACCEPTED]
        assert "sequence 0 does not increase (last stored on this stream: 0" in acks[0].reason
        assert "sequence 5 does not increase (last stored on this stream: 5" in acks[2].reason
        assert "sequence 4 does not increase" in acks[3].reason
        assert r.state.summary("gpu-node-1").sequence == 8  # gaps are fine: the agent sends only its newest
        assert r.metric("gpu_extender_reports_rejected_total", reason="sequence") == 3

    run(test)


def test_a_rejected_report_does_not_advance_the_sequence() -> None:
    async def test(r: Rig) -> None:
        acks = await r.exchange(at("gpu-node-1", 0, 1), at("gpu-node-1", 99 * 10**9, 2), at("gpu-node-1", 0, 2))
        assert [a.status for a in acks] == [ACCEPTED, REJECTED, ACCEPTED]

    run(test)


def test_state_orders_by_receipt_on_the_extenders_clock() -> None:
    state = GpuState(IdleRule())
    assert state.ingest(report("n", [gpu(0)], seconds=2000, seq=1), received_at=10.0)
    assert state.ingest(report("n", [gpu(0)], seconds=1000, seq=2), received_at=10.0)  # same instant: stored
    assert state.summary("n").sequence == 2
    assert not state.ingest(report("n", [gpu(0)], seconds=3000, seq=3), received_at=9.999)  # received before
    assert state.summary("n").sequence == 2


# -- B: bounded strings and lists ---------------------------------------------------------------------


def _set(path: str, value: Any) -> Callable[[pb.NodeReport], None]:
    def apply(r: pb.NodeReport) -> None:
        target = r.gpus[0] if path.startswith("gpu.") else r
        name = path.removeprefix("gpu.")
        if name == "unhealthy_reasons":
            del target.unhealthy_reasons[:]
            target.unhealthy_reasons.extend(value)
        else:
            setattr(target, name, value)

    return apply


BOUNDS = [
    ("agent_version", MAX_AGENT_VERSION_CHARS),
    ("driver_version", MAX_DRIVER_VERSION_CHARS),
    ("node_error", MAX_NODE_ERROR_CHARS),
    ("gpu.uuid", MAX_UUID_CHARS),
    ("gpu.name", MAX_GPU_NAME_CHARS),
    ("gpu.pci_bus_id", MAX_PCI_BUS_ID_CHARS),
]


@pytest.mark.parametrize(("path", "limit"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_every_string_is_bounded_exactly(path: str, limit: int) -> None:
    ok, over = report("n", [gpu(0)]), report("n", [gpu(0)])
    _set(path, "x" * limit)(ok)
    _set(path, "x" * (limit + 1))(over)
    assert report_problem(ok, None) is None
    field = path.removeprefix("gpu.")
    assert f"{field} is {limit + 1} characters, more than the {limit} allowed" in report_problem(over, None)


def test_unhealthy_reasons_are_bounded_in_count_and_length() -> None:
    def with_reasons(reasons: list[str]) -> pb.NodeReport:
        r = report("n", [gpu(0, healthy=False)])
        _set("gpu.unhealthy_reasons", reasons)(r)
        return r

    assert report_problem(with_reasons(["R"] * MAX_UNHEALTHY_REASONS), None) is None
    assert f"{MAX_UNHEALTHY_REASONS + 1} unhealthy_reasons, more than the {MAX_UNHEALTHY_REASONS}" in report_problem(
        with_reasons(["R"] * (MAX_UNHEALTHY_REASONS + 1)), None
    )
    assert report_problem(with_reasons(["R" * MAX_UNHEALTHY_REASON_CHARS]), None) is None
    assert f"more than the {MAX_UNHEALTHY_REASON_CHARS} allowed" in report_problem(
        with_reasons(["R" * (MAX_UNHEALTHY_REASON_CHARS + 1)]), None
    )


def test_gpu_count_is_bounded_exactly() -> None:
    assert report_problem(report("n", [gpu(i) for i in range(MAX_GPUS_PER_NODE)]), None) is None
    assert f"{MAX_GPUS_PER_NODE + 1} GPUs is more than the {MAX_GPUS_PER_NODE}" in report_problem(
        report("n", [gpu(i) for i in range(MAX_GPUS_PER_NODE + 1)]), None
    )


def test_sample_time_nanos_must_be_a_valid_timestamp() -> None:
    r = report("n", [gpu(0)])
    r.sample_time.nanos = 999_999_999
    assert report_problem(r, None) is None
    r.sample_time.nanos = 1_000_000_000
    assert "outside 0..999999999" in report_problem(r, None)
    r.sample_time.nanos = -1
    assert "outside 0..999999999" in report_problem(r, None)


def maximal_report() -> pb.NodeReport:
    """Every field at its bound, every number at its widest encoding: the largest valid report."""
    r = pb.NodeReport(
        node_name="n" * 253,
        sequence=2**64 - 1,
        agent_version="a" * MAX_AGENT_VERSION_CHARS,
        driver_version="d" * MAX_DRIVER_VERSION_CHARS,
        node_error="e" * MAX_NODE_ERROR_CHARS,
    )
    r.sample_time.seconds, r.sample_time.nanos = 2**40, 999_999_999
    for i in range(MAX_GPUS_PER_NODE):
        g = r.gpus.add(
            index=2**32 - 1 - i,
            uuid="u" * MAX_UUID_CHARS,
            name="m" * MAX_GPU_NAME_CHARS,
            pci_bus_id="p" * MAX_PCI_BUS_ID_CHARS,
            healthy=True,
        )
        g.compute_capability.major = g.compute_capability.minor = 2**32 - 1
        g.memory_total_bytes = g.memory_used_bytes = g.memory_free_bytes = g.memory_reserved_bytes = 2**64 - 1
        g.utilization_gpu_percent = g.utilization_memory_percent = 100
        g.temperature_celsius, g.power_watts = 2**32 - 1, 1e9
        g.unhealthy_reasons.extend(["r" * MAX_UNHEALTHY_REASON_CHARS] * MAX_UNHEALTHY_REASONS)
    return r


def test_the_largest_valid_report_fits_the_grpc_limit_with_room_to_spare() -> None:
    r = maximal_report()
    assert report_problem(r, None) is None
    assert r.ByteSize() == 150_960  # the figure ingest/limits.py's MAX_REPORT_BYTES comment gives
    assert MAX_REPORT_BYTES - r.ByteSize() >= 100 * 1024  # room for per-GPU pod lists


def test_the_bounds_hold_what_the_agent_really_sends() -> None:
    """The agent lists each unhealthy reason once: NVML errors of the GPU_UNHEALTHY group, or NoHandle."""
    unhealthy = [
        name
        for name, code in known_error_names().items()
        if classify(pynvml.NVMLError(code)) is ErrorGroup.GPU_UNHEALTHY
    ]
    assert len(unhealthy) + 1 <= MAX_UNHEALTHY_REASONS
    assert max(len(n) for n in [*known_error_names(), "NoHandle", f"Code{2**31}"]) <= MAX_UNHEALTHY_REASON_CHARS
    assert max(len(n) for n in known_error_names()) <= MAX_NODE_ERROR_CHARS


# -- D: memory readings the idle rule can judge -------------------------------------------------------


def with_memory(total: int | None, used: int | None) -> pb.NodeReport:
    g = gpu(0, mem_pct=None)
    if total is not None:
        g.memory_total_bytes = total
    if used is not None:
        g.memory_used_bytes = used
    return report("n", [g])


@pytest.mark.parametrize(
    ("total", "used", "problem"),
    [
        (80 * GIB, 80 * GIB, None),
        (80 * GIB, 80 * GIB + 1, f"memory_used_bytes is above memory_total_bytes={80 * GIB}"),
        (0, 0, "memory_total_bytes is 0"),
        (1, 0, None),
        (1, 1, None),
        (1, 2, "memory_used_bytes is above memory_total_bytes=1"),
        (None, None, None),  # no memory reading at all (NVML said NotSupported)
        (80 * GIB, None, "must come together"),
        (None, 0, "must come together"),
    ],
)
def test_memory_readings_are_consistent(total: int | None, used: int | None, problem: str | None) -> None:
    found = report_problem(with_memory(total, used), None)
    assert found is None if problem is None else (found is not None and problem in found)


def test_a_gpu_without_memory_is_rejected_not_counted_idle() -> None:
    async def test(r: Rig) -> None:
        acks = await r.exchange(at("gpu-node-1", 0, 1, [with_memory(0, 0).gpus[0]]))
        assert acks[0].status == REJECTED and "GPU 0: memory_total_bytes is 0" in acks[0].reason
        assert r.state.summary("gpu-node-1") is None

    run(test)


# -- B: nodes the inventory does not know --------------------------------------------------------------


def test_unknown_nodes_are_held_up_to_the_limit() -> None:
    inventory = {"gpu-node-1"}

    async def test(r: Rig) -> None:
        for node in ("made-up-1", "made-up-2"):  # exactly the limit: held
            assert [a.status for a in await r.exchange(at(node, 0, 1))] == [ACCEPTED]
        over = await r.exchange(at("made-up-3", 0, 1))
        assert over[0].status == REJECTED
        assert "node 'made-up-3' is not in the extender's inventory" in over[0].reason
        assert "--max-unknown-nodes 2" in over[0].reason
        assert r.state.summary("made-up-3") is None
        assert [a.status for a in await r.exchange(at("gpu-node-1", 0, 1))] == [ACCEPTED]  # known: never limited
        assert [a.status for a in await r.exchange(at("made-up-1", 0, 2))] == [ACCEPTED]  # already held
        assert r.metric("gpu_extender_unknown_nodes") == 2
        assert r.metric("gpu_extender_reports_rejected_total", reason="unknown_node_limit") == 1

        inventory.add("made-up-1")  # the inventory learns it: it leaves the set at once
        assert r.metric("gpu_extender_unknown_nodes") == 1
        assert [a.status for a in await r.exchange(at("made-up-3", 0, 1))] == [ACCEPTED]
        assert r.metric("gpu_extender_unknown_nodes") == 2

        r.state.forget_older_than(math.inf)  # their data forgotten (--forget-after): slots free
        assert r.metric("gpu_extender_unknown_nodes") == 0
        assert [a.status for a in await r.exchange(at("made-up-4", 0, 1))] == [ACCEPTED]

    run(test, limits=IngestLimits(known_node=inventory.__contains__, max_unknown_nodes=2))


def test_with_a_limit_of_zero_only_inventory_nodes_are_kept() -> None:
    async def test(r: Rig) -> None:
        assert [a.status for a in await r.exchange(at("gpu-node-1", 0, 1))] == [ACCEPTED]
        assert [a.status for a in await r.exchange(at("made-up-1", 0, 1))] == [REJECTED]

    run(test, limits=IngestLimits(known_node={"gpu-node-1"}.__contains__, max_unknown_nodes=0))


def test_without_an_inventory_source_every_node_is_kept() -> None:
    async def test(r: Rig) -> None:
        for i in range(5):
            assert [a.status for a in await r.exchange(at(f"made-up-{i}", 0, 1))] == [ACCEPTED]
        assert len(r.state) == 5 and r.metric("gpu_extender_unknown_nodes") == 0

    run(test, limits=IngestLimits(known_node=None, max_unknown_nodes=0))


def test_a_forgotten_unknown_node_frees_its_slot() -> None:
    known: set[str] = set()
    held = {"a", "b"}  # the nodes GpuState holds data for
    nodes = UnknownNodes(known.__contains__, held.__contains__, limit=2)
    assert nodes.admit("a") and nodes.admit("b") and not nodes.admit("c")
    held.discard("b")  # b's data was forgotten
    assert nodes.admit("c")
    held.add("c")  # ... and c's report stored
    assert nodes.count() == 2 and not nodes.admit("d")


# -- C: pacing -------------------------------------------------------------------------------------------


def test_the_rate_is_what_a_real_agent_may_need() -> None:
    assert REPORTS_PER_SECOND >= 1 / MIN_INTERVAL_S and REPORT_BURST >= 1


def test_pacer_refills_at_its_rate_up_to_its_burst() -> None:
    now = [0.0]
    pacer = ReportPacer(lambda: now[0], rate=4.0, burst=2)
    assert [pacer.take() for _ in range(3)] == [0.0, 0.0, 0.25]  # the burst, then a quarter second
    now[0] = 0.125  # half a token
    assert pacer.take() == 0.125
    now[0] = 0.25  # exactly one token
    assert pacer.take() == 0.0 and pacer.take() == 0.25
    now[0] = 100.0  # idle for long: still only the burst
    assert [pacer.take() for _ in range(3)] == [0.0, 0.0, 0.25]


def test_a_stream_that_never_reads_acks_is_paced_not_dropped() -> None:
    """A client writes as fast as it can and reads nothing: with the extender's clock frozen it gets
    exactly the burst processed, then exactly `rate` per second of clock; every report is processed
    in the end, in order."""
    total = 200

    async def test(r: Rig) -> None:
        accepted = lambda: r.metric("gpu_extender_reports_total", result="accepted") or 0  # noqa: E731
        paced = lambda: r.metric("gpu_extender_paced_streams") == 1  # noqa: E731
        async with grpc.aio.insecure_channel(f"127.0.0.1:{r.port}") as channel:
            call = pb_grpc.GpuStateServiceStub(channel).StreamNodeReports()

            async def flood() -> None:
                for seq in range(1, total + 1):
                    await call.write(at("gpu-node-1", 0, seq))
                await call.done_writing()

            writer = asyncio.create_task(flood())
            await until("the stream held at its limit", paced)
            assert accepted() == REPORT_BURST
            assert r.state.summary("gpu-node-1").sequence == REPORT_BURST
            r.now[0] += 0.5  # half a second: exactly half the rate more
            await until("five more", lambda: accepted() == REPORT_BURST + 5 and paced())
            assert accepted() == REPORT_BURST + 5
            while accepted() < total:  # one second of clock: one burst more (the bucket holds no more)
                target = min(total, accepted() + REPORT_BURST)
                r.now[0] += 1.0
                await until(f"{target} processed", lambda t=target: accepted() == t and (t == total or paced()))
            acks = [await call.read() for _ in range(total)]
            await writer
            assert [a.sequence for a in acks] == list(range(1, total + 1))
            assert all(a.status == ACCEPTED for a in acks)
            assert await call.read() is grpc.aio.EOF
        assert r.metric("gpu_extender_paced_streams") == 0
        assert r.metric("gpu_extender_paced_reports_total") >= (total - REPORT_BURST) / REPORT_BURST

    run(test)


def test_streams_are_paced_separately() -> None:
    async def test(r: Rig) -> None:
        for node in ("gpu-node-1", "gpu-node-2"):  # the clock is frozen: each stream has its own burst
            acks = await r.exchange(*(at(node, 0, seq) for seq in range(1, REPORT_BURST + 1)))
            assert [a.status for a in acks] == [ACCEPTED] * REPORT_BURST
        assert r.metric("gpu_extender_paced_reports_total") == 0

    run(test)
