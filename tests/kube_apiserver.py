"""A small in-process Kubernetes API server for tests: enough list+watch for kubernetes-asyncio.

Serves `GET /api/v1/<plural>` and `GET /apis/<group>/<version>/<plural>` for the kinds it is
given (default: `extender.model.kube_objects.KINDS` and `POD`), on 127.0.0.1 with a random port:

- LIST: `{"kind": "<Kind>List", "apiVersion": ..., "metadata": {"resourceVersion": "N"}, "items": [...]}`,
  paged with `limit`/`continue` like the real one (pages of one snapshot). As on a real server,
  items of built-in kinds carry no apiVersion/kind; custom resources keep theirs.
- WATCH (`?watch=true&resourceVersion=N&allowWatchBookmarks=true&timeoutSeconds=T`): a chunked
  stream of JSON lines `{"type": ..., "object": ...}`. Events after N are replayed from the
  history, then live events follow; the stream ends after `timeoutSeconds`.
- One global resourceVersion counter; each change gets the next value.
- `fieldSelector` (`a.b=v`, `a.b==v`, `a.b!=v`, comma-joined; a missing field reads as "") on
  LIST and WATCH, like the real one on a watch: a MODIFIED object that starts matching is ADDED,
  one that stops matching is DELETED (with its last matching state, as kube-apiserver's watch
  cache sends it), one that never matches is not sent.

What a test can do: `add` / `modify` / `delete` objects (pushed to open watches; `silent=True`
changes state without any event, like changes lost to history compaction), `bookmark()`,
`send_error_event()`, `expire_history()` so that a watch from an older resourceVersion gets 410
(as an HTTP status or as an ERROR event: `gone_as`), `close_watches()` (gracefully: end of stream;
or abruptly: connection cut), `uninstall()` / `install()` a kind (404 while uninstalled),
`fail_with(503)`, `expire_continue_tokens`, `go_down()` / `come_up()` (port closed, then reopened on the same port), and
read `list_count(kind)` and `watch_requests` to see what the client did.

TokenReview (`POST /apis/authentication.k8s.io/v1/tokenreviews`): `add_token(token, username,
extra=..., audiences=...)` fills the table the review answers from; an unknown token, or one whose
audiences do not meet `spec.audiences`, is `authenticated: false` with an error, as on a real server.
`token_reviews` records each review (token and the audiences asked for). `fail_with` applies too.

Runs in the test's event loop: `async with KubeApiServer() as server: ...`.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from aiohttp import web
from kubernetes_asyncio import client as k8s

from gpuextender.extender.model.kube_objects import KINDS, POD, KindInfo, KubeObject

_CLOSE = "close"
_ABORT = "abort"


@dataclass(frozen=True, slots=True)
class WatchRequest:
    kind: str
    resource_version: str | None
    allow_bookmarks: bool
    timeout_seconds: int | None
    field_selector: str | None = None
    label_selector: str | None = None  # recorded as sent (not applied)


@dataclass(frozen=True, slots=True)
class ListRequest:
    kind: str
    limit: int | None
    continue_token: str | None
    field_selector: str | None = None
    label_selector: str | None = None  # recorded as sent (not applied)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1", "t")  # Go's ParseBool; the client sends "True"


@dataclass(frozen=True, slots=True)
class TokenEntry:
    username: str
    extra: dict[str, list[str]]
    audiences: tuple[str, ...]
    authenticated: bool = True


@dataclass(frozen=True, slots=True)
class TokenReviewRequest:
    token: str
    audiences: tuple[str, ...]


def _field(obj: KubeObject, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _matches(obj: KubeObject, selector: str | None) -> bool:
    """Whether `obj` is selected by a fieldSelector (None or "": everything)."""
    for term in (selector or "").split(","):
        if not term:
            continue
        if "!=" in term:
            path, _, want = term.partition("!=")
            if _field(obj, path) == want:
                return False
        else:
            path, _, want = term.replace("==", "=").partition("=")
            if _field(obj, path) != want:
                return False
    return True


def _selected(event: dict[str, Any], old: KubeObject | None, selector: str | None) -> dict[str, Any] | None:
    """The event as a watch with `selector` sees it (None: not sent), as the real API server does."""
    if not selector or event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
        return event
    now = _matches(event["object"], selector)
    before = old is not None and _matches(old, selector)
    if event["type"] == "MODIFIED":
        if now and not before:
            return {**event, "type": "ADDED"}
        if before and not now:
            return {"type": "DELETED", "object": old}  # the real one sends the last state that matched
    return event if now or (event["type"] == "MODIFIED" and before) else None


class _Watch:
    def __init__(self, kind: str, field_selector: str | None = None) -> None:
        self.kind = kind
        self.field_selector = field_selector
        self.queue: asyncio.Queue[dict[str, Any] | str] = asyncio.Queue()

    def offer(self, event: dict[str, Any], old: KubeObject | None) -> None:
        seen = _selected(event, old, self.field_selector)
        if seen is not None:
            self.queue.put_nowait(seen)


class KubeApiServer:
    def __init__(self, kinds: Iterable[KindInfo] = (*KINDS, POD), *, installed: Iterable[str] | None = None) -> None:
        self.kinds = {k.kind: k for k in kinds}
        self._by_path: dict[str, KindInfo] = {}
        for k in self.kinds.values():
            path = f"/api/{k.version}/{k.plural}" if not k.group else f"/apis/{k.group}/{k.version}/{k.plural}"
            self._by_path[path] = k
        self.installed: set[str] = set(self.kinds if installed is None else installed)
        self.forbidden: set[str] = set()  # kinds whose requests get 403 (RBAC does not allow them)
        self.objects: dict[str, dict[str, KubeObject]] = {k: {} for k in self.kinds}
        self.rv = 1
        self._compacted = 0  # a watch from a resourceVersion below this is 410 Gone
        # (rv, kind, event, the object before a MODIFIED: for field selectors)
        self._history: list[tuple[int, str, dict[str, Any], KubeObject | None]] = []
        self._watches: set[_Watch] = set()
        self._snapshots: dict[str, tuple[int, list[KubeObject]]] = {}
        self._snapshot_ids = itertools.count(1)
        self.gone_as: Literal["http", "event"] = "http"
        self.fail_status: int | None = None
        self.expire_continue_tokens = 0  # the next N continue requests get 410 Expired
        self.down = False
        self.list_requests: list[ListRequest] = []
        self.watch_requests: list[WatchRequest] = []
        self.tokens: dict[str, TokenEntry] = {}
        self.token_reviews: list[TokenReviewRequest] = []
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def configuration(self) -> k8s.Configuration:
        """A kubernetes-asyncio client configuration pointing here."""
        configuration = k8s.Configuration(host=self.url)
        configuration.api_key = {"BearerToken": "Bearer test-token"}
        return configuration

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig file pointing here, for a program started with --kubeconfig."""
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "test",
                    "clusters": [{"name": "test", "cluster": {"server": self.url}}],
                    "users": [{"name": "test", "user": {"token": "test-token"}}],
                    "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
                }
            )
        )
        return path

    async def start(self) -> KubeApiServer:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, handle_signals=False)
        await self._runner.setup()
        await self._listen()
        return self

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        server = self._site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        self._end_watches(_ABORT)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> KubeApiServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def go_down(self) -> None:
        """Stop listening (connection refused) and cut every open connection."""
        self.down = True
        self._end_watches(_ABORT)
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def come_up(self) -> None:
        """Listen again on the same port."""
        self.down = False
        await self._listen()

    # -- test controls ---------------------------------------------------------------------------

    def _bump(self) -> int:
        self.rv += 1
        return self.rv

    def _publish(self, kind: str, etype: str, obj: KubeObject, rv: int, old: KubeObject | None = None) -> None:
        event = {"type": etype, "object": copy.deepcopy(obj)}
        self._history.append((rv, kind, event, old))
        for watch in list(self._watches):
            if watch.kind == kind:
                watch.offer(event, old)

    def _key(self, kind: str, obj: KubeObject) -> str:
        meta = obj["metadata"]
        return f"{meta['namespace']}/{meta['name']}" if self.kinds[kind].namespaced else meta["name"]

    def _complete(self, kind: str, obj: KubeObject, rv: int) -> KubeObject:
        info = self.kinds[kind]
        obj = copy.deepcopy(obj)
        obj["apiVersion"] = f"{info.group}/{info.version}" if info.group else info.version
        obj["kind"] = info.kind
        meta = obj.setdefault("metadata", {})
        if info.namespaced:
            meta.setdefault("namespace", "default")
        meta["resourceVersion"] = str(rv)
        return obj

    def add(self, kind: str, obj: KubeObject, *, silent: bool = False) -> KubeObject:
        """Create or replace (ADDED for a new key, MODIFIED for an existing one)."""
        rv = self._bump()
        stored = self._complete(kind, obj, rv)
        key = self._key(kind, stored)
        old = self.objects[kind].get(key)
        etype = "MODIFIED" if old is not None else "ADDED"
        self.objects[kind][key] = stored
        if not silent:
            self._publish(kind, etype, stored, rv, old)
        return copy.deepcopy(stored)

    modify = add

    def delete(self, kind: str, name: str, namespace: str | None = None, *, silent: bool = False) -> None:
        key = f"{namespace or 'default'}/{name}" if self.kinds[kind].namespaced else name
        stored = self.objects[kind].pop(key)
        rv = self._bump()
        gone = copy.deepcopy(stored)
        gone["metadata"]["resourceVersion"] = str(rv)
        if not silent:
            self._publish(kind, "DELETED", gone, rv)

    def bookmark(self, kind: str | None = None) -> str:
        """Send a BOOKMARK at a new resourceVersion (as if other resources changed) to open watches."""
        rv = str(self._bump())
        for watch in list(self._watches):
            if kind is None or watch.kind == kind:
                info = self.kinds[watch.kind]
                obj = {
                    "apiVersion": f"{info.group}/{info.version}" if info.group else info.version,
                    "kind": info.kind,
                    "metadata": {"resourceVersion": rv},
                }
                watch.queue.put_nowait({"type": "BOOKMARK", "object": obj})
        return rv

    def send_raw(self, kind: str, line: Any) -> None:
        """Put anything on the open watches of `kind` (a dict/list/str is JSON-encoded; bytes as is)."""
        for watch in list(self._watches):
            if watch.kind == kind:
                watch.queue.put_nowait({"raw": line})

    def send_error_event(self, kind: str | None = None, code: int = 410, reason: str = "Expired") -> None:
        """An ERROR event with a Status object; the server then ends the stream, as the real one does."""
        status = _status(code, reason, f"too old resource version (test, code {code})")
        for watch in list(self._watches):
            if kind is None or watch.kind == kind:
                watch.queue.put_nowait({"type": "ERROR", "object": status})
                watch.queue.put_nowait(_CLOSE)

    def expire_history(self) -> None:
        """Compact: a watch from any resourceVersion before now gets 410 Gone (see `gone_as`)."""
        self._compacted = self._bump()
        self._history.clear()
        self._snapshots.clear()

    def close_watches(self, *, abrupt: bool = False) -> None:
        """End every open watch: gracefully (like its timeout) or by cutting the connection."""
        self._end_watches(_ABORT if abrupt else _CLOSE)

    def _end_watches(self, how: str) -> None:
        for watch in list(self._watches):
            watch.queue.put_nowait(how)

    def uninstall(self, kind: str) -> None:
        """The kind's CRD goes away: its objects too, open watches end, requests get 404."""
        self.installed.discard(kind)
        self.objects[kind].clear()
        for watch in list(self._watches):
            if watch.kind == kind:
                watch.queue.put_nowait(_CLOSE)

    def install(self, kind: str, objects: Iterable[KubeObject] = ()) -> None:
        self.installed.add(kind)
        for obj in objects:
            self.add(kind, obj)

    def fail_with(self, status: int | None) -> None:
        """Answer every request with this HTTP status (None: back to normal)."""
        self.fail_status = status
        if status is not None:
            self._end_watches(_ABORT)

    def add_token(
        self,
        token: str,
        username: str,
        *,
        extra: dict[str, list[str]] | None = None,
        audiences: Iterable[str] = ("gpu-extender",),
        authenticated: bool = True,
    ) -> None:
        """What a TokenReview of `token` answers (`authenticated=False`: a revoked/expired token)."""
        self.tokens[token] = TokenEntry(username, dict(extra or {}), tuple(audiences), authenticated)

    def list_count(self, kind: str) -> int:
        """Complete LISTs of `kind` (first pages: a paged list counts once)."""
        return sum(1 for r in self.list_requests if r.kind == kind and not r.continue_token)

    def watches_of(self, kind: str) -> list[WatchRequest]:
        return [w for w in self.watch_requests if w.kind == kind]

    def open_watches(self, kind: str | None = None) -> int:
        return sum(1 for w in self._watches if kind is None or w.kind == kind)

    # -- HTTP ------------------------------------------------------------------------------------------

    def _refuse(self, request: web.Request) -> web.Response | None:
        """What every endpoint answers first: down, an injected failure, or no credentials."""
        if self.down:
            # A connection accepted just before going down: cut it like a dying server does.
            if request.transport is not None:
                request.transport.close()
            raise web.HTTPServiceUnavailable()
        if self.fail_status is not None:
            return web.json_response(
                _status(self.fail_status, "InternalError", "injected failure"), status=self.fail_status
            )
        if request.headers.get("Authorization") != "Bearer test-token":
            return web.json_response(_status(401, "Unauthorized", "Unauthorized"), status=401)
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        refused = self._refuse(request)
        if refused is not None:
            return refused
        info = self._by_path.get(request.path)
        if info is None:
            return web.Response(status=404, text="404 page not found\n")
        watch = _truthy(request.query.get("watch"))
        if watch:
            timeout = int(request.query["timeoutSeconds"]) if request.query.get("timeoutSeconds") else None
            self.watch_requests.append(
                WatchRequest(
                    info.kind,
                    request.query.get("resourceVersion"),
                    _truthy(request.query.get("allowWatchBookmarks")),
                    timeout,
                    request.query.get("fieldSelector"),
                    request.query.get("labelSelector"),
                )
            )
        else:
            limit = int(request.query["limit"]) if request.query.get("limit") else None
            self.list_requests.append(
                ListRequest(
                    info.kind,
                    limit,
                    request.query.get("continue") or None,
                    request.query.get("fieldSelector"),
                    request.query.get("labelSelector"),
                )
            )
        if info.kind not in self.installed:
            return web.json_response(
                _status(404, "NotFound", "the server could not find the requested resource"), status=404
            )
        if info.kind in self.forbidden:
            message = f"{info.plural}.{info.group} is forbidden: cannot list resource {info.plural!r}"
            return web.json_response(_status(403, "Forbidden", message), status=403)
        if watch:
            return await self._watch(request, info)
        return self._list(request, info)

    async def _token_review(self, request: web.Request) -> web.Response:
        refused = self._refuse(request)
        if refused is not None:
            return refused
        review = await request.json()
        spec = review.get("spec") or {}
        token = str(spec.get("token") or "")
        wanted = tuple(spec.get("audiences") or ())
        self.token_reviews.append(TokenReviewRequest(token, wanted))
        entry = self.tokens.get(token)
        status: dict[str, Any]
        if entry is None or not entry.authenticated:
            status = {"user": {}, "error": "[invalid bearer token, service account token has been invalidated]"}
        else:
            # Like the API server: the token must be valid for one of the audiences asked for (or
            # for the API server's own when none is asked), and the answer echoes the intersection.
            common = [a for a in entry.audiences if a in wanted] if wanted else list(entry.audiences)
            if not common:
                status = {
                    "user": {},
                    "error": f"[invalid bearer token, token audiences {list(entry.audiences)} "
                    f"is invalid for the target audiences {list(wanted)}]",
                }
            else:
                user: dict[str, Any] = {
                    "username": entry.username,
                    "uid": f"uid-{entry.username}",
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                }
                if entry.extra:
                    user["extra"] = entry.extra
                status = {"authenticated": True, "user": user, "audiences": common}
        body = {
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }
        return web.json_response(body, status=201)

    def _list(self, request: web.Request, info: KindInfo) -> web.Response:
        limit = int(request.query["limit"]) if request.query.get("limit") else None
        token = request.query.get("continue") or None
        if token:
            snapshot_id, _, offset_text = token.partition(":")
            snapshot = self._snapshots.get(snapshot_id)
            if self.expire_continue_tokens > 0:
                self.expire_continue_tokens -= 1
                snapshot = None
            if snapshot is None:
                return web.json_response(
                    _status(410, "Expired", "The provided continue parameter is too old"), status=410
                )
            rv, items = snapshot
            offset = int(offset_text)
        else:
            rv = self.rv
            selector = request.query.get("fieldSelector")
            items = [copy.deepcopy(o) for _, o in sorted(self.objects[info.kind].items()) if _matches(o, selector)]
            offset = 0
            snapshot_id = str(next(self._snapshot_ids))
            self._snapshots[snapshot_id] = (rv, items)
        end = len(items) if limit is None else min(len(items), offset + limit)
        page = items[offset:end]
        if not info.group:
            # Typed lists of built-in kinds omit each item's apiVersion/kind.
            page = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in page]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if end < len(items):
            meta["continue"] = f"{snapshot_id}:{end}"
        body = {
            "kind": f"{info.kind}List",
            "apiVersion": f"{info.group}/{info.version}" if info.group else info.version,
            "metadata": meta,
            "items": page,
        }
        return web.json_response(body)

    async def _watch(self, request: web.Request, info: KindInfo) -> web.StreamResponse:
        rv_text = request.query.get("resourceVersion")
        timeout = int(request.query["timeoutSeconds"]) if request.query.get("timeoutSeconds") else None
        since = int(rv_text) if rv_text and rv_text != "0" else None
        if since is not None and since < self._compacted and self.gone_as == "http":
            message = f"too old resource version: {since} ({self._compacted})"
            return web.json_response(_status(410, "Expired", message), status=410)

        # Register before the first await, so no event falls between the replay and the live feed.
        watch = _Watch(info.kind, request.query.get("fieldSelector"))
        if since is not None and since < self._compacted:
            message = f"too old resource version: {since} ({self._compacted})"
            watch.queue.put_nowait({"type": "ERROR", "object": _status(410, "Expired", message)})
            watch.queue.put_nowait(_CLOSE)
        elif since is None:  # "0" or none: synthetic ADDED for everything, then live
            for _, obj in sorted(self.objects[info.kind].items()):
                watch.offer({"type": "ADDED", "object": copy.deepcopy(obj)}, None)
        else:
            for rv, kind, event, old in self._history:
                if kind == info.kind and rv > since:
                    watch.offer(event, old)
        self._watches.add(watch)

        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            while True:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(watch.queue.get(), remaining)
                except TimeoutError:
                    break
                if item == _CLOSE:
                    break
                if item == _ABORT:
                    if request.transport is not None:
                        request.transport.close()
                    return response
                assert isinstance(item, dict)
                if "raw" in item:
                    raw = item["raw"]
                    data = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
                else:
                    data = json.dumps(item).encode()
                await response.write(data + b"\n")
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client went away
        finally:
            self._watches.discard(watch)
        return response
