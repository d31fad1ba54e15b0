"""`--agent-auth tokenreview`: agent tokens checked with the API server's TokenReview.

Called once per new agent stream, never on the scheduler's request path. An
answer is cached per token hash (the token itself is not kept) for at most
`cache_ttl_s` and never past the token's own `exp`, so a fleet of agents
reconnecting after an extender restart costs one review per agent, and a
revoked or expired token is refused on the next stream within the TTL (open
streams are re-checked when the server ends them, every
`ingest.AUTHENTICATED_STREAM_AGE_S`). Refusals are cached
briefly (a misconfigured fleet retrying every few seconds does not hammer the
API server); an API server error is not cached: the stream is refused with
UNAVAILABLE and the agent retries with backoff.

At most `max_in_flight` reviews run at once, and one peer host may have at most
`max_in_flight_per_peer` of them started or queued: a client flooding made-up
tokens is refused at once (UNAVAILABLE, `peer_busy`) instead of filling the
queue in front of real agents. Cached answers and streams that join a review
already under way cost no review and are never refused for this.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import grpc
import orjson

from gpuextender.extender.ingest.agent_identity import (
    AgentIdentity,
    AgentRefused,
    Refusal,
    bearer_token,
    judge_review,
    missing_token,
    token_expiry,
)
from gpuextender.extender.settings import ExtenderConfig, ServiceAccountRef

if TYPE_CHECKING:  # the Kubernetes client loads only where a reviewer is made (kube/ imports it)
    from gpuextender.extender.kube.connection import ApiClient, Configuration

_EXPIRY_MARGIN_S = 5.0  # stop trusting a cached answer this long before the token expires
# One agent has one token: two reviews at once from one host cover an agent reconnecting while its
# previous review is still out (or two agents behind one address); more is a flood.
MAX_REVIEWS_PER_PEER = 2


class TokenReviewer:
    def __init__(
        self,
        connection: Configuration | Callable[[], ApiClient],
        service_account: ServiceAccountRef,
        audience: str,
        *,
        cache_ttl_s: float = 60.0,
        refusal_ttl_s: float = 5.0,
        max_entries: int = 20_000,
        max_in_flight: int = 8,
        max_in_flight_per_peer: int = MAX_REVIEWS_PER_PEER,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        node_bound: bool = True,
    ) -> None:
        """`node_bound`: agents' tokens (each names its node); False: relays' (agent_identity.judge_review)."""
        from gpuextender.extender.kube.connection import client_factory

        self._factory = client_factory(connection)
        self.service_account = service_account
        self.audience = audience
        self._node_bound = node_bound
        self._cache_ttl_s = cache_ttl_s
        self._refusal_ttl_s = refusal_ttl_s
        self._max_entries = max_entries
        self._timeout_s = timeout_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._cache: dict[str, tuple[float, AgentIdentity | Refusal]] = {}
        # A fleet reconnecting at once (a new replica, an API server brownout) queues here
        # instead of flooding the API server; streams with the same token share one review.
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self._pending: dict[str, asyncio.Future[AgentIdentity | Refusal]] = {}
        self._max_per_peer = max_in_flight_per_peer
        self._per_peer: dict[str, int] = {}  # peer host -> reviews it started that are not done yet
        self._client: ApiClient | None = None
        self.reviews = 0  # TokenReview calls made (the cache's effect, for tests and debugging)

    async def authenticate(self, metadata: Iterable[tuple[str, str | bytes]], peer_host: str) -> AgentIdentity:
        token = bearer_token(metadata)
        if token is None:
            raise AgentRefused(missing_token(self.audience))
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._cached(key)
        if cached is not None:
            return _identity_or_raise(cached)
        pending = self._pending.get(key)
        if pending is None:  # one review per token, however many streams wait for it
            started = self._per_peer.get(peer_host, 0)
            if started >= self._max_per_peer:
                raise AgentRefused(_peer_busy(peer_host, self._max_per_peer))
            self._per_peer[peer_host] = started + 1
            pending = self._pending[key] = asyncio.ensure_future(self._review_and_judge(key, token))
            pending.add_done_callback(lambda done: self._review_done(key, peer_host, done))
        return _identity_or_raise(await asyncio.shield(pending))

    def _review_done(self, key: str, peer_host: str, done: asyncio.Future[AgentIdentity | Refusal]) -> None:
        self._pending.pop(key, None)
        left = self._per_peer.pop(peer_host, 1) - 1
        if left > 0:  # the dict holds only hosts with reviews under way
            self._per_peer[peer_host] = left
        if not done.cancelled():
            done.exception()  # retrieved: its waiters (if any are left) got it already

    async def _review_and_judge(self, key: str, token: str) -> AgentIdentity | Refusal:
        async with self._in_flight:
            now = self._clock()
            result = judge_review(await self._review(token), self.service_account, self.audience, self._node_bound)
            self._remember(key, token, result, now)
            return result

    def _cached(self, key: str) -> AgentIdentity | Refusal | None:
        entry = self._cache.get(key)
        return entry[1] if entry is not None and entry[0] > self._clock() else None

    def for_relays(self, service_account: ServiceAccountRef) -> TokenReviewer:
        """A reviewer of relays' tokens (`service_account`, no node), on this one's API client (its
        close closes both); its own cache and limits."""
        return TokenReviewer(
            self._shared_client,
            service_account,
            self.audience,
            timeout_s=self._timeout_s,
            clock=self._clock,
            wall_clock=self._wall_clock,
            node_bound=False,
        )

    def _shared_client(self) -> ApiClient:
        if self._client is None:
            self._client = self._factory()
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _review(self, token: str) -> dict[str, Any]:
        """The TokenReview's status; AgentRefused(UNAVAILABLE) when the API server cannot answer."""
        from gpuextender.extender.kube import api_call

        client = self._shared_client()
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self.audience]},
        }
        self.reviews += 1
        try:
            got = await api_call.answer(api_call.create_token_review(client, body, self._timeout_s))
        except (*api_call.TRANSPORT_ERRORS, api_call.ApiError) as exc:
            raise AgentRefused(_unavailable(f"{type(exc).__name__}: {exc}")) from None
        if got.status not in (200, 201):
            raise AgentRefused(_unavailable(f"HTTP {got.status}: {api_call.server_message(got.raw)}"))
        try:
            review = orjson.loads(got.raw)
        except orjson.JSONDecodeError:
            raise AgentRefused(_unavailable("the answer is not JSON")) from None
        status = review.get("status") if isinstance(review, dict) else None
        return status if isinstance(status, dict) else {}

    def _remember(self, key: str, token: str, result: AgentIdentity | Refusal, now: float) -> None:
        ttl = self._cache_ttl_s if isinstance(result, AgentIdentity) else self._refusal_ttl_s
        expiry = token_expiry(token)
        if expiry is not None:
            ttl = min(ttl, expiry - self._wall_clock() - _EXPIRY_MARGIN_S)
        if ttl <= 0:
            return
        if len(self._cache) >= self._max_entries:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            while len(self._cache) >= self._max_entries:  # still full: drop the oldest entries
                del self._cache[next(iter(self._cache))]
        self._cache[key] = (now + ttl, result)


def _identity_or_raise(result: AgentIdentity | Refusal) -> AgentIdentity:
    if isinstance(result, Refusal):
        raise AgentRefused(result)
    return result


def _peer_busy(peer_host: str, limit: int) -> Refusal:
    return Refusal(
        grpc.StatusCode.UNAVAILABLE,
        "peer_busy",
        f"{limit} token reviews for {peer_host} are already under way (at most {limit} per client "
        "address at once): retry once they are answered",
    )


def _unavailable(cause: str) -> Refusal:
    return Refusal(
        grpc.StatusCode.UNAVAILABLE, "review_failed", f"cannot verify the agent token now (TokenReview: {cause})"
    )


async def reviewer_for(config: ExtenderConfig, connection: Configuration | None = None) -> TokenReviewer | None:
    """The TokenReviewer of agents' tokens that `config` asks for (--agent-auth tokenreview under
    --kubernetes), over `connection` or the cluster connection loaded now; None where it asks for
    none. The one place it is built: the extender, each ingest worker and the gpu-relay. Raises
    kube.connection.KubeConfigError where no connection can be loaded."""
    if not config.token_review:
        return None
    if connection is None:
        from gpuextender.extender.kube.connection import load_kube_config

        connection = await load_kube_config(config.kubeconfig)
    assert config.agent_auth.service_account is not None  # the settings guarantee it
    return TokenReviewer(connection, config.agent_auth.service_account, config.agent_auth.audience)
