"""gRPC ingest: agents stream NodeReports in, the live GpuState is updated, each report is acked.

With an authenticator (`--agent-auth tokenreview`) a stream is authenticated
once, when it opens (the server ends every connection after --agent-reauth-interval,
so a revoked or expired token stops working at the agent's next reconnect): a refused stream ends with UNAUTHENTICATED /
PERMISSION_DENIED (UNAVAILABLE when the API server cannot answer) and is
counted in `gpu_extender_agent_auth_failures_total{reason}`. A report for a
node other than the one the token is bound to gets a REJECTED ack and is not
stored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable

import grpc
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from prometheus_client import Counter

from extender.agent_identity import AgentIdentity, AgentRefused, Authenticator, node_mismatch
from extender.gpu_state import GpuState
from extender.metrics import ExtenderMetrics
from extender.report_validation import report_problem

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


class IngestService(pb_grpc.GpuStateServiceServicer):
    def __init__(
        self,
        state: GpuState,
        metrics: ExtenderMetrics,
        *,
        requested_interval_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
        authenticator: Authenticator | None = None,
    ) -> None:
        self._state = state
        self._metrics = metrics
        self._requested_interval_ms = requested_interval_ms
        self._clock = clock
        self._authenticator = authenticator
        self._should_log = _OncePer(_REPEAT_REFUSAL_S, clock)
        self.auth_failures: Counter | None = None
        if authenticator is not None:
            self.auth_failures = Counter(
                "gpu_extender_agent_auth_failures",
                "Agent streams refused at open (missing/invalid token, wrong service account, no node-name claim, "
                "TokenReview unavailable) and reports rejected for another node than the token's, by reason.",
                ["reason"], registry=metrics.registry,
            )  # fmt: skip

    async def StreamNodeReports(
        self, request_iterator: AsyncIterator[pb.NodeReport], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReportAck]:
        node: str | None = None
        peer = context.peer()
        identity: AgentIdentity | None = None
        if self._authenticator is not None:
            try:
                identity = await self._authenticator.authenticate(context.invocation_metadata() or ())
            except AgentRefused as exc:
                refusal = exc.refusal
                self._count_auth_failure(refusal.reason)
                if self._should_log(refusal.reason, _peer_host(peer)):
                    log.warning("refused agent stream from %s (%s): %s", peer, refusal.code.name, refusal.message)
                await context.abort(refusal.code, refusal.message)
            except Exception as exc:  # a bug or an odd API answer: refuse, say so, never UNKNOWN + traceback
                self._count_auth_failure("review_failed")
                if self._should_log("review_failed", _peer_host(peer)):
                    log.warning("refused agent stream from %s: cannot verify its token: %s: %s", peer,
                                type(exc).__name__, exc)  # fmt: skip
                await context.abort(grpc.StatusCode.UNAVAILABLE, "cannot verify the agent token now; retry")
        mismatch_logged = False
        try:
            async for report in request_iterator:
                mismatch = node_mismatch(identity, report.node_name) if identity is not None else None
                if mismatch is not None:
                    self._count_auth_failure("node_mismatch")
                    self._metrics.reports.labels(result="rejected").inc()
                    if not mismatch_logged:  # once per stream: the agent sends one a second
                        log.warning("rejected report %d from %s: %s", report.sequence, peer, mismatch)
                        mismatch_logged = True
                    yield pb.ReportAck(sequence=report.sequence, status=pb.ReportAck.REJECTED, reason=mismatch)
                    continue
                problem = report_problem(report, node)
                if problem is not None:
                    self._metrics.reports.labels(result="rejected").inc()
                    log.warning("rejected report %d from %s: %s", report.sequence, peer, problem)
                    yield pb.ReportAck(sequence=report.sequence, status=pb.ReportAck.REJECTED, reason=problem)
                    continue
                if node is None:
                    node = report.node_name
                    self._metrics.connected_agents.inc()
                    log.info("agent for node %s connected (%s, agent %s%s)", node, peer, report.agent_version or "?",
                             f", {identity.username}" if identity else "")  # fmt: skip
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

    def _count_auth_failure(self, reason: str) -> None:
        if self.auth_failures is not None:
            self.auth_failures.labels(reason=reason).inc()


def _peer_host(peer: str) -> str:
    """`ipv4:10.0.0.5:41234` → `ipv4:10.0.0.5`: the port changes on every reconnect."""
    host, sep, _ = peer.rpartition(":")
    return host if sep else peer
