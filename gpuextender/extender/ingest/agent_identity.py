"""Who is on the other end of an agent stream: the pure rules (no I/O).

With `--agent-auth tokenreview` each agent sends its projected ServiceAccount
token as `authorization: Bearer <token>`. The API server's TokenReview answer
is judged here: the token must be authenticated for our audience, belong to
the agent's service account, and name the node its pod runs on
(`authentication.kubernetes.io/node-name`, Kubernetes >= 1.30), so an agent
can only report for its own node.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import grpc

from gpuextender.extender.model.untrusted import object_at
from gpuextender.extender.settings import ServiceAccountRef

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    username: str
    node_name: str


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a stream is refused: the gRPC status, a metric label and the sentence for the agent."""

    code: grpc.StatusCode
    reason: str
    message: str


class AgentRefused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class Authenticator(Protocol):
    async def authenticate(self, metadata: Iterable[tuple[str, str | bytes]], peer_host: str) -> AgentIdentity:
        """The stream's identity, or AgentRefused. `peer_host` (`ipv4:10.0.0.5`, no port) is
        the client's address, so one noisy client cannot hold every review slot."""
        ...


@runtime_checkable
class RelayReviewing(Protocol):
    """An Authenticator that can also vouch for relays (token_review.TokenReviewer)."""

    def for_relays(self, service_account: ServiceAccountRef) -> Authenticator: ...


def missing_token(audience: str) -> Refusal:
    return Refusal(
        grpc.StatusCode.UNAUTHENTICATED,
        "missing_token",
        "no `authorization: Bearer <token>` metadata: run the agent with --token-file pointing at a "
        f"projected ServiceAccount token with audience {audience!r}",
    )


def bearer_token(metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
    for key, value in metadata:
        if key.lower() != "authorization" or not isinstance(value, str):
            continue
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


def judge_review(
    status: Mapping[str, Any], expected: ServiceAccountRef, audience: str, node_bound: bool = True
) -> AgentIdentity | Refusal:
    """A TokenReview's `status` → the agent's identity, or why it is refused. `node_bound`: the
    token must name its pod's node (an agent's); a relay's names none (its identity's node_name
    is empty: it reports for no node of its own)."""
    if status.get("authenticated") is not True:
        error = status.get("error") or "no reason given"
        return Refusal(grpc.StatusCode.UNAUTHENTICATED, "invalid_token", f"token not authenticated: {error}")
    # The server echoes the audiences it validated the token for (TokenReview API contract):
    # ours must be among them. None or an empty list means "the API server's own audience",
    # which is not ours: an authenticator that ignores spec.audiences must not let a token
    # minted for another purpose through.
    audiences = status.get("audiences")
    if not isinstance(audiences, list) or audience not in audiences:
        return Refusal(
            grpc.StatusCode.UNAUTHENTICATED,
            "wrong_audience",
            f"token is for audience(s) {audiences or 'of the API server'}, not {audience!r}",
        )
    user = object_at(status, "user")
    username = str(user.get("username") or "")
    if username != expected.username:
        return Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            "wrong_service_account",
            f"token belongs to {username or 'nobody'!r}, not to the {'agents' if node_bound else 'relays'}' "
            f"service account {expected} ({expected.username})",
        )
    if not node_bound:
        return AgentIdentity(username, "")
    extra = object_at(user, "extra")
    nodes = extra.get(NODE_NAME_EXTRA) or []
    node = nodes[0] if isinstance(nodes, list) and len(nodes) == 1 and isinstance(nodes[0], str) else ""
    if not node:
        return Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            "no_node_name",
            f"the token names no node ({NODE_NAME_EXTRA} is missing): --agent-auth tokenreview needs "
            "Kubernetes >= 1.30 (ServiceAccountTokenPodNodeInfo) and a pod-bound projected token; on older "
            "clusters run the extender with --agent-auth none and mTLS (--tls-ca)",
        )
    return AgentIdentity(username, node)


def identity_node_mismatch(identity: AgentIdentity, report_node: str) -> str | None:
    """None when the identity may report for `report_node`, else the reason for the REJECTED ack."""
    if report_node == identity.node_name:
        return None
    return (
        f"report for node {report_node!r} refused: this agent's token is bound to node "
        f"{identity.node_name!r} ({NODE_NAME_EXTRA}); an agent may only report for its own node"
    )


def token_expiry(token: str) -> float | None:
    """The JWT `exp` claim (Unix seconds), read without verification: only to bound a cache entry."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        return None
    try:
        value = float(exp)  # a forged 400-digit `exp` overflows
    except OverflowError:
        return None
    return value if math.isfinite(value) else None
