"""The agent's GET-only HTTP server (gpuextender.agent.export.http_get_server) on loopback: real
clients (urllib, aiohttp's keep-alive client) and raw sockets for what a client would not send.
Every bound is tried at its value and one past it."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import aiohttp
import pytest

from gpuextender.agent.export.http_get_server import (
    BadRequest,
    GetServer,
    Handler,
    Request,
    Response,
    encode_response,
    http_date,
    parse_head,
    text,
)

HEAD_LIMIT = 256  # small, so the bound is cheap to reach


def ok() -> Response:
    return text(200, "ok\n")


def boom() -> Response:
    raise RuntimeError("handler bug")


ROUTES: dict[str, Handler] = {"/ok": ok, "/boom": boom}


@asynccontextmanager
async def serving(routes: Mapping[str, Handler] = ROUTES, **kwargs: float) -> AsyncIterator[GetServer]:
    server = GetServer(routes, max_head_bytes=HEAD_LIMIT, **kwargs)  # type: ignore[arg-type]
    await server.start("127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.close()


async def exchange(server: GetServer, raw: bytes, *, read_timeout: float = 5.0) -> bytes:
    """Sends `raw`, returns every byte the server sends until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(raw)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), read_timeout)
    finally:
        writer.close()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def statuses(answers: bytes) -> list[int]:
    """The status of each answer in a byte stream of several (bodies here never hold "HTTP/1.1 ")."""
    return [int(part.split(b" ", 1)[0]) for part in answers.split(b"HTTP/1.1 ")[1:]]


def get_request(path: str = "/ok", *headers: str, version: str = "HTTP/1.1") -> bytes:
    return "\r\n".join([f"GET {path} {version}", "Host: x", *headers, "", ""]).encode()


# -- the parser and encoder -------------------------------------------------------------------


def test_parse_head_reads_the_method_path_and_keep_alive() -> None:
    assert parse_head(b"GET /metrics?name[]=x HTTP/1.1\r\nHost: a") == Request("GET", "/metrics", keep_alive=True)
    assert parse_head(b"HEAD /ok HTTP/1.1\r\nConnection: Close") == Request("HEAD", "/ok", keep_alive=False)
    assert parse_head(b"GET /ok HTTP/1.0\r\nConnection: keep-alive") == Request("GET", "/ok", keep_alive=False)
    assert parse_head(b"GET /ok HTTP/1.1\r\nContent-Length: 0") == Request("GET", "/ok", keep_alive=True)


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET /ok", 400),
        (b"GET  /ok HTTP/1.1", 400),
        (b"get /ok HTTP/1.1", 400),
        (b"GET http://host/ok HTTP/1.1", 400),
        (b"GET /ok HTTP/2.0", 505),
        (b"GET /ok SPDY/3", 400),
        (b"GET /ok HTTP/1.1\r\nno colon", 400),
        (b"GET /ok HTTP/1.1\r\n folded: header", 400),
        (b"GET /ok HTTP/1.1\r\n: empty name", 400),
        (b"GET /ok HTTP/1.1\r\nContent-Length: 1", 400),
        (b"GET /ok HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 0", 400),  # not only the last one counts
        (b"GET /ok HTTP/1.1\r\nTransfer-Encoding: chunked", 400),
    ],
)
def test_parse_head_refuses(head: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_head(head)
    assert caught.value.status == status


def test_http_date_is_imf_fixdate() -> None:
    assert http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"
    assert http_date(1_795_470_000) == "Mon, 23 Nov 2026 21:40:00 GMT"


def test_head_answers_carry_the_length_but_no_body() -> None:
    raw = encode_response(text(200, "four"), head_only=True, keep_alive=True)
    assert raw.endswith(b"Content-Length: 4\r\n\r\n") and b"Connection" not in raw
    raw = encode_response(text(599, "x"), head_only=False, keep_alive=False)
    assert raw.startswith(b"HTTP/1.1 599 Unknown\r\n") and raw.endswith(b"Connection: close\r\n\r\nx")


# -- the server with real clients -------------------------------------------------------------


def test_real_clients_get_answers_over_one_keep_alive_connection() -> None:
    async def run() -> None:
        async with serving() as server:
            base = f"http://127.0.0.1:{server.port}"
            connector = aiohttp.TCPConnector(limit=1)
            async with aiohttp.ClientSession(connector=connector) as session:
                for _ in range(3):
                    async with session.get(f"{base}/ok") as r:
                        assert (r.status, await r.text(), r.headers["Content-Type"]) == (
                            200,
                            "ok\n",
                            "text/plain; charset=utf-8",
                        )
                async with session.head(f"{base}/ok") as r:
                    assert r.status == 200 and r.headers["Content-Length"] == "3" and await r.read() == b""
                async with session.get(f"{base}/missing") as r:
                    assert r.status == 404 and "served: /boom, /ok" in await r.text()
                # Every request went over one connection, and it is still open (kept alive).
                assert len(server._open) == 1

            def urlopen() -> tuple[int, bytes]:
                with urllib.request.urlopen(f"{base}/ok?x=1", timeout=5) as response:
                    return response.status, response.read()

            assert await asyncio.to_thread(urlopen) == (200, b"ok\n")

    asyncio.run(run())


def test_pipelined_requests_are_answered_in_order() -> None:
    async def run() -> None:
        async with serving() as server:
            answer = await exchange(
                server, get_request("/ok") + get_request("/nope") + get_request("/ok", "Connection: close")
            )
            assert statuses(answer) == [200, 404, 200]

    asyncio.run(run())


def test_http_1_0_and_connection_close_end_the_connection_after_the_answer() -> None:
    async def run() -> None:
        async with serving() as server:
            for raw in (get_request(version="HTTP/1.0"), get_request("/ok", "Connection: close")):
                answer = await exchange(server, raw)  # returns only because the server closed
                assert status_of(answer) == 200 and answer.endswith(b"\r\n\r\nok\n")
                assert b"Connection: close" in answer

    asyncio.run(run())


def test_methods_other_than_get_and_head_are_refused_with_allow() -> None:
    async def run() -> None:
        async with serving() as server:
            answer = await exchange(server, b"DELETE /ok HTTP/1.1\r\nConnection: close\r\n\r\n")
            assert status_of(answer) == 405 and b"Allow: GET, HEAD\r\n" in answer

    asyncio.run(run())


def test_a_request_with_a_body_is_refused_and_the_body_never_read_as_a_request() -> None:
    async def run() -> None:
        async with serving() as server:
            smuggled = get_request("/ok")
            raw = b"GET /ok HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(smuggled) + smuggled
            answer = await exchange(server, raw)
            assert status_of(answer) == 400 and answer.count(b"HTTP/1.1 ") == 1

    asyncio.run(run())


def test_the_head_bound_is_exact() -> None:
    async def run() -> None:
        async with serving() as server:
            start = b"GET /ok HTTP/1.1\r\nConnection: close\r\nX: "
            at_limit = start + b"a" * (HEAD_LIMIT - len(start))
            assert len(at_limit) == HEAD_LIMIT
            assert status_of(await exchange(server, at_limit + b"\r\n\r\n")) == 200
            answer = await exchange(server, at_limit + b"a\r\n\r\n")
            assert status_of(answer) == 431 and b"over 256 bytes" in answer
            # Sent without an end, the excess alone is refused: the server does not wait for more.
            assert status_of(await exchange(server, at_limit + b"a" * 8)) == 431

    asyncio.run(run())


def test_a_handler_that_raises_answers_500_and_the_server_keeps_serving(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        async with serving() as server:
            answer = await exchange(server, get_request("/boom") + get_request("/ok", "Connection: close"))
            assert statuses(answer) == [500, 200]

    asyncio.run(run())
    assert "handler for /boom failed" in caplog.text and "handler bug" in caplog.text


def test_an_idle_or_half_sent_connection_is_closed_after_the_idle_timeout() -> None:
    async def run() -> None:
        async with serving(idle_timeout_s=0.3) as server:
            assert await exchange(server, b"", read_timeout=5) == b""  # silent: closed, no answer
            assert await exchange(server, b"GET /ok HTTP/1.1\r\nHost", read_timeout=5) == b""  # slow head
            # Between keep-alive requests the same clock runs: answered once, then closed.
            answer = await exchange(server, get_request("/ok"), read_timeout=5)
            assert status_of(answer) == 200 and answer.count(b"HTTP/1.1 ") == 1

    asyncio.run(run())


def test_connections_past_the_limit_get_503_and_those_at_it_are_served(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        async with serving(max_connections=2) as server:
            held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
            for reader, writer in held:  # both are served: the limit counts these two
                writer.write(get_request("/ok"))
                assert status_of(await reader.readuntil(b"ok\n")) == 200
            for _ in range(3):
                answer = await exchange(server, get_request("/ok"))
                assert status_of(answer) == 503 and b"too many connections" in answer
            held[0][1].close()
            await held[0][1].wait_closed()
            await asyncio.sleep(0.1)  # the server sees the close
            assert status_of(await exchange(server, get_request("/ok", "Connection: close"))) == 200
            held[1][1].close()

    asyncio.run(run())
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and refusals[0].startswith("refused 1 connection(s) with 2 already open")


def test_an_answer_nobody_reads_is_dropped_after_the_write_timeout() -> None:
    big = Response(200, b"x" * (16 * 1024 * 1024))

    async def run() -> None:
        async with serving({"/big": lambda: big}, write_timeout_s=0.3) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(get_request("/big"))
            await asyncio.sleep(0.2)
            assert len(server._open) == 1
            for _ in range(50):  # the server gives up on the connection and forgets it
                if not server._open:
                    break
                await asyncio.sleep(0.1)
            assert not server._open
            received = 0
            try:  # what the kernel's buffers held, then the end: the rest was dropped, not kept
                while chunk := await asyncio.wait_for(reader.read(1 << 20), 5):
                    received += len(chunk)
            except ConnectionResetError:
                pass
            assert received < len(big.body)
            writer.close()

    asyncio.run(run())


def test_close_ends_open_keep_alive_connections() -> None:
    async def run() -> None:
        server = GetServer(ROUTES)
        await server.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(get_request("/ok"))
        await reader.readuntil(b"ok\n")
        await server.close()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server, not by a timeout
        writer.close()

    asyncio.run(run())
