"""One answer of the API server to the writers (device taint rules, node status, Events), read the
same way: the object, {} for a 404 (gone already), None for a 409 where the caller can list or read
again, else Forbidden (403: the RBAC component not applied) or ApiError, with the server's words."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

# The bodies of a PATCH, by content type.
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ApiError(Exception):
    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status (0: not an answer of the API server)


class Forbidden(ApiError):
    pass


async def call(pending: Any, what: str, *, conflict_ok: bool = False) -> dict[str, Any] | None:
    """`pending`: a kubernetes_asyncio call made with `_preload_content=False`; `what` names the
    resource in an error."""
    resp: aiohttp.ClientResponse = await pending
    try:
        raw = await resp.read()
    finally:
        resp.release()
    if resp.status in (200, 201, 202):
        loaded: dict[str, Any] = orjson.loads(raw) if raw else {}
        return loaded
    if resp.status == 404:
        return {}
    if resp.status == 409 and conflict_ok:
        return None
    message = raw[:300].decode("utf-8", "replace")
    if resp.status == 403:
        raise Forbidden(f"HTTP 403 on {what}: {message}", 403)
    raise ApiError(f"HTTP {resp.status} on {what}: {message}", resp.status)
