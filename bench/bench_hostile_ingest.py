"""Benchmark: what hostile gRPC clients can make the extender hold (issue 8).

With `--agent-auth none` any client that reaches the gRPC port can report. Before
the ingest bounds, 100 made-up node names sending 3.4 MB reports took the
extender from 91 to 436 MiB RSS, kept for an hour (--forget-after). This starts
the real `gpu-extender` and, over real grpc.aio streams:

1. no inventory: 100 made-up nodes each send 3 maximal reports (every string and
   list at the bounds of gpuextender/extender/ingest/report_checks.py, 256 GPUs: ~147 KiB each);
   every node is allowed without an inventory source, so all are kept;
2. with an inventory (`--inventory`, 4 real nodes): the same 100 made-up nodes
   plus the 4 real ones; only --max-unknown-nodes (64) made-up nodes are kept;
3. over the size bound: 100 nodes send one 3.4 MB report each (the original
   repro): gRPC ends each stream with RESOURCE_EXHAUSTED before parsing it;
4. a flood: 50 streams write small reports as fast as they can and never read an
   ack, for a window: the per-stream pacing bounds what is processed.
For each it reads VmRSS (and VmHWM, the peak) from /proc/PID/status before and
after, and the extender's /metrics for what was stored and refused.

Run: `.venv/bin/python bench/bench_hostile_ingest.py [--quick]` (or via bench/run_all.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import (
    CLOCK_TICKS,
    OUT_DIR,
    BenchError,
    ManagedProcess,
    exit_on_sigterm,
    extender_process,
    scrape,
    tree_cpu_ticks,
    tree_memory_kib,
    wait_http_ok,
)

from gpuextender.extender.ingest.limits import REPORT_BURST, REPORTS_PER_SECOND
from gpuextender.extender.ingest.report_checks import (
    MAX_AGENT_VERSION_CHARS,
    MAX_DRIVER_VERSION_CHARS,
    MAX_GPU_NAME_CHARS,
    MAX_GPUS_PER_NODE,
    MAX_NODE_ERROR_CHARS,
    MAX_PCI_BUS_ID_CHARS,
    MAX_UNHEALTHY_REASON_CHARS,
    MAX_UNHEALTHY_REASONS,
    MAX_UUID_CHARS,
)
from gpuextender.extender.settings import MAX_UNKNOWN_NODES
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc

MADE_UP_NODES = 100
REAL_NODES = [f"gpu-node-{i}" for i in range(1, 5)]
REPORTS_PER_NODE = 3
OVERSIZE_BYTES = 3_400_000  # the original repro's report size
FLOOD_STREAMS = 50


@dataclass(slots=True)
class Row:
    scenario: str
    nodes: int
    reports_sent: int
    accepted: int
    rejected: int
    streams_refused: int  # ended by gRPC (RESOURCE_EXHAUSTED) instead of acked
    nodes_held: int
    unknown_held: int
    report_kib: float
    rss_before_mib: float
    rss_after_mib: float
    hwm_mib: float
    seconds: float


@dataclass(slots=True)
class FloodResult:
    streams: int
    window_s: float
    processed: int  # reports the extender processed (stored) in the window
    bound: int  # streams x (burst + rate x window)
    paced_streams: float  # streams held by the rate limit at the end of the window
    extender_cpu_percent: float  # of one core, over the window
    rss_before_mib: float
    rss_after_mib: float


def made_up_name(i: int) -> str:
    """A 253-character valid node name: the longest the ingest accepts."""
    head = f"made-up-{i:03d}-"
    return head + "x" * (253 - len(head))


def maximal_report(node: str) -> pb.NodeReport:
    r = pb.NodeReport(
        node_name=node,
        agent_version="a" * MAX_AGENT_VERSION_CHARS,
        driver_version="d" * MAX_DRIVER_VERSION_CHARS,
        node_error="e" * MAX_NODE_ERROR_CHARS,
    )
    for i in range(MAX_GPUS_PER_NODE):
        g = r.gpus.add(
            index=i,
            uuid=f"{i:03d}".ljust(MAX_UUID_CHARS, "u"),
            name="m" * MAX_GPU_NAME_CHARS,
            pci_bus_id="p" * MAX_PCI_BUS_ID_CHARS,
            healthy=False,
        )
        g.compute_capability.major, g.compute_capability.minor = 9, 0
        g.memory_total_bytes = g.memory_used_bytes = g.memory_free_bytes = g.memory_reserved_bytes = 2**64 - 1
        g.utilization_gpu_percent = g.utilization_memory_percent = 100
        g.temperature_celsius, g.power_watts = 2**32 - 1, 1e9
        g.unhealthy_reasons.extend(str(k).ljust(MAX_UNHEALTHY_REASON_CHARS, "r") for k in range(MAX_UNHEALTHY_REASONS))
    return r


def small_report(node: str) -> pb.NodeReport:
    r = pb.NodeReport(node_name=node, agent_version="flood")
    for i in range(8):
        g = r.gpus.add(index=i, uuid=f"GPU-{i}", name="NVIDIA H100 80GB HBM3", healthy=True)
        g.memory_total_bytes, g.memory_used_bytes, g.utilization_gpu_percent = 80 * 1024**3, 0, 0
    return r


def stamp(report: pb.NodeReport, seq: int) -> pb.NodeReport:
    report.sequence = seq
    report.sample_time.FromNanoseconds(time.time_ns())
    return report


async def send_reports(target: str, reports: list[pb.NodeReport], count: int) -> tuple[int, int, int]:
    """One stream per report template, `count` reports each, acks read: (accepted, rejected, refused)."""
    accepted = rejected = refused = 0
    async with grpc.aio.insecure_channel(target, options=[("grpc.max_send_message_length", 8 * 1024**2)]) as channel:
        stub = pb_grpc.GpuStateServiceStub(channel)

        async def one(template: pb.NodeReport) -> None:
            nonlocal accepted, rejected, refused
            call = stub.StreamNodeReports(timeout=60)
            try:
                for seq in range(1, count + 1):
                    await call.write(stamp(template, seq))
                    ack = await call.read()
                    if ack is grpc.aio.EOF:
                        raise BenchError(f"stream for {template.node_name[:20]}... ended without an ack")
                    if ack.status == pb.ReportAck.ACCEPTED:
                        accepted += 1
                    else:
                        rejected += 1
                await call.done_writing()
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise BenchError(f"stream failed: {exc.code().name}: {exc.details()}") from None
                refused += 1

        await asyncio.gather(*(one(r) for r in reports))
    return accepted, rejected, refused


async def _settled_rss(proc: ManagedProcess) -> dict[str, int]:
    await asyncio.sleep(1.0)  # let the loop finish what the last acks started
    proc.check_alive()
    return tree_memory_kib(proc.pid)


async def _scenario(name: str, extra: list[str], reports: list[pb.NodeReport], count: int) -> Row:
    process, addrs = extender_process(f"extender-hostile-ingest-{name.split()[0]}", extra)
    with process:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            await wait_http_ok(session, f"{addrs.base_url}/readyz", process)
            before = await _settled_rss(process)
            started = time.monotonic()
            accepted, rejected, refused = await send_reports(addrs.grpc_target, reports, count)
            seconds = time.monotonic() - started
            after = await _settled_rss(process)
            metrics = await scrape(session, f"{addrs.base_url}/metrics")
    return Row(
        scenario=name,
        nodes=len(reports),
        reports_sent=len(reports) * count,
        accepted=accepted,
        rejected=rejected,
        streams_refused=refused,
        nodes_held=int(metrics.get("gpu_extender_nodes_with_data", -1)),
        unknown_held=int(metrics.get("gpu_extender_unknown_nodes", -1)),
        report_kib=max(r.ByteSize() for r in reports) / 1024,
        rss_before_mib=before["VmRSS"] / 1024,
        rss_after_mib=after["VmRSS"] / 1024,
        hwm_mib=after["VmHWM"] / 1024,
        seconds=seconds,
    )


async def _flood(window_s: float) -> FloodResult:
    process, addrs = extender_process("extender-hostile-ingest-flood")
    with process:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            await wait_http_ok(session, f"{addrs.base_url}/readyz", process)
            rss_before = (await _settled_rss(process))["VmRSS"]
            async with grpc.aio.insecure_channel(addrs.grpc_target) as channel:
                stub = pb_grpc.GpuStateServiceStub(channel)
                calls = [stub.StreamNodeReports() for _ in range(FLOOD_STREAMS)]

                async def write_forever(call: grpc.aio.StreamStreamCall, node: str) -> None:
                    template = small_report(node)
                    seq = 0
                    while True:  # never reads an ack
                        seq += 1
                        await call.write(stamp(template, seq))

                ticks0, t0 = tree_cpu_ticks(process.pid), time.monotonic()
                writers = [asyncio.create_task(write_forever(c, f"flood-{i}")) for i, c in enumerate(calls)]
                await asyncio.sleep(window_s)
                metrics = await scrape(session, f"{addrs.base_url}/metrics")
                ticks1, t1 = tree_cpu_ticks(process.pid), time.monotonic()
                for task in writers:
                    task.cancel()
                for call in calls:
                    call.cancel()
                await asyncio.gather(*writers, return_exceptions=True)
            rss_after = (await _settled_rss(process))["VmRSS"]
    elapsed = t1 - t0
    return FloodResult(
        streams=FLOOD_STREAMS,
        window_s=elapsed,
        processed=int(metrics.get('gpu_extender_reports_total{result="accepted"}', 0)),
        bound=int(FLOOD_STREAMS * (REPORT_BURST + REPORTS_PER_SECOND * elapsed)),
        paced_streams=metrics.get("gpu_extender_paced_streams", 0.0),
        extender_cpu_percent=100.0 * (ticks1 - ticks0) / CLOCK_TICKS / elapsed,
        rss_before_mib=rss_before / 1024,
        rss_after_mib=rss_after / 1024,
    )


def _write_inventory(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    docs = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
        for n in REAL_NODES
    ]
    (directory / "nodes.yaml").write_text("\n---\n".join(json.dumps(d) for d in docs))
    return directory


def run(*, quick: bool = False) -> tuple[list[Row], FloodResult]:
    made_up = [maximal_report(made_up_name(i)) for i in range(MADE_UP_NODES)]
    real = [maximal_report(n) for n in REAL_NODES]
    oversize = []
    for i in range(MADE_UP_NODES):
        r = pb.NodeReport(node_name=f"made-up-{i:03d}", agent_version="x")
        r.node_error = "e" * OVERSIZE_BYTES
        oversize.append(r)
    inventory = _write_inventory(OUT_DIR / "hostile-ingest-inventory")
    rows = [
        asyncio.run(_scenario("no inventory", [], made_up, REPORTS_PER_NODE)),
        asyncio.run(
            _scenario(
                f"--inventory ({len(REAL_NODES)} real nodes)",
                ["--inventory", str(inventory)],
                made_up + real,
                REPORTS_PER_NODE,
            )
        ),
        asyncio.run(_scenario("over the size bound (3.4 MB)", [], oversize, 1)),
    ]
    flood = asyncio.run(_flood(3.0 if quick else 10.0))
    expected_held = (MADE_UP_NODES, MAX_UNKNOWN_NODES + len(REAL_NODES), 0)
    for row, held in zip(rows, expected_held, strict=True):
        if row.nodes_held != held:
            raise BenchError(f"{row.scenario}: the extender holds {row.nodes_held} nodes, expected {held}")
    if flood.processed > flood.bound:
        raise BenchError(f"flood: {flood.processed} reports processed, above the pacing bound {flood.bound}")
    return rows, flood


HEADER = (
    "| scenario | nodes | report KiB | reports sent | accepted | rejected | streams refused | nodes held "
    "(unknown) | RSS before MiB | RSS after MiB | growth MiB | peak MiB |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def format_row(r: Row) -> str:
    return (
        f"| {r.scenario} | {r.nodes} | {r.report_kib:,.1f} | {r.reports_sent} | {r.accepted} | {r.rejected} | "
        f"{r.streams_refused} | {r.nodes_held} ({r.unknown_held}) | {r.rss_before_mib:.1f} | "
        f"{r.rss_after_mib:.1f} | {r.rss_after_mib - r.rss_before_mib:+.1f} | {r.hwm_mib:.1f} |"
    )


def format_flood(f: FloodResult) -> str:
    return (
        f"flood: {f.streams} streams writing without reading acks for {f.window_s:.1f} s: {f.processed:,} "
        f"reports processed (pacing bound {f.bound:,}), {f.paced_streams:g} streams held at the limit, "
        f"extender CPU {f.extender_cpu_percent:.1f} % of one core, RSS {f.rss_before_mib:.1f} -> "
        f"{f.rss_after_mib:.1f} MiB"
    )


def format_result(rows: list[Row], flood: FloodResult) -> str:
    return "\n".join([HEADER, *(format_row(r) for r in rows), "", format_flood(flood)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 3 s flood window instead of 10 s")
    parser.add_argument("--json", type=Path, help="also write the raw result as JSON here")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    try:
        rows, flood = run(quick=args.quick)
    except BenchError as exc:
        print(f"bench_hostile_ingest: FAILED: {exc}", file=sys.stderr)
        return 1
    print(format_result(rows, flood))
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows], "flood": asdict(flood)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
