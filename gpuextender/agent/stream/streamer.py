"""One long-lived gRPC stream per extender replica, reopened with backoff.

Every extender replica must see every node (kube-scheduler may call any of
them), so the agent keeps a stream to each address it was given. A stream
sends only the newest report (see `agent.report.latest`), reads one ack per report,
and is torn down and reopened when the extender goes away, stops acking, or
the connection breaks. The agent never exits because an extender is down.

Each attempt opens a fresh channel with its own connection: certificates and
the bearer token are read again from disk (see `gpuextender.common.dial`), so rotation needs
no restart, and our backoff alone paces reconnects (gRPC's own reconnect
backoff is kept within it, and calls do not wait for readiness). Failures are
logged once when they start or change kind, then at most once a minute, in
words naming the flag to fix (`common.stream_problem`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.report.gate import ReportGate, rule_from_ack
from gpuextender.agent.report.latest import LatestReport
from gpuextender.agent.report.light import light_heartbeat
from gpuextender.common.backoff import Backoff
from gpuextender.common.dial import DialError, DialSettings, call_metadata, open_channel
from gpuextender.common.reconnect import Reconnects
from gpuextender.common.stream_problem import StreamProblem, describe_failure
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc

log = logging.getLogger("gpu_agent.stream")

# A TCP + TLS handshake with a busy extender finishes well within this; see `_options`.
_MIN_CONNECT_TIMEOUT_MS = 5_000


# Full reports awaiting their ack, at most: an extender acks each report (a dead one is noticed
# within the ack timeout), so this is reached only by acks that never come.
_MAX_UNACKED = 64


class _CallFailed(Exception):
    """The RPC ended with an error status, noticed through a write on the finished call."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


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
        dial: DialSettings = DialSettings(),
        gate: ReportGate | None = None,
    ) -> None:
        self.target = target
        self._dial = dial
        self._latest = latest
        self._metrics = metrics
        self._backoff = backoff
        self._ack_timeout_s = ack_timeout_s
        self._on_requested_interval = on_requested_interval
        self._gate = gate  # learns from each ACCEPTED ack what this extender decides with
        self._last_reject_reason = ""
        self.connected = False
        self._light = False  # (set per session, in _session)
        self._base: tuple[int, int] | None = None
        self._full_sent: dict[int, int] = {}  # full reports out, not yet acked: sequence -> epoch

    def _options(self) -> list[tuple[str, int]]:
        initial_ms = max(1, round(self._backoff.initial_s * 1000))
        max_ms = max(initial_ms, round(self._backoff.max_s * 1000))
        return [
            # Notice a vanished extender host (no FIN) within ~30 s.
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            # Our backoff paces reconnects (each attempt is a new channel with its own subchannels,
            # see gpuextender.common.dial); should gRPC ever retry a connection inside one channel, its backoff
            # (default 1 s .. 120 s) stays within ours.
            ("grpc.initial_reconnect_backoff_ms", initial_ms),
            ("grpc.max_reconnect_backoff_ms", max_ms),
            # gRPC's name for the shortest connect timeout (default 20 s): a connect that hangs
            # (an extender host gone without a RST) fails after this and our backoff takes over.
            ("grpc.min_reconnect_backoff_ms", max(max_ms, _MIN_CONNECT_TIMEOUT_MS)),
        ]

    async def run(self) -> None:
        """Stream until cancelled."""
        retry = Reconnects(self._backoff, log, f"stream to extender {self.target}")
        while True:
            self._metrics.stream_reconnects.labels(extender=self.target).inc()
            acked = 0
            try:
                acked = await self._attempt()
                problem = StreamProblem("closed", "extender closed the stream")
            except DialError as exc:
                problem = StreamProblem("credentials", str(exc))
            except grpc.aio.AioRpcError as exc:
                problem = describe_failure(exc.code().name, exc.details() or "", self.target, self._dial)
            except _CallFailed as exc:
                problem = describe_failure(exc.code.name, exc.details, self.target, self._dial)
            except TimeoutError:
                problem = StreamProblem("timeout", f"no ack within {self._ack_timeout_s:.0f}s")
            except Exception as exc:  # e.g. a write on a call that just finished; never fatal
                problem = StreamProblem("error", f"{type(exc).__name__}: {exc}")
                log.debug("stream to %s failed", self.target, exc_info=True)
            finally:
                self._set_connected(False)
            if acked:
                retry.answered()
            await retry.failed(problem)

    async def _attempt(self) -> int:
        """One connection: fresh credentials, one stream. Returns acks received."""
        metadata = call_metadata(self._dial)
        async with open_channel(self.target, self._dial, self._options()) as channel:
            stub = pb_grpc.GpuStateServiceStub(channel)
            # Not wait_for_ready: a refused connection fails this call at once and we back off
            # (re-reading credentials) on our schedule, rather than waiting inside gRPC's.
            call = stub.StreamNodeReports(metadata=metadata or None, wait_for_ready=False)
            try:
                return await self._session(call)
            except (grpc.aio.AioRpcError, TimeoutError):
                raise
            except Exception:
                if call.done():  # the extender ended the call (e.g. refused it): its status says why
                    code = await call.code()
                    if code not in (grpc.StatusCode.OK, grpc.StatusCode.CANCELLED):
                        raise _CallFailed(code, await call.details() or "") from None
                raise
            finally:
                call.cancel()

    async def _session(self, call: grpc.aio.StreamStreamCall) -> int:
        """One stream: write the newest reports, read acks. Returns acks received."""
        sent = 0
        acked = 0
        # Light heartbeats (contract 0.6), per session: what this extender said, and the full
        # report (sequence, gate epoch) it ACCEPTED last, which a heartbeat of that epoch repeats.
        self._light = False
        self._base = None
        self._full_sent.clear()

        async def write_newest() -> None:
            nonlocal sent
            version = 0
            while True:
                version, report = await self._latest.newer_than(version)
                epoch, repeats = self._latest.epoch, self._latest.repeats
                base = self._base
                if repeats and self._light and base is not None and base[1] == epoch:
                    await call.write(light_heartbeat(report, base[0]))
                    self._metrics.light_heartbeats_sent.labels(extender=self.target).inc()
                else:
                    if len(self._full_sent) >= _MAX_UNACKED:  # acks lost: forget, never grow
                        self._full_sent.clear()
                    self._full_sent[report.sequence] = epoch
                    await call.write(report)
                sent += 1
                self._metrics.reports_sent.labels(extender=self.target).inc()

        writer = asyncio.create_task(write_newest())
        read: asyncio.Future[object] | None = None  # kept across timeouts: never cancel a pending read
        try:
            while True:
                if read is None:
                    read = asyncio.ensure_future(call.read())
                done, _ = await asyncio.wait(
                    {read, writer}, timeout=self._ack_timeout_s, return_when=asyncio.FIRST_COMPLETED
                )
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

    def _handle_ack(self, ack: pb.ReportAck) -> None:
        epoch = self._full_sent.pop(ack.sequence, None)  # None: a light heartbeat's ack
        light_refused = ack.status == pb.ReportAck.REJECTED and epoch is None
        if light_refused:
            self._base = None  # the extender does not hold what it repeats: the next report goes full
        elif ack.status == pb.ReportAck.ACCEPTED:
            self._light = ack.light_heartbeats
            if epoch is not None:
                self._base = (ack.sequence, epoch)
        if light_refused:  # expected after a worker restart or a forgotten node: the full one follows
            self._metrics.reports_rejected.labels(extender=self.target).inc()
            log.info(
                "extender %s asks for a full report: %s",
                self.target,
                ack.reason,
                extra={"peer": self.target, "reason": ack.reason},
            )
        elif ack.status == pb.ReportAck.REJECTED:
            self._metrics.reports_rejected.labels(extender=self.target).inc()
            if ack.reason != self._last_reject_reason:
                log.error(
                    "extender %s rejected report %d: %s",
                    self.target,
                    ack.sequence,
                    ack.reason,
                    extra={"peer": self.target, "reason": ack.reason},
                )
                self._last_reject_reason = ack.reason
        else:
            self._last_reject_reason = ""
            self._set_connected(True)
            if ack.status == pb.ReportAck.ACCEPTED:  # not UNSPECIFIED: an extender that says nothing is no proof
                self._metrics.note_report_accepted()
                if self._gate is not None:
                    self._gate.learn(self.target, rule_from_ack(ack))
        if ack.requested_interval_ms > 0:
            self._on_requested_interval(ack.requested_interval_ms / 1000.0)

    def forget_metrics(self) -> None:
        """Drop this extender's series (resolved pod IPs change with every rollout), and its rule."""
        if self._gate is not None:
            self._gate.forget(self.target)
        for family in (
            self._metrics.stream_connected,
            self._metrics.stream_reconnects,
            self._metrics.reports_sent,
            self._metrics.light_heartbeats_sent,
            self._metrics.reports_rejected,
        ):
            try:
                family.remove(self.target)
            except KeyError:
                pass

    def _set_connected(self, connected: bool) -> None:
        if connected and not self.connected:
            log.info("streaming to extender %s", self.target)
        self.connected = connected
        self._metrics.stream_connected.labels(extender=self.target).set(1 if connected else 0)
