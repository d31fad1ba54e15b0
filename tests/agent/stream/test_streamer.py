"""The agent's extender stream against a real grpc.aio server on loopback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
import pytest
from prometheus_client import generate_latest

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.report.latest import LatestReport
from gpuextender.agent.stream.streamer import ExtenderStream
from gpuextender.common.backoff import Backoff
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.harness import free_port, parse_metrics


class Recorder(pb_grpc.GpuStateServiceServicer):
    """An extender stand-in that records what arrives and answers as told."""

    def __init__(self, *, status=pb.ReportAck.ACCEPTED, reason: str = "", interval_ms: int = 0, ack: bool = True):
        self.received: list[int] = []
        self.streams = 0
        self.status, self.reason, self.interval_ms, self.ack = status, reason, interval_ms, ack
        self.arrived = asyncio.Event()

    async def StreamNodeReports(
        self, request_iterator: AsyncIterator[pb.NodeReport], context
    ) -> AsyncIterator[pb.ReportAck]:
        self.streams += 1
        async for report in request_iterator:
            self.received.append(report.sequence)
            self.arrived.set()
            if self.ack:
                yield pb.ReportAck(
                    sequence=report.sequence,
                    status=self.status,
                    reason=self.reason,
                    requested_interval_ms=self.interval_ms,
                )


async def serve(servicer: Recorder, port: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    pb_grpc.add_GpuStateServiceServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


def make_stream(
    port: int,
    latest: LatestReport,
    metrics: AgentMetrics,
    intervals: list[float] | None = None,
    ack_timeout_s: float = 5.0,
) -> ExtenderStream:
    return ExtenderStream(
        f"127.0.0.1:{port}",
        latest,
        metrics,
        backoff=Backoff(0.05, 0.2),
        ack_timeout_s=ack_timeout_s,
        on_requested_interval=(intervals.append if intervals is not None else lambda _: None),
    )


async def wait_for(predicate, timeout: float = 30.0) -> None:  # a liveness bound (busy CI), not a speed one
    async def loop() -> None:
        while not predicate():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(loop(), timeout)


def value(metrics: AgentMetrics, name: str, **labels: str) -> float | None:
    return parse_metrics(generate_latest(metrics.registry).decode()).get((name, frozenset(labels.items())))


def test_reconnects_with_backoff_and_sends_only_the_newest_report() -> None:
    async def scenario() -> None:
        port = free_port()
        latest = LatestReport()
        metrics = AgentMetrics("n1")
        stream = make_stream(port, latest, metrics)
        task = asyncio.create_task(stream.run())
        for seq in range(1, 11):  # published while the extender is down
            latest.publish(pb.NodeReport(node_name="n1", sequence=seq))
            await asyncio.sleep(0.03)
        assert not stream.connected
        recorder = Recorder()
        server = await serve(recorder, port)
        try:
            await wait_for(lambda: stream.connected)
            assert recorder.received[0] == 10  # the latest snapshot, not the backlog
            latest.publish(pb.NodeReport(node_name="n1", sequence=11))
            await wait_for(lambda: 11 in recorder.received)
            assert recorder.received == [10, 11]
            target = f"127.0.0.1:{port}"
            assert value(metrics, "gpu_agent_stream_connected", extender=target) == 1
            assert value(metrics, "gpu_agent_stream_reconnects_total", extender=target) >= 2
            assert value(metrics, "gpu_agent_reports_sent_total", extender=target) == 2
        finally:
            task.cancel()
            await server.stop(None)

    asyncio.run(scenario())


def test_rejections_are_logged_once_and_requested_interval_is_applied(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()

    async def scenario() -> tuple[list[float], AgentMetrics]:
        recorder = Recorder(status=pb.ReportAck.REJECTED, reason="node_name 'x' is not valid", interval_ms=2500)
        server = await serve(recorder, port)
        latest, metrics, intervals = LatestReport(), AgentMetrics("n1"), []
        task = asyncio.create_task(make_stream(port, latest, metrics, intervals).run())
        try:
            for seq in (1, 2, 3):
                latest.publish(pb.NodeReport(node_name="n1", sequence=seq))
                await wait_for(lambda seq=seq: seq in recorder.received)
            await wait_for(lambda: len(intervals) == 3)
        finally:
            task.cancel()
            await server.stop(None)
        return intervals, metrics

    with caplog.at_level(logging.ERROR, logger="gpu_agent.stream"):
        intervals, metrics = asyncio.run(scenario())
    assert intervals == [2.5, 2.5, 2.5]
    rejected = [r for r in caplog.records if "rejected report" in r.message]
    assert len(rejected) == 1 and "node_name 'x' is not valid" in rejected[0].message
    assert value(metrics, "gpu_agent_reports_rejected_total", extender=f"127.0.0.1:{port}") == 3


def test_an_extender_that_stops_acking_is_abandoned_and_reopened() -> None:
    async def scenario() -> int:
        port = free_port()
        recorder = Recorder(ack=False)
        server = await serve(recorder, port)
        latest = LatestReport()
        task = asyncio.create_task(make_stream(port, latest, AgentMetrics("n1"), ack_timeout_s=0.3).run())
        try:
            latest.publish(pb.NodeReport(node_name="n1", sequence=1))
            await wait_for(lambda: recorder.streams >= 2)  # no ack in time: the stream was torn down and reopened
            return recorder.streams
        finally:
            task.cancel()
            await server.stop(None)

    assert asyncio.run(scenario()) >= 2


def test_every_attempt_dials_its_own_connection() -> None:
    """A peer that accepts and hangs up at once: each of our attempts must reach it. With gRPC's
    shared subchannel pool, a new channel reused the last one's failed connection and failed
    without dialing until gRPC's own backoff (1 s growing to 120 s) ran out."""

    async def scenario() -> tuple[int, float]:
        accepted = 0

        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            writer.close()

        port = free_port()
        server = await asyncio.start_server(hang_up, "127.0.0.1", port)
        metrics = AgentMetrics("n1")
        latest = LatestReport()
        latest.publish(pb.NodeReport(node_name="n1", sequence=1))
        task = asyncio.create_task(make_stream(port, latest, metrics).run())
        try:
            await wait_for(lambda: accepted >= 8)
        finally:
            task.cancel()
            server.close()
        attempts = value(metrics, "gpu_agent_stream_reconnects_total", extender=f"127.0.0.1:{port}")
        return accepted, attempts or 0.0

    accepted, attempts = asyncio.run(scenario())
    assert accepted >= attempts - 1  # the attempt under way may not have dialed yet


def test_grpc_reconnect_backoff_stays_within_ours_and_connects_time_out() -> None:
    def options(initial_s: float, max_s: float) -> dict[str, int]:
        stream = ExtenderStream(
            "127.0.0.1:1",
            LatestReport(),
            AgentMetrics("n1"),
            backoff=Backoff(initial_s, max_s),
            ack_timeout_s=5.0,
            on_requested_interval=lambda _: None,
        )
        return dict(stream._options())

    default = options(0.2, 5.0)
    assert default["grpc.initial_reconnect_backoff_ms"] == 200
    assert default["grpc.max_reconnect_backoff_ms"] == 5000
    # The connect timeout is 5 s, or our max backoff when that is longer: exactly at 5 s and both sides.
    assert default["grpc.min_reconnect_backoff_ms"] == 5000
    assert options(0.2, 4.999)["grpc.min_reconnect_backoff_ms"] == 5000
    assert options(0.2, 5.001)["grpc.min_reconnect_backoff_ms"] == 5001
    assert options(0.2, 4.999)["grpc.max_reconnect_backoff_ms"] == 4999
