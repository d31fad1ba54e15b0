"""Inventory from the Kubernetes API: list+watch of Nodes and OME's custom resources.

One background task per kind (`extender.model.kube_objects.KINDS`) runs the same
protocol client-go's reflector runs, written out here so that every object
reaches the sink as the plain JSON dict the API server sent:

1. **LIST** the whole kind, cluster-wide (namespaced kinds across all
   namespaces), in pages of `list_page_size` (`limit`/`continue`), then
   `sink.replace_all(kind, items)` with the complete set, and remember the
   list's `metadata.resourceVersion`. List items lack `apiVersion`/`kind` for
   built-in kinds; they are filled in so every object carries both.
2. **WATCH** from that resourceVersion with `allowWatchBookmarks=true` and a
   server-side `timeoutSeconds`. ADDED/MODIFIED → `sink.upsert`, DELETED →
   `sink.delete`, BOOKMARK → no sink call; every event advances the
   resourceVersion.
3. When the server ends the watch normally (its timeout, an API server
   rolling restart), **watch again from the last resourceVersion**: no relist.
4. **410 Gone** (the HTTP status of the watch request, or an ERROR event whose
   object is a Status with code 410, or an expired `continue` token) means
   the resourceVersion fell out of the server's history: **relist** (step 1,
   a fresh `replace_all`), then watch again.
5. Any other failure (connection refused, reset, 5xx, 4xx, timeouts, an ERROR
   event with another code) → retry after exponential backoff with jitter
   (capped at `backoff_max_s`), re-watching from the last resourceVersion if
   there is one, else listing. A watch that ends within `min_watch_s` without
   a single event counts as a failure, so a proxy that cuts every stream
   cannot turn this into a hot loop. Logging: one WARNING when a problem
   starts (or changes), one INFO when every kind that hit it has recovered;
   individual retries are DEBUG. A connection-level problem (API server
   unreachable, 5xx) is one line for all kinds, not one per kind.
6. A **CRD that is not installed** (404 on the LIST of a kind with an API
   group) is a warning and an **empty set**: `replace_all(kind, [])`, which
   counts as synced. The kind is re-listed every `crd_recheck_s`, so installing
   OME later works without a restart; a CRD removed while watched (404 on the
   watch) goes back through the same path and empties the kind.
7. A malformed watch event (not JSON, not an object, unknown type, an object
   without `metadata.name`) is logged and skipped; it never stops the watch.
8. A kind with a `field_selector` (`KindInfo`; the Pods of the bound-pod ledger) sends it as
   `fieldSelector` on the LIST and on every WATCH, and a `label_selector` (JobSet's Jobs) as
   `labelSelector`; an object that stops matching arrives as DELETED. A source's optional
   `list_filter(kind, item)` drops LIST items as each page arrives, so a relist never holds a
   large kind whole (watch events are never filtered: a DELETED must always reach the sink).

Each time a kind's loop starts over, `on_restart(kind, cause)` is called: `relist_410` (the
resourceVersion or continue token expired), `crd_removed` (404 on the watch of a CRD kind),
`server_closed` (the server ended the watch normally: its timeout or a restart; watched
again from the last resourceVersion) and `error` (any other failure of a LIST or WATCH,
retried after backoff). The extender counts them in
`gpu_extender_inventory_watch_restarts_total{kind,cause}`.

`ready` turns true (and `wait_ready()` returns) once every kind has had its
first `replace_all`, CRD-absent kinds included; it stays true through later
outages, because the store keeps serving the last known state (as informers
do). Nothing here runs on a request path: the source is only a background task.

Why not `kubernetes_asyncio.watch.Watch`: it deserializes every object into
model classes (wasted work for Nodes, and we want the raw dicts), hides HTTP
errors on the watch request (with `_preload_content=False` a non-2xx response
is returned, not raised, and `Watch` only notices it if the body parses as a
Status; a proxy's HTML 503 page comes back as a *string event*), retries 410 by
itself when no timeout is set, and raises a bare `Exception` on a bookmark
without a resourceVersion. An ERROR event whose Status lacks `reason` or `message`
even raises a KeyError inside it. So the generated list methods
(`CoreV1Api.list_node`, `CustomObjectsApi.list_cluster_custom_object`) are called
with `watch=True, _preload_content=False`, which returns the raw aiohttp response
whatever its status, and the JSON lines are read here.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client as k8s

from gpuextender.common.backoff import Backoff
from gpuextender.extender.kube.connection import client_factory
from gpuextender.extender.model.kube_objects import KINDS, InventorySink, KindInfo, KubeObject
from gpuextender.extender.model.untrusted import object_at

log = logging.getLogger("gpu_extender.inventory.kube")

__all__ = [
    "RESTART_CAUSES",
    "KindStatus",
    "KubeInventorySource",
    "KubeSourceTimings",
]


# -- configuration -------------------------------------------------------------


RESTART_CAUSES = ("relist_410", "crd_removed", "server_closed", "error")  # see the module docstring

ListFilter = Callable[[str, KubeObject], bool]
RestartHook = Callable[[str, str], None]


def _no_restart_hook(kind: str, cause: str) -> None:
    pass


# -- settings and status ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KubeSourceTimings:
    """Timeouts and retry pacing; the defaults suit a real cluster, tests shrink them."""

    watch_timeout_s: int = 300  # the watch's `timeoutSeconds`: the server ends the stream after it
    # Client-side read timeout on a watch is timeout + grace: a silent half-open connection is
    # noticed even if the server's own timeout never arrives.
    watch_read_grace_s: float = 30.0
    list_timeout_s: float = 60.0  # one LIST page, total
    connect_timeout_s: float = 10.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    crd_recheck_s: float = 60.0  # how often a kind whose CRD is absent is listed again
    min_watch_s: float = 1.0  # a watch ending sooner than this with no events counts as a failure
    list_page_size: int = 500  # LIST `limit`; 0 = one unpaged LIST


@dataclass(slots=True)
class KindStatus:
    """What one kind's watcher is doing; for logs, /readyz details and tests."""

    kind: str
    state: str = "starting"  # starting | listing | watching | crd-absent | backoff
    synced: bool = False
    resource_version: str | None = None
    lists: int = 0  # completed LISTs (first list and every relist)
    relists: int = 0  # LISTs caused by 410 Gone or a vanished CRD
    watches: int = 0  # watch requests answered with HTTP 200
    consecutive_failures: int = 0
    last_error: str | None = None


# -- errors raised inside one watcher ------------------------------------------------


class _Gone(Exception):
    """410: the resourceVersion (or continue token) is no longer in the server's history."""


class _NotFound(Exception):
    """404 on the collection: for a kind with an API group, its CRD is not installed."""


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if message else f"HTTP {status}")
        self.status = status


class _ProtocolError(Exception):
    """The API server answered with something this client cannot use."""


class _ShortWatch(Exception):
    """The watch ended immediately without any event."""


def _status_message(body: bytes) -> str:
    """The `reason: message` of a Kubernetes Status body, or the start of whatever it is."""
    try:
        status = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:200].decode("utf-8", "replace").strip()
    if isinstance(status, dict):
        parts = [str(status[k]) for k in ("reason", "message") if status.get(k)]
        if parts:
            return ": ".join(parts)
    return body[:200].decode("utf-8", "replace").strip()


def _error_for_status(status: int, message: str) -> Exception:
    if status == 410:
        return _Gone(message or "410 Gone")
    if status == 404:
        return _NotFound(message or "404 Not Found")
    return _HttpError(status, message)


# -- logging problems once -------------------------------------------------------------


class _ProblemLog:
    """One WARNING when a problem starts, one INFO when every kind that had it has recovered.

    A problem is identified by a category string: connection-level ones (API server
    unreachable, 5xx, timeouts) are shared by all kinds, so an outage is one line,
    not seven; kind-specific ones (403 on one resource) name the resource.
    """

    def __init__(self, backoff_max_s: float) -> None:
        self._active: dict[str, set[str]] = {}
        self._backoff_max_s = backoff_max_s

    def failed(self, kind: str, category: str, detail: str) -> None:
        # A kind whose problem changed (connection dropped → refused) leaves the old one
        # quietly: the new problem gets its own warning, and it is not a recovery.
        self._leave(kind, keep=category, announce=False)
        kinds = self._active.get(category)
        if kinds is None:
            self._active[category] = {kind}
            log.warning(
                "inventory: %s (first seen on %s); retrying with backoff (at most %g s apart) until it recovers",
                detail,
                kind,
                self._backoff_max_s,
            )
        else:
            kinds.add(kind)
            log.debug("inventory: %s: still failing: %s", kind, detail)

    def recovered(self, kind: str) -> None:
        self._leave(kind, keep=None, announce=True)

    def _leave(self, kind: str, *, keep: str | None, announce: bool) -> None:
        for category in list(self._active):
            if category == keep:
                continue
            kinds = self._active[category]
            kinds.discard(kind)
            if not kinds:
                del self._active[category]
                if announce:
                    log.info("inventory: the API server answers again (was: %s)", category)


def _describe(exc: BaseException, info: KindInfo) -> tuple[str, str]:
    """(category, one-line detail) for a failure; see `_ProblemLog`."""
    resource = _resource_path(info)
    if isinstance(exc, _HttpError):
        if exc.status >= 500:
            return f"API server error HTTP {exc.status}", f"API server error on {resource}: {exc}"
        hint = ""
        if exc.status in (401, 403):
            hint = " (check the extender's credentials / RBAC: it needs list+watch on this resource)"
        return f"HTTP {exc.status} on {resource}", f"{resource}: {exc}{hint}"
    if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError is one too
        return "API server timeout", f"request to the API server timed out ({resource})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "API server unreachable", f"API server unreachable: {exc}"
    if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | ConnectionError):
        return "connection dropped", f"connection to the API server dropped ({type(exc).__name__})"
    if isinstance(exc, _ShortWatch):
        return f"watch closed immediately on {resource}", f"{resource}: {exc}"
    if isinstance(exc, _ProtocolError):
        return f"unusable response on {resource}", f"{resource}: {exc}"
    return f"{type(exc).__name__} on {resource}", f"{resource}: {type(exc).__name__}: {exc}"


def _resource_path(info: KindInfo) -> str:
    if not info.group:
        return f"/api/{info.version}/{info.plural}"
    return f"/apis/{info.group}/{info.version}/{info.plural}"


# -- backoff -------------------------------------------------------------------------------


# -- one kind ----------------------------------------------------------------------------------

_ListCall = Callable[..., Awaitable[Any]]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _core_list_method(info: KindInfo) -> str:
    if info.version != "v1":
        raise ValueError(f"core kind {info.kind} in version {info.version}: only core v1 is supported")
    name = f"list_{_snake(info.kind)}{'_for_all_namespaces' if info.namespaced else ''}"
    if not hasattr(k8s.CoreV1Api, name):
        raise ValueError(f"kubernetes-asyncio has no CoreV1Api.{name} for {info.kind}")
    return name


def _check_listable(info: KindInfo) -> None:
    """Fail at construction, not in a background task, for a kind this client cannot list."""
    if not info.group:
        _core_list_method(info)


def _list_call(api_client: k8s.ApiClient, info: KindInfo) -> _ListCall:
    """The generated list method for the kind, cluster-wide, with group/version/plural bound."""
    if info.group:
        # Works for cluster-scoped kinds and, across all namespaces, for namespaced ones.
        custom = k8s.CustomObjectsApi(api_client)

        def call(**kwargs: Any) -> Awaitable[Any]:
            return custom.list_cluster_custom_object(info.group, info.version, info.plural, **kwargs)

        return call
    # e.g. CoreV1Api.list_node (cluster-scoped) or list_pod_for_all_namespaces (namespaced).
    return getattr(k8s.CoreV1Api(api_client), _core_list_method(info))


def _object_name(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    name = meta.get("name")
    return name if isinstance(name, str) and name else None


def _object_rv(obj: Any) -> str | None:
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            rv = meta.get("resourceVersion")
            if isinstance(rv, str) and rv:
                return rv
    return None


class _KindWatcher:
    def __init__(
        self,
        info: KindInfo,
        sink: InventorySink,
        api_client_factory: Callable[[], k8s.ApiClient],
        timings: KubeSourceTimings,
        problems: _ProblemLog,
        on_synced: Callable[[str], None],
        rng: random.Random,
        list_filter: ListFilter | None = None,
        on_restart: RestartHook = _no_restart_hook,
    ) -> None:
        self.info = info
        self.status = KindStatus(info.kind)
        self._sink = sink
        self._factory = api_client_factory
        self._t = timings
        self._problems = problems
        self._on_synced = on_synced
        self._rng = rng
        self._backoff = Backoff(timings.backoff_initial_s, timings.backoff_max_s, rng)
        self._api_version = f"{info.group}/{info.version}" if info.group else info.version
        self._crd_absent = False
        self._events_since_list = 0
        self._call: _ListCall | None = None
        self._list_filter = list_filter
        self._on_restart = on_restart
        self._selector: dict[str, str] = {}
        if info.field_selector:
            self._selector["field_selector"] = info.field_selector
        if info.label_selector:
            self._selector["label_selector"] = info.label_selector

    # The resourceVersion lives in the status so that tests and /readyz details see it.
    @property
    def resource_version(self) -> str | None:
        return self.status.resource_version

    @resource_version.setter
    def resource_version(self, value: str | None) -> None:
        self.status.resource_version = value

    async def run(self) -> None:
        """List and watch until cancelled; never returns otherwise, never raises otherwise."""
        async with self._factory() as api_client:
            self._call = _list_call(api_client, self.info)
            while True:
                try:
                    if self.resource_version is None:
                        if not await self._list():
                            # CRD absent: look again later, without counting it as a failure.
                            self.status.state = "crd-absent"
                            await asyncio.sleep(self._t.crd_recheck_s * self._rng.uniform(0.9, 1.1))
                            continue
                    await self._watch()
                    self._restarted("server_closed")
                except asyncio.CancelledError:
                    raise
                except _Gone as exc:
                    self._restarted("relist_410")
                    if self.resource_version is None:  # a paged LIST whose continue token expired
                        log.info("inventory: %s: list continue token expired (%s); listing again", self.info.kind, exc)
                    else:
                        log.info(
                            "inventory: %s: resourceVersion %s expired (%s); relisting",
                            self.info.kind,
                            self.resource_version,
                            exc,
                        )
                    self.resource_version = None
                    self.status.relists += 1
                    if self._events_since_list == 0:
                        # Gone again right after a list: something is off; don't hammer LIST.
                        await self._sleep_backoff()
                except _NotFound as exc:
                    if self.info.group and self.resource_version is not None:
                        # The CRD went away while watched: relist, which finds the 404 and empties the kind.
                        self._restarted("crd_removed")
                        log.info("inventory: %s: watch answered 404 (%s); relisting", self.info.kind, exc)
                        self.resource_version = None
                        self.status.relists += 1
                        await self._sleep_backoff()
                    else:
                        await self._failed(_HttpError(404, str(exc)))
                except Exception as exc:  # anything else: log once per problem, back off, retry
                    await self._failed(exc)

    async def _sleep_backoff(self) -> None:
        self.status.state = "backoff"
        await asyncio.sleep(self._backoff.next_delay())

    def _restarted(self, cause: str) -> None:
        try:
            self._on_restart(self.info.kind, cause)
        except Exception:  # a metrics hook must not stop the watch
            log.exception("inventory: %s: the restart hook failed", self.info.kind)

    async def _failed(self, exc: Exception) -> None:
        self._restarted("error")
        category, detail = _describe(exc, self.info)
        self.status.consecutive_failures += 1
        self.status.last_error = detail
        if not isinstance(exc, _HttpError | OSError | TimeoutError | aiohttp.ClientError | _ShortWatch):
            # Not a network/API condition: possibly a bug here or in the sink; keep the traceback.
            log.debug("inventory: %s: unexpected error", self.info.kind, exc_info=exc)
        self._problems.failed(self.info.kind, category, detail)
        await self._sleep_backoff()

    def _healthy(self) -> None:
        """The API server answered this kind's request with 2xx."""
        self.status.consecutive_failures = 0
        self.status.last_error = None
        self._problems.recovered(self.info.kind)

    async def _error_from(self, resp: aiohttp.ClientResponse) -> Exception:
        try:
            body = await resp.read()
        except (aiohttp.ClientError, TimeoutError):
            body = b""
        return _error_for_status(resp.status, _status_message(body))

    # -- LIST ----------------------------------------------------------------------------------

    async def _list(self) -> bool:
        """Full LIST → replace_all. False when the CRD is not installed (the kind is then empty)."""
        assert self._call is not None
        self.status.state = "listing"
        timeout = aiohttp.ClientTimeout(
            total=self._t.list_timeout_s, connect=self._t.connect_timeout_s, sock_connect=self._t.connect_timeout_s
        )
        items: list[Any] = []
        token: str | None = None
        resource_version: str | None = None
        while True:
            kwargs: dict[str, Any] = {"_preload_content": False, "_request_timeout": timeout, **self._selector}
            if self._t.list_page_size > 0:
                kwargs["limit"] = self._t.list_page_size
            if token:
                kwargs["_continue"] = token
            resp: aiohttp.ClientResponse = await self._call(**kwargs)
            try:
                if resp.status != 200:
                    error = await self._error_from(resp)
                    if isinstance(error, _NotFound) and self.info.group:
                        self._healthy()  # the server answered; the resource just is not there
                        self._mark_crd_absent(str(error))
                        return False
                    if isinstance(error, _HttpError) and error.status == 403 and self.info.optional_api:
                        # Not allowed to read an optional API (RBAC not updated): without it, never ready.
                        self._healthy()
                        self._mark_crd_absent(f"{error}; grant list and watch on it to the extender's ClusterRole")
                        return False
                    raise error
                body = await resp.read()
            finally:
                resp.release()
            try:
                page = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise _ProtocolError(f"LIST response is not JSON ({exc})") from exc
            if not isinstance(page, dict):
                raise _ProtocolError("LIST response is not a JSON object")
            meta = object_at(page, "metadata")
            page_items = page.get("items") or []
            if not isinstance(page_items, list):
                raise _ProtocolError("LIST response `items` is not a list")
            if self._list_filter is not None:
                kind, keep = self.info.kind, self._list_filter
                page_items = [item for item in page_items if keep(kind, item)]
            del page, body  # only the kept items outlive the page
            items.extend(page_items)
            resource_version = meta.get("resourceVersion") or resource_version
            token = meta.get("continue") or None
            if not token:
                break
        if not resource_version:
            raise _ProtocolError("LIST response has no metadata.resourceVersion to watch from")

        objects: list[KubeObject] = []
        skipped = 0
        for item in items:
            if _object_name(item) is None:
                skipped += 1
                continue
            # Lists of built-in kinds leave apiVersion/kind out of each item; consumers want them.
            item.setdefault("apiVersion", self._api_version)
            item.setdefault("kind", self.info.kind)
            objects.append(item)
        if skipped:
            log.warning("inventory: %s: skipped %d list item(s) without metadata.name", self.info.kind, skipped)

        self._healthy()
        self._backoff.reset()
        if self._crd_absent:
            log.info("inventory: %s: served now (%d object(s))", self.info.kind, len(objects))
            self._crd_absent = False
        self._sink.replace_all(self.info.kind, objects)
        self.resource_version = str(resource_version)
        self._events_since_list = 0
        self.status.lists += 1
        if not self.status.synced:
            log.info(
                "inventory: %s: listed %d object(s) at resourceVersion %s; watching",
                self.info.kind,
                len(objects),
                resource_version,
            )
        self._synced()
        return True

    def _mark_crd_absent(self, message: str) -> None:
        # replace_all([]) only on the transition: a re-check that finds it still absent changes nothing.
        if not self._crd_absent or not self.status.synced:
            log.warning(
                "inventory: %s: %s (%s: %s); treating it as empty, re-checking every %g s",
                self.info.kind,
                self.info.absent,
                _resource_path(self.info),
                message,
                self._t.crd_recheck_s,
            )
            self._sink.replace_all(self.info.kind, [])
            self._crd_absent = True
        self.resource_version = None
        self._backoff.reset()
        self._synced()

    def _synced(self) -> None:
        if not self.status.synced:
            self.status.synced = True
            self._on_synced(self.info.kind)

    # -- WATCH ---------------------------------------------------------------------------------

    async def _watch(self) -> None:
        """One watch request from the current resourceVersion; returns when the server ends it."""
        assert self._call is not None
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self._t.connect_timeout_s,
            sock_connect=self._t.connect_timeout_s,
            sock_read=self._t.watch_timeout_s + self._t.watch_read_grace_s,
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        events = 0
        resp: aiohttp.ClientResponse = await self._call(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._t.watch_timeout_s,
            _preload_content=False,
            _request_timeout=timeout,
            **self._selector,
        )
        try:
            if resp.status != 200:
                raise await self._error_from(resp)
            self._healthy()
            self.status.watches += 1
            self.status.state = "watching"
            while True:
                line = await resp.content.readline()
                if not line:
                    break  # the server ended the stream: its timeout, or a restart
                if line.isspace():
                    continue
                self._handle_line(line)
                events += 1
                # An event proves the connection works: the next failure starts a fresh backoff.
                self._backoff.reset()
        finally:
            resp.close()
        if events == 0 and loop.time() - started < self._t.min_watch_s:
            raise _ShortWatch(f"watch from resourceVersion {self.resource_version} ended at once without events")
        self._backoff.reset()

    def _handle_line(self, line: bytes) -> None:
        kind = self.info.kind
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            log.warning("inventory: %s: skipped a watch line that is not JSON: %.200r", kind, line)
            return
        if not isinstance(event, dict):
            log.warning("inventory: %s: skipped a watch event that is not an object: %.200r", kind, event)
            return
        etype = event.get("type")
        obj = event.get("object")
        if etype is None and event.get("kind") == "Status":
            etype, obj = "ERROR", event  # a bare Status on the stream: treat it as the ERROR event it means
        if etype == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            code = status.get("code")
            message = ": ".join(str(status[k]) for k in ("reason", "message") if status.get(k))
            raise _error_for_status(code if isinstance(code, int) else 0, message or "ERROR event")
        rv = _object_rv(obj)
        if etype == "BOOKMARK":
            # Only progress: the server says "nothing of yours changed up to here".
            if rv is None:
                log.warning("inventory: %s: skipped a BOOKMARK without metadata.resourceVersion", kind)
            else:
                self.resource_version = rv
                self._events_since_list += 1
            return
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("inventory: %s: skipped a watch event of unknown type %.50r", kind, etype)
            return
        if _object_name(obj) is None:
            log.warning(
                "inventory: %s: skipped a watch event (%s) whose object has no metadata.name: %.200r", kind, etype, obj
            )
            if rv is not None:
                self.resource_version = rv  # consumed; re-reading it after a reconnect would not help
            return
        assert isinstance(obj, dict)
        obj.setdefault("apiVersion", self._api_version)
        obj.setdefault("kind", kind)
        try:
            if etype == "DELETED":
                self._sink.delete(kind, obj)
            else:
                self._sink.upsert(kind, obj)
        except Exception:  # a sink bug must not stop the watch; the next relist repairs the store
            log.exception("inventory: %s: the sink failed on a %s event", kind, etype)
        if rv is not None:
            self.resource_version = rv
        self._events_since_list += 1


# -- the source ----------------------------------------------------------------------------------


class KubeInventorySource:
    """List+watch every kind in `kinds` into `sink` until cancelled (see the module docstring).

    `connection` is a kubernetes-asyncio `Configuration` (e.g. from `load_kube_config`) or a
    zero-argument factory returning a fresh `ApiClient`. Each kind gets its own ApiClient, so its
    long-lived watch has its own HTTP connection and one broken connection affects one kind.
    `list_filter` and `on_restart`: see the module docstring (points 8 and after).
    """

    def __init__(
        self,
        sink: InventorySink,
        connection: k8s.Configuration | Callable[[], k8s.ApiClient],
        *,
        kinds: Iterable[KindInfo] = KINDS,
        timings: KubeSourceTimings = KubeSourceTimings(),
        rng: random.Random | None = None,
        list_filter: ListFilter | None = None,
        on_restart: RestartHook = _no_restart_hook,
    ) -> None:
        self._factory = client_factory(connection)
        self.kinds: tuple[KindInfo, ...] = tuple(kinds)
        if not self.kinds:
            raise ValueError("KubeInventorySource needs at least one kind")
        for info in self.kinds:
            _check_listable(info)
        self.timings = timings
        self._sink = sink
        self._rng = rng or random.Random()
        self._problems = _ProblemLog(timings.backoff_max_s)
        self._ready = asyncio.Event()
        self._synced: set[str] = set()
        self._watchers = {
            k.kind: _KindWatcher(
                k, sink, self._factory, timings, self._problems, self._on_synced, self._rng, list_filter, on_restart
            )
            for k in self.kinds
        }

    @property
    def ready(self) -> bool:
        """True once every kind has been listed (or found absent) at least once; stays true."""
        return self._ready.is_set()

    async def wait_ready(self) -> None:
        """Return once `ready` is true."""
        await self._ready.wait()

    def status(self) -> dict[str, KindStatus]:
        """Per-kind state (live objects: read, don't keep)."""
        return {kind: w.status for kind, w in self._watchers.items()}

    def resource_version(self, kind: str) -> str | None:
        """The resourceVersion the kind's next watch starts from (None: it will list first)."""
        return self._watchers[kind].resource_version

    def _on_synced(self, kind: str) -> None:
        self._synced.add(kind)
        if len(self._synced) == len(self._watchers) and not self._ready.is_set():
            log.info("inventory: all %d kind(s) listed; ready", len(self._watchers))
            self._ready.set()

    async def run(self) -> None:
        """Run every kind's list+watch loop until cancelled."""
        tasks = [asyncio.create_task(w.run(), name=f"inventory-kube-{kind}") for kind, w in self._watchers.items()]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
