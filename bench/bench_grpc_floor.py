"""Benchmark: the floor under the extender's ingest: a bare grpc.aio server that only acks (issue 13).

What it measures: the same bidirectional stream as StreamNodeReports (raw bytes, no protobuf,
no validation, no state: the handler counts and yields a 2-byte ack, or acks only the first
report), served by grpc.aio in its own process, with N agents (default 5,000) in a load process,
each sending a 2,000-byte report every --period seconds (the gated agent's heartbeat), phases
spread evenly. Per variant: the server's CPU per report and % of one core (utime+stime over a
--window after a settle period), and its VmRSS with all streams open.

Variants (side by side, one run):
  shared-8   all streams over 8 TCP connections (as bench_ingest's load worker);
  per-agent  one TCP connection per agent (each with its own subchannel, as real agents have);
  no-ack     per-agent, but the server acks only each stream's first report.

Whatever the extender does per report comes on top of these figures, so they say how much
of a goal the transport alone leaves (bench/RESULTS.md, the ingest section).

Run: `.venv/bin/python bench/bench_grpc_floor.py [--agents N] [--period S] [--window S]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import grpc

ACK = b"\x08\x01"
BODY = bytes(2000)
VARIANTS = {"shared-8": (8, True), "per-agent": (0, True), "no-ack": (0, False)}  # (connections, ack each)


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


async def serve(port: int, ack_each: bool, settle_s: float, window_s: float) -> dict[str, float]:
    count = 0
    streams = 0

    async def handler(requests: Any, context: Any) -> Any:
        nonlocal count, streams
        streams += 1
        first = True
        async for _ in requests:
            count += 1
            if ack_each or first:
                first = False
                yield ACK

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("floor", {"Stream": grpc.stream_stream_rpc_method_handler(handler)})]
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await asyncio.sleep(settle_s)
    c0, n0, t0 = _cpu_s(), count, time.monotonic()
    await asyncio.sleep(window_s)
    c1, n1, t1 = _cpu_s(), count, time.monotonic()
    reports = max(1, n1 - n0)
    return {
        "streams": streams,
        "reports_per_s": (n1 - n0) / (t1 - t0),
        "cpu_percent": 100 * (c1 - c0) / (t1 - t0),
        "us_per_report": 1e6 * (c1 - c0) / reports,
        "rss_mib": _rss_mib(),
    }


async def load(port: int, agents: int, connections: int, ack_each: bool, period_s: float) -> None:
    count = connections or agents
    options = [("grpc.use_local_subchannel_pool", 1)]  # a connection of its own per channel
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) for _ in range(count)]
    opening = asyncio.Semaphore(64)

    async def agent(i: int) -> None:
        async with opening:
            call = channels[i % count].stream_stream("/floor/Stream")()
            await call.write(BODY)
            await call.read()
        await asyncio.sleep(random.random() * period_s)
        while True:
            started = time.monotonic()
            await call.write(BODY)
            if ack_each:
                await call.read()
            await asyncio.sleep(max(0.0, period_s - (time.monotonic() - started)))

    await asyncio.gather(*(agent(i) for i in range(agents)))


async def serve_then_wait(args: argparse.Namespace) -> None:
    """Print the figures, then keep serving until killed (the load is stopped first: no errors)."""
    figures = await serve(args.port, VARIANTS[args.variant][1], args.settle, args.window)
    print(json.dumps(figures), flush=True)
    await asyncio.Event().wait()


@dataclass
class FloorRow:
    variant: str
    connections: int
    streams: int
    reports_per_s: float
    cpu_percent: float
    us_per_report: float
    rss_mib: float


def run_variant(name: str, args: argparse.Namespace) -> FloorRow:
    connections, _ack_each = VARIANTS[name]
    port = _free_port()
    common = [
        sys.executable,
        __file__,
        "--port",
        str(port),
        "--variant",
        name,
        "--agents",
        str(args.agents),
        "--period",
        str(args.period),
        "--settle",
        str(args.settle),
        "--window",
        str(args.window),
    ]
    server = subprocess.Popen([*common, "--role", "server"], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    if server.stdout.readline().strip() != "ready":
        raise RuntimeError(f"{name}: the server did not start")
    client = subprocess.Popen([*common, "--role", "load"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        figures = json.loads(server.stdout.readline())
    finally:
        for proc in (client, server):
            proc.kill()
            proc.wait()
    return FloorRow(name, connections or args.agents, **figures)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def format_rows(rows: list[FloorRow], args: argparse.Namespace) -> str:
    lines = [
        f"bare grpc.aio ack server: {args.agents} agents, a 2,000-byte report every {args.period:g} s each, "
        f"{args.window:g} s window",
        f"{'variant':<10} {'conns':>6} {'streams':>7} {'reports/s':>9} {'% core':>7} {'us/report':>9} {'RSS MiB':>8}",
    ]
    for r in rows:
        lines.append(
            f"{r.variant:<10} {r.connections:>6} {r.streams:>7} {r.reports_per_s:>9.0f} {r.cpu_percent:>7.1f} "
            f"{r.us_per_report:>9.1f} {r.rss_mib:>8.1f}"
        )
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--agents", type=int, default=5000)
    p.add_argument("--period", type=float, default=3.0, help="seconds between one agent's reports (heartbeat)")
    p.add_argument("--settle", type=float, default=8.0)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--role", choices=("server", "load"), help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> list[FloorRow]:
    # One connection per agent needs a descriptor each, in both processes.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.agents * 2 + 256)), hard))
    return [run_variant(name, args) for name in args.variants.split(",")]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.role == "server":
        connections, ack_each = VARIANTS[args.variant]
        asyncio.run(serve_then_wait(args))
        return 0
    if args.role == "load":
        connections, ack_each = VARIANTS[args.variant]
        asyncio.run(load(args.port, args.agents, connections, ack_each, args.period))
        return 0
    rows = run(args)
    print(format_rows(rows, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
