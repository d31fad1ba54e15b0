"""A Kubernetes API server on loopback for the writers' tests: every request answered by one
handler, the test given a real kubernetes_asyncio client (and its Configuration) to it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client as k8s

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def with_api(handler: Handler, test: Callable[[k8s.ApiClient, k8s.Configuration], Awaitable[None]]) -> None:
    """Run `test` against a server that answers every path and method with `handler`."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1")

    async def go() -> None:
        await server.start_server()
        try:
            connection = k8s.Configuration(host=str(server.make_url("")).rstrip("/"))
            async with k8s.ApiClient(connection) as client:
                await test(client, connection)
        finally:
            await server.close()

    asyncio.run(go())
