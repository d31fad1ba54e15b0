"""gRPC ingest over a real grpc.aio channel: reports stored, acked, or rejected with a reason."""

from __future__ import annotations

import asyncio
import sys

import grpc
import pytest
from prometheus_client import generate_latest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.ingest.report_checks import report_problem
from gpuextender.extender.ingest.service import AgentTerms, IngestService, add_to_server
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.extender.builders import gpu, report
from tests.harness import free_port, metric, parse_metrics


async def exchange(reports: list[pb.NodeReport], state: GpuState, metrics: ExtenderMetrics) -> list[pb.ReportAck]:
    port = free_port()
    server = grpc.aio.server()
    add_to_server(
        IngestService(
            state,
            metrics.ingest,
            terms=AgentTerms(requested_interval_ms=2000, stale_after_s=10.0),
            clock=lambda: 50.0,
            wall_clock=lambda: 1000.0,
        ),
        server,
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = pb_grpc.GpuStateServiceStub(channel).StreamNodeReports()
            acks = []
            for r in reports:
                await call.write(r)
                acks.append(await call.read())
            assert (
                metric(parse_metrics(generate_latest(metrics.registry).decode()), "gpu_extender_connected_agents") == 1
            )
            await call.done_writing()
            assert await call.read() is grpc.aio.EOF
            return acks
    finally:
        await server.stop(None)


def test_reports_are_stored_acked_and_bad_ones_rejected() -> None:
    state = GpuState(IdleRule())
    metrics = ExtenderMetrics(state, clock=lambda: 51.0)
    reports = [
        report("gpu-node-1", [gpu(0), gpu(1, 90, 90)], seconds=1000, seq=1),
        report("gpu-node-2", [gpu(0)], seconds=1001, seq=2),  # another node on the same stream
        report("gpu-node-1", [gpu(0), gpu(0)], seconds=1002, seq=3),  # duplicate index
        # Sampled before the stored one by the node's clock, received after it: received last wins.
        report("gpu-node-1", [gpu(0), gpu(1)], seconds=999, seq=4),
        report("gpu-node-1", [gpu(0), gpu(1)], seconds=1003, seq=5),
    ]
    acks = asyncio.run(exchange(reports, state, metrics))
    assert [a.sequence for a in acks] == [1, 2, 3, 4, 5]
    assert [a.status for a in acks] == [
        pb.ReportAck.ACCEPTED,
        pb.ReportAck.REJECTED,
        pb.ReportAck.REJECTED,
        pb.ReportAck.ACCEPTED,
        pb.ReportAck.ACCEPTED,
    ]
    assert all(not a.reason for a in acks if a.status == pb.ReportAck.ACCEPTED)
    assert "changed from 'gpu-node-1' to 'gpu-node-2'" in acks[1].reason
    assert "GPU index 0 appears twice" in acks[2].reason
    assert all(a.requested_interval_ms == 2000 for a in acks if a.status == pb.ReportAck.ACCEPTED)
    # 0.3: every ACCEPTED ack says what the extender decides with (the agent's report gate).
    rule = [
        (a.idle_max_utilization_percent, a.idle_max_memory_used_percent, a.stale_after_ms)
        for a in acks
        if a.status == pb.ReportAck.ACCEPTED
    ]
    assert rule == [(IdleRule().max_utilization_percent, IdleRule().max_memory_used_percent, 10_000)] * 3
    assert not any(a.HasField("idle_max_utilization_percent") for a in acks if a.status == pb.ReportAck.REJECTED)
    # The SM rule is on by default: said in every ACCEPTED ack, never in a REJECTED one.
    assert [a.idle_max_sm_active_percent for a in acks if a.status == pb.ReportAck.ACCEPTED] == [10.0] * 3
    assert not any(a.HasField("idle_max_sm_active_percent") for a in acks if a.status == pb.ReportAck.REJECTED)
    summary = state.summary("gpu-node-1")
    assert (summary.idle_gpus, summary.sequence, summary.received_at) == (2, 5, 50.0)
    assert state.summary("gpu-node-2") is None
    samples = parse_metrics(generate_latest(metrics.registry).decode())
    assert metric(samples, "gpu_extender_reports_total", result="accepted") == 3  # every ACCEPTED was stored
    assert metric(samples, "gpu_extender_reports_total", result="out_of_order") is None
    assert metric(samples, "gpu_extender_reports_total", result="rejected") == 2
    assert metric(samples, "gpu_extender_reports_rejected_total", reason="invalid") == 2
    assert metric(samples, "gpu_extender_connected_agents") == 0  # stream closed
    assert metric(samples, "gpu_extender_node_data_age_seconds", node="gpu-node-1") == 1.0


@pytest.mark.parametrize(
    ("r", "problem"),
    [
        (report("Gpu_Node", []), "not a valid Kubernetes node name"),
        (report("", []), "not a valid Kubernetes node name"),
        (report("n", [gpu(i) for i in range(300)]), "more than the 256"),
        (report("n", [gpu(0, util=101)]), "utilization_gpu_percent=101 is above 100"),
    ],
)
def test_report_problems(r: pb.NodeReport, problem: str) -> None:
    assert problem in report_problem(r, None)


def test_state_forgets_departed_nodes() -> None:
    state = GpuState(IdleRule())
    state.ingest(report("old", [gpu(0)]), received_at=10.0)
    state.ingest(report("new", [gpu(0)]), received_at=90.0)
    assert state.forget_older_than(50.0) == ["old"]
    assert len(state) == 1 and state.summary("old") is None


def test_acks_say_the_sm_activity_rule_when_it_is_on() -> None:
    state = GpuState(IdleRule(30.0, 50.0, 12.5))
    metrics = ExtenderMetrics(state, clock=lambda: 51.0)
    acks = asyncio.run(exchange([report("gpu-node-1", [gpu(0)], seconds=1000, seq=1)], state, metrics))
    assert acks[0].status == pb.ReportAck.ACCEPTED
    assert acks[0].idle_max_sm_active_percent == 12.5
    off = GpuState(IdleRule(30.0, 50.0, None))  # --idle-max-sm-active off: the field stays unset
    acks = asyncio.run(exchange([report("gpu-node-1", [gpu(0)], seconds=1000, seq=1)], off, ExtenderMetrics(off)))
    assert acks[0].status == pb.ReportAck.ACCEPTED and not acks[0].HasField("idle_max_sm_active_percent")


def test_a_stream_holds_no_report_while_it_waits_for_the_next() -> None:
    """grpc.aio's request iterator keeps each report alive until the next one arrives (a parsed
    8-GPU report holds ~8 KB, per open stream): the service reads with context.read() and drops the
    report before its ack goes out, so once the agent has the ack nothing of ours holds it."""
    parsed: list[pb.NodeReport] = []

    def deserialize(raw: bytes) -> pb.NodeReport:
        message = pb.NodeReport.FromString(raw)
        parsed.append(message)
        return message

    async def scenario() -> list[int]:
        state = GpuState(IdleRule())
        service = IngestService(state, ExtenderMetrics(state).ingest, clock=lambda: 50.0, wall_clock=lambda: 1000.0)
        handler = grpc.stream_stream_rpc_method_handler(
            service.StreamNodeReports,
            request_deserializer=deserialize,
            response_serializer=None,  # the service's acks are bytes (add_to_server)
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("gpuextender.v1.GpuStateService", {"StreamNodeReports": handler})]
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        held = []
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = pb_grpc.GpuStateServiceStub(channel).StreamNodeReports()
                for seq in (1, 2):
                    await call.write(report("gpu-node-1", [gpu(0), gpu(1)], seconds=1000, seq=seq))
                    ack = await call.read()
                    assert ack.status == pb.ReportAck.ACCEPTED
                    # The list's reference and getrefcount's argument: no other.
                    held.append(sys.getrefcount(parsed[-1]) - 2)
                await call.done_writing()
                assert await call.read() is grpc.aio.EOF
        finally:
            await server.stop(None)
        return held

    assert asyncio.run(scenario()) == [0, 0]
    assert len(parsed) == 2


@pytest.mark.parametrize("sequence", [1, 127, 128, 2**14 - 1, 2**14, 2**63, 2**64 - 1])
def test_accepted_ack_bytes_are_the_ack_message(sequence: int) -> None:
    """The prebuilt ACCEPTED ack parses to the ReportAck the service would build, for sequences at
    each varint length's bounds (1 and 2 bytes at 127 / 128, ..., 10 bytes at uint64's top)."""
    state = GpuState(IdleRule(30.0, 50.0, 40.0))
    service = IngestService(
        state, ExtenderMetrics(state).ingest, terms=AgentTerms(requested_interval_ms=1500, stale_after_s=12.5)
    )
    expected = pb.ReportAck(
        sequence=sequence,
        status=pb.ReportAck.ACCEPTED,
        requested_interval_ms=1500,
        idle_max_utilization_percent=30.0,
        idle_max_memory_used_percent=50.0,
        idle_max_sm_active_percent=40.0,
        stale_after_ms=12_500,
        light_heartbeats=False,  # GpuState takes full reports only
    )
    assert pb.ReportAck.FromString(service.accepted_ack(sequence)) == expected
