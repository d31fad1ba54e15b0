"""gRPC ingest: agents stream NodeReports in, the live GpuState is updated, each report is acked."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable

import grpc
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc

from extender.gpu_state import GpuState
from extender.metrics import ExtenderMetrics
from extender.report_validation import report_problem

log = logging.getLogger("gpu_extender.ingest")


class IngestService(pb_grpc.GpuStateServiceServicer):
    def __init__(
        self,
        state: GpuState,
        metrics: ExtenderMetrics,
        *,
        requested_interval_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._state = state
        self._metrics = metrics
        self._requested_interval_ms = requested_interval_ms
        self._clock = clock

    async def StreamNodeReports(
        self, request_iterator: AsyncIterator[pb.NodeReport], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReportAck]:
        node: str | None = None
        peer = context.peer()
        try:
            async for report in request_iterator:
                problem = report_problem(report, node)
                if problem is not None:
                    self._metrics.reports.labels(result="rejected").inc()
                    log.warning("rejected report %d from %s: %s", report.sequence, peer, problem)
                    yield pb.ReportAck(sequence=report.sequence, status=pb.ReportAck.REJECTED, reason=problem)
                    continue
                if node is None:
                    node = report.node_name
                    self._metrics.connected_agents.inc()
                    log.info("agent for node %s connected (%s, agent %s)", node, peer, report.agent_version or "?")
                stored = self._state.ingest(report, self._clock())
                self._metrics.reports.labels(result="accepted" if stored else "out_of_order").inc()
                yield pb.ReportAck(
                    sequence=report.sequence,
                    status=pb.ReportAck.ACCEPTED,
                    requested_interval_ms=self._requested_interval_ms,
                )
        finally:
            if node is not None:
                self._metrics.connected_agents.dec()
                log.info("agent for node %s disconnected (%s)", node, peer)
