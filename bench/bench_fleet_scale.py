"""Benchmark: gpu-extender at fleet scale, size by size, against a bare gRPC floor (issue 36).

Goals (issue 36, "Fleet scale II"), measured here per fleet size in one run:
- ingest: the extender's CPU per accepted report (its whole process tree: the main process
  and its ingest workers) <= 1.2x that of a bare grpc.aio server that only acks
  (bench_grpc_floor.py's floor), under the same load generator, same streams, same
  connection layout; for the gated agents (the shipped behaviour) and, reported too, the
  every-second "paced" agents (every sample changes: the worst case);
- memory: the extender's RSS with 20,000 agent streams open <= 700 MiB (here: per size, and
  the bytes each connected node adds, (RSS with N streams - RSS with none) / N);
- scheduling: filter p99 <= 10 ms at 20,000 names, and filter / prioritize p99 with the gated
  agents streaming <= 1.2x the same with the streams open and quiet;
- the main process's apply rate: relayed reports stored per second per core >= 50,000
  (`apply_rate()`, below; importable: `from bench_fleet_scale import apply_rate`).

How, per size N (--sizes, default 1,000, 5,000 and 10,000), every server up at once:
1. the servers (--servers, default all of them, each on --extender-cpus, os.sched_setaffinity in
   the child before it execs, so the extender's ingest workers inherit it):
   - "extender": the real `gpu-extender` (benchlib.extender_argv, --ingest-workers W);
   - "floor": --floor-processes (default W) bench_grpc_floor.py `--role server --variant
     per-agent` processes on one port (grpc's SO_REUSEPORT): a handler that acks every report,
     no parsing, grpc's default options (the issue's floor);
   - "floor-xopts": that handler with the extender's gRPC server options (ingest/server.py
     grpc_options: HTTP/2 BDP probing off, ...), to tell the options' share from the code's;
   - "floor-pb", "floor-loop", "floor-unchecked" and "floor-service": the steps between
     floor-xopts and an ingest worker (STEPS), to tell where the extender's share goes;
   - "relayed": the real gpu-extender with --relays `gpu-extender relay` processes in front
     (docs/relay.md, on --relay-cpus), the agents on the relays: the extender's memory is counted
     apart from the relays' ("relay"), their CPU too;
   Each tree's VmRSS and PSS with no agent connected;
2. the load, per server: --load-processes processes of this script (`--worker`, niced 10,
   affinity --load-cpus), each a bench_ingest.LoadWorker over its share of the N nodes
   (bench_extender's fleet, 8 GPUs, varied readings: bench_ingest.report_variants): one
   long-lived StreamNodeReports stream per node and, like real agents, one TCP connection per
   node (a channel each with grpc.use_local_subchannel_pool; --connections C shares C instead).
   The floors' 2-byte ack counts as accepted. Once every stream has sent its first report, the
   tree's RSS again: per-node bytes = (RSS with N streams - RSS with none) / N;
3. ingest rows (bench_ingest's modes, --window seconds after a settle), the servers one after the
   other per mode, the others' loads idle (and drained: a server that fell behind still has a
   report in flight per stream), the order reversed every other round (--ingest-rounds), so the
   machine's drift falls on both sides of a ratio: "idle" (streams open, nothing sent), "gated"
   (1 s samples, a report when something decision-relevant changed, probability --change-rate
   0.02 per sample, else a heartbeat every --heartbeat 3 s: N / 2.94 reports/s, every one a full
   report, as agents before 0.6 send), "light" (the same, heartbeats light as 0.6 agents send them
   to an extender that takes them) and "paced" (every node every second; slots the load could
   not keep are skipped and counted); --modes picks among them. Per row: accepted
   reports/s, the tree's CPU (utime+stime, /proc) split into the extender's main process and its
   workers, per report and less the idle row's ("marginal"), the load's CPU, and "bg cores"
   (other processes on this machine meanwhile). The ratio extender / floor is taken per round
   (the two rows back to back), its median reported;
4. scheduling, per round (--rounds): bench_extender's run_scenario with names-N (filter with all
   N names shuffled, then prioritize with what filter passed; one request in flight over one
   keep-alive connection, every answer checked) and names-K, K the candidates kube-scheduler
   sends at N nodes (percentageOfNodesToScore adaptive: max(5, 50 - N/125) %, at least 100:
   schedule_one.go numFeasibleNodesToFind; 1,000 at 20,000 nodes), each "quiet" (streams open,
   nothing sent) and "loaded" (--change-rate; light heartbeats, the shipped agent's, unless --modes
   leaves "light" out: then gated). Ratios are of the medians over rounds;
5. once, before the sizes: `apply_rate(--apply-nodes, 5)`: frames built by the worker's own
   SummaryStore from bench_apply's varied 8-GPU reports, stored by the real IngestProcess.apply
   (workers/supervisor.py; its yields to the loop included), best of 5, thread CPU time, the garbage
   collector set as app.py sets it.

Client and servers share one machine: the servers on --extender-cpus, the loads and this process
(the latency client) on --load-cpus (default: the first half of the usable CPUs for the servers,
the rest for the load: on 2 cores, CPU 0 and CPU 1). The CPUs every process had are printed.
On a shared VM the same work's CPU time varies by tens of percent from minute to minute (other
tenants on the host; "bg cores" sees only this machine's processes): compare rows measured back
to back, and repeat a run before trusting a few percent.

Run here (2 cores, about 15 minutes; --quick: 500 and 1,000 nodes, floor and extender only, 3 s
windows, one round, about 2 minutes):
  .venv/bin/python bench/bench_fleet_scale.py [--quick] [--sizes 1000,5000,10000] [--json PATH]
On a 16-core machine, 20,000 agents:
  .venv/bin/python bench/bench_fleet_scale.py --sizes 20000 --ingest-workers 8 \\
      --extender-cpus 0-8 --load-cpus 9-15 --json bench/out/fleet_scale-20000.json
(--load-processes defaults to the load CPUs less one, 1 to 8: one Python process drives a few
thousand reports/s at most; --connections 64 if 20,000 connections per load are too many; with
8 workers each process holds N / 8 connections, and the floors as many processes.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import bench_apply as ba
import bench_extender as bx
import bench_grpc_floor as floor
import bench_ingest as bi
from benchlib import (
    CLOCK_TICKS,
    OUT_DIR,
    REPO_ROOT,
    BackgroundLoad,
    BenchError,
    ExtenderAddrs,
    ManagedProcess,
    cpu_ticks,
    exit_on_sigterm,
    extender_argv,
    free_port,
    machine_facts,
    memory_kib,
    scrape,
    tree_cpu_ticks,
    tree_pids,
    tree_rss_kib,
    wait_http_ok,
)

from gpuextender.v1 import gpu_state_pb2 as pb

DEFAULT_SIZES = (1_000, 5_000, 10_000)
QUICK_SIZES = (500, 1_000)
GOAL_SIZE = 20_000
GOAL_INGEST_RATIO = 1.2  # extender / floor CPU per report
GOAL_RSS_MIB = 700.0  # at 20,000 streams
GOAL_FILTER_P99_MS = 10.0  # at 20,000 names
GOAL_P99_RATIO = 1.2  # loaded / quiet
GOAL_APPLY_PER_CORE = 50_000.0
EXTENDER_METHOD = bi.METHOD
FLOOR_METHOD = "/floor/Stream"  # bench_grpc_floor's generic handler
# The loaded modes, in the order measured: "light" is "gated" with 0.6 agents (heartbeats light).
MODES = ("gated", "light", "paced")
FLOORS = ("floor", "floor-xopts")  # bench_grpc_floor's server; its handler with the extender's gRPC options
# Steps from floor-xopts to a worker, each adding one part of the extender's work (floor_server_main):
# "floor-pb" parses each NodeReport and answers the extender's ReportAck; "floor-loop" is the
# extender's IngestService stream loop (context.read, the pacer, its ack), nothing checked or
# stored; "floor-unchecked" the whole service and a worker's SummaryStore (summaries, light
# heartbeats) but the checks; "floor-service" all of it, checks included. The steps' batches are
# dropped instead of relayed to a main process.
STEPS = ("floor-pb", "floor-loop", "floor-unchecked", "floor-service")
# "relayed": the extender with a `gpu-extender relay` in front, the agents' streams on the relay
# (its memory is counted apart, as "relay"; its CPU with the extender's, under "workers").
SERVERS = (*FLOORS, *STEPS, "extender", "relayed")
OPEN_CONCURRENCY = 128  # connections being set up at a time, per load process


# -- 5. the main process's apply rate (in-process, no sockets) -----------------------------


def apply_rate(nodes: int = 5_000, repeat: int = 5) -> float:
    """Relayed reports the extender's main process stores per second of one core.

    Frames are what an ingest worker sends: its own SummaryStore (workers/summary_store.py) takes
    `nodes` varied 8-GPU reports (bench_apply.report_rounds: bench_extender's fleet, readings
    moving a little each round) and gives one frame; the real IngestProcess.apply stores it
    in a GpuState (the main process's work per frame, its yields to the loop included). Thread
    CPU time of the best of `repeat` frames (each a newer round), after one warm round per
    version, with the garbage collector frozen and thresholds as app.py sets them (restored
    on return)."""
    from gpuextender.common.idle_rule import IdleRule
    from gpuextender.extender.workers.worker_args import Worker

    try:  # the extender's side of its workers (it moved while issue 36 went on)
        from gpuextender.extender.workers.supervisor import IngestProcess
    except ImportError:
        from gpuextender.extender.ingest.relay import IngestProcess  # type: ignore[no-redef]
    from gpuextender.extender.state.gpu_state import GpuState
    from gpuextender.extender.workers.summary_store import SummaryStore

    rule = IdleRule()
    rounds = ba.report_rounds(nodes)
    state = GpuState(rule)
    store = SummaryStore(rule)
    process = IngestProcess([], Worker(0, 1, 1), state, lambda _i, _t: None)
    clock = [time.monotonic()]

    def frame(i: int) -> bytes:
        clock[0] += 1.0  # received after what is stored, or GpuState refuses it at once
        for report in rounds[i % len(rounds)]:
            store.ingest(report, clock[0])
        return store.take()

    async def timed(payload: bytes) -> float:
        start = time.thread_time()
        await process.apply(payload)
        return time.thread_time() - start

    threshold = gc.get_threshold()
    try:
        for i in range(len(rounds)):  # warm: every node known, facts pooled
            asyncio.run(timed(frame(i)))
        payloads = [frame(len(rounds) + i) for i in range(repeat)]
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 10, 10)
        best = min(asyncio.run(timed(p)) for p in payloads)
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
    if len(state) != nodes:
        raise BenchError(f"apply_rate: {len(state)} nodes stored, expected {nodes}")
    return nodes / best


# -- kube-scheduler's candidate count -------------------------------------------------------


def scheduler_candidates(nodes: int) -> int:
    """numFeasibleNodesToFind (kube-scheduler v1.35 schedule_one.go) with the adaptive
    percentageOfNodesToScore: the nodes a scheduling cycle finds feasible, then sends on to
    the extenders' filter (when that many pass its own filters)."""
    if nodes < 100:  # minFeasibleNodesToFind
        return nodes
    percentage = max(5, 50 - nodes // 125)  # minFeasibleNodesPercentageToFind = 5
    return max(100, nodes * percentage // 100)


# -- CPUs -----------------------------------------------------------------------------------


def parse_cpus(text: str) -> set[int] | None:
    """ "0-8,10" -> {0..8, 10}; "" or "none": no pinning (None)."""
    if text in ("", "none"):
        return None
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_list(cpus: set[int] | None) -> str:
    """{0, 1, 2, 5} -> "0-2,5" (the kernel's Cpus_allowed_list form)."""
    if not cpus:
        return "all"
    out, ordered = [], sorted(cpus)
    start = prev = ordered[0]
    for c in [*ordered[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        if c is not None:
            start = prev = c
    return ",".join(out)


def default_cpus() -> tuple[str, str]:
    """The first half of the usable CPUs for the extender, the rest for the load (2 cores: 0 | 1)."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        return "none", "none"
    half = len(usable) - len(usable) // 2
    return cpu_list(set(usable[:half])), cpu_list(set(usable[half:]))


def affinity_of(pids: Sequence[int]) -> dict[int, str]:
    out = {}
    for pid in pids:
        try:
            out[pid] = cpu_list(os.sched_getaffinity(pid))
        except OSError:
            out[pid] = "gone"
    return out


def raise_nofile() -> int:
    """One descriptor per connection, in every process (inherited by the children)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class PinnedProcess(ManagedProcess):
    """A ManagedProcess whose CPU affinity is set in the child before it execs (its own
    children, the extender's ingest workers, inherit it). ManagedProcess.start, plus preexec_fn."""

    def __init__(self, name: str, argv: Sequence[str], cpus: set[int] | None) -> None:
        super().__init__(name, argv)
        self.cpus = cpus

    def start(self) -> None:
        cpus = self.cpus
        preexec: Callable[[], None] | None = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO_ROOT,
                preexec_fn=preexec,
            )


def tree_memory(pids: Sequence[int]) -> tuple[int, int]:
    """(VmRSS, Pss) of the trees under `pids`, KiB. PSS shares common pages among the
    processes (RSS counts them in each)."""
    rss = pss = 0
    for root in pids:
        rss += tree_rss_kib(root)
        for p in tree_pids(root):
            try:
                with open(f"/proc/{p}/smaps_rollup") as f:
                    pss += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
            except (OSError, StopIteration):
                continue
    return rss, pss


# -- the load worker (a child process: `bench_fleet_scale.py --worker ...`) ------------------


class FleetLoadWorker(bi.LoadWorker):
    """bench_ingest's LoadWorker over nodes [first, first + count) of the fleet, one connection
    per node by default (channels opened concurrently), against the extender or the floor."""

    def __init__(
        self, target: str, first: int, count: int, connections: int, variants: int, method: str, strict: bool
    ) -> None:
        super().__init__(target, 0, connections or count, variants)
        self.fleet = bx.make_fleet(first + count)[first:]
        rng = random.Random(f"{bx.SEED}-fleet-{first}")
        self.variants = [bi.report_variants(n, variants, rng) for n in self.fleet]
        self.method, self.strict = method, strict

    async def start(self) -> float:
        """LoadWorker.start, with the channels' connections set up concurrently (thousands)."""
        loop = asyncio.get_running_loop()
        self.epoch = loop.time()
        started = time.perf_counter()
        options = [("grpc.use_local_subchannel_pool", 1)]  # a connection of its own per channel
        self.channels = [grpc.aio.insecure_channel(self.target, options=options) for _ in range(self.channel_count)]
        connecting = asyncio.Semaphore(OPEN_CONCURRENCY)

        async def ready(channel: grpc.aio.Channel) -> None:
            async with connecting:
                await asyncio.wait_for(channel.channel_ready(), timeout=60)

        await asyncio.gather(*(ready(ch) for ch in self.channels))
        methods = [
            ch.stream_stream(self.method, request_serializer=None, response_deserializer=pb.ReportAck.FromString)
            for ch in self.channels
        ]
        gate = asyncio.Semaphore(bi.OPEN_CONCURRENCY)
        all_open = asyncio.Event()
        for i in range(len(self.fleet)):
            self.tasks.append(asyncio.create_task(self._stream(i, methods[i % len(methods)], gate, all_open)))
        await all_open.wait()
        return time.perf_counter() - started

    async def _send(self, call: Any, header: pb.NodeReport, body: bytes, seq: int, repeats: int = 0) -> None:
        if self.strict:
            await super()._send(call, header, body, seq, repeats)
            return
        # The floor acks every report with the same 2 bytes: any ack is "accepted".
        now = time.time()
        header.sequence = seq
        header.heartbeat_of = repeats
        header.sample_time.seconds = int(now)
        header.sample_time.nanos = int((now - int(now)) * 1e9)
        await call.write(body + header.SerializeToString())
        ack = await call.read()
        if ack is grpc.aio.EOF:
            raise BenchError(f"stream ended (code {await call.code()}: {await call.details()})")
        self.accepted += 1


async def worker_main(args: argparse.Namespace) -> int:
    """bench_ingest.worker_main's line protocol (copied: that one builds its own LoadWorker)."""
    cpus = parse_cpus(args.cpus or "")
    if cpus:
        os.sched_setaffinity(0, cpus)
    os.nice(10)  # the load stands for agents on other machines
    raise_nofile()
    out = sys.stdout

    def say(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    load = FleetLoadWorker(
        args.target, args.first, args.count, args.connections, args.variants, args.method, not args.floor_acks
    )
    open_s = await load.start()
    say({"event": "ready", "open_s": open_s, **load.stats()})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        cmd = json.loads(line)
        if cmd["cmd"] == "mode":
            load.set_mode(
                cmd["mode"],
                bool(cmd.get("vary")),
                float(cmd.get("interval", 1.0)),
                float(cmd.get("change_rate", bi.DEFAULT_CHANGE_RATE)),
                float(cmd.get("heartbeat", bi.DEFAULT_HEARTBEAT_S)),
            )
            say({"event": "mode", **load.stats()})
        elif cmd["cmd"] == "stats":
            say({"event": "stats", **load.stats()})
        elif cmd["cmd"] == "quit":
            break
    await load.stop()
    return 0


class LoadGroup:
    """The load processes of one server: nodes split evenly, commands to all, counts summed."""

    def __init__(
        self,
        tag: str,
        target: str,
        nodes: int,
        processes: int,
        connections: int,
        variants: int,
        method: str,
        floor_acks: bool,
        cpus: str,
    ) -> None:
        self.nodes = nodes
        self.workers: list[bi.WorkerProcess] = []
        processes = max(1, min(processes, nodes))
        targets = target.split(",")  # several relays: process k streams to relay k % their number
        if len(targets) > processes:
            raise BenchError(f"{len(targets)} relays need as many load processes (--load-processes), not {processes}")
        for k in range(processes):
            target = targets[k % len(targets)]
            first, end = nodes * k // processes, nodes * (k + 1) // processes
            conns = max(1, connections // processes) if connections else 0
            w = bi.WorkerProcess(target, end - first, conns, variants)
            w.argv = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                "--target",
                target,
                "--first",
                str(first),
                "--count",
                str(end - first),
                "--connections",
                str(conns),
                "--variants",
                str(variants),
                "--method",
                method,
                "--cpus",
                cpus,
                *(["--floor-acks"] if floor_acks else []),
            ]
            w.log_path = OUT_DIR / f"fleet_scale-load-{tag}-{k}.log"
            self.workers.append(w)

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    async def start(self, timeout_s: float) -> float:
        """Open every stream; the seconds the slowest process took."""
        try:
            answers = await asyncio.gather(*(w.start(timeout_s) for w in self.workers))
        except BaseException:
            await self.stop()
            raise
        return max(a["open_s"] for a in answers)

    async def command(self, **cmd: Any) -> dict[str, Any]:
        answers = await asyncio.gather(*(w.command(**cmd) for w in self.workers))
        total: dict[str, Any] = {"t": max(a["t"] for a in answers)}
        for key in ("accepted", "rejected", "late", "errors", "opened"):
            total[key] = sum(a[key] for a in answers)
        return total

    async def stop(self) -> None:
        await asyncio.gather(*(w.stop() for w in self.workers), return_exceptions=True)


# -- results ----------------------------------------------------------------------------------


@dataclass(slots=True)
class IngestRow:
    server: str  # "extender" or "floor"
    mode: str  # "idle", "gated", "light" or "paced"
    round: int  # 0: the idle row
    nodes: int
    window_s: float
    accepted: int
    late: int  # paced slots skipped: the load could not keep up (or the server)
    reports_per_s: float
    cores: float  # the server's whole tree
    main_cores: float  # the extender's main process (the floor: all of it)
    worker_cores: float  # the extender's ingest workers (the floor: 0)
    us_per_report: float
    main_us_per_report: float
    worker_us_per_report: float
    marginal_us_per_report: float  # (cores - the idle row's cores) per report
    marginal_main_us_per_report: float  # the main process's, likewise
    expected_per_s: float  # what the load would send if nothing fell behind
    client_cores: float
    client_us_per_report: float
    background_cores: float
    pids_changed: bool = False  # a process of the tree ended or started during the window
    relay_us_per_report: float = 0.0  # "relayed": the relay's share of us_per_report (in worker_us too)


@dataclass(slots=True)
class LatencyRow:
    scenario: str
    names: int
    phase: str  # "quiet" or "loaded" (light, or gated: latency_row)
    round: int
    filter_p50_ms: float
    filter_p99_ms: float
    prioritize_p50_ms: float
    prioritize_p99_ms: float
    prioritize_sent: int
    filter_server_ms: float
    prioritize_server_ms: float
    reports_per_s: float
    extender_cores: float
    client_cores: float
    background_cores: float
    server: str = "extender"  # or "relayed": the extender behind a relay (its ingest on the relay's CPUs)


@dataclass(slots=True)
class Memory:
    rss_idle_kib: int = 0  # no agent connected
    pss_idle_kib: int = 0
    rss_open_kib: int = 0  # every stream open (one report each), before the load
    pss_open_kib: int = 0
    rss_end_kib: int = 0
    pss_end_kib: int = 0
    main_rss_idle_kib: int = 0  # the extender's main process alone (a floor: its first process)
    main_rss_open_kib: int = 0

    def per_node_bytes(self, nodes: int) -> float:
        return 1024 * (self.rss_open_kib - self.rss_idle_kib) / nodes

    def main_per_node_bytes(self, nodes: int) -> float:
        return 1024 * (self.main_rss_open_kib - self.main_rss_idle_kib) / nodes


@dataclass(slots=True)
class SizeResult:
    nodes: int
    candidates: int  # what kube-scheduler sends to filter at this size
    connections: str  # "per-agent" or "C shared"
    open_s: dict[str, float] = field(default_factory=dict)  # per server: every stream open
    memory: dict[str, Memory] = field(default_factory=dict)  # per server
    ingest: list[IngestRow] = field(default_factory=list)
    latency: list[LatencyRow] = field(default_factory=list)
    affinity: dict[str, dict[int, str]] = field(default_factory=dict)
    wall_s: float = 0.0
    summary: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class FleetScaleResult:
    started_utc: str
    commit: str
    machine: dict[str, str]
    args: dict[str, Any]
    extender_cpus: str
    load_cpus: str
    ingest_workers: int
    floor_processes: int
    load_processes: int
    apply_nodes: int = 0
    apply_reports_per_core: float = 0.0
    sizes: list[SizeResult] = field(default_factory=list)
    finished_utc: str = ""


# -- measuring ----------------------------------------------------------------------------------


class Meter:
    """Over one window: the load's counts, the server's CPU (main process and the rest of its
    tree), the load's CPU, and what other processes used."""

    def __init__(self, load: LoadGroup, roots: list[int], main_pid: int | None, relay_pids: Sequence[int] = ()) -> None:
        self.load, self.roots, self.main_pid, self.relay_pids = load, roots, main_pid, relay_pids

    def _pids(self) -> set[int]:
        return {p for r in self.roots for p in tree_pids(r)}

    def _ticks(self) -> tuple[int, int, int, int]:
        total = sum(tree_cpu_ticks(r) for r in self.roots)
        main = cpu_ticks(self.main_pid) if self.main_pid is not None else total
        client = sum(cpu_ticks(p) for p in self.load.pids)
        relay = sum(tree_cpu_ticks(r) for r in self.relay_pids)
        return total, main, client, relay

    async def begin(self) -> None:
        self.s0 = await self.load.command(cmd="stats")
        self.pids0 = self._pids()
        self.k0 = self._ticks()
        self.t0 = time.monotonic()
        self.bg = BackgroundLoad(*self.pids0, *self.load.pids)

    async def end(self) -> dict[str, Any]:
        s1 = await self.load.command(cmd="stats")
        k1 = self._ticks()
        wall = time.monotonic() - self.t0
        total, main, client, relay = ((b - a) / CLOCK_TICKS / wall for a, b in zip(self.k0, k1, strict=True))
        accepted = s1["accepted"] - self.s0["accepted"]
        if s1["rejected"] > self.s0["rejected"]:
            raise BenchError(f"{s1['rejected'] - self.s0['rejected']} reports rejected")
        return {
            "wall": wall,
            "accepted": accepted,
            "late": s1["late"] - self.s0["late"],
            "rate": accepted / max(1e-9, s1["t"] - self.s0["t"]),
            "cores": total,
            "main_cores": main,
            "worker_cores": max(0.0, total - main),
            "client_cores": client,
            "relay_cores": relay,
            "bg_cores": self.bg.cores(),
            "pids_changed": self._pids() != self.pids0,
        }


def _per(cores: float, rate: float) -> float:
    return 1e6 * cores / rate if rate > 0 else float("nan")


async def set_load(load: LoadGroup, mode: str, args: argparse.Namespace) -> float:
    """Switch the load's mode; the settle time it needs."""
    await load.command(
        cmd="mode",
        mode=mode,
        vary=True,
        interval=1.0,
        change_rate=args.change_rate,
        heartbeat=args.heartbeat,
    )
    if mode == "idle":  # a server that fell behind still has a report in flight per stream: drained first
        deadline = time.monotonic() + 60
        last = (await load.command(cmd="stats"))["accepted"]
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            now = (await load.command(cmd="stats"))["accepted"]
            if now == last:
                break
            last = now
        return args.settle
    # gated: each node's first heartbeat falls within one period; paced: a stream waiting on its
    # gated heartbeat takes the new mode then
    return max(args.settle, args.heartbeat)


@dataclass(slots=True)
class Target:
    """One server under test: its processes (the extender: one, with its workers below it; a
    floor: --floor-processes on one port), the roots of its process trees, its load."""

    kind: str
    processes: list[ManagedProcess]
    main_pid: int | None  # the extender's main process (None: a floor, all of it counts as "main")
    grpc_target: str
    addrs: ExtenderAddrs | None = None
    load: LoadGroup | None = None

    @property
    def roots(self) -> list[int]:
        return [p.pid for p in self.processes]

    def check_alive(self) -> None:
        for p in self.processes:
            p.check_alive()


async def ingest_row(
    target: Target, mode: str, round_no: int, idle: IngestRow | None, args: argparse.Namespace
) -> IngestRow:
    """One window of `mode` load on `target` (the other targets' loads idle), then its load idle again."""
    load = target.load
    assert load is not None
    nodes = load.nodes
    await asyncio.sleep(await set_load(load, mode, args))
    meter = Meter(load, target.roots, target.main_pid, target.roots[1:] if target.kind == "relayed" else [])
    await meter.begin()
    await asyncio.sleep(args.window if mode != "idle" else max(2.0, args.window / 2))
    m = await meter.end()
    if mode != "idle":
        await set_load(load, "idle", args)  # drained: the next row measures another server alone
    target.check_alive()
    rate = m["rate"]
    per_node = bi.gated_expected_per_node(args.change_rate, args.heartbeat, 1.0) if mode in bi.GATED else 1.0
    row = IngestRow(
        server=target.kind,
        mode=mode,
        round=round_no,
        nodes=nodes,
        window_s=m["wall"],
        accepted=m["accepted"],
        late=m["late"],
        reports_per_s=rate,
        cores=m["cores"],
        main_cores=m["main_cores"],
        worker_cores=m["worker_cores"],
        us_per_report=_per(m["cores"], rate),
        main_us_per_report=_per(m["main_cores"], rate),
        worker_us_per_report=_per(m["worker_cores"], rate),
        marginal_us_per_report=_per(m["cores"] - (idle.cores if idle else 0.0), rate),
        marginal_main_us_per_report=_per(m["main_cores"] - (idle.main_cores if idle else 0.0), rate),
        expected_per_s=0.0 if mode == "idle" else nodes * per_node,
        client_cores=m["client_cores"],
        client_us_per_report=_per(m["client_cores"], rate),
        background_cores=m["bg_cores"],
        pids_changed=m["pids_changed"],
        relay_us_per_report=_per(m["relay_cores"], rate),
    )
    relay = f", relay {row.relay_us_per_report:.1f}" if row.relay_us_per_report else ""
    print(
        f"  {nodes} {target.kind:<11} {mode:<5} r{round_no}: {rate:7.0f} reports/s, {100 * row.cores:5.1f} % of a "
        f"core ({row.us_per_report:6.1f} us/report{relay}), "
        f"load {100 * row.client_cores:5.1f} %, "
        f"bg {row.background_cores:.2f}",
        file=sys.stderr,
        flush=True,
    )
    return row


async def latency_row(
    session: aiohttp.ClientSession,
    target: Target,
    scenario: bx.Scenario,
    fleet: list[bx.NodeState],
    pod: dict[str, Any],
    phase: str,
    round_no: int,
    args: argparse.Namespace,
) -> LatencyRow:
    load, extender, addrs = target.load, target.processes[0], target.addrs
    assert load is not None and addrs is not None
    # Loaded: the shipped agents' load (light heartbeats) unless --modes leaves it out.
    loaded = "light" if "light" in args.modes else "gated"
    await asyncio.sleep(await set_load(load, loaded if phase == "loaded" else "idle", args))
    meter = Meter(load, target.roots, target.main_pid)
    await meter.begin()
    res = await bx.run_scenario(session, extender, addrs, scenario, fleet, pod, prioritize_all=False, progress=False)
    m = await meter.end()
    f, p = res.verbs
    row = LatencyRow(
        scenario=scenario.name,
        names=scenario.nodes,
        phase=phase,
        round=round_no,
        filter_p50_ms=f.p50_ms,
        filter_p99_ms=f.p99_ms,
        prioritize_p50_ms=p.p50_ms,
        prioritize_p99_ms=p.p99_ms,
        prioritize_sent=p.nodes_sent,
        filter_server_ms=f.server_mean_ms,
        prioritize_server_ms=p.server_mean_ms,
        reports_per_s=m["rate"],
        extender_cores=m["cores"],
        client_cores=m["client_cores"],
        background_cores=m["bg_cores"],
        server=target.kind,
    )
    print(
        f"  {target.kind:<8} {scenario.name:<11} {phase:<6} round {round_no}: filter p99 {f.p99_ms:6.2f} ms, "
        f"prioritize p99 {p.p99_ms:6.2f} ms, ingest {m['rate']:5.0f}/s, bg {m['bg_cores']:.2f}",
        file=sys.stderr,
        flush=True,
    )
    return row


def _connections_label(args: argparse.Namespace) -> str:
    return f"{args.connections} shared" if args.connections else "per-agent"


async def floor_server_main(port: int, kind: str) -> int:
    """A floor server with the extender's gRPC server options: bench_grpc_floor.serve's handler
    (copied: that one takes grpc's defaults), grpc_options of gpuextender/extender/ingest/server.py
    as one of several workers on a port (HTTP/2 BDP probing off, SO_REUSEPORT on, ...); for a step
    (STEPS), that server with its part of the extender's work."""
    try:
        from gpuextender.extender.flags import build_config
        from gpuextender.extender.ingest.server import grpc_options

        options = grpc_options(build_config([], env={}), False, True)
    except (ImportError, TypeError) as exc:
        print(f"the extender's grpc options: {exc}; using bench_grpc_floor's defaults", flush=True)
        options = []

    async def handler(requests: Any, context: Any) -> Any:
        async for _ in requests:
            yield floor.ACK

    codec: dict[str, Any] = {}
    if kind in STEPS:
        handler = _step_handler(kind)
        codec = {
            "request_deserializer": pb.NodeReport.FromString,
            "response_serializer": None,  # the service's acks are bytes (ingest.service.add_to_server)
        }
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "floor", {"Stream": grpc.stream_stream_rpc_method_handler(handler, **codec)}
            )
        ]
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"options {options}", flush=True)
    print("ready", flush=True)
    await server.wait_for_termination()
    return 0


def _step_handler(kind: str) -> Any:
    """The stream handler of a step (STEPS), on the running loop."""
    from gpuextender.extender.flags import build_config
    from gpuextender.extender.ingest.limits import FLUSH_S
    from gpuextender.extender.ingest.service import IngestService
    from gpuextender.extender.observe.ingest_metrics import IngestMetrics
    from gpuextender.extender.workers.summary_store import SummaryStore

    class LoopOnly(IngestService):  # floor-loop: the stream loop and its ack; nothing checked or stored
        def _answer(self, report: Any, stream: Any) -> bytes:
            return self.accepted_ack(report.sequence)

    class Unchecked(IngestService):  # floor-unchecked: all of it but the checks (_problem)
        def _problem(self, report: Any, node: Any, last_sequence: int, last_full: int) -> tuple[str, None]:
            return "", None

    config = build_config(["--stale-after", "100000", "--forget-after", "200000"], env={})
    store = SummaryStore(config.idle_rule)
    kinds = {"floor-loop": LoopOnly, "floor-unchecked": Unchecked}
    service = kinds.get(kind, IngestService)(store, IngestMetrics(), stale_after_s=config.api.policy.stale_after_s)
    if kind == "floor-pb":
        accepted_ack = service.accepted_ack  # the extender's own ack, nothing else of the service

        async def parsed(requests: Any, context: Any) -> Any:
            async for report in requests:
                yield accepted_ack(report.sequence)

        return parsed

    async def drop() -> None:  # what a worker's send loop takes, every FLUSH_S, sent nowhere
        while True:
            await asyncio.sleep(FLUSH_S)
            store.take()

    _background.append(asyncio.get_running_loop().create_task(drop()))
    return service.StreamNodeReports


_background: list[asyncio.Task[None]] = []  # held: the loop keeps only weak references to tasks


async def start_target(
    kind: str,
    args: argparse.Namespace,
    ext_cpus: set[int] | None,
    session: aiohttp.ClientSession,
    stack: contextlib.AsyncExitStack,
) -> Target:
    """Start a server (stopped when `stack` closes) and wait until it serves. "extender": the real
    gpu-extender; "floor": bench_grpc_floor.py's server itself (grpc's default options);
    "floor-xopts": that handler with the extender's gRPC server options (floor_server_main)."""
    if kind in ("extender", "relayed"):
        addrs = ExtenderAddrs(http_port=free_port(), grpc_port=free_port())
        argv = extender_argv(addrs, ["--ingest-workers", str(args.ingest_workers), *args.extender_arg])
        extender = stack.enter_context(PinnedProcess(f"fleet_scale-{kind}", argv, ext_cpus))
        await wait_http_ok(session, f"{addrs.base_url}/readyz", extender, timeout_s=60)
        if kind == "extender":
            return Target(kind, [extender], extender.pid, addrs.grpc_target, addrs)
        # Relays run elsewhere than the extender (other nodes): on --relay-cpus, the load's by default.
        relay_cpus = parse_cpus(args.relay_cpus or args.load_cpus)
        relays, targets = [], []
        for k in range(args.relays):
            port = free_port()
            relay_argv = [sys.executable, "-m", "gpuextender.extender", "relay", "--extender", addrs.grpc_target]
            relay_argv += ["--grpc-addr", f"127.0.0.1:{port}", "--metrics-addr", ""]
            relay = stack.enter_context(PinnedProcess(f"fleet_scale-relay-{k}", relay_argv, relay_cpus))
            deadline = time.monotonic() + 30
            while "relay stream to extender" not in relay.log_path.read_text(errors="replace"):
                relay.check_alive()
                if time.monotonic() > deadline:
                    raise BenchError(f"the relay did not reach the extender; log:\n{relay.log_tail()}")
                await asyncio.sleep(0.05)
            relays.append(relay)
            targets.append(f"127.0.0.1:{port}")
        # The load processes take the relays in turn (LoadGroup): each agent on one relay.
        return Target(kind, [extender, *relays], extender.pid, ",".join(targets), addrs)
    port = free_port()
    if kind == "floor":
        argv = [
            sys.executable,
            floor.__file__,
            "--role",
            "server",
            "--variant",
            "per-agent",  # acks every report (the connections are the load's choice)
            "--port",
            str(port),
            "--settle",
            "1e9",  # serve() measures nothing of its own here: it serves until stopped
            "--window",
            "1",
        ]
    else:
        argv = [sys.executable, str(Path(__file__).resolve()), "--floor-server", kind, "--port", str(port)]
    servers: list[ManagedProcess] = []
    for k in range(args.floor_processes):  # one after the other: each listens before the next binds
        s = stack.enter_context(PinnedProcess(f"fleet_scale-{kind}-{k}", argv, ext_cpus))
        servers.append(s)
        deadline = time.monotonic() + 30
        while "ready" not in s.log_path.read_text(errors="replace"):
            s.check_alive()
            if time.monotonic() > deadline:
                raise BenchError(f"{s.name} did not say ready; log:\n{s.log_tail()}")
            await asyncio.sleep(0.05)
    return Target(kind, servers, None, f"127.0.0.1:{port}")


def memory_parts(target: Target) -> list[tuple[str, list[int]]]:
    """Whose memory is counted under which name: a relayed extender's apart from its relay's."""
    if target.kind == "relayed":
        return [("relayed", target.roots[:1]), ("relay", target.roots[1:])]
    return [(target.kind, target.roots)]


async def open_load(
    target: Target,
    nodes: int,
    size: SizeResult,
    args: argparse.Namespace,
    session: aiohttp.ClientSession,
    stack: contextlib.AsyncExitStack,
) -> None:
    """Open every stream to `target` (its load processes stop when `stack` closes); its memory then."""
    floor_acks = target.kind not in ("extender", "relayed")
    load = LoadGroup(
        f"{target.kind}-{nodes}",
        target.grpc_target,
        nodes,
        args.load_processes,
        args.connections,
        args.variants,
        FLOOR_METHOD if floor_acks else EXTENDER_METHOD,
        floor_acks,
        args.load_cpus,
    )
    stack.push_async_callback(load.stop)
    print(f"{nodes}: opening {nodes} streams to {target.kind} ({_connections_label(args)})...", file=sys.stderr)
    size.open_s[target.kind] = await load.start(args.open_timeout)
    target.load = load
    if target.addrs is not None:
        deadline = time.monotonic() + 10  # through a relay: its next message, ~50 ms later
        while (metrics := await scrape(session, f"{target.addrs.base_url}/metrics")).get(
            "gpu_extender_nodes_with_data"
        ) != float(nodes) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        if metrics.get("gpu_extender_nodes_with_data") != float(nodes):
            raise BenchError(
                f"extender has data for {metrics.get('gpu_extender_nodes_with_data')} nodes, expected {nodes}"
            )
    await asyncio.sleep(args.settle)
    for name, roots in memory_parts(target):
        mem = size.memory[name]
        mem.rss_open_kib, mem.pss_open_kib = tree_memory(roots)
        mem.main_rss_open_kib = memory_kib(roots[0]).get("VmRSS", 0)
    size.affinity[target.kind] = affinity_of([p for r in target.roots for p in tree_pids(r)])
    size.affinity[f"{target.kind} load"] = affinity_of(load.pids)


async def measure_size(nodes: int, args: argparse.Namespace, ext_cpus: set[int] | None) -> SizeResult:
    """Every server up with its streams open at once; the ingest rows of the servers back to back
    per mode (the order reversed every other round: the machine's drift falls on both sides);
    then the extender's latency rounds."""
    started = time.monotonic()
    size = SizeResult(nodes, scheduler_candidates(nodes), _connections_label(args))
    size.affinity["latency client"] = affinity_of([os.getpid()])
    connector = aiohttp.TCPConnector(limit=1, force_close=False)
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(
            aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120))
        )
        targets = [await start_target(kind, args, ext_cpus, session, stack) for kind in args.servers]
        await asyncio.sleep(1.0)
        for t in targets:  # no agent connected yet
            for name, roots in memory_parts(t):
                mem = size.memory[name] = Memory()
                mem.rss_idle_kib, mem.pss_idle_kib = tree_memory(roots)
                mem.main_rss_idle_kib = memory_kib(roots[0]).get("VmRSS", 0)
        for t in targets:
            await open_load(t, nodes, size, args, session, stack)
        idle: dict[str, IngestRow] = {}
        for t in targets:
            idle[t.kind] = await ingest_row(t, "idle", 0, None, args)
            size.ingest.append(idle[t.kind])
        for round_no in range(1, args.ingest_rounds + 1):
            order = targets if round_no % 2 else targets[::-1]
            for mode in args.modes:
                for t in order:
                    size.ingest.append(await ingest_row(t, mode, round_no, idle[t.kind], args))
        for ext in (t for t in targets if t.kind in ("extender", "relayed")):
            if args.rounds <= 0:
                break
            fleet = bx.make_fleet(nodes)
            pod = bx.load_pod()
            scenarios = [bx.Scenario(f"names-{nodes}", "names", nodes, args.iterations, args.warmup)]
            if size.candidates != nodes:
                scenarios.append(
                    bx.Scenario(f"names-{size.candidates}", "names", size.candidates, args.iterations, args.warmup)
                )
            for round_no in range(1, args.rounds + 1):
                for scenario in scenarios:
                    for phase in ("quiet", "loaded"):
                        size.latency.append(
                            await latency_row(session, ext, scenario, fleet, pod, phase, round_no, args)
                        )
            assert ext.load is not None and ext.addrs is not None
            await set_load(ext.load, "idle", args)
            final = await scrape(session, f"{ext.addrs.base_url}/metrics")
            rejected = final.get('gpu_extender_reports_total{result="rejected"}', 0.0)
            if rejected:
                raise BenchError(f"the extender counted {rejected:.0f} rejected reports")
        for t in targets:
            t.check_alive()
            for name, roots in memory_parts(t):
                mem = size.memory[name]
                mem.rss_end_kib, mem.pss_end_kib = tree_memory(roots)
    size.wall_s = time.monotonic() - started
    size.summary = summarize(size)
    return size


def _key(server: str) -> str:
    return server.replace("-", "_")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(size: SizeResult) -> dict[str, float]:
    """Flat figures: the extender's CPU per report against each floor's (the goal's: "floor"), the
    ratio per round (the two measured back to back) and its median; memory; latency medians."""
    s: dict[str, float] = {"nodes": size.nodes, "candidates": size.candidates}
    by = {(r.server, r.mode, r.round): r for r in size.ingest}
    rounds = sorted({r.round for r in size.ingest if r.mode != "idle"})
    for mode in MODES:
        for kind in STEPS:  # each step against floor-xopts, round by round
            pairs = [(by[(kind, mode, n)], by.get(("floor-xopts", mode, n))) for n in rounds if (kind, mode, n) in by]
            if pairs:
                key = f"{mode}_{_key(kind)}"
                s[f"{key}_us_per_report"] = _median([step.us_per_report for step, _ in pairs])
                ratios = [step.us_per_report / f.us_per_report for step, f in pairs if f is not None]
                if ratios:
                    s[f"{key}_floor_xopts_ratio"] = _median(ratios)
        relayed = [by[("relayed", mode, n)] for n in rounds if ("relayed", mode, n) in by]
        if relayed:  # the extender's share behind a relay, and the relay's
            s[f"{mode}_relayed_us_per_report"] = _median([r.us_per_report for r in relayed])
            s[f"{mode}_relayed_relay_us_per_report"] = _median([r.relay_us_per_report for r in relayed])
            s[f"{mode}_relayed_extender_us_per_report"] = _median(
                [r.us_per_report - r.relay_us_per_report for r in relayed]
            )
        ext = [by[("extender", mode, n)] for n in rounds if ("extender", mode, n) in by]
        if not ext:
            continue
        s[f"{mode}_extender_reports_per_s"] = _median([r.reports_per_s for r in ext])
        s[f"{mode}_extender_us_per_report"] = _median([r.us_per_report for r in ext])
        s[f"{mode}_extender_main_us_per_report"] = _median([r.main_us_per_report for r in ext])
        s[f"{mode}_extender_workers_us_per_report"] = _median([r.worker_us_per_report for r in ext])
        for kind in FLOORS:
            pairs = [(by[("extender", mode, n)], by[(kind, mode, n)]) for n in rounds if (kind, mode, n) in by]
            if not pairs:
                continue
            key = f"{mode}_{_key(kind)}"
            s[f"{key}_reports_per_s"] = _median([f.reports_per_s for _, f in pairs])
            s[f"{key}_us_per_report"] = _median([f.us_per_report for _, f in pairs])
            s[f"{key}_ratio"] = _median([e.us_per_report / f.us_per_report for e, f in pairs])
            s[f"{key}_marginal_ratio"] = _median(
                [e.marginal_us_per_report / f.marginal_us_per_report for e, f in pairs]
            )
    for server, mem in size.memory.items():
        key = _key(server)
        s[f"{key}_rss_idle_mib"] = mem.rss_idle_kib / 1024
        s[f"{key}_rss_open_mib"] = mem.rss_open_kib / 1024
        s[f"{key}_rss_end_mib"] = mem.rss_end_kib / 1024
        s[f"{key}_pss_open_mib"] = mem.pss_open_kib / 1024
        s[f"{key}_bytes_per_node"] = mem.per_node_bytes(size.nodes)
        s[f"{key}_main_bytes_per_node"] = mem.main_per_node_bytes(size.nodes)
        s[f"{key}_rss_at_20000_mib"] = (mem.rss_idle_kib * 1024 + mem.per_node_bytes(size.nodes) * GOAL_SIZE) / 1024**2
    for server, prefix in (("extender", ""), ("relayed", "relayed_")):
        for names, tag in ((size.nodes, "all"), (size.candidates, "candidates")):
            tag = prefix + tag
            for phase in ("quiet", "loaded"):
                runs = [x for x in size.latency if x.server == server and x.names == names and x.phase == phase]
                for attr in ("filter_p50_ms", "filter_p99_ms", "prioritize_p50_ms", "prioritize_p99_ms"):
                    s[f"{tag}_{phase}_{attr}"] = _median([getattr(x, attr) for x in runs])
            for verb in ("filter", "prioritize"):
                quiet, loaded = s[f"{tag}_quiet_{verb}_p99_ms"], s[f"{tag}_loaded_{verb}_p99_ms"]
                s[f"{tag}_{verb}_p99_ratio"] = loaded / quiet if quiet > 0 else float("nan")
    return s


def _commit() -> str:
    """GPUEXT_COMMIT where set (a device machine's copy of the tree may carry an older .git than
    the code it was sent: bench/device_fleet_scale.sh), else the checkout's HEAD."""
    given = os.environ.get("GPUEXT_COMMIT")
    if given:
        return given
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return head + (" (+ uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


async def _run(args: argparse.Namespace, result: FleetScaleResult) -> None:
    ext_cpus, load_cpus = parse_cpus(args.extender_cpus), parse_cpus(args.load_cpus)
    if load_cpus:
        os.sched_setaffinity(0, load_cpus)  # the latency client (this process) with the load
    for nodes in args.sizes:
        result.sizes.append(await measure_size(nodes, args, ext_cpus))


# -- the report ------------------------------------------------------------------------------------


def _f(value: float, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def format_report(r: FleetScaleResult) -> str:
    lines = [
        f"bench_fleet_scale: {r.started_utc} .. {r.finished_utc}; commit {r.commit}",
        f"machine: {r.machine['cpu']}, {r.machine['cores']} usable cores, {r.machine['memory']}, "
        f"Python {r.machine['python']}, {r.machine['os']}",
        f"CPUs: extender (and floor) {r.extender_cpus}; load ({r.load_processes} process(es)) and latency client "
        f"{r.load_cpus}; --ingest-workers {r.ingest_workers}; floor processes {r.floor_processes}",
        f"load: bench_ingest's agents, 8-GPU varied reports; gated p = {r.args['change_rate']:g}, heartbeat "
        f"{r.args['heartbeat']:g} s, 1 s samples; paced: every node every 1 s; {r.args['window']:g} s windows; "
        f"connections: {r.sizes[0].connections if r.sizes else '-'}",
    ]
    for size in r.sizes:
        lines.append(f"CPUs had, {size.nodes} nodes (pid: list):")
        for who, pids in size.affinity.items():
            lines.append(f"  {who:<17} " + ", ".join(f"{pid}: {cpus}" for pid, cpus in pids.items()))
    head = (
        f"{'nodes':>6} {'server':<11} {'mode':<5} {'rnd':>3} {'expect/s':>8} {'reports/s':>9} {'%core':>6} "
        f"{'us/rep':>7} "
        f"{'main us':>7} {'wrk us':>7} {'marg us':>7} {'m main':>7} {'load %':>6} {'load us':>7} {'skipped':>7} "
        f"{'bg':>5}"
    )
    lines += [
        "",
        "1. ingest: CPU of the server's process tree per accepted report (us/rep = main + wrk; marg = less the "
        "idle row's CPU; floors: all in 'main'; load = the load processes; skipped = paced slots missed)",
        head,
        "-" * len(head),
    ]
    for size in r.sizes:
        for row in size.ingest:
            lines.append(
                f"{row.nodes:>6} {row.server:<11} {row.mode:<5} {row.round:>3} {row.expected_per_s:>8.0f} "
                f"{row.reports_per_s:>9.0f} "
                f"{100 * row.cores:>6.1f} {_f(row.us_per_report, '7.1f'):>7} {_f(row.main_us_per_report, '7.1f'):>7} "
                f"{_f(row.worker_us_per_report, '7.1f'):>7} {_f(row.marginal_us_per_report, '7.1f'):>7} "
                f"{_f(row.marginal_main_us_per_report, '7.1f'):>7} {100 * row.client_cores:>6.1f} "
                f"{_f(row.client_us_per_report, '7.1f'):>7} {row.late:>7} {row.background_cores:>5.2f}"
                + ("  (a process of the tree changed)" if row.pids_changed else "")
            )
    head = (
        f"{'nodes':>6} {'server':<11} {'RSS 0':>6} {'RSS N':>6} {'RSS end':>7} {'PSS N':>6} {'B/node':>7} "
        f"{'main B/node':>11} {'@20k est':>8} {'open s':>6}"
    )
    lines += [
        "",
        "2. memory of the server's process tree (MiB; B/node = (RSS with N streams open - RSS with none) / N; "
        "main: the extender's main process alone, the rest is its workers'; @20k est = RSS 0 + B/node x 20,000)",
        head,
        "-" * len(head),
    ]
    for size in r.sizes:
        for server, mem in size.memory.items():
            est = (mem.rss_idle_kib * 1024 + mem.per_node_bytes(size.nodes) * GOAL_SIZE) / 1024**2
            lines.append(
                f"{size.nodes:>6} {server:<11} {mem.rss_idle_kib / 1024:>6.0f} {mem.rss_open_kib / 1024:>6.0f} "
                f"{mem.rss_end_kib / 1024:>7.0f} {mem.pss_open_kib / 1024:>6.0f} "
                f"{mem.per_node_bytes(size.nodes):>7.0f} "
                f"{_f(mem.main_per_node_bytes(size.nodes) if server == 'extender' else math.nan, '.0f'):>11} "
                f"{est:>8.0f} {size.open_s.get(server, 0.0):>6.1f}"
            )
    head = (
        f"{'nodes':>6} {'scenario':<11} {'phase':<6} {'rnd':>3} {'filt p50':>8} {'filt p99':>8} {'prio p50':>8} "
        f"{'prio p99':>8} {'prio n':>6} {'srv f':>6} {'srv p':>6} {'ingest/s':>8} {'ext %':>6} {'bg':>5}"
    )
    lines += [
        "",
        "3. scheduling (ms; filter with all the names, prioritize with what filter passed; "
        f"{r.args['iterations']} pairs a run)",
        head,
        "-" * len(head),
    ]
    for size in r.sizes:
        for x in size.latency:
            lines.append(
                f"{size.nodes:>6} {x.scenario + (' (relayed)' if x.server == 'relayed' else ''):<11} {x.phase:<6} "
                f"{x.round:>3} {x.filter_p50_ms:>8.2f} "
                f"{x.filter_p99_ms:>8.2f} {x.prioritize_p50_ms:>8.2f} {x.prioritize_p99_ms:>8.2f} "
                f"{x.prioritize_sent:>6} {x.filter_server_ms:>6.2f} {x.prioritize_server_ms:>6.2f} "
                f"{x.reports_per_s:>8.0f} {100 * x.extender_cores:>6.1f} {x.background_cores:>5.2f}"
            )
    lines += [
        "",
        f"4. main process apply rate (in-process, {r.apply_nodes}-node frames, best of 5): "
        f"{r.apply_reports_per_core:,.0f} reports/s per core (goal >= {GOAL_APPLY_PER_CORE:,.0f})",
        "",
        "issue 36 goals, per size",
    ]
    for size in r.sizes:
        s = size.summary
        lines.append(f"  {size.nodes} nodes ({size.connections} connections; kube-scheduler sends {size.candidates}):")
        for mode in MODES:
            for kind in FLOORS:
                key = f"{mode}_{_key(kind)}"
                if f"{key}_ratio" not in s:
                    continue
                lines.append(
                    f"    ingest {mode:<5}: extender {s[f'{mode}_extender_us_per_report']:.1f} us/report (main "
                    f"{s[f'{mode}_extender_main_us_per_report']:.1f}, workers "
                    f"{s[f'{mode}_extender_workers_us_per_report']:.1f}) / {kind} {s[f'{key}_us_per_report']:.1f}"
                    f" = x{s[f'{key}_ratio']:.2f} (marginal x{s[f'{key}_marginal_ratio']:.2f}; goal <= "
                    f"x{GOAL_INGEST_RATIO:g}{'' if mode in bi.GATED else '; worst case'})"
                )
        for mode in MODES:
            steps = [
                f"{kind} {s[f'{mode}_{_key(kind)}_us_per_report']:.1f} us/report (x{s[key]:.2f})"
                for kind in STEPS
                if (key := f"{mode}_{_key(kind)}_floor_xopts_ratio") in s
            ]
            if steps:
                lines.append(f"    steps {mode:<5} (x of floor-xopts, same rounds): {'; '.join(steps)}")
        if "extender_rss_open_mib" in s:
            floors = ", ".join(f"{k} {s[f'{_key(k)}_bytes_per_node']:,.0f}" for k in FLOORS if k in size.memory)
            lines.append(
                f"    RSS with {size.nodes} streams: {s['extender_rss_open_mib']:.0f} MiB "
                f"({s['extender_bytes_per_node']:,.0f} B/node; {floors or 'no floor'}); linear at 20,000: "
                f"{s['extender_rss_at_20000_mib']:.0f} MiB (goal <= {GOAL_RSS_MIB:g} at 20,000)"
            )
        if "relayed_rss_open_mib" in s:
            lines.append(
                f"    behind a relay: the extender {s['relayed_rss_open_mib']:.0f} MiB with {size.nodes} agents "
                f"({s['relayed_bytes_per_node']:,.0f} B/node; linear at 20,000: {s['relayed_rss_at_20000_mib']:.0f} "
                f"MiB), the relay {s['relay_rss_open_mib']:.0f} MiB ({s['relay_bytes_per_node']:,.0f} B/node)"
            )
            for mode in MODES:
                if f"{mode}_relayed_us_per_report" in s:
                    lines.append(
                        f"    behind a relay, {mode:<5}: {s[f'{mode}_relayed_us_per_report']:.1f} us/report, of which "
                        f"the extender {s[f'{mode}_relayed_extender_us_per_report']:.1f} and the relay "
                        f"{s[f'{mode}_relayed_relay_us_per_report']:.1f}"
                    )
        for tag, names in (
            *(("all", size.nodes), ("candidates", size.candidates)),
            *(("relayed_all", size.nodes), ("relayed_candidates", size.candidates)),
        ):
            if (tag.endswith("candidates") and names == size.nodes) or math.isnan(s[f"{tag}_quiet_filter_p99_ms"]):
                continue
            lines.append(
                f"    {'behind a relay, ' if tag.startswith('relayed') else ''}filter {names:>5} names p99 quiet "
                f"{s[f'{tag}_quiet_filter_p99_ms']:.2f} ms, loaded "
                f"{s[f'{tag}_loaded_filter_p99_ms']:.2f} ms = x{s[f'{tag}_filter_p99_ratio']:.2f}; prioritize p99 "
                f"{s[f'{tag}_quiet_prioritize_p99_ms']:.2f} / {s[f'{tag}_loaded_prioritize_p99_ms']:.2f} ms = "
                f"x{s[f'{tag}_prioritize_p99_ratio']:.2f} (goals: filter p99 <= {GOAL_FILTER_P99_MS:g} ms at 20,000 "
                f"names, ratios <= x{GOAL_P99_RATIO:g}; medians of rounds)"
            )
        lines.append(f"    ({size.wall_s:.0f} s for this size)")
    return "\n".join(lines)


# -- command line ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, its defaults filled in (bench/device_fleet_scale.sh's is checked here:
    tests/bench/test_device_fleet_scale.py)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes 500,1000, 3 s windows, 1 round: a smoke check")
    parser.add_argument("--sizes", help="fleet sizes, comma-separated (default 1000,5000,10000; --quick 500,1000)")
    ext_default, load_default = default_cpus()
    parser.add_argument(
        "--extender-cpus", default=ext_default, help=f"the extender's and the floor's CPUs (default {ext_default})"
    )
    parser.add_argument(
        "--load-cpus", default=load_default, help=f"the load's and latency client's CPUs (default {load_default})"
    )
    parser.add_argument("--relays", type=int, default=1, help="relays in front of the extender for --servers relayed")
    parser.add_argument(
        "--relay-cpus",
        help="the relay's CPUs for --servers relayed (default: --load-cpus: a relay runs on other nodes)",
    )
    parser.add_argument("--ingest-workers", type=int, default=1, help="gpu-extender --ingest-workers (default 1)")
    parser.add_argument("--floor-processes", type=int, help="floor server processes (default: --ingest-workers)")
    parser.add_argument("--load-processes", type=int, help="load processes (default: the load CPUs less one, 1 to 8)")
    parser.add_argument(
        "--connections", type=int, default=0, help="TCP connections the streams share (default 0: one per agent)"
    )
    parser.add_argument("--window", type=float, help="seconds measured per ingest row (default 10; --quick 3)")
    parser.add_argument("--settle", type=float, help="seconds after a mode change (default 2; --quick 1)")
    parser.add_argument("--change-rate", type=float, default=bi.DEFAULT_CHANGE_RATE, help="gated: p per sample")
    parser.add_argument("--heartbeat", type=float, default=bi.DEFAULT_HEARTBEAT_S, help="gated: heartbeat seconds")
    parser.add_argument("--variants", type=int, default=bi.DEFAULT_VARIANTS, help="versions of each report")
    parser.add_argument(
        "--modes",
        type=lambda text: tuple(m for m in text.split(",") if m),
        default=MODES,
        help=f"loaded modes measured, comma-separated, of {','.join(MODES)} (default all): gated = agents "
        "before 0.6 (every heartbeat a full report), light = 0.6 agents (light heartbeats), paced = every "
        "node every second",
    )
    parser.add_argument("--rounds", type=int, help="latency rounds (default 2; --quick 1; 0: none)")
    parser.add_argument(
        "--ingest-rounds", type=int, help="ingest rounds, gated and paced per server (default 2; --quick 1)"
    )
    parser.add_argument("--iterations", type=int, help="filter+prioritize pairs per latency run (default 300)")
    parser.add_argument("--apply-nodes", type=int, help="nodes per frame for apply_rate (default 5000; --quick 1000)")
    parser.add_argument("--open-timeout", type=float, default=600.0, help="seconds to open every stream")
    parser.add_argument(
        "--servers",
        help=f"what to measure, in this order (default {','.join(SERVERS)}): floor = bench_grpc_floor.py's server "
        "(grpc's default options), floor-xopts = its handler with the extender's gRPC server options, "
        "relayed = the extender behind a relay (docs/relay.md)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw results as JSON here")
    parser.add_argument(
        "--extender-arg", action="append", default=[], metavar="ARG", help="an extra gpu-extender flag (repeatable)"
    )
    # the load worker (internal): this script started by itself
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--method", default=EXTENDER_METHOD, help=argparse.SUPPRESS)
    parser.add_argument("--cpus", default="", help=argparse.SUPPRESS)
    parser.add_argument("--floor-acks", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--floor-server", choices=("floor-xopts", *STEPS), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker or args.floor_server:
        return args
    default_servers = "floor,extender" if args.quick else ",".join(SERVERS)
    args.servers = [x for x in (args.servers or default_servers).split(",") if x]
    if not args.servers or set(args.servers) - set(SERVERS):
        parser.error(f"--servers: a comma-separated choice of {','.join(SERVERS)}")
    if not args.modes or set(args.modes) - set(MODES):
        parser.error(f"--modes: a comma-separated choice of {','.join(MODES)}")
    args.sizes = (
        [int(x) for x in args.sizes.split(",")] if args.sizes else list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    )
    args.window = args.window or (3.0 if args.quick else 10.0)
    args.settle = args.settle if args.settle is not None else (1.0 if args.quick else 2.0)
    args.rounds = args.rounds if args.rounds is not None else (1 if args.quick else 2)
    args.ingest_rounds = args.ingest_rounds or (1 if args.quick else 2)
    args.iterations = args.iterations or (40 if args.quick else 300)
    args.warmup = 5 if args.quick else 20
    args.apply_nodes = args.apply_nodes or (1_000 if args.quick else 5_000)
    args.floor_processes = args.floor_processes or args.ingest_workers
    load_cpus = parse_cpus(args.load_cpus)
    n_load = len(load_cpus) if load_cpus else len(os.sched_getaffinity(0))
    args.load_processes = args.load_processes or max(1, min(8, n_load - 1))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return asyncio.run(worker_main(args))
    if args.floor_server:
        return asyncio.run(floor_server_main(args.port, args.floor_server))
    load_cpus = parse_cpus(args.load_cpus)
    exit_on_sigterm()
    nofile = raise_nofile()
    need = max(args.sizes) // max(1, min(args.load_processes, args.floor_processes, args.ingest_workers))
    if not args.connections and need + 512 > nofile:
        print(
            f"bench_fleet_scale: warning: {need} connections per process, descriptor limit {nofile}",
            file=sys.stderr,
        )
    result = FleetScaleResult(
        started_utc=_now(),
        commit=_commit(),
        machine=machine_facts(),
        args={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        extender_cpus=cpu_list(parse_cpus(args.extender_cpus)),
        load_cpus=cpu_list(load_cpus),
        ingest_workers=args.ingest_workers,
        floor_processes=args.floor_processes,
        load_processes=args.load_processes,
        apply_nodes=args.apply_nodes,
    )
    try:
        print(f"apply rate ({args.apply_nodes}-node frames)...", file=sys.stderr, flush=True)
        result.apply_reports_per_core = apply_rate(args.apply_nodes, 5)
        asyncio.run(_run(args, result))
    except BenchError as exc:
        print(f"bench_fleet_scale: FAILED: {exc}", file=sys.stderr)
        return 1
    result.finished_utc = _now()
    print(format_report(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(asdict(result), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
