"""Every raw call of the extender to the API server, and one way to read an answer.

The inventory's writers (device taint rules, node status, Events, evictions, cleanup) build their
calls on kubernetes_asyncio's APIs and read the answer with `call`: the object, {} for a 404 (gone
already), None for a 409 where the caller can list or read again, else Forbidden (403: the RBAC
component not applied) or ApiError, with the server's words. The TokenReview client, the binder
and explain's reads make their calls here (`create_token_review`, `create_binding`, `read_pod`,
`list_nodes`) and read them with `answer`: the status and the raw body, for the caller to judge.
Every call is made with `_preload_content=False`: the raw aiohttp response, never the generated
models (they refuse answers they do not expect, e.g. a Binding's null target). Importing this
module loads no Kubernetes client: each call does, where one is made."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, NamedTuple

import aiohttp
import orjson

if TYPE_CHECKING:  # loaded by the calls below: reading an answer (the writers') needs no client
    from kubernetes_asyncio import client as k8s

# The bodies of a PATCH, by content type.
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# What a call raises where the API server gave no answer (connection, TLS, timeout).
TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
Timeout = aiohttp.ClientTimeout


class ApiError(Exception):
    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status (0: not an answer of the API server)


class Forbidden(ApiError):
    pass


class Answer(NamedTuple):
    status: int  # the HTTP status
    raw: bytes  # the body as the API server sent it


async def answer(pending: Awaitable[Any]) -> Answer:
    """The answer of one call made with `_preload_content=False`; TRANSPORT_ERRORS where there
    was none, ApiError where the client refused to make the call."""
    from kubernetes_asyncio.client import ApiException

    try:
        resp: aiohttp.ClientResponse = await pending
    except ApiException as exc:
        raise ApiError(f"the Kubernetes client refused the call: {exc.reason}", exc.status or 0) from None
    try:
        raw = await resp.read()
    finally:
        resp.release()
    return Answer(resp.status, raw)


def server_message(raw: bytes, limit: int = 200) -> str:
    """What the API server said: its Status's message, else the body's first `limit` bytes."""
    try:
        status = orjson.loads(raw)
    except orjson.JSONDecodeError:
        status = None
    message = status.get("message") if isinstance(status, dict) else None
    return str(message) if message else raw[:limit].decode("utf-8", "replace")


async def call(pending: Any, what: str, *, conflict_ok: bool = False) -> dict[str, Any] | None:
    """`pending`: a kubernetes_asyncio call made with `_preload_content=False`; `what` names the
    resource in an error."""
    got = await answer(pending)
    if got.status in (200, 201, 202):
        loaded: dict[str, Any] = orjson.loads(got.raw) if got.raw else {}
        return loaded
    if got.status == 404:
        return {}
    if got.status == 409 and conflict_ok:
        return None
    message = got.raw[:300].decode("utf-8", "replace")
    if got.status == 403:
        raise Forbidden(f"HTTP 403 on {what}: {message}", 403)
    raise ApiError(f"HTTP {got.status} on {what}: {message}", got.status)


# -- the raw calls made outside the inventory ------------------------------------------------------


def create_token_review(client: k8s.ApiClient, body: dict[str, Any], timeout_s: float) -> Awaitable[Any]:
    """POST a TokenReview (authentication.k8s.io/v1)."""
    from kubernetes_asyncio import client as k8s

    return k8s.AuthenticationV1Api(client).create_token_review(
        body=body,  # type: ignore[arg-type]  # a plain dict serialises the same
        _preload_content=False,
        _request_timeout=Timeout(total=timeout_s),
    )


def create_binding(
    client: k8s.ApiClient, namespace: str, name: str, body: dict[str, Any], timeout_s: float
) -> Awaitable[Any]:
    """POST a pod's Binding (the pods/binding subresource)."""
    from kubernetes_asyncio import client as k8s

    return k8s.CoreV1Api(client).create_namespaced_pod_binding(
        name,
        namespace,
        body,  # type: ignore[arg-type]  # a plain dict serialises the same
        _preload_content=False,
        _request_timeout=Timeout(total=timeout_s),
    )


def read_pod(client: k8s.ApiClient, namespace: str, name: str, timeout: Timeout) -> Awaitable[Any]:
    from kubernetes_asyncio import client as k8s

    return k8s.CoreV1Api(client).read_namespaced_pod(
        name=name, namespace=namespace, _preload_content=False, _request_timeout=timeout
    )


def list_nodes(client: k8s.ApiClient, limit: int, token: str | None, timeout: Timeout) -> Awaitable[Any]:
    """One page of Nodes (`token`: the previous page's `continue`)."""
    more: dict[str, Any] = {"_continue": token} if token else {}
    from kubernetes_asyncio import client as k8s

    return k8s.CoreV1Api(client).list_node(limit=limit, _preload_content=False, _request_timeout=timeout, **more)
