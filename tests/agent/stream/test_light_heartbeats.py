"""The agent's stream sends light heartbeats (contract 0.6) to the extender's real ingest path (an
ingest worker's IngestService and relay, over a real grpc.aio channel): only for a report that
repeats the key of a full report that extender ACCEPTED, a full report otherwise, and a full one
again after a refusal; never to an extender that does not say light_heartbeats."""

from __future__ import annotations

import asyncio
import time

import grpc

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.report import light
from gpuextender.agent.report.latest import LatestReport
from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.ingest.service import AgentTerms, IngestService, ReportStore, add_to_server
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.state import summary_refresh
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.workers.summary_store import SummaryStore
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.agent.stream.test_streamer import make_stream, value, wait_for
from tests.extender.builders import gpu, report
from tests.harness import free_port

RULE = IdleRule(30.0, 50.0, None)


class Seen(IngestService):
    """The real service, noting what arrived (full or the report a heartbeat repeats) and the acks."""

    def __init__(self, store: ReportStore) -> None:
        super().__init__(store, IngestMetrics(), terms=AgentTerms(stale_after_s=30.0))
        self.arrived: list[tuple[int, int]] = []  # (sequence, heartbeat_of)
        self.acks: list[pb.ReportAck] = []

    async def StreamNodeReports(self, request_iterator, context):  # type: ignore[no-untyped-def,override]
        async for ack in super().StreamNodeReports(request_iterator, _Noting(context, self)):
            self.acks.append(pb.ReportAck.FromString(ack))
            yield ack


class _Noting:
    """A stream's ServicerContext that notes each report read for `seen`."""

    def __init__(self, context: grpc.aio.ServicerContext, seen: Seen) -> None:
        self._context, self._seen = context, seen

    async def read(self) -> object:
        r = await self._context.read()
        if r is not grpc.aio.EOF:
            self._seen.arrived.append((r.sequence, r.heartbeat_of))
        return r

    def __getattr__(self, name: str) -> object:
        return getattr(self._context, name)


def sample(seq: int, util1: int = 5) -> pb.NodeReport:
    r = report("n1", [gpu(0, 0, 10), gpu(1, util1, 20)], seq=seq, seconds=int(time.time()))
    return r


async def run(store: ReportStore, steps: list[tuple[pb.NodeReport, int, bool]]) -> tuple[Seen, float | None]:
    """Publish each (report, epoch, repeats) once the one before was acked; the service, and the
    agent's count of light heartbeats sent."""
    port = free_port()
    service = Seen(store)
    server = grpc.aio.server()
    add_to_server(service, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    latest, metrics = LatestReport(), AgentMetrics("n1")
    stream = make_stream(port, latest, metrics)
    # The next report is published once the agent has taken the ack (not only once the service sent
    # it): on a busy machine the agent would otherwise send it before it knows its base.
    handled = [0]
    take_ack = stream._handle_ack

    def counting(ack: pb.ReportAck) -> None:
        take_ack(ack)
        handled[0] += 1

    stream._handle_ack = counting  # type: ignore[method-assign]
    task = asyncio.create_task(stream.run())
    try:
        for done, (r, epoch, repeats) in enumerate(steps, start=1):
            latest.publish(r, epoch, repeats)
            await wait_for(lambda done=done: handled[0] >= done)  # type: ignore[misc]
    finally:
        task.cancel()
        await server.stop(None)
    return service, value(metrics, "gpu_agent_light_heartbeats_sent_total", extender=f"127.0.0.1:{port}")


def test_heartbeats_go_light_only_where_the_extender_holds_their_full_report() -> None:
    async def scenario() -> tuple[Seen, float | None]:
        steps = [
            (sample(1), 1, False),  # first: full (no base yet)
            (sample(2), 1, True),  # heartbeat of epoch 1: light, repeats 1
            (sample(3), 2, False),  # a change: full
            (sample(4), 2, True),  # light, repeats 3
            (sample(5, util1=30), 2, True),  # light, but GPU 1 turns busy: REJECTED
            (sample(6, util1=30), 2, True),  # after a refusal: full
            (sample(7, util1=31), 2, True),  # light, repeats 6
        ]
        return await run(SummaryStore(RULE), steps)

    service, light_sent = asyncio.run(scenario())
    assert service.arrived == [(1, 0), (2, 1), (3, 0), (4, 3), (5, 3), (6, 0), (7, 6)]
    assert [a.status for a in service.acks] == [1, 1, 1, 1, 2, 1, 1]
    assert service.acks[4].reason == "GPU 1 turns busy: send a full report"
    assert light_sent == 4


def test_an_extender_without_light_heartbeats_gets_full_reports() -> None:
    async def scenario() -> tuple[Seen, float | None]:
        return await run(GpuState(RULE), [(sample(1), 1, False), (sample(2), 1, True), (sample(3), 1, True)])

    service, light_sent = asyncio.run(scenario())
    assert service.arrived == [(1, 0), (2, 0), (3, 0)] and light_sent in (None, 0.0)
    assert all(a.status == pb.ReportAck.ACCEPTED and not a.light_heartbeats for a in service.acks)


def test_the_agent_and_the_extender_mean_the_same_missing_reading() -> None:
    # One home (common/heartbeat_readings.py): the agent's encoder writes it, the extender reads it.
    gpu = pb.GpuSample(index=0)  # no utilization, memory or GPM reading
    assert list(light.light_heartbeat(pb.NodeReport(gpus=[gpu]), 1).heartbeat_utilization_percent) == [-1]
    assert summary_refresh.NO_READING == -1
