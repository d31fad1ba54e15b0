"""Benchmark: what a hostile relay stream can make the extender spend on refused reports.

A relay (contract 0.7, `RelayNodeReports`) sends many agents' reports per message. Each agent
stream it names is paced, but a message of 256 KiB (the largest the transport takes) holds 46,432
empty items, each a new agent stream and each refused: ~7 us of ingest work apiece. Where agents
are not authenticated anyone who reaches the port can open such a stream. Since the relay
refusal budget (`ingest/limits.py`: RELAY_REFUSAL_BURST at once, then RELAY_REFUSALS_PER_SECOND,
or 10 a second per agent stream the relay holds) the extender reads such a stream only as its
budget refills.

How: the real `gpu-extender` (`--agent-auth none`, its ingest workers as shipped) on loopback;
`--streams` relay streams (default 1), each sending messages of empty items as a relay does
(write one, read its ack) for `--window` seconds. Reported per side: items refused in the window
(the extender's `gpu_extender_reports_rejected_total{reason="invalid"}`); the bound, streams x
(burst + rate x window + RELAY_YIELD_EVERY), as the budget is charged after each slice of a
message; the relay streams waiting at the end (`gpu_extender_paced_streams`); and the extender's
process-tree CPU over the window (share of one core). `--against REV` also runs the same against
an earlier revision's extender (bench_baseline's unpacked tree), sides alternating, so the two
are compared in one run.

Run: `.venv/bin/python bench/bench_hostile_relay.py [--window 10] [--streams 1] [--against REV]`
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_baseline import python_path, unpack
from benchlib import (
    CLOCK_TICKS,
    BenchError,
    exit_on_sigterm,
    extender_process,
    scrape,
    tree_cpu_ticks,
    wait_http_ok,
)

from gpuextender.extender.ingest.limits import MAX_REPORT_BYTES, RELAY_REFUSAL_BURST, RELAY_REFUSALS_PER_SECOND
from gpuextender.extender.ingest.service import RELAY_YIELD_EVERY
from gpuextender.v1 import gpu_state_pb2 as pb

METHOD = "/gpuextender.v1.GpuStateService/RelayNodeReports"


@dataclass(slots=True)
class Side:
    label: str
    streams: int
    window_s: float
    messages: int  # messages acked in the window
    refused: int  # items the extender refused in the window
    bound: int  # streams x (burst + rate x window + a slice): what the budget lets through
    waiting: float  # relay streams waiting off their budget at the end of the window
    extender_cpu_percent: float  # of one core, its process tree, over the window


def worst_message() -> bytes:
    """The most empty items one message can hold, each a new agent stream."""
    batch, size = pb.RelayBatch(), 0
    for stream in range(1, MAX_REPORT_BYTES):
        item = 3 + len(_varint(stream))  # the item's tag and length, the stream's tag and value
        if size + item > MAX_REPORT_BYTES:
            break
        batch.reports.add(stream=stream)
        size += item
    raw = batch.SerializeToString()
    assert len(raw) == size, (len(raw), size)
    return raw


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


async def _side(label: str, streams: int, window_s: float, message: bytes, until_paced_s: float = 0.0) -> Side:
    process, addrs = extender_process(f"extender-hostile-relay-{label}", ["--agent-auth", "none"])
    with process:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            await wait_http_ok(session, f"{addrs.base_url}/readyz", process)
            async with grpc.aio.insecure_channel(
                addrs.grpc_target, options=[("grpc.max_send_message_length", MAX_REPORT_BYTES)]
            ) as channel:
                relay = channel.stream_stream(
                    METHOD, request_serializer=lambda raw: raw, response_deserializer=pb.RelayAck.FromString
                )
                acked = [0]

                async def send(call: grpc.aio.StreamStreamCall) -> None:
                    while True:  # as a relay does: a message, then its ack
                        await call.write(message)
                        if await call.read() is grpc.aio.EOF:
                            raise BenchError(f"{label}: the extender ended a relay stream: {await call.details()}")
                        acked[0] += 1

                calls = [relay() for _ in range(streams)]
                before = await scrape(session, f"{addrs.base_url}/metrics")
                ticks0, t0 = tree_cpu_ticks(process.pid), time.monotonic()
                senders = [asyncio.create_task(send(c)) for c in calls]
                await asyncio.sleep(window_s)
                after = await scrape(session, f"{addrs.base_url}/metrics")
                # A test's form: then until every stream waits off its debt (where the machine is
                # too busy for the window to reach the budget), for at most `until_paced_s`.
                deadline = time.monotonic() + until_paced_s
                while after.get("gpu_extender_paced_streams", 0.0) < streams and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                    after = await scrape(session, f"{addrs.base_url}/metrics")
                ticks1, t1 = tree_cpu_ticks(process.pid), time.monotonic()
                for task in senders:
                    task.cancel()
                for call in calls:
                    call.cancel()
                for result in await asyncio.gather(*senders, return_exceptions=True):
                    if isinstance(result, BenchError):
                        raise result
    key = 'gpu_extender_reports_rejected_total{reason="invalid"}'
    elapsed = t1 - t0
    return Side(
        label=label,
        streams=streams,
        window_s=elapsed,
        messages=acked[0],
        refused=int(after.get(key, 0.0) - before.get(key, 0.0)),
        bound=int(streams * (RELAY_REFUSAL_BURST + RELAY_REFUSALS_PER_SECOND * elapsed + RELAY_YIELD_EVERY)),
        waiting=after.get("gpu_extender_paced_streams", 0.0),
        extender_cpu_percent=100.0 * (ticks1 - ticks0) / CLOCK_TICKS / elapsed,
    )


def run(window_s: float, streams: int, against: str | None, until_paced_s: float = 0.0) -> list[Side]:
    message = worst_message()
    if against is None:
        return [asyncio.run(_side("current", streams, window_s, message, until_paced_s))]
    tree = unpack(against)
    sides = []
    for label, path in (("base", tree), ("current", None), ("current", None), ("base", tree)):
        with python_path(path):
            sides.append(asyncio.run(_side(label, streams, window_s, message)))
    return sides


def format_sides(sides: list[Side], items: int) -> str:
    lines = [
        f"relay streams sending {items:,} empty items per message (each a new agent stream, each refused)",
        f"{'side':<8} {'streams':>7} {'window s':>8} {'messages':>8} {'refused':>10} {'bound':>8} "
        f"{'waiting':>7} {'CPU % of a core':>15}",
    ]
    for s in sides:
        bound = f"{s.bound:,}" if s.label == "current" else "-"
        lines.append(
            f"{s.label:<8} {s.streams:>7} {s.window_s:>8.1f} {s.messages:>8,} {s.refused:>10,} {bound:>8} "
            f"{s.waiting:>7g} {s.extender_cpu_percent:>15.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=10.0, help="seconds of sending per side (default 10)")
    parser.add_argument("--streams", type=int, default=1, help="hostile relay streams at once (default 1)")
    parser.add_argument("--against", metavar="REV", help="also run an earlier revision's extender, alternating")
    args = parser.parse_args(argv)
    if args.window <= 0 or args.streams < 1:
        parser.error("--window must be > 0 and --streams at least 1")
    exit_on_sigterm()
    try:
        sides = run(args.window, args.streams, args.against)
        for s in sides:
            if s.label == "current" and s.refused > s.bound:
                raise BenchError(f"{s.refused:,} items refused in {s.window_s:.1f}s, above the budget's {s.bound:,}")
    except BenchError as exc:
        print(f"bench_hostile_relay: FAILED: {exc}", file=sys.stderr)
        return 1
    print(format_sides(sides, len(pb.RelayBatch.FromString(worst_message()).reports)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
