"""gRPC ingest: agents stream NodeReports in, the live GpuState is updated, each report is acked.

With an authenticator (`--agent-auth tokenreview`) a stream is authenticated
once, when it opens (the server ends every connection after --agent-reauth-interval,
so a revoked or expired token stops working at the agent's next reconnect): a refused stream ends with UNAUTHENTICATED /
PERMISSION_DENIED (UNAVAILABLE when the API server cannot answer) and is
counted in `gpu_extender_agent_auth_failures_total{reason}`. A report for a
node other than the one the token is bound to gets a REJECTED ack and is not
stored.

A report is stored or answered REJECTED with a reason, never acked ACCEPTED
without being stored. Reports are ordered by receipt, never by `sample_time`
(the node's clock): within a stream the sequence must increase, and a
sample_time further than --max-clock-skew from our wall clock is refused. Each
stream is paced (`limits.ReportPacer`): a client writing faster waits
before its next report is read, so HTTP/2 flow control pushes back on it. With
an inventory source, reports for nodes it does not know are kept for at most
--max-unknown-nodes nodes (`limits.UnknownNodes`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol, runtime_checkable

import grpc
from prometheus_client import Counter

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.ingest.agent_identity import (
    AgentIdentity,
    AgentRefused,
    Authenticator,
    identity_node_mismatch,
)
from gpuextender.extender.ingest.limits import REPORT_BURST, REPORTS_PER_SECOND, ReportPacer, UnknownNodes
from gpuextender.extender.ingest.report_checks import (
    clock_skew_problem,
    heartbeat_problem,
    readings_problem,
    report_problem,
)
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.settings import MAX_CLOCK_SKEW_S, MAX_UNKNOWN_NODES
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc

log = logging.getLogger("gpu_extender.ingest")

# A misconfigured agent retries every few seconds: repeat its refusal line at most this often.
_REPEAT_REFUSAL_S = 60.0

# With authentication on, a connection past --agent-reauth-interval (gRPC max_connection_age)
# gets this long (at most; no longer than the interval itself) to finish its stream; the agent
# then reconnects with a fresh token.
REAUTH_GRACE_S = 30


class _OncePer:
    """True for a key at most once per `period_s` (bounded: forgets everything when full)."""

    def __init__(self, period_s: float, clock: Callable[[], float], max_keys: int = 10_000) -> None:
        self._period_s, self._clock, self._max_keys = period_s, clock, max_keys
        self._last: dict[tuple[str, ...], float] = {}

    def __call__(self, *key: str) -> bool:
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._period_s:
            return False
        if len(self._last) >= self._max_keys:
            self._last.clear()
        self._last[key] = now
        return True


class ReportStore(Protocol):
    """Where accepted reports go: the live GpuState, or the relay to it (ingest_process.py)."""

    rule: IdleRule

    def has_data(self, node: str) -> bool: ...  # a report of the node is held

    def ingest(self, report: pb.NodeReport, received_at: float) -> bool: ...


@runtime_checkable
class HeartbeatStore(ReportStore, Protocol):
    """A store that takes light heartbeats (contract 0.6): the ingest workers' relay."""

    def refresh(self, heartbeat: pb.NodeReport, received_at: float) -> str | None:
        """Apply `heartbeat` to the node's full report `heartbeat.heartbeat_of`; None when stored,
        else why not (the agent then sends a full report)."""
        ...

    def known_shape(self, report: pb.NodeReport) -> bool:
        """`report` (full) changes only readings since the node's last full report held here from
        this stream or one open with it: every other field is one that passed report_problem."""
        ...

    def stream_opened(self, node: str) -> None:
        """A stream of `node` stores its first report: what it sends is taken against what it sent
        on it, never against what another stream of the node left here."""
        ...


class _Stream:
    """One agent stream's own state between its reports."""

    __slots__ = ("identity", "last_full", "last_sequence", "mismatch_logged", "node", "peer")

    def __init__(self, peer: str, identity: AgentIdentity | None) -> None:
        self.peer, self.identity = peer, identity
        self.node: str | None = None  # set by its first stored report
        self.last_sequence = 0  # sequences start at 1 (proto)
        self.last_full = 0  # the last full report stored from this stream: what a heartbeat may repeat
        self.mismatch_logged = False


class IngestService(pb_grpc.GpuStateServiceServicer):
    def __init__(
        self,
        state: ReportStore,
        metrics: IngestMetrics,
        *,
        requested_interval_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        authenticator: Authenticator | None = None,
        max_clock_skew_s: float = MAX_CLOCK_SKEW_S,
        known_node: Callable[[str], bool] | None = None,
        max_unknown_nodes: int = MAX_UNKNOWN_NODES,
        reports_per_second: float = REPORTS_PER_SECOND,
        report_burst: int = REPORT_BURST,
        stale_after_s: float = 0.0,
    ) -> None:
        """`known_node`: is this node in the inventory? None when there is no inventory source
        (every node is allowed then). `clock` (monotonic) orders and paces reports; `wall_clock`
        (Unix seconds) is what sample times are compared with."""
        self._state = state
        self._metrics = metrics
        self._requested_interval_ms = requested_interval_ms
        # Told to the agent in every ACCEPTED ack: what makes a change matter here (the idle rule),
        # and how long a quiet agent may go without a heartbeat (stale_after_s; 0: not said).
        self._idle_max_utilization = state.rule.max_utilization_percent
        self._idle_max_memory = state.rule.max_memory_used_percent
        self._idle_max_sm_active = state.rule.max_sm_active_percent  # None: not said (the ack field stays unset)
        self._stale_after_ms = max(0, min(2**32 - 1, round(stale_after_s * 1000)))
        self._clock = clock
        self._wall_clock = wall_clock
        self._authenticator = authenticator
        self._max_clock_skew_s = max_clock_skew_s
        self._pace = (reports_per_second, report_burst)
        self._unknown: UnknownNodes | None = None
        if known_node is not None:
            self._unknown = UnknownNodes(known_node, state.has_data, max_unknown_nodes)
            metrics.unknown_nodes.set_function(self._unknown.count)
        self._should_log = _OncePer(_REPEAT_REFUSAL_S, clock)
        self._accepted = metrics.reports.labels(result="accepted")  # once: labels() is a lookup per call
        # Light heartbeats are offered, and full reports of a known shape taken as readings, where
        # the store can (the workers' relay; the extender's own GpuState with --ingest-in-process
        # takes full reports only, each checked whole).
        self._relay = state if isinstance(state, HeartbeatStore) else None
        self.auth_failures: Counter | None = metrics.auth_failures() if authenticator is not None else None
        self._accepted_tail = self._accepted_fields()

    async def StreamNodeReports(
        self, request_iterator: AsyncIterator[pb.NodeReport], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """Reports are read with `context.read()`, not `request_iterator`: grpc.aio's iterator holds
        each report until the next one arrives (a parsed 8-GPU report: ~8 KB of upb arena per open
        stream, bench/RESULTS.md). Acks are still yielded: with `context.write()` a refused stream's
        status sometimes reached the agent as INTERNAL, its first write racing the abort
        (tests/extender/ingest/test_agent_identity.py failed 2 runs in ~30)."""
        peer = context.peer()
        identity: AgentIdentity | None = None
        if self._authenticator is not None:
            try:
                metadata = context.invocation_metadata() or ()
                identity = await self._authenticator.authenticate(metadata, _peer_host(peer))
            except AgentRefused as exc:
                refusal = exc.refusal
                self._count_auth_failure(refusal.reason)
                if self._should_log(refusal.reason, _peer_host(peer)):
                    log.warning(
                        "refused agent stream from %s (%s): %s",
                        peer,
                        refusal.code.name,
                        refusal.message,
                        extra={"peer": peer, "reason": refusal.reason},
                    )
                await context.abort(refusal.code, refusal.message)
            except Exception as exc:  # a bug or an odd API answer: refuse, say so, never UNKNOWN + traceback
                self._count_auth_failure("review_failed")
                if self._should_log("review_failed", _peer_host(peer)):
                    log.warning(
                        "refused agent stream from %s: cannot verify its token: %s: %s",
                        peer,
                        type(exc).__name__,
                        exc,
                        extra={"peer": peer, "reason": "review_failed"},
                    )
                await context.abort(grpc.StatusCode.UNAVAILABLE, "cannot verify the agent token now; retry")
        stream = _Stream(peer, identity)
        pacer = ReportPacer(self._clock, *self._pace)
        try:
            while (report := await context.read()) is not grpc.aio.EOF:
                delay = pacer.take()
                if delay > 0.0:  # no coroutine per report: only a stream over its rate waits
                    await self._wait_for_pace(pacer, delay)
                ack = self._answer(report, stream)
                del report  # not held while the stream waits for its next report
                yield ack
        finally:
            if stream.node is not None:
                self._metrics.connected_agents.dec()
                log.info(
                    "agent for node %s disconnected (%s)",
                    stream.node,
                    peer,
                    extra={"node": stream.node, "peer": peer},
                )

    def _answer(self, report: pb.NodeReport, stream: _Stream) -> bytes:
        """Check `report`, store it if it may be, and its ack (REJECTED with the reason if not)."""
        identity, peer = stream.identity, stream.peer
        mismatch = identity_node_mismatch(identity, report.node_name) if identity is not None else None
        if mismatch is not None:
            self._count_auth_failure("node_mismatch")
            self._count_rejected("node_mismatch")
            if not stream.mismatch_logged:  # once per stream: the agent sends one a second
                log.warning(
                    "rejected report %d from %s: %s",
                    report.sequence,
                    peer,
                    mismatch,
                    extra={"peer": peer, "node": report.node_name[:253], "reason": "node_mismatch"},
                )
                stream.mismatch_logged = True
            return self._rejected(report, mismatch)
        heartbeat = report.heartbeat_of != 0
        kind, problem = self._problem(report, stream.node, stream.last_sequence, stream.last_full)
        if problem is not None:
            self._count_rejected(kind)
            if self._should_log(kind, _peer_host(peer)):  # a line a minute per client and kind
                log.warning(
                    "rejected report %d for node %r from %s: %s",
                    report.sequence,
                    report.node_name[:253],
                    peer,
                    problem,
                    extra={"peer": peer, "node": report.node_name[:253], "reason": kind},
                )
            return self._rejected(report, problem)
        if stream.node is None:
            node = stream.node = report.node_name
            if self._relay is not None:
                self._relay.stream_opened(node)
            self._metrics.connected_agents.inc()
            log.info(
                "agent for node %s connected (%s, agent %s%s)",
                node,
                peer,
                report.agent_version or "?",
                f", {identity.username}" if identity else "",
                extra={"node": node, "peer": peer},
            )
        if heartbeat:
            assert self._relay is not None  # _problem refuses heartbeats otherwise
            problem = self._relay.refresh(report, self._clock())
            if problem is not None:  # the agent sends a full report next: no log line
                self._count_rejected("heartbeat")
                return self._rejected(report, problem)
        elif not self._state.ingest(report, self._clock()):  # not reachable on one loop; never ack it
            self._count_rejected("superseded")
            return self._rejected(report, f"a report for node {stream.node} received later is already stored")
        else:
            stream.last_full = report.sequence
        stream.last_sequence = report.sequence
        self._accepted.inc()
        return self.accepted_ack(report.sequence)

    def accepted_ack(self, sequence: int) -> bytes:
        """The ACCEPTED ack of report `sequence`, serialized: the same fields every time but the
        sequence, which is appended (a parser takes fields in any order; ~1 us where building and
        serializing a ReportAck took ~4.5, bench/RESULTS.md)."""
        return self._accepted_tail + _sequence_field(sequence)

    def _accepted_fields(self) -> bytes:
        """An ACCEPTED ack's fields but its sequence: what makes a change matter here."""
        return pb.ReportAck(
            status=pb.ReportAck.ACCEPTED,
            requested_interval_ms=self._requested_interval_ms,
            idle_max_utilization_percent=self._idle_max_utilization,
            idle_max_memory_used_percent=self._idle_max_memory,
            stale_after_ms=self._stale_after_ms,
            idle_max_sm_active_percent=self._idle_max_sm_active,
            light_heartbeats=self._relay is not None,
        ).SerializeToString()

    def _problem(
        self, report: pb.NodeReport, node: str | None, last_sequence: int, last_full: int
    ) -> tuple[str, str | None]:
        """Why the report may not be stored, as (metric reason, sentence for the agent); (_, None) if
        it may. A light heartbeat must also repeat this stream's last full report (`last_full`)."""
        heartbeat = report.heartbeat_of != 0
        if heartbeat and self._relay is None:
            return "invalid", "this extender takes full reports only (its acks do not say light_heartbeats)"
        if heartbeat:
            problem = heartbeat_problem(report, node)
        elif node is not None and self._relay is not None and self._relay.known_shape(report):
            problem = readings_problem(report, node)  # the rest of it passed report_problem before
        else:
            problem = report_problem(report, node)
        if problem is not None:
            return "invalid", problem
        problem = clock_skew_problem(report, self._wall_clock(), self._max_clock_skew_s)
        if problem is not None:
            return "clock_skew", problem
        if report.sequence <= last_sequence:
            return "sequence", (
                f"sequence {report.sequence} does not increase (last stored on this stream: "
                f"{last_sequence}; sequences start at 1 and grow with every report)"
            )
        if heartbeat:
            if report.heartbeat_of != last_full:
                return "heartbeat", (
                    f"heartbeat of report {report.heartbeat_of}, but the last full report stored from this "
                    f"stream is {last_full}: send a full report"
                )
        elif self._unknown is not None and not self._unknown.admit(report.node_name):
            limit = self._unknown.limit
            return "unknown_node_limit", (
                f"node {report.node_name!r} is not in the extender's inventory and reports of {limit} such "
                f"node(s) are already held (--max-unknown-nodes {limit}); its reports are stored once the "
                "node is in the inventory"
            )
        return "", None

    async def _wait_for_pace(self, pacer: ReportPacer, delay: float) -> None:
        """Hold the stream while it is over its rate (`delay`: the pacer's first answer): nothing
        more is read from it meanwhile."""
        self._metrics.paced_reports.inc()
        self._metrics.paced_streams.inc()
        try:
            while delay > 0.0:
                await asyncio.sleep(delay)
                delay = pacer.take()
        finally:
            self._metrics.paced_streams.dec()

    def _rejected(self, report: pb.NodeReport, reason: str) -> bytes:
        return pb.ReportAck(sequence=report.sequence, status=pb.ReportAck.REJECTED, reason=reason).SerializeToString()

    def _count_rejected(self, reason: str) -> None:
        self._metrics.reports.labels(result="rejected").inc()
        self._metrics.reports_rejected.labels(reason=reason).inc()

    def _count_auth_failure(self, reason: str) -> None:
        if self.auth_failures is not None:
            self.auth_failures.labels(reason=reason).inc()


SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GpuStateService"].full_name
_SEQUENCE_TAG = b"\x08"  # ReportAck.sequence: field 1, varint


def add_to_server(service: IngestService, server: grpc.aio.Server) -> None:
    """Serve `service` as gpuextender.v1.GpuStateService on `server`. Its acks leave as the bytes
    it made (the generated add_GpuStateServiceServicer_to_server would serialize a ReportAck per
    report); agents read them as ReportAck messages."""
    handlers = {
        "StreamNodeReports": grpc.stream_stream_rpc_method_handler(
            service.StreamNodeReports, request_deserializer=pb.NodeReport.FromString, response_serializer=None
        )
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def _sequence_field(sequence: int) -> bytes:
    """ReportAck's sequence field, encoded (a base-128 varint after its tag)."""
    out = bytearray(_SEQUENCE_TAG)
    while sequence > 0x7F:
        out.append(sequence & 0x7F | 0x80)
        sequence >>= 7
    out.append(sequence)
    return bytes(out)


def _peer_host(peer: str) -> str:
    """`ipv4:10.0.0.5:41234` → `ipv4:10.0.0.5`: the port changes on every reconnect."""
    host, sep, _ = peer.rpartition(":")
    return host if sep else peer
