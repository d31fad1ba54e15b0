"""One long-lived gRPC stream per extender replica, reopened with backoff.

Every extender replica must see every node (kube-scheduler may call any of
them), so the agent keeps a stream to each address it was given. A stream
sends only the newest report (see `agent.latest`), reads one ack per report,
and is torn down and reopened when the extender goes away, stops acking, or
the connection breaks. The agent never exits because an extender is down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import grpc
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc

from gpuextender.backoff import Backoff
from agent.latest import LatestReport
from agent.metrics import AgentMetrics

log = logging.getLogger("gpu_agent.stream")

# While the extender is unreachable, repeat the warning at most this often.
_REPEAT_WARNING_S = 60.0


class ExtenderStream:
    def __init__(
        self,
        target: str,
        latest: LatestReport,
        metrics: AgentMetrics,
        *,
        backoff: Backoff,
        ack_timeout_s: float,
        on_requested_interval: Callable[[float], None],
    ) -> None:
        self.target = target
        self._latest = latest
        self._metrics = metrics
        self._backoff = backoff
        self._ack_timeout_s = ack_timeout_s
        self._on_requested_interval = on_requested_interval
        self._last_reject_reason = ""
        self.connected = False

    def _channel(self) -> grpc.aio.Channel:
        max_ms = int(self._backoff.max_s * 1000)
        options = [
            # Our loop does the backoff; keep grpc's own reconnect timer below it.
            ("grpc.initial_reconnect_backoff_ms", min(1000, max_ms)),
            ("grpc.min_reconnect_backoff_ms", min(1000, max_ms)),
            ("grpc.max_reconnect_backoff_ms", max_ms),
            # Notice a vanished extender host (no FIN) within ~30 s.
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_timeout_ms", 10_000),
        ]
        return grpc.aio.insecure_channel(self.target, options=options)

    async def run(self) -> None:
        """Stream until cancelled."""
        failures = 0
        last_warning = 0.0
        async with self._channel() as channel:
            stub = pb_grpc.GpuStateServiceStub(channel)
            while True:
                self._metrics.stream_reconnects.labels(extender=self.target).inc()
                acked = 0
                try:
                    acked = await self._session(stub)
                    problem = "extender closed the stream"
                except grpc.aio.AioRpcError as exc:
                    problem = f"{exc.code().name}: {exc.details()}"
                except TimeoutError:
                    problem = f"no ack within {self._ack_timeout_s:.0f}s"
                except Exception as exc:  # e.g. a write on a call that just finished; never fatal
                    problem = f"{type(exc).__name__}: {exc}"
                    log.debug("stream to %s failed", self.target, exc_info=True)
                finally:
                    self._set_connected(False)
                if acked:
                    self._backoff.reset()
                    failures = 0
                failures += 1
                delay = self._backoff.next_delay()
                now = time.monotonic()
                if failures == 1 or now - last_warning >= _REPEAT_WARNING_S:
                    log.warning(
                        "stream to extender %s down (%s); attempt %d, retrying in %.1fs",
                        self.target, problem, failures, delay,
                    )  # fmt: skip
                    last_warning = now
                await asyncio.sleep(delay)

    async def _session(self, stub: pb_grpc.GpuStateServiceStub) -> int:
        """One stream: write the newest reports, read acks. Returns acks received."""
        call = stub.StreamNodeReports()
        sent = 0
        acked = 0

        async def write_newest() -> None:
            nonlocal sent
            version = 0
            while True:
                version, report = await self._latest.newer_than(version)
                await call.write(report)
                sent += 1
                self._metrics.reports_sent.labels(extender=self.target).inc()

        writer = asyncio.create_task(write_newest())
        read: asyncio.Future[object] | None = None  # kept across timeouts: never cancel a pending read
        try:
            while True:
                if read is None:
                    read = asyncio.ensure_future(call.read())
                done, _ = await asyncio.wait({read, writer}, timeout=self._ack_timeout_s,
                                             return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                if writer in done:
                    writer.result()  # raises the write error
                if read not in done:
                    if sent > acked:  # a report is out and nothing came back: dead peer
                        raise TimeoutError
                    continue  # no new sample to send yet: keep waiting
                ack, read = read.result(), None
                if ack is grpc.aio.EOF:
                    return acked
                acked += 1
                self._handle_ack(ack)  # type: ignore[arg-type]
        finally:
            writer.cancel()
            if read is not None:
                read.cancel()
            call.cancel()

    def _handle_ack(self, ack: pb.ReportAck) -> None:
        if ack.status == pb.ReportAck.REJECTED:
            self._metrics.reports_rejected.labels(extender=self.target).inc()
            if ack.reason != self._last_reject_reason:
                log.error("extender %s rejected report %d: %s", self.target, ack.sequence, ack.reason)
                self._last_reject_reason = ack.reason
        else:
            self._last_reject_reason = ""
            self._set_connected(True)
        if ack.requested_interval_ms > 0:
            self._on_requested_interval(ack.requested_interval_ms / 1000.0)

    def _set_connected(self, connected: bool) -> None:
        if connected and not self.connected:
            log.info("streaming to extender %s", self.target)
        self.connected = connected
        self._metrics.stream_connected.labels(extender=self.target).set(1 if connected else 0)
