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
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import grpc
from google.protobuf.message import DecodeError
from prometheus_client import Counter

from gpuextender.common.idle_rule import IdleRule
from gpuextender.common.log_once import OncePer
from gpuextender.extender.ingest.agent_identity import (
    AgentIdentity,
    AgentRefused,
    Authenticator,
    identity_node_mismatch,
)
from gpuextender.extender.ingest.limits import (
    RELAY_REFUSALS_PER_SECOND,
    REPORT_BURST,
    REPORTS_PER_SECOND,
    RefusalBudget,
    RefusalBudgets,
    ReportPacer,
    UnknownNodes,
)
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

# A relay's batch is taken in slices of this many reports, other streams' reports between them.
RELAY_YIELD_EVERY = 64
# Refusals a RelayAck lists (the rest are counted: the batch's reports less `accepted`): a relay's
# 256 KiB message of empty items made a 2.6 MB answer before (bench/RESULTS.md).
MAX_REFUSALS_LISTED = 64
# Pacers kept for a relay's agent streams that stored nothing yet (refused ones), beyond the stored.
MAX_PACED_UNSTORED = 1024

# A misconfigured agent retries every few seconds: repeat its refusal line at most this often.
REPEAT_REFUSAL_S = 60.0

# With authentication on, a connection past --agent-reauth-interval (gRPC max_connection_age)
# gets this long (at most; no longer than the interval itself) to finish its stream; the agent
# then reconnects with a fresh token.
REAUTH_GRACE_S = 30


class ReportStore(Protocol):
    """Where accepted reports go: the live GpuState, or an ingest worker's store that sends them to it
    (workers/summary_store.py)."""

    rule: IdleRule

    def has_data(self, node: str) -> bool: ...  # a report of the node is held

    def ingest(self, report: pb.NodeReport, received_at: float) -> bool: ...


@runtime_checkable
class HeartbeatStore(ReportStore, Protocol):
    """A store that takes light heartbeats (contract 0.6): an ingest worker's SummaryStore."""

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

    def stream_closed(self, node: str) -> None:
        """A stream of `node` that stored a report ended."""
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


class _RelayedStreams:
    """One relay stream's agent streams: those that stored a report (at most one per node, so
    as many as the nodes stored: the unknown-node limit bounds them), and each one's pacer."""

    def __init__(
        self,
        peer: str,
        clock: Callable[[], float] = time.monotonic,
        pace: tuple[float, int] = (REPORTS_PER_SECOND, REPORT_BURST),
        refusals: RefusalBudget | None = None,
    ) -> None:
        """`refusals`: its client's budget (limits.RefusalBudgets), shared with its other streams."""
        self.peer = f"{peer} (relay)"
        self.host = _peer_host(peer)  # what its log lines are repeated per, as an agent's are
        self.streams: dict[int, _Stream] = {}
        self.by_node: dict[str, int] = {}
        self.pacers: dict[int, ReportPacer] = {}
        self.refusals = refusals if refusals is not None else RefusalBudget(clock)
        self._clock, self._pace = clock, pace

    def refusal_rate(self) -> float:
        """Refusals a second this relay stream may cost (limits.RELAY_REFUSALS_PER_SECOND)."""
        return max(RELAY_REFUSALS_PER_SECOND, self._pace[0] * len(self.streams))

    def pacer(self, key: int) -> ReportPacer:
        pacer = self.pacers.get(key)
        if pacer is None:
            if len(self.pacers) > len(self.streams) + MAX_PACED_UNSTORED:  # streams that never stored a report
                self.pacers = {k: p for k, p in self.pacers.items() if k in self.streams}
            pacer = self.pacers[key] = ReportPacer(self._clock, *self._pace)
        return pacer


@dataclass(frozen=True)
class AgentTerms:
    """What every ACCEPTED ack tells an agent besides the idle rule (0: not said)."""

    requested_interval_ms: int = 0  # --requested-agent-interval
    stale_after_s: float = 0.0  # how long a quiet agent may go without a heartbeat


@dataclass(frozen=True)
class Gate:
    """Who may stream: agents (`authenticator`) and relays (`relay_authenticator`: without one,
    relays are taken as agents are where agents are not authenticated, and refused where they
    are). None: not authenticated."""

    authenticator: Authenticator | None = None
    relay_authenticator: Authenticator | None = None


@dataclass(frozen=True)
class IngestLimits:
    """What a report may be and how fast it may come. `known_node`: is this node in the inventory?
    None when there is no inventory source (every node is allowed then)."""

    max_clock_skew_s: float = MAX_CLOCK_SKEW_S
    known_node: Callable[[str], bool] | None = None
    max_unknown_nodes: int = MAX_UNKNOWN_NODES
    reports_per_second: float = REPORTS_PER_SECOND
    report_burst: int = REPORT_BURST


class IngestService(pb_grpc.GpuStateServiceServicer):
    def __init__(
        self,
        state: ReportStore,
        metrics: IngestMetrics,
        *,
        terms: AgentTerms = AgentTerms(),
        gate: Gate = Gate(),
        limits: IngestLimits = IngestLimits(),
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock` (monotonic) orders and paces reports; `wall_clock` (Unix seconds) is what sample
        times are compared with."""
        self._state = state
        self._metrics = metrics
        self._requested_interval_ms = terms.requested_interval_ms
        # Told to the agent in every ACCEPTED ack: what makes a change matter here (the idle rule),
        # and how long a quiet agent may go without a heartbeat (stale_after_s; 0: not said).
        self._idle_max_utilization = state.rule.max_utilization_percent
        self._idle_max_memory = state.rule.max_memory_used_percent
        self._idle_max_sm_active = state.rule.max_sm_active_percent  # None: not said (the ack field stays unset)
        self._stale_after_ms = max(0, min(2**32 - 1, round(terms.stale_after_s * 1000)))
        self._clock = clock
        self._wall_clock = wall_clock
        authenticator = self._authenticator = gate.authenticator
        self._relay_authenticator = gate.relay_authenticator
        self._max_clock_skew_s = limits.max_clock_skew_s
        self._pace = (limits.reports_per_second, limits.report_burst)
        self._unknown: UnknownNodes | None = None
        if limits.known_node is not None:
            self._unknown = UnknownNodes(limits.known_node, state.has_data, limits.max_unknown_nodes)
            metrics.unknown_nodes.set_function(self._unknown.count)
        self._should_log = OncePer(REPEAT_REFUSAL_S, clock)
        self._accepted = metrics.reports.labels(result="accepted")  # once: labels() is a lookup per call
        # Light heartbeats are offered, and full reports of a known shape taken as readings, where
        # the store can (a worker's SummaryStore; the extender's own GpuState with --ingest-in-process
        # takes full reports only, each checked whole).
        self._heartbeats = state if isinstance(state, HeartbeatStore) else None
        self.auth_failures: Counter | None = metrics.auth_failures() if authenticator is not None else None
        self._accepted_tail = self._accepted_fields()
        self._agent_ack = pb.ReportAck.FromString(self._accepted_tail)  # told to relays in every RelayAck
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep  # a relay stream's waits (tests time them)
        self._refusal_budgets = RefusalBudgets(clock)

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
            identity = await self._authenticate(self._authenticator, context, peer, "agent")
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
                if self._heartbeats is not None:
                    self._heartbeats.stream_closed(stream.node)
                log.info(
                    "agent for node %s disconnected (%s)",
                    stream.node,
                    peer,
                    extra={"node": stream.node, "peer": peer},
                )

    async def RelayNodeReports(
        self, request_iterator: AsyncIterator[pb.RelayBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """A relay's stream (extender/relay/): many agents' reports per RelayBatch, each taken as
        from the agent's own stream (the same checks, sequences and light heartbeats per agent
        stream, the same store), answered by one RelayAck per batch. The relay authenticated its
        agents and paces each; here each agent stream is also held to its rate (a report over it is
        refused, not waited for: the batch's others must not wait)."""
        peer = context.peer()
        client = await self._admit_relay(context, peer)
        relayed = _RelayedStreams(peer, self._clock, self._pace, self._refusal_budgets.open(client))
        log.info("relay connected (%s)", peer, extra={"peer": peer})
        try:
            while (batch := await context.read()) is not grpc.aio.EOF:
                ack = await self._relayed_batch(batch, relayed)
                del batch
                yield ack
        finally:
            self._refusal_budgets.close(client)
            self._metrics.connected_agents.dec(len(relayed.streams))
            log.info(
                "relay disconnected (%s): %d agent stream(s) through it",
                peer,
                len(relayed.streams),
                extra={"peer": peer},
            )

    async def _admit_relay(self, context: grpc.aio.ServicerContext, peer: str) -> str:
        """The relay client the stream is of (its refusal budget's key): its address. Relays
        authenticate as the one service account --relay-service-account names, which tells no
        two relay pods apart; their addresses do. A refusal ends the stream (context.abort raises)."""
        if self._relay_authenticator is not None:
            await self._authenticate(self._relay_authenticator, context, peer, "relay")
            return _peer_host(peer)
        if self._authenticator is not None:  # agents must prove who they are: a relay may not speak for them unproven
            self._count_auth_failure("relay_not_allowed")
            if self._should_log("relay_not_allowed", _peer_host(peer)):
                log.warning(
                    "refused relay stream from %s: this extender authenticates agents and names no "
                    "relay service account (--relay-service-account)",
                    peer,
                    extra={"peer": peer, "reason": "relay_not_allowed"},
                )
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                "this extender authenticates agents (--agent-auth tokenreview) and takes relays only "
                "from the service account named by --relay-service-account",
            )
        return _peer_host(peer)

    async def _relayed_batch(self, batch: pb.RelayBatch, relayed: _RelayedStreams) -> bytes:
        """Take each report of `batch`; the RelayAck, serialized."""
        accepted = unpaid = 0  # unpaid: refusals not yet charged to the stream's budget
        refused: list[pb.RelayRefusal] = []
        for taken, item in enumerate(batch.reports, 1):
            if taken % RELAY_YIELD_EVERY == 0:  # other streams' reports between a batch's slices
                await self._relay_pause(relayed, unpaid)
                unpaid = 0
            if item.closed:
                self._relayed_closed(relayed, item.stream)
                continue
            stream = relayed.streams.get(item.stream) or _Stream(relayed.peer, None)
            try:
                report = pb.NodeReport.FromString(item.report)
            except DecodeError:
                self._count_rejected("invalid")
                unpaid += 1
                if len(refused) < MAX_REFUSALS_LISTED:
                    refused.append(pb.RelayRefusal(stream=item.stream, reason="not a NodeReport"))
                continue
            problem: str | None
            if relayed.pacer(item.stream).take() > 0.0:
                self._count_rejected("paced")
                problem = f"over {self._pace[0]:g} reports a second for one agent stream"
            else:
                new = stream.node is None
                problem = self._take(report, stream)
                if problem is None and new:
                    self._relayed_opened(relayed, item.stream, stream)
            if problem is None:
                accepted += 1
                continue
            unpaid += 1
            if len(refused) < MAX_REFUSALS_LISTED:
                refused.append(
                    pb.RelayRefusal(
                        stream=item.stream, node_name=report.node_name[:253], sequence=report.sequence, reason=problem
                    )
                )
        if unpaid:
            await self._relay_pause(relayed, unpaid, between_slices=False)
        return pb.RelayAck(accepted=accepted, refused=refused, agent_ack=self._agent_ack).SerializeToString()

    async def _relay_pause(self, relayed: _RelayedStreams, refused: int, between_slices: bool = True) -> None:
        """Charge `refused` to the relay stream's budget; wait off any debt (nothing read from the
        stream meanwhile), else yield between slices."""
        rate = relayed.refusal_rate()
        wait = relayed.refusals.charge(refused, rate)
        if wait <= 0.0:
            if between_slices:
                await self._sleep(0)
            return
        if self._should_log("relay_refusals", relayed.host):
            log.warning(
                "relay %s: its reports are refused faster than %g a second; reading it slower (%.2fs now)",
                relayed.peer,
                rate,
                wait,
                extra={"peer": relayed.peer, "reason": "relay_refusals"},
            )
        self._metrics.paced_streams.inc()
        try:
            await self._sleep(wait)
        finally:
            self._metrics.paced_streams.dec()

    def _relayed_opened(self, relayed: _RelayedStreams, key: int, stream: _Stream) -> None:
        """`stream` (relayed as `key`) stored its first report: held from now on; another stream
        of the node through the same relay is over (the relay opened this one after it)."""
        assert stream.node is not None
        older = relayed.by_node.get(stream.node)
        if older is not None:
            self._relayed_closed(relayed, older)
        relayed.streams[key] = stream
        relayed.by_node[stream.node] = key

    def _relayed_closed(self, relayed: _RelayedStreams, key: int) -> None:
        relayed.pacers.pop(key, None)
        stream = relayed.streams.pop(key, None)
        if stream is None or stream.node is None:
            return
        if relayed.by_node.get(stream.node) == key:
            del relayed.by_node[stream.node]
        self._metrics.connected_agents.dec()
        log.info(
            "agent for node %s disconnected (through relay %s)",
            stream.node,
            relayed.peer,
            extra={"node": stream.node, "peer": relayed.peer},
        )

    async def _authenticate(
        self, authenticator: Authenticator, context: grpc.aio.ServicerContext, peer: str, who: str
    ) -> AgentIdentity:
        """The stream's identity; a refusal is counted, logged (a line a minute per client and
        reason) and ends the stream (context.abort raises)."""
        try:
            metadata = context.invocation_metadata() or ()
            return await authenticator.authenticate(metadata, _peer_host(peer))
        except AgentRefused as exc:
            refusal = exc.refusal
            self._count_auth_failure(refusal.reason)
            if self._should_log(refusal.reason, _peer_host(peer)):
                log.warning(
                    "refused %s stream from %s (%s): %s",
                    who,
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
                    "refused %s stream from %s: cannot verify its token: %s: %s",
                    who,
                    peer,
                    type(exc).__name__,
                    exc,
                    extra={"peer": peer, "reason": "review_failed"},
                )
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot verify the {who} token now; retry")
        raise AssertionError("context.abort returned")  # pragma: no cover: abort always raises

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
        problem = self._take(report, stream)
        return self.accepted_ack(report.sequence) if problem is None else self._rejected(report, problem)

    def _take(self, report: pb.NodeReport, stream: _Stream) -> str | None:
        """Check `report` of `stream` and store it if it may be: None when stored, else why not
        (counted and, a line a minute per client and kind, logged)."""
        peer = stream.peer
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
            return problem
        if stream.node is None:
            node = stream.node = report.node_name
            if self._heartbeats is not None:
                self._heartbeats.stream_opened(node)
            self._metrics.connected_agents.inc()
            log.info(
                "agent for node %s connected (%s, agent %s%s)",
                node,
                peer,
                report.agent_version or "?",
                f", {stream.identity.username}" if stream.identity else "",
                extra={"node": node, "peer": peer},
            )
        if heartbeat:
            assert self._heartbeats is not None  # _problem refuses heartbeats otherwise
            problem = self._heartbeats.refresh(report, self._clock())
            if problem is not None:  # the agent sends a full report next: no log line
                self._count_rejected("heartbeat")
                return problem
        elif not self._state.ingest(report, self._clock()):  # not reachable on one loop; never ack it
            self._count_rejected("superseded")
            return f"a report for node {stream.node} received later is already stored"
        else:
            stream.last_full = report.sequence
        stream.last_sequence = report.sequence
        self._accepted.inc()
        return None

    def follow_ack(self, fields: pb.ReportAck) -> None:
        """From now on an ACCEPTED ack says what `fields` say (a relay's: its extenders' idle rule,
        stale_after_ms, light_heartbeats), its sequence and status aside."""
        followed = pb.ReportAck()
        followed.CopyFrom(fields)
        followed.sequence, followed.status, followed.reason = 0, pb.ReportAck.ACCEPTED, ""
        self._accepted_tail = followed.SerializeToString()
        self._agent_ack = followed  # what it tells relays of its own (a relay's relays)

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
            light_heartbeats=self._heartbeats is not None,
        ).SerializeToString()

    def _problem(
        self, report: pb.NodeReport, node: str | None, last_sequence: int, last_full: int
    ) -> tuple[str, str | None]:
        """Why the report may not be stored, as (metric reason, sentence for the agent); (_, None) if
        it may. A light heartbeat must also repeat this stream's last full report (`last_full`)."""
        heartbeat = report.heartbeat_of != 0
        if heartbeat and self._heartbeats is None:
            return "invalid", "this extender takes full reports only (its acks do not say light_heartbeats)"
        if heartbeat:
            problem = heartbeat_problem(report, node)
        elif node is not None and self._heartbeats is not None and self._heartbeats.known_shape(report):
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
RELAY_METHOD = f"/{SERVICE_NAME}/RelayNodeReports"  # what a relay calls (relay/upstream.py)
_SEQUENCE_TAG = b"\x08"  # ReportAck.sequence: field 1, varint


def add_to_server(service: IngestService, server: grpc.aio.Server) -> None:
    """Serve `service` as gpuextender.v1.GpuStateService on `server` (agents' and relays' streams).
    Its acks leave as the bytes it made (the generated add_GpuStateServiceServicer_to_server would
    serialize a ReportAck per report); agents read them as ReportAck messages."""
    handlers = {
        "StreamNodeReports": grpc.stream_stream_rpc_method_handler(
            service.StreamNodeReports, request_deserializer=pb.NodeReport.FromString, response_serializer=None
        ),
        "RelayNodeReports": grpc.stream_stream_rpc_method_handler(
            service.RelayNodeReports, request_deserializer=pb.RelayBatch.FromString, response_serializer=None
        ),
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
