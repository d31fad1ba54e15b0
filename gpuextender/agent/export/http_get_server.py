"""A GET-only HTTP/1.1 server on asyncio streams, for the agent's /metrics, /healthz and /readyz.

Why not aiohttp: its import alone is ~10 MiB of the agent's RSS (bench/agent_imports.py), a
sixth of the whole process, for three fixed GET routes that Prometheus and the kubelet call. What
those clients need is small and is all here: origin-form GET/HEAD, keep-alive, Content-Length.

Every input is bounded, and a bad one closes only its own connection: the request head (the
request line and the headers) is at most `max_head_bytes` before its blank line (431 beyond),
it must arrive within `idle_timeout_s` of the previous answer or of the connect (otherwise the
connection is closed), at most `max_connections` are open (503 and close beyond), and an answer
not read within `write_timeout_s` is dropped. A request that carries a body is refused (400 and
close): this server never reads one, so it must not take the body's bytes for a next request.
Handlers are plain functions run on the event loop; one that raises answers 500 and the server
keeps serving."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus

log = logging.getLogger("gpu_agent.http")

TEXT = "text/plain; charset=utf-8"
DEFAULT_MAX_HEAD_BYTES = 8192  # aiohttp's and Go's net/http limits are of this order; a scrape sends < 300
DEFAULT_MAX_CONNECTIONS = 32  # Prometheus replicas, the kubelet's probes and a curl or two
DEFAULT_IDLE_TIMEOUT_S = 75.0  # as aiohttp's keep-alive: longer than any usual scrape interval
DEFAULT_WRITE_TIMEOUT_S = 10.0
REFUSAL_LOG_EVERY_S = 60.0  # a connection flood must not become a log flood
_HEAD_END = b"\r\n\r\n"
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = TEXT


Handler = Callable[[], Response]


def text(status: int, message: str) -> Response:
    return Response(status, message.encode())


class BadRequest(Exception):
    """The request cannot be answered normally: answer `status` with the message, then close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # without the query string
    keep_alive: bool


def parse_head(head: bytes) -> Request:
    """The request line and headers (without the blank line that ends them). Raises BadRequest."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise BadRequest(400, "malformed request line") from None
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(505 if version.startswith("HTTP/") else 400, f"unsupported protocol {version[:16]!r}")
    if not target.startswith("/"):
        raise BadRequest(400, "only origin-form request targets (a path) are served")
    if not method.isalpha() or not method.isupper():
        raise BadRequest(400, "malformed request method")
    close = False
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(400, "malformed header line")
        name, value = name.lower(), value.strip()
        # Every Content-Length is checked, not the last one: "5" then "0" must not slip a body by.
        if name == "transfer-encoding" or (name == "content-length" and value != "0"):
            raise BadRequest(400, "request bodies are not accepted")
        if name == "connection" and "close" in value.lower():
            close = True
    return Request(method, target.partition("?")[0], keep_alive=version == "HTTP/1.1" and not close)


def http_date(now: float) -> str:
    """RFC 9110 IMF-fixdate, independent of the locale (strftime's %a and %b are not)."""
    t = time.gmtime(now)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    )


def encode_response(response: Response, *, head_only: bool, keep_alive: bool, extra: tuple[str, ...] = ()) -> bytes:
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [
        f"HTTP/1.1 {response.status} {reason}",
        f"Date: {http_date(time.time())}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",  # HEAD too: what GET would send
        *extra,
        *([] if keep_alive else ["Connection: close"]),
    ]
    head = "\r\n".join(lines) + "\r\n\r\n"
    return head.encode("latin-1") + (b"" if head_only else response.body)


class GetServer:
    """Serves `routes` (exact path -> handler) on one TCP address."""

    def __init__(
        self,
        routes: Mapping[str, Handler],
        *,
        max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        write_timeout_s: float = DEFAULT_WRITE_TIMEOUT_S,
    ) -> None:
        self._routes = dict(routes)
        self._max_head = max_head_bytes
        self._max_connections = max_connections
        self._idle_timeout_s = idle_timeout_s
        self._write_timeout_s = write_timeout_s
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._refused = 0  # connections refused since the last warning
        self._refusal_logged = -REFUSAL_LOG_EVERY_S

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, host: str, port: int) -> None:
        # The reader's limit is the head bound (readuntil refuses past it) and caps its buffer.
        self._server = await asyncio.start_server(self._connection, host, port, limit=self._max_head)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for writer in list(self._open):
            writer.close()  # the handler's pending read ends; it then forgets the writer

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if len(self._open) >= self._max_connections:
                self._log_refusal(writer)
                await self._send(writer, text(503, "too many connections\n"), head_only=False, keep_alive=False)
                return
            self._open.add(writer)
            while await self._one_request(reader, writer):
                pass
        except ConnectionError:
            pass  # the peer left: nothing to answer
        except TimeoutError:
            # Silent past the idle timeout, or not reading its answer: drop what is still buffered
            # for it (close() would keep it until the peer reads).
            writer.transport.abort()
        finally:
            self._open.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _log_refusal(self, writer: asyncio.StreamWriter) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._refusal_logged >= REFUSAL_LOG_EVERY_S:
            log.warning(
                "refused %d connection(s) with %d already open (the limit), the latest from %s",
                self._refused,
                len(self._open),
                _peer(writer),
            )
            self._refused, self._refusal_logged = 0, now

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answers one request; whether the connection stays open for another."""
        try:
            head = await asyncio.wait_for(reader.readuntil(_HEAD_END), self._idle_timeout_s)
        except asyncio.IncompleteReadError:
            return False  # closed between requests (or mid-head): nobody to answer
        except asyncio.LimitOverrunError:
            await self._send(
                writer, text(431, f"request head over {self._max_head} bytes\n"), head_only=False, keep_alive=False
            )
            return False
        try:
            request = parse_head(head[: -len(_HEAD_END)])
        except BadRequest as exc:
            await self._send(writer, text(exc.status, f"{exc}\n"), head_only=False, keep_alive=False)
            return False
        head_only = request.method == "HEAD"
        extra: tuple[str, ...] = ()
        handler = self._routes.get(request.path)
        if request.method not in ("GET", "HEAD"):
            response, extra = text(405, f"method {request.method[:16]} not allowed\n"), ("Allow: GET, HEAD",)
        elif handler is None:
            response = text(404, f"not found; served: {', '.join(sorted(self._routes))}\n")
        else:
            try:
                response = handler()
            except Exception:
                log.exception("handler for %s failed", request.path)
                response = text(500, "internal error (logged by the agent)\n")
        await self._send(writer, response, head_only=head_only, keep_alive=request.keep_alive, extra=extra)
        return request.keep_alive

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        response: Response,
        *,
        head_only: bool,
        keep_alive: bool,
        extra: tuple[str, ...] = (),
    ) -> None:
        writer.write(encode_response(response, head_only=head_only, keep_alive=keep_alive, extra=extra))
        await asyncio.wait_for(writer.drain(), self._write_timeout_s)


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"
