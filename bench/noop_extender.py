"""A do-nothing kube-scheduler extender in Python (aiohttp), for bench/bench_scheduler.py.

It is the floor a Python extender pays per scheduling cycle: aiohttp's HTTP exchange plus
decoding the scheduler's ExtenderArgs and encoding an answer. orjson is used because the
product uses it (the fastest a Python extender in this project could be). /filter passes
every candidate (`{"NodeNames": [...], "FailedNodes": {}, "Error": ""}`); /prioritize
gives every candidate the same score. nodeCacheCapable: true only (the shipped setting).
/stats counts calls so the bench can prove the scheduler called it. Not part of the product.

Run: `.venv/bin/python bench/noop_extender.py --addr 127.0.0.1:PORT`
"""

from __future__ import annotations

import argparse

import orjson
from aiohttp import web

CALLS = web.AppKey("calls", dict[str, int])


async def _names(request: web.Request) -> list[str] | web.Response:
    args = orjson.loads(await request.read())
    names = args.get("NodeNames") if isinstance(args, dict) else None
    if not isinstance(names, list):
        return web.Response(status=400, text="no NodeNames: configure nodeCacheCapable: true\n")
    return names


async def filter_(request: web.Request) -> web.Response:
    names = await _names(request)
    if isinstance(names, web.Response):
        return names
    request.app[CALLS]["filter"] += 1
    body = orjson.dumps({"NodeNames": names, "FailedNodes": {}, "Error": ""})
    return web.Response(body=body, content_type="application/json")


async def prioritize(request: web.Request) -> web.Response:
    names = await _names(request)
    if isinstance(names, web.Response):
        return names
    request.app[CALLS]["prioritize"] += 1
    body = orjson.dumps([{"Host": name, "Score": 1} for name in names])
    return web.Response(body=body, content_type="application/json")


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def stats(request: web.Request) -> web.Response:
    return web.Response(body=orjson.dumps(request.app[CALLS]), content_type="application/json")


def make_app() -> web.Application:
    app = web.Application()
    app[CALLS] = {"filter": 0, "prioritize": 0}
    app.router.add_post("/filter", filter_)
    app.router.add_post("/prioritize", prioritize)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/stats", stats)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="do-nothing kube-scheduler extender (bench only)")
    parser.add_argument("--addr", default="127.0.0.1:8891", help="HOST:PORT to listen on")
    args = parser.parse_args()
    host, _, port = args.addr.rpartition(":")
    web.run_app(make_app(), host=host, port=int(port), access_log=None, print=None)


if __name__ == "__main__":
    main()
