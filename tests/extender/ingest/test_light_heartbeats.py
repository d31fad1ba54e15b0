"""Light heartbeats (contract 0.6) over a real grpc.aio channel: an ingest worker's relay takes
them in place of the full report they repeat, refuses them with a reason where they do not fit
it, and the extender's own GpuState (--ingest-in-process) never offers them."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.ingest.report_checks import MAX_GPUS_PER_NODE, heartbeat_problem
from gpuextender.extender.ingest.service import AgentTerms, IngestService, ReportStore, add_to_server
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import summarize
from gpuextender.extender.workers import frames
from gpuextender.extender.workers.summary_store import SummaryStore
from gpuextender.extender.workers.supervisor import IngestProcess
from gpuextender.extender.workers.worker_args import Worker
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.extender.builders import gpu, report
from tests.extender.state.test_summary_refresh import heartbeat_of
from tests.harness import free_port, metric, parse_metrics

RULE = IdleRule(30.0, 50.0, None)


async def stream(
    store_of: Callable[[], ReportStore], streams: list[list[pb.NodeReport]], between: Callable[[ReportStore], None]
) -> tuple[list[list[pb.ReportAck]], ReportStore, IngestMetrics]:
    """Each list of reports on a stream of its own, one after the other; `between` runs between
    streams."""
    store, metrics = store_of(), IngestMetrics()
    port = free_port()
    server = grpc.aio.server()
    service = IngestService(
        store, metrics, terms=AgentTerms(stale_after_s=10.0), clock=lambda: 50.0, wall_clock=lambda: 1000.0
    )
    add_to_server(service, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    out = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            for reports in streams:
                call = pb_grpc.GpuStateServiceStub(channel).StreamNodeReports()
                acks = []
                for r in reports:
                    await call.write(r)
                    acks.append(await call.read())
                await call.done_writing()
                assert await call.read() is grpc.aio.EOF
                out.append(acks)
                between(store)
    finally:
        await server.stop(None)
    return out, store, metrics


def stored(batches: list[bytes]) -> GpuState:
    """The extender's GpuState after the real IngestProcess.apply of each relayed batch."""
    state = GpuState(RULE)
    process = IngestProcess([], Worker(0, 1, 1), state, lambda _i, _t: None)
    for batch in batches:
        asyncio.run(process.apply(batch))
    return state


def full(seq: int, utils: tuple[int, int] = (0, 5), seconds: int = 1000) -> pb.NodeReport:
    return report("node-a", [gpu(0, utils[0], 10), gpu(1, utils[1], 20)], seq=seq, seconds=seconds)


def test_a_heartbeat_is_stored_as_the_full_report_with_its_readings_would_be() -> None:
    batches: list[bytes] = []
    first, now = full(1), full(2, (3, 7), seconds=1001)
    heartbeat = heartbeat_of(first, now, 2)
    acks, _, metrics = asyncio.run(
        stream(lambda: SummaryStore(RULE), [[first, heartbeat]], lambda s: batches.append(s.take()))  # type: ignore[attr-defined]
    )
    assert [a.status for a in acks[0]] == [pb.ReportAck.ACCEPTED] * 2
    assert all(a.light_heartbeats for a in acks[0])
    # One batch: the full report waits ahead of the readings that apply to it.
    assert [tag for tag, _, _ in frames.summary_entries(batches[0])] == [frames.FULL, frames.READINGS]
    summary = stored(batches).reported("node-a")
    assert summary == summarize(now, RULE, 50.0)
    assert summary is not None and summary.mean_utilization == 5.0 and summary.sequence == 2
    text = generate_latest(metrics.registry).decode()
    assert metric(parse_metrics(text), "gpu_extender_reports_total", result="accepted") == 2


def test_a_full_report_of_the_same_shape_goes_as_its_readings_and_a_new_stream_starts_summarized() -> None:
    """An agent before 0.6 sends its heartbeat as a full report: only readings changed, so the
    worker relays those; a light heartbeat may then repeat that report (an 0.6 agent's full report
    at a reconnect). A new stream's first report is summarized, whatever another stream left."""
    batches: list[bytes] = []
    first, again = full(1), full(2, (3, 7), seconds=1001)
    heartbeat = heartbeat_of(again, full(3, (4, 8), seconds=1002), 3)
    later = full(4, (1, 6), seconds=1003)
    acks, _, _ = asyncio.run(
        stream(
            lambda: SummaryStore(RULE),
            [[first], [again, heartbeat], [later]],
            lambda s: batches.append(s.take()),  # type: ignore[attr-defined]
        )
    )
    assert [a.status for stream_acks in acks for a in stream_acks] == [pb.ReportAck.ACCEPTED] * 4
    tags = [[tag for tag, _, _ in frames.summary_entries(batch)] for batch in batches]
    # The second stream's first report is summarized; its heartbeat goes as readings; the third
    # stream's report, of the same shape, is summarized again (a new stream).
    assert tags == [[frames.FULL], [frames.FULL, frames.READINGS], [frames.FULL]]
    assert stored(batches[:2]).reported("node-a") == summarize(full(3, (4, 8), seconds=1002), RULE, 50.0)
    assert stored(batches).reported("node-a") == summarize(later, RULE, 50.0)


def test_an_old_agents_heartbeat_goes_as_readings_and_a_light_one_may_repeat_it() -> None:
    batches: list[bytes] = []
    first, again = full(1), full(2, (3, 7), seconds=1001)  # same shape: only readings
    heartbeat = heartbeat_of(again, full(3, (4, 8), seconds=1002), 3)  # repeats report 2
    acks, _, _ = asyncio.run(
        stream(lambda: SummaryStore(RULE), [[first, again, heartbeat]], lambda s: batches.append(s.take()))  # type: ignore[attr-defined]
    )
    assert [a.status for a in acks[0]] == [pb.ReportAck.ACCEPTED] * 3, [a.reason for a in acks[0]]
    (batch,) = batches
    entries = list(frames.summary_entries(batch))
    assert [tag for tag, _, _ in entries] == [frames.FULL, frames.READINGS]  # the newest readings only
    assert stored(batches).reported("node-a") == summarize(full(3, (4, 8), seconds=1002), RULE, 50.0)


def test_a_full_report_of_a_known_shape_has_its_readings_checked_and_a_new_streams_all_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuextender.extender.ingest import service

    checked: list[str] = []
    for name in ("report_problem", "readings_problem"):
        real = getattr(service, name)
        monkeypatch.setattr(service, name, lambda r, n, real=real, name=name: checked.append(name) or real(r, n))
    bad = full(3, (101, 5), seconds=1002)  # same shape, a reading out of range: refused
    acks, _, _ = asyncio.run(
        stream(lambda: SummaryStore(RULE), [[full(1), full(2, (3, 7), seconds=1001), bad], [full(4)]], lambda s: None)
    )
    assert [a.status for stream_acks in acks for a in stream_acks] == [1, 1, 2, 1]
    assert acks[0][2].reason == "GPU 0: utilization_gpu_percent=101 is above 100"
    assert checked == ["report_problem", "readings_problem", "readings_problem", "report_problem"]


def test_heartbeats_that_do_not_fit_are_refused_and_a_full_report_mends_the_stream() -> None:
    first = full(1)
    wrong_base = heartbeat_of(first, full(2), 2)
    wrong_base.heartbeat_of = 7
    busy = heartbeat_of(first, full(3, (0, 30)), 3)  # GPU 1 crosses the rule: decisions change
    carries_gpus = heartbeat_of(first, full(4), 4)
    carries_gpus.gpus.add(index=0)
    replaced = full(5, (0, 30))  # the full report the agent sends instead: GPU 1 busy
    after = heartbeat_of(replaced, full(6, (1, 31)), 6)
    stale_base = heartbeat_of(first, full(7), 7)  # repeats report 1, replaced by 5
    acks, _, metrics = asyncio.run(
        stream(
            lambda: SummaryStore(RULE),
            [[first, wrong_base, busy, carries_gpus, replaced, after, stale_base]],
            lambda s: None,
        )
    )
    statuses = [a.status for a in acks[0]]
    assert statuses == [1, 2, 2, 2, 1, 1, 2]
    reasons = [a.reason for a in acks[0]]
    assert (
        reasons[1] == "heartbeat of report 7, but the last full report stored from this stream is 1: send a full report"
    )
    assert reasons[2] == "GPU 1 turns busy: send a full report"
    assert reasons[3] == "a heartbeat carries only readings, not gpus"
    assert (
        reasons[6] == "heartbeat of report 1, but the last full report stored from this stream is 5: send a full report"
    )
    counted = parse_metrics(generate_latest(metrics.registry).decode())
    assert metric(counted, "gpu_extender_reports_rejected_total", reason="heartbeat") == 3
    assert metric(counted, "gpu_extender_reports_rejected_total", reason="invalid") == 1


def test_a_new_stream_or_a_forgotten_node_needs_a_full_report_first() -> None:
    first = full(1)
    acks, _, _ = asyncio.run(
        stream(
            lambda: SummaryStore(RULE),
            [[first], [heartbeat_of(first, full(2), 2)], [full(3), heartbeat_of(full(3), full(4), 4)]],
            lambda s: s.forget(["node-a"]),  # type: ignore[attr-defined]
        )
    )
    assert acks[1][0].status == pb.ReportAck.REJECTED
    assert acks[1][0].reason == "a heartbeat before any full report on this stream: send a full report first"
    assert [a.status for a in acks[2]] == [pb.ReportAck.ACCEPTED] * 2

    async def forgotten_mid_stream() -> str:
        store = SummaryStore(RULE)
        store.ingest(full(1), 1.0)
        store.forget(["node-a"])
        return store.refresh(heartbeat_of(full(1), full(2), 2), 2.0) or ""

    assert asyncio.run(forgotten_mid_stream()) == "report 1 of node node-a is not held here: send a full report"


def test_the_extenders_own_state_takes_full_reports_only() -> None:
    first = full(1)
    acks, store, _ = asyncio.run(
        stream(lambda: GpuState(RULE), [[first, heartbeat_of(first, full(2), 2)]], lambda s: None)
    )
    assert [a.status for a in acks[0]] == [pb.ReportAck.ACCEPTED, pb.ReportAck.REJECTED]
    assert not acks[0][0].light_heartbeats
    assert acks[0][1].reason == "this extender takes full reports only (its acks do not say light_heartbeats)"
    assert store.summary("node-a").sequence == 1  # type: ignore[attr-defined]


def test_a_full_report_may_not_carry_heartbeat_readings() -> None:
    r = full(1)
    r.heartbeat_sm_active_percent.append(1.0)
    acks, _, _ = asyncio.run(stream(lambda: SummaryStore(RULE), [[r]], lambda s: None))
    assert acks[0][0].reason == "heartbeat readings in a full report (heartbeat_of 0)"


def _hb(**lists: list[float]) -> pb.NodeReport:
    hb = pb.NodeReport(node_name="node-a", sequence=2, heartbeat_of=1)
    for name, values in lists.items():
        getattr(hb, f"heartbeat_{name}").extend(values)
    return hb


@pytest.mark.parametrize(
    ("hb", "problem"),
    [
        (_hb(utilization_percent=[-1, 0, 100]), None),
        (_hb(utilization_percent=[101]), "a heartbeat utilization is outside 0..100 (-1: no reading)"),
        (_hb(utilization_percent=[-2]), "a heartbeat utilization is outside 0..100 (-1: no reading)"),
        (_hb(memory_used_bytes=[-1, 0]), None),
        (_hb(memory_used_bytes=[-2]), "a heartbeat memory reading is below 0 (-1: no reading)"),
        (_hb(sm_active_percent=[-1.0, 0.0, 100.0]), None),
        (_hb(sm_active_percent=[-0.5]), "a heartbeat SM activity is outside 0..100 (-1: no reading)"),
        (_hb(sm_active_percent=[100.01]), "a heartbeat SM activity is outside 0..100 (-1: no reading)"),
        (_hb(sm_active_percent=[math.nan]), "a heartbeat SM activity is outside 0..100 (-1: no reading)"),
        (_hb(utilization_percent=[0] * MAX_GPUS_PER_NODE), None),
        (
            _hb(utilization_percent=[0] * (MAX_GPUS_PER_NODE + 1)),
            f"heartbeat readings for more than the {MAX_GPUS_PER_NODE} GPUs a node can report",
        ),
    ],
)
def test_heartbeat_bounds(hb: pb.NodeReport, problem: str | None) -> None:
    assert heartbeat_problem(hb, "node-a") == problem


def test_heartbeat_identity_and_fields() -> None:
    hb = _hb()
    assert heartbeat_problem(hb, "node-b") == "node_name changed from 'node-b' to 'node-a' within one stream"
    hb.agent_version, hb.node_error = "0.6", "x"
    assert heartbeat_problem(hb, "node-a") == "a heartbeat carries only readings, not agent_version, node_error"
    hb = _hb()
    hb.sample_time.nanos = 999_999_999
    assert heartbeat_problem(hb, "node-a") is None
    hb.sample_time.nanos = -1
    assert heartbeat_problem(hb, "node-a") == "sample_time.nanos=-1 is outside 0..999999999"


def _set_to_non_default(report: pb.NodeReport, field: Any) -> None:
    """`field` of `report` holding the smallest value that counts as set (one empty or zero element
    for a list, an empty message for a message field, 1 / "x" / the first non-zero enum value else)."""
    values = getattr(report, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value = field.message_type.fields_by_name["value"]
        values["k"] = "" if value.type == value.TYPE_STRING else 0  # one entry, its value the default
    elif field.is_repeated:
        values.add() if field.message_type is not None else values.append(0)
    elif field.message_type is not None:
        getattr(report, field.name).SetInParent()
    elif field.enum_type is not None:
        setattr(report, field.name, field.enum_type.values[1].number)
    elif field.type == field.TYPE_STRING:
        setattr(report, field.name, "x")
    else:
        setattr(report, field.name, 1)


@pytest.mark.parametrize(
    "field",
    [f for f in pb.NodeReport.DESCRIPTOR.fields if not f.name.startswith("heartbeat_")]
    + [pb.NodeReport.DESCRIPTOR.fields_by_name["heartbeat_of"]],
    ids=lambda f: f.name,
)
def test_every_field_of_a_full_report_is_refused_in_a_heartbeat(field: Any) -> None:
    """Each NodeReport field but the heartbeat's own, set alone to its least set value, is refused
    by name; the heartbeat's own fields are not (the descriptor-derived check against ListFields')."""
    hb = _hb(utilization_percent=[0], memory_used_bytes=[0], sm_active_percent=[0.0])
    hb.sample_time.seconds = 1
    if field.name in ("node_name", "sequence", "sample_time", "heartbeat_of"):
        assert heartbeat_problem(hb, "node-a") is None
        return
    _set_to_non_default(hb, field)
    assert heartbeat_problem(hb, "node-a") == f"a heartbeat carries only readings, not {field.name}"
