"""One answer of the API server to the writers (device taint rules, node status, Events), read the
same way: the object, {} for a 404 (gone already), None for a 409 where the caller can list or read
again, else Forbidden (403: the RBAC component not applied) or ApiError, with the server's words."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson


class ApiError(Exception):
    pass


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
        raise Forbidden(f"HTTP 403 on {what}: {message}")
    raise ApiError(f"HTTP {resp.status} on {what}: {message}")
