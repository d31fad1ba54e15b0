"""Benchmark: gpu-extender's report ingest, and scheduling latency while it ingests (issue 13).

Goals (issue 13), measured here in one run:
- ingest: >= 20,000 node reports/s of 8-GPU reports per core of the extender;
  equivalently, 5,000 nodes at 1 s freshness for <= 25 % of one core. The agent
  streams through its report gate (gpuextender/agent/report/gate.py): it samples
  every 1 s but sends a report only when something decision-relevant changed, else
  a heartbeat every min(--heartbeat 3 s, the extender's stale_after 10 s / 3) = 3 s.
  The "1 s freshness" goal is measured with that load ("gated", below) at an assumed
  change rate (--change-rate, default 0.02: each node changes something decision-
  relevant on 2 % of its samples, once every ~50 s on average, so 2 % of the fleet
  per second); the raw per-core rate ("flat") and the agent before the gate ("paced",
  every node every second: the case where every sample changes) are reported too;
- scheduling under ingest: filter and prioritize p99 at 5,000 NodeNames while
  5,000 gated agents stream <= 1.2x the same without ingest;
- extender RSS (all its processes) with 5,000 agents streaming <= 150 MiB.

How:
1. starts the real `gpu-extender` (bench/benchlib.py `extender_process`; its CPU and
   RSS are those of its process tree: the HTTP process and its ingest process) and a
   load worker: this same script with `--worker`, a separate, niced process (it stands
   for agents on other machines) so that the load does not share an event loop (or a
   GIL) with the latency client. The worker simulates N agents (default 5,000, the
   nodes of bench_extender's `make_fleet`, 8 GPUs, the 0.2 report of its `node_report`):
   one long-lived StreamNodeReports stream per node, as an agent keeps, spread over
   --channels grpc.aio channels (separate TCP connections). A stream writes a report,
   reads its ack, writes the next... Every report has the stream's next sequence and
   sample_time = now. Readings: "varied" cycles each node through --variants versions
   of its report whose utilization / memory / temperature / power readings differ a
   little (never across the idle rule's or the held-GPU thresholds, so filter's
   verdicts stay those of the fleet); "quiet" sends identical readings every time
   (only sequence and sample_time change). The reports are serialized once; each write
   is those bytes plus a small serialized NodeReport with the sequence and sample_time
   (protobuf merges concatenated messages; the extender parses the same fields).
2. ingest rate, per mode, after a settle period, over a --window; each row: accepted
   reports/s, the extender's CPU (utime+stime of its process tree, /proc/PID/stat) as
   % of one core and per report, and the load worker's CPU:
   - "idle": the streams open, nothing sent: the cost of N connected agents;
   - "flat": every stream writes its next report as soon as the previous one is acked
     (the extender paces each stream at 10 reports/s, burst 10) -> reports/s per core
     of the extender (the raw per-core goal);
   - "paced": every node sends one (varied or quiet) report per --interval (1 s),
     spread evenly over the interval: the agent without the gate, i.e. every sample
     changes (worst case). When the extender cannot keep up, an ack comes back after
     the stream's next slot and the slots that passed are skipped ("skipped");
   - "gated" (varied readings), at change rates 0, --change-rate and 0.10: each node
     samples every --interval on its own phase (node i at i/N of the interval); on a
     sample, with probability p (a seeded random stream per node) it sends its next
     report variant at once (a "change"), otherwise it sends a heartbeat when
     --heartbeat has passed since its last send. Each node's first heartbeat after
     the load turns gated falls on a random sample of the heartbeat period, so the
     heartbeats are spread evenly over it, as agents started at different times are.
     Expected rate: N * p / (1 - (1 - p)^h) per second (N / h at p = 0), h = samples
     per heartbeat (3): at 5,000 nodes 1,667/s at p = 0, 1,700/s at 0.02, 1,845/s at 0.10.
   The extender's RSS is read once every stream is open (before any load) and at the end.
3. scheduling under ingest: bench_extender's `run_scenario` (names-5000: filter with
   all 5,000 names shuffled, then prioritize with those filter passed; strictly one
   request in flight over one keep-alive connection; every answer checked against
   the fleet's verdicts), per round (--rounds): with the streams open but idle
   ("quiet"), with the gated load at --change-rate ("loaded": the realistic fleet,
   the goal's ratios) and, unless --skip-paced-latency, with the paced every-second
   varied load ("paced": the worst case, reported, not a goal). Ratios are the median
   over rounds of loaded (or paced) p99 / quiet p99.

Client and server share this machine (2 cores here): the load worker's CPU is
reported next to the extender's (and "bg cores", what other processes used meanwhile).
Flat out, the worker is usually the bottleneck and the extender is not saturated;
reports/s per extender core is the rate divided by the cores it used, so it is the
extender's cost per report, not a measured maximum. Under load the latency client
competes with the worker and the extender for the 2 cores, so the loaded p99 also
includes that contention (a real extender runs on its own node). With --nodes other
than 5,000 (e.g. --quick: 500), the 5,000-node figures are linear estimates from the
idle streams' cost plus the measured cost per report.

Run: `.venv/bin/python bench/bench_ingest.py [--quick] [--nodes N] [--window S] [--change-rate P]
[--heartbeat S] [--json PATH]` (default: 5,000 nodes, 10 s windows, about 3 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from gpuextender.agent.report.light import light_heartbeat
from gpuextender.v1 import gpu_state_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_extender as bx
from benchlib import (
    CLOCK_TICKS,
    OUT_DIR,
    BackgroundLoad,
    BenchError,
    ManagedProcess,
    cpu_ticks,
    exit_on_sigterm,
    extender_process,
    machine_facts,
    scrape,
    tree_cpu_ticks,
    tree_pids,
    tree_rss_kib,
    wait_http_ok,
)

METHOD = "/gpuextender.v1.GpuStateService/StreamNodeReports"
DEFAULT_NODES = 5_000
DEFAULT_CHANNELS = 8
DEFAULT_VARIANTS = 4
OPEN_CONCURRENCY = 256  # streams opening (first report) at a time
GOAL_REPORTS_PER_CORE = 20_000.0
GOAL_PACED_CORE_PERCENT = 25.0
GOAL_P99_RATIO = 1.2
GOAL_RSS_MIB = 150.0
# The gated agent (gpuextender/agent/report/gate.py): a report when something decision-relevant
# changed, a heartbeat otherwise. Assumed fleet: 2 % of nodes change such a thing per 1 s
# sample (a node every ~50 s: a GPU turning busy or idle, a pod placed or gone), heartbeat 3 s
# (min(--heartbeat 3, --stale-after 10 / 3)).
DEFAULT_CHANGE_RATE = 0.02
DEFAULT_HEARTBEAT_S = 3.0
# The load modes timed by the report gate: "gated" sends every heartbeat as a full report (agents
# before 0.6), "light" as a light heartbeat (contract 0.6) on a stream whose last full was accepted.
GATED = ("gated", "light")
HIGH_CHANGE_RATE = 0.10  # a busy fleet: every node changes something every ~10 s


def gated_rates(change_rate: float) -> tuple[float, ...]:
    """The gated rows' change rates: none, the assumed one, a busy fleet (each once)."""
    return tuple(sorted({0.0, change_rate, HIGH_CHANGE_RATE}))


def gated_expected_per_node(change_rate: float, heartbeat_s: float, interval_s: float) -> float:
    """Reports/s per gated node: one per renewal, min(samples until a change, heartbeat samples)."""
    h = max(1, round(heartbeat_s / interval_s))
    p = change_rate
    return (p / (1 - (1 - p) ** h) if p > 0 else 1 / h) / interval_s


# -- the load worker (a child process: `bench_ingest.py --worker ...`) -------------------


def _band(value: float, bounds: tuple[float, ...], top: float) -> tuple[float, float]:
    """The [low, high] band of `value` between consecutive `bounds` (0 .. top)."""
    low = 0.0
    for b in bounds:
        if value < b:
            return low, b - 0.01
        low = b
    return low, top


def report_variants(node: bx.NodeState, count: int, rng: random.Random) -> list[bytes]:
    """Serialized reports of `node` without sequence and sample_time: the first is the
    fleet's readings, the others differ a little (utilization +-3, memory +-1 %,
    temperature and power with them), never across the idle rule (30 % utilization,
    50 % memory) or the held-GPU threshold (40 %), so verdicts stay the fleet's."""
    base = bx.node_report(node, 0.0)
    base.ClearField("sample_time")
    base.sequence = 0
    out = [base.SerializeToString()]
    util_bounds = (bx.IDLE_MAX_UTILIZATION, float(bx.HELD_AT_UTILIZATION))
    for _ in range(count - 1):
        v = pb.NodeReport()
        v.CopyFrom(base)
        for gpu, state in zip(v.gpus, node.gpus if v.gpus else (), strict=True):  # none: a node_error
            if not state.healthy:
                continue
            lo, hi = _band(state.utilization, util_bounds, 100.0)
            util = int(min(hi, max(lo, state.utilization + rng.randint(-3, 3))))
            mlo, mhi = _band(state.memory_percent, (bx.IDLE_MAX_MEMORY,), 99.0)
            mem = min(mhi, max(mlo, state.memory_percent + rng.uniform(-1.0, 1.0)))
            used = int(bx.GPU_MEMORY_BYTES * mem / 100)
            gpu.utilization_gpu_percent = util
            gpu.utilization_memory_percent = util // 2
            gpu.memory_used_bytes = used
            gpu.memory_free_bytes = max(0, bx.GPU_MEMORY_BYTES - gpu.memory_reserved_bytes - used)
            gpu.temperature_celsius = 34 + util * 2 // 5 + rng.randint(-1, 1)
            gpu.power_watts = round(70.0 + 6.2 * util + rng.uniform(-5.0, 5.0), 1)
        out.append(v.SerializeToString())
    return out


class LoadWorker:
    """N agent streams in this process; a mode ("idle", "flat", "paced") that all follow."""

    def __init__(self, target: str, nodes: int, channels: int, variants: int) -> None:
        self.target = target
        self.fleet = bx.make_fleet(nodes)
        rng = random.Random(f"{bx.SEED}-ingest")
        self.variants = [report_variants(n, variants, rng) for n in self.fleet]
        self.channel_count = channels
        self.mode = "idle"
        self.vary = False
        self.interval = 1.0
        self.change_rate = DEFAULT_CHANGE_RATE
        self.heartbeat = DEFAULT_HEARTBEAT_S
        self.epoch = 0.0
        self.wake = asyncio.Event()
        self.accepted = 0
        self.rejected = 0
        self.late = 0  # paced slots skipped: the previous ack came back after the next slot had passed
        self.errors = 0
        self.problem = ""
        self.opened = 0
        self.tasks: list[asyncio.Task[None]] = []

    def set_mode(
        self,
        mode: str,
        vary: bool,
        interval: float,
        change_rate: float = DEFAULT_CHANGE_RATE,
        heartbeat: float = DEFAULT_HEARTBEAT_S,
    ) -> None:
        self.mode, self.vary, self.interval = mode, vary, interval
        self.change_rate, self.heartbeat = change_rate, heartbeat
        if mode == "idle":
            self.wake.clear()
        else:
            self.wake.set()

    def stats(self) -> dict[str, Any]:
        return {
            "t": time.monotonic(),
            "accepted": self.accepted,
            "rejected": self.rejected,
            "late": self.late,
            "errors": self.errors,
            "problem": self.problem,
            "opened": self.opened,
        }

    async def start(self) -> float:
        """Open every stream (each sends its first report and reads the ack); the seconds it took."""
        loop = asyncio.get_running_loop()
        self.epoch = loop.time()
        self.channels = [
            grpc.aio.insecure_channel(self.target, options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(self.channel_count)
        ]
        for ch in self.channels:
            await asyncio.wait_for(ch.channel_ready(), timeout=10)
        methods = [
            ch.stream_stream(METHOD, request_serializer=None, response_deserializer=pb.ReportAck.FromString)
            for ch in self.channels
        ]
        gate = asyncio.Semaphore(OPEN_CONCURRENCY)
        started = time.perf_counter()
        all_open = asyncio.Event()
        n = len(self.fleet)
        for i in range(n):
            self.tasks.append(asyncio.create_task(self._stream(i, methods[i % len(methods)], gate, all_open)))
        await all_open.wait()
        return time.perf_counter() - started

    async def _stream(self, i: int, method: Any, gate: asyncio.Semaphore, all_open: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        variants = self.variants[i]
        # Each variant's light heartbeat (contract 0.6) without its sequence, sample time and
        # heartbeat_of: the "light" mode sends these for heartbeats, as a 0.6 agent does.
        lights = [light_body(v) for v in variants]
        offset = i / len(self.fleet)  # of the interval: slots spread evenly
        header, light_header = pb.NodeReport(), pb.NodeReport()
        rng = random.Random(f"{bx.SEED}-gated-{i}")
        seq = base = 0
        call = None
        is_open = False
        try:
            async with gate:
                call = method()
                seq = 1
                await self._send(call, header, variants[0], seq)
                base = seq
            is_open = True
            self.opened += 1
            if self.opened == len(self.fleet):
                all_open.set()
            next_t: float | None = None
            last_mode = ""
            while True:
                mode = self.mode
                if mode not in GATED:
                    last_mode = mode
                if mode == "idle":
                    next_t = None
                    await self.wake.wait()
                    continue
                beat = False
                if mode in GATED:
                    next_t = None
                    beat = await self._wait_gated(rng, offset, first=last_mode not in GATED)
                    last_mode = mode
                    if self.mode != mode:
                        continue
                elif mode == "paced":
                    interval = self.interval
                    now = loop.time()
                    if next_t is None:  # the first slot of this stream from now on
                        k = int((now - self.epoch) / interval - offset) + 1
                        next_t = self.epoch + (k + offset) * interval
                    elif now >= next_t + interval:  # the ack came back after the next slot: skip
                        missed = int((now - next_t) / interval)  # slots whose successor has passed
                        self.late += missed
                        next_t += missed * interval
                    if next_t > now:
                        await asyncio.sleep(next_t - now)
                        if self.mode != "paced" or self.interval != interval:
                            next_t = None
                            continue
                    next_t += interval  # sent now (within its slot, or late by less than an interval)
                else:
                    next_t = None
                seq += 1
                at = seq % len(variants) if self.vary else 0
                if beat and mode == "light" and base:
                    await self._send(call, light_header, lights[at], seq, base)
                else:
                    await self._send(call, header, variants[at], seq)
                    base = seq  # the stream's last full report (every report is accepted: checked)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a stream that broke: count it, say why once
            self.errors += 1
            if not self.problem:
                self.problem = f"stream {i} ({self.fleet[i].name}): {type(exc).__name__}: {exc}"
            if not is_open:
                self.opened += 1  # do not hang start(); the parent sees errors > 0
                if self.opened == len(self.fleet):
                    all_open.set()
        finally:
            if call is not None:
                call.cancel()

    async def _wait_gated(self, rng: random.Random, offset: float, first: bool) -> bool:
        """Until this agent's next report: its next 1 s sample that brings a change (each does
        with probability change_rate), or its heartbeat, whichever is first. Samples fall on
        this stream's phase of the interval, and (`first`, when the load turns gated) its first
        heartbeat on a random sample of the heartbeat period, so the fleet's reports are spread
        evenly, as agents started at different times are, not in a burst every heartbeat. True
        when it is the heartbeat (nothing changed)."""
        loop = asyncio.get_running_loop()
        interval, p, heartbeat = self.interval, self.change_rate, self.heartbeat
        now = loop.time()
        # The sample just sent at (asyncio may wake a timer up to a clock tick early: the nearest
        # sample, not the next one, or every heartbeat would come one sample early).
        last = round((now - self.epoch) / interval - offset)
        # Samples until one changes something: geometric, 1 + floor(log(u) / log(1 - p)).
        samples = 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p)) if 0 < p < 1 else (1 if p >= 1 else 10**9)
        change_t = self.epoch + (last + samples + offset) * interval
        beat_t = self.epoch + (last + offset) * interval + heartbeat
        if first:
            beat_t = self.epoch + (last + offset + rng.randint(1, max(1, round(heartbeat / interval)))) * interval
        await asyncio.sleep(max(0.0, min(change_t, beat_t) - now))
        return beat_t < change_t

    async def _send(self, call: Any, header: pb.NodeReport, body: bytes, seq: int, repeats: int = 0) -> None:
        now = time.time()
        header.sequence = seq
        header.heartbeat_of = repeats
        header.sample_time.seconds = int(now)
        header.sample_time.nanos = int((now - int(now)) * 1e9)
        await call.write(body + header.SerializeToString())
        ack = await call.read()
        if ack is grpc.aio.EOF:
            raise BenchError(f"stream ended (code {await call.code()}: {await call.details()})")
        if ack.status == pb.ReportAck.ACCEPTED and ack.sequence == seq:
            self.accepted += 1
        else:
            self.rejected += 1
            if not self.problem:
                self.problem = f"report {seq} not accepted: {ack.reason or ack}"

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for ch in self.channels:
            await ch.close()


async def worker_main(args: argparse.Namespace) -> int:
    """The child's side of a line protocol: JSON commands on stdin, one JSON answer each on stdout."""
    out = sys.stdout

    def say(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    # The load stands for agents on other machines: it yields the 2 cores to the extender.
    os.nice(10)
    load = LoadWorker(args.target, args.nodes, args.channels, args.variants)
    open_s = await load.start()
    say({"event": "ready", "open_s": open_s, **load.stats()})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            break
        cmd = json.loads(line)
        if cmd["cmd"] == "mode":
            load.set_mode(
                cmd["mode"],
                bool(cmd.get("vary")),
                float(cmd.get("interval", 1.0)),
                float(cmd.get("change_rate", DEFAULT_CHANGE_RATE)),
                float(cmd.get("heartbeat", DEFAULT_HEARTBEAT_S)),
            )
            say({"event": "mode", **load.stats()})
        elif cmd["cmd"] == "stats":
            say({"event": "stats", **load.stats()})
        elif cmd["cmd"] == "quit":
            break
    await load.stop()
    return 0


# -- the parent: driving the worker ----------------------------------------------------


def light_body(variant: bytes) -> bytes:
    """A report variant's light heartbeat, less what each send adds (agent: report/light.py)."""
    return light_heartbeat(pb.NodeReport.FromString(variant), 0).SerializeToString()


class WorkerProcess:
    """The load worker as a child process, spoken to over its stdin/stdout."""

    def __init__(self, target: str, nodes: int, channels: int, variants: int) -> None:
        self.argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            "--target",
            target,
            "--nodes",
            str(nodes),
            "--channels",
            str(channels),
            "--variants",
            str(variants),
        ]
        self.log_path = OUT_DIR / "ingest-load-worker.log"
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, timeout_s: float) -> dict[str, Any]:
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log
            )
        return await self._answer(timeout_s)

    async def _answer(self, timeout_s: float = 30.0) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        except TimeoutError:
            raise BenchError(f"load worker silent for {timeout_s:.0f}s; log: {self.log_path}") from None
        if not line:
            tail = self.log_path.read_text(errors="replace").splitlines()[-20:]
            raise BenchError("load worker exited; last log lines:\n" + "\n".join(tail))
        answer: dict[str, Any] = json.loads(line)
        if answer.get("errors"):
            raise BenchError(f"load worker: {answer['errors']} stream(s) broke, e.g. {answer['problem']}")
        return answer

    async def command(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        await self.proc.stdin.drain()
        return await self._answer()

    async def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.write(b'{"cmd": "quit"}\n')
            await proc.stdin.drain()
            await asyncio.wait_for(proc.wait(), 10)
        except (TimeoutError, OSError):
            proc.kill()
            await proc.wait()


# -- results ------------------------------------------------------------------------------


@dataclass(slots=True)
class IngestRow:
    mode: str  # "idle", "flat", "paced" (every node every interval) or "gated" (report gate)
    readings: str  # "varied" or "quiet"
    nodes: int
    interval_s: float | None  # paced only
    window_s: float
    accepted: int
    rejected: int
    late: int  # paced slots skipped (an ack came back after the next slot: the extender fell behind)
    reports_per_s: float
    extender_cores: float
    extender_us_per_report: float
    reports_per_extender_core: float
    client_cores: float
    background_cores: float
    change_rate: float | None = None  # gated only
    heartbeat_s: float | None = None  # gated only


@dataclass(slots=True)
class LatencyRun:
    phase: str  # "quiet" (streams idle), "loaded" (gated agents) or "paced" (every node every interval)
    round: int
    filter_p50_ms: float
    filter_p99_ms: float
    prioritize_p50_ms: float
    prioritize_p99_ms: float
    filter_server_ms: float
    prioritize_server_ms: float
    reports_per_s: float  # ingest meanwhile
    extender_cores: float
    client_cores: float  # load worker
    background_cores: float


@dataclass(slots=True)
class IngestBenchResult:
    nodes: int
    channels: int
    variants: int
    window_s: float
    interval_s: float
    streams_open_s: float
    extender_rss_end_kib: int
    machine: dict[str, str]
    extender_rss_open_kib: int = 0  # with every stream open, before any load
    change_rate: float = DEFAULT_CHANGE_RATE  # the gated load's assumed rate (the loaded phase, the goal row)
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    ingest: list[IngestRow] = field(default_factory=list)
    latency_scenario: str = ""
    latency_iterations: int = 0
    latency: list[LatencyRun] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)


class Meter:
    """Counts and CPU over one window: the worker's acks, the extender's and worker's ticks."""

    def __init__(self, worker: WorkerProcess, extender: ManagedProcess) -> None:
        self.worker, self.extender = worker, extender

    async def begin(self) -> None:
        self.s0 = await self.worker.command(cmd="stats")
        self.e0, self.w0 = tree_cpu_ticks(self.extender.pid), cpu_ticks(self.worker.pid)
        self.t0 = time.monotonic()
        self.bg = BackgroundLoad(*tree_pids(self.extender.pid), self.worker.pid)

    async def end(self) -> dict[str, float]:
        s1 = await self.worker.command(cmd="stats")
        e1, w1 = tree_cpu_ticks(self.extender.pid), cpu_ticks(self.worker.pid)
        wall = time.monotonic() - self.t0
        count_wall = s1["t"] - self.s0["t"]
        self.extender.check_alive()
        return {
            "wall": wall,
            "accepted": s1["accepted"] - self.s0["accepted"],
            "rejected": s1["rejected"] - self.s0["rejected"],
            "late": s1["late"] - self.s0["late"],
            "rate": (s1["accepted"] - self.s0["accepted"]) / count_wall,
            "ext_cores": (e1 - self.e0) / CLOCK_TICKS / wall,
            "client_cores": (w1 - self.w0) / CLOCK_TICKS / wall,
            "bg_cores": self.bg.cores(),
        }


async def ingest_row(
    worker: WorkerProcess,
    extender: ManagedProcess,
    mode: str,
    vary: bool,
    nodes: int,
    interval: float,
    settle_s: float,
    window_s: float,
    change_rate: float = DEFAULT_CHANGE_RATE,
    heartbeat: float = DEFAULT_HEARTBEAT_S,
) -> IngestRow:
    await worker.command(
        cmd="mode", mode=mode, vary=vary, interval=interval, change_rate=change_rate, heartbeat=heartbeat
    )
    await asyncio.sleep(settle_s)
    meter = Meter(worker, extender)
    await meter.begin()
    await asyncio.sleep(window_s)
    m = await meter.end()
    if m["rejected"]:
        raise BenchError(f"{m['rejected']:.0f} reports rejected during {mode}/{'varied' if vary else 'quiet'}")
    rate, cores = m["rate"], m["ext_cores"]
    row = IngestRow(
        mode=mode,
        readings="-" if mode == "idle" else "varied" if vary else "quiet",
        nodes=nodes,
        interval_s=interval if mode in ("paced", "gated") else None,
        window_s=m["wall"],
        accepted=int(m["accepted"]),
        rejected=int(m["rejected"]),
        late=int(m["late"]),
        reports_per_s=rate,
        extender_cores=cores,
        extender_us_per_report=1e6 * cores / rate if rate > 0 else float("nan"),
        reports_per_extender_core=rate / cores if rate > 0 and cores > 0 else float("nan"),
        client_cores=m["client_cores"],
        background_cores=m["bg_cores"],
        change_rate=change_rate if mode == "gated" else None,
        heartbeat_s=heartbeat if mode == "gated" else None,
    )
    label = f"p={change_rate:g}" if mode == "gated" else row.readings
    print(
        f"  ingest {mode:<5} {label:<6}: {rate:8.0f} reports/s, extender {100 * cores:5.1f} % of a core, "
        f"client {100 * row.client_cores:5.1f} %",
        file=sys.stderr,
        flush=True,
    )
    return row


async def latency_run(
    session: aiohttp.ClientSession,
    worker: WorkerProcess,
    extender: ManagedProcess,
    addrs: Any,
    scenario: bx.Scenario,
    fleet: list[bx.NodeState],
    pod: dict[str, Any],
    phase: str,
    round_no: int,
    interval: float,
    settle_s: float,
    change_rate: float,
    heartbeat: float,
) -> LatencyRun:
    if phase == "loaded":  # the realistic fleet: gated agents at the assumed change rate
        await worker.command(
            cmd="mode", mode="gated", vary=True, interval=interval, change_rate=change_rate, heartbeat=heartbeat
        )
        settle_s = max(settle_s, heartbeat)  # the first heartbeats spread over the period
    elif phase == "paced":  # the worst case: every node every sample (the agent before the gate)
        await worker.command(cmd="mode", mode="paced", vary=True, interval=interval)
        settle_s = max(settle_s, heartbeat)  # a stream waiting for its gated heartbeat sees the change then
    else:
        await worker.command(cmd="mode", mode="idle")
    await asyncio.sleep(settle_s)
    meter = Meter(worker, extender)
    await meter.begin()
    res = await bx.run_scenario(session, extender, addrs, scenario, fleet, pod, prioritize_all=False, progress=False)
    m = await meter.end()
    if m["rejected"]:
        raise BenchError(f"{m['rejected']:.0f} reports rejected during the {phase} latency run")
    f, p = res.verbs
    run = LatencyRun(
        phase=phase,
        round=round_no,
        filter_p50_ms=f.p50_ms,
        filter_p99_ms=f.p99_ms,
        prioritize_p50_ms=p.p50_ms,
        prioritize_p99_ms=p.p99_ms,
        filter_server_ms=f.server_mean_ms,
        prioritize_server_ms=p.server_mean_ms,
        reports_per_s=m["rate"],
        extender_cores=m["ext_cores"],
        client_cores=m["client_cores"],
        background_cores=m["bg_cores"],
    )
    print(
        f"  {scenario.name} {phase:<6} round {round_no}: filter p99 {f.p99_ms:6.2f} ms, prioritize p99 "
        f"{p.p99_ms:6.2f} ms, ingest {m['rate']:6.0f}/s",
        file=sys.stderr,
        flush=True,
    )
    return run


def pooled(runs: list[LatencyRun], phase: str, attr: str) -> float:
    """The median over rounds of a per-run figure (with 2 rounds: their mean); run_scenario
    keeps only each run's percentiles, not its samples."""
    values = sorted(getattr(r, attr) for r in runs if r.phase == phase)
    if not values:
        return float("nan")
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


async def _bench(args: argparse.Namespace, extender: ManagedProcess, addrs: Any) -> IngestBenchResult:
    nodes, window, settle, interval = args.nodes, args.window, args.settle, args.interval
    fleet = bx.make_fleet(nodes)
    pod = bx.load_pod()
    names_n = min(5_000, nodes)
    iterations, warmup = bx.QUICK_ITERATIONS["names-5000"] if args.quick else (300, 20)
    if args.iterations:
        iterations = args.iterations
    scenario = bx.Scenario(f"names-{names_n}", "names", names_n, iterations=iterations, warmup=warmup)
    connector = aiohttp.TCPConnector(limit=1, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        await wait_http_ok(session, f"{addrs.base_url}/readyz", extender)
        worker = WorkerProcess(addrs.grpc_target, nodes, args.channels, args.variants)
        try:
            print(f"opening {nodes} agent streams over {args.channels} channels...", file=sys.stderr, flush=True)
            ready = await worker.start(timeout_s=120)
            metrics = await scrape(session, f"{addrs.base_url}/metrics")
            if metrics.get("gpu_extender_nodes_with_data") != float(nodes):
                raise BenchError(
                    f"extender has data for {metrics.get('gpu_extender_nodes_with_data')} nodes, expected {nodes}"
                )
            result = IngestBenchResult(
                nodes=nodes,
                channels=args.channels,
                variants=args.variants,
                window_s=window,
                interval_s=interval,
                streams_open_s=ready["open_s"],
                extender_rss_end_kib=0,
                machine=machine_facts(),
                latency_scenario=scenario.name,
                latency_iterations=iterations,
                change_rate=args.change_rate,
                heartbeat_s=args.heartbeat,
            )
            print(f"  {nodes} streams open in {ready['open_s']:.1f}s", file=sys.stderr, flush=True)
            result.extender_rss_open_kib = tree_rss_kib(extender.pid)
            if not args.skip_ingest:
                # streams open, nothing sent: what the extender costs with 5,000 idle agents
                result.ingest.append(await ingest_row(worker, extender, "idle", False, nodes, interval, settle, window))
                for mode in ("flat", "paced"):
                    for vary in (True, False):
                        result.ingest.append(
                            await ingest_row(worker, extender, mode, vary, nodes, interval, settle, window)
                        )
                for rate in gated_rates(args.change_rate):  # agents with the report gate (the shipped behaviour)
                    result.ingest.append(
                        await ingest_row(
                            worker,
                            extender,
                            "gated",
                            True,
                            nodes,
                            interval,
                            max(settle, args.heartbeat),
                            window,
                            rate,
                            args.heartbeat,
                        )
                    )
            if not args.skip_latency:
                for round_no in range(1, args.rounds + 1):
                    for phase in ("quiet", "loaded") if args.skip_paced_latency else ("quiet", "loaded", "paced"):
                        result.latency.append(
                            await latency_run(
                                session,
                                worker,
                                extender,
                                addrs,
                                scenario,
                                fleet,
                                pod,
                                phase,
                                round_no,
                                interval,
                                settle,
                                args.change_rate,
                                args.heartbeat,
                            )
                        )
            await worker.command(cmd="mode", mode="idle")
            final = await scrape(session, f"{addrs.base_url}/metrics")
            rejected = final.get('gpu_extender_reports_total{result="rejected"}', 0.0)
            if rejected:
                raise BenchError(f"the extender counted {rejected:.0f} rejected reports")
            result.extender_rss_end_kib = tree_rss_kib(extender.pid)
        finally:
            await worker.stop()
    result.summary = summarize(result)
    return result


def summarize(result: IngestBenchResult) -> dict[str, float]:
    """Flat figures for run_all's targets table. The 5,000-node figures are the measurement at
    5,000 nodes, else a linear estimate: the idle streams' cost + the cost per report x the rate."""
    s: dict[str, float] = {"nodes": result.nodes, "change_rate": result.change_rate, "heartbeat_s": result.heartbeat_s}
    idle = next((row.extender_cores for row in result.ingest if row.mode == "idle"), 0.0)
    for row in result.ingest:
        key = f"{row.mode}_{row.readings}"
        if row.mode == "idle":
            s["idle_streams_extender_core_percent"] = 100 * row.extender_cores
        elif row.mode == "gated":
            at_5000 = 100 * (idle + (row.extender_cores - idle) * 5_000 / row.nodes)
            keys = [f"gated_{row.change_rate:g}"] + (["gated"] if row.change_rate == result.change_rate else [])
            for k in keys:  # "gated_*": the assumed change rate (the goal row)
                s[f"{k}_extender_core_percent"] = 100 * row.extender_cores
                s[f"{k}_reports_per_s"] = row.reports_per_s
                s[f"{k}_core_percent_at_5000_nodes"] = at_5000
        elif row.mode == "flat":
            s[f"{key}_reports_per_extender_core"] = row.reports_per_extender_core
            s[f"{key}_ratio_to_goal"] = row.reports_per_extender_core / GOAL_REPORTS_PER_CORE
        else:
            s[f"{key}_extender_core_percent"] = 100 * row.extender_cores
            # scaled to 5,000 reports/s (5,000 nodes at 1 s): the idle streams' cost plus the paced
            # reports' extra cost per report x 5,000 (the measurement itself when it ran at 5,000/s)
            extra = (row.extender_cores - idle) / row.reports_per_s if row.reports_per_s > 0 else float("nan")
            s[f"{key}_core_percent_at_5000_per_s"] = 100 * (idle + extra * 5_000)
    s["extender_rss_open_mib"] = result.extender_rss_open_kib / 1024
    s["extender_rss_end_mib"] = result.extender_rss_end_kib / 1024
    s["extender_rss_max_mib"] = max(s["extender_rss_open_mib"], s["extender_rss_end_mib"])
    if result.latency:
        for verb in ("filter", "prioritize"):
            quiet = pooled(result.latency, "quiet", f"{verb}_p99_ms")
            s[f"{verb}_p99_quiet_ms"] = quiet
            for phase, key in (("loaded", verb), ("paced", f"{verb}_paced")):
                if any(x.phase == phase for x in result.latency):
                    loaded = pooled(result.latency, phase, f"{verb}_p99_ms")
                    s[f"{key}_p99_loaded_ms" if phase == "loaded" else f"{key}_p99_ms"] = loaded
                    s[f"{key}_p99_ratio"] = loaded / quiet if quiet > 0 else float("nan")
    return s


def format_report(r: IngestBenchResult) -> str:
    per_node = gated_expected_per_node(r.change_rate, r.heartbeat_s, r.interval_s)
    lines = [
        f"{r.nodes} agent streams over {r.channels} channels (opened in {r.streams_open_s:.1f}s); "
        f"{r.window_s:g}s windows; varied readings cycle {r.variants} versions; "
        f"{r.machine.get('cores')} cores shared by client and server",
        f"gated agents: a sample every {r.interval_s:g} s; a report when the sample changed something "
        f"decision-relevant (probability p per node per sample, seeded), else a heartbeat {r.heartbeat_s:g} s "
        f"after the last report; assumed fleet p = {r.change_rate:g} ({100 * r.change_rate / r.interval_s:g} % "
        f"of nodes change per second; expected {per_node * r.nodes:,.0f} reports/s); "
        f"loaded = gated at p = {r.change_rate:g}, paced = every node every {r.interval_s:g} s (worst case)",
        f"extender RSS (its process tree): {r.extender_rss_open_kib / 1024:.0f} MiB with the {r.nodes} streams "
        f"open, {r.extender_rss_end_kib / 1024:.0f} MiB at the end",
    ]
    if r.ingest:
        head = (
            f"{'mode':<6} {'readings':<8} {'interval':>8} {'reports/s':>10} {'ext %core':>9} {'us/report':>9} "
            f"{'reports/s/core':>14} {'client %':>8} {'skipped':>7} {'bg cores':>8}"
        )
        lines += ["", "ingest", head, "-" * len(head)]
        for row in r.ingest:
            iv = f"{row.interval_s:g}s" if row.interval_s else "-"
            readings = f"p={row.change_rate:g}" if row.mode == "gated" else row.readings
            lines.append(
                f"{row.mode:<6} {readings:<8} {iv:>8} {row.reports_per_s:>10.0f} {100 * row.extender_cores:>9.1f} "
                f"{row.extender_us_per_report:>9.1f} {row.reports_per_extender_core:>14.0f} "
                f"{100 * row.client_cores:>8.1f} {row.late:>7} {row.background_cores:>8.2f}"
            )
    if r.latency:
        head = (
            f"{'phase':<7} {'round':>5} {'filter p50':>10} {'filter p99':>10} {'prio p50':>8} {'prio p99':>8} "
            f"{'srv f ms':>8} {'srv p ms':>8} {'ingest/s':>8} {'ext %':>6} {'client %':>8} {'bg cores':>8}"
        )
        lines += [
            "",
            f"scheduling ({r.latency_scenario}, {r.latency_iterations} filter+prioritize pairs per run; ms; "
            f"loaded = gated p={r.change_rate:g}, paced = every {r.interval_s:g} s)",
            head,
            "-" * len(head),
        ]
        for x in r.latency:
            lines.append(
                f"{x.phase:<7} {x.round:>5} {x.filter_p50_ms:>10.2f} {x.filter_p99_ms:>10.2f} "
                f"{x.prioritize_p50_ms:>8.2f} {x.prioritize_p99_ms:>8.2f} {x.filter_server_ms:>8.2f} "
                f"{x.prioritize_server_ms:>8.2f} {x.reports_per_s:>8.0f} {100 * x.extender_cores:>6.1f} "
                f"{100 * x.client_cores:>8.1f} {x.background_cores:>8.2f}"
            )
    s = r.summary
    estimate = " (linear estimate)" if r.nodes != 5_000 else ""
    lines += ["", "issue 13 goals"]
    if "idle_streams_extender_core_percent" in s:
        lines.append(f"  {r.nodes} open idle streams: {s['idle_streams_extender_core_percent']:.1f} % of a core")
    for readings in ("varied", "quiet"):
        key = f"flat_{readings}_reports_per_extender_core"
        if key in s:
            lines.append(
                f"  ingest per extender core, {readings:<6}: {s[key]:8.0f} reports/s "
                f"(goal >= {GOAL_REPORTS_PER_CORE:,.0f}: x{s[f'flat_{readings}_ratio_to_goal']:.2f})"
            )
    for rate in gated_rates(r.change_rate):
        key = f"gated_{rate:g}"
        if f"{key}_extender_core_percent" in s:
            lines.append(
                f"  gated {r.nodes} nodes, p = {rate:<4g}: {s[f'{key}_reports_per_s']:6.0f} reports/s, "
                f"{s[f'{key}_extender_core_percent']:5.1f} % of a core; at 5,000 nodes{estimate}: "
                f"{s[f'{key}_core_percent_at_5000_nodes']:5.1f} % (goal <= {GOAL_PACED_CORE_PERCENT:g} %"
                f"{'' if rate == r.change_rate else ', not the assumed fleet'})"
            )
    for readings in ("varied", "quiet"):
        key = f"paced_{readings}_extender_core_percent"
        if key in s:
            lines.append(
                f"  paced {r.nodes} nodes at {r.interval_s:g}s (every sample changes), {readings:<6}: "
                f"{s[key]:5.1f} % of a core; at 5,000 reports/s"
                f"{' (linear estimate)' if r.nodes / r.interval_s != 5_000 else ''}: "
                f"{s[f'paced_{readings}_core_percent_at_5000_per_s']:5.1f} % (worst case)"
            )
    lines.append(
        f"  extender RSS with {r.nodes} streams open: {s['extender_rss_open_mib']:.0f} MiB, at the end "
        f"{s['extender_rss_end_mib']:.0f} MiB (goal <= {GOAL_RSS_MIB:g} MiB at 5,000)"
    )
    for verb in ("filter", "prioritize"):
        if f"{verb}_p99_ratio" in s:
            lines.append(
                f"  {verb:<10} p99 loaded/quiet: {s[f'{verb}_p99_loaded_ms']:.2f} / "
                f"{s[f'{verb}_p99_quiet_ms']:.2f} ms = x{s[f'{verb}_p99_ratio']:.2f} "
                f"(goal <= x{GOAL_P99_RATIO:g}; median of rounds; gated p = {r.change_rate:g})"
            )
    for verb in ("filter", "prioritize"):
        if f"{verb}_paced_p99_ratio" in s:
            lines.append(
                f"  {verb:<10} p99 paced/quiet: {s[f'{verb}_paced_p99_ms']:.2f} / "
                f"{s[f'{verb}_p99_quiet_ms']:.2f} ms = x{s[f'{verb}_paced_p99_ratio']:.2f} "
                f"(worst case, every node every {r.interval_s:g} s; not a goal)"
            )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> IngestBenchResult:
    extender, addrs = extender_process("extender-ingest", args.extender_arg)
    with extender:
        return asyncio.run(_bench(args, extender, addrs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 nodes, 3 s windows: a smoke check")
    parser.add_argument("--nodes", type=int, help=f"simulated agents (default {DEFAULT_NODES}; --quick 500)")
    parser.add_argument("--window", type=float, help="seconds measured per ingest row (default 10; --quick 3)")
    parser.add_argument(
        "--settle", type=float, help="seconds after a mode change before measuring (default 2; --quick 1)"
    )
    parser.add_argument(
        "--interval", type=float, default=1.0, help="seconds between a node's samples (paced: its reports)"
    )
    parser.add_argument(
        "--change-rate",
        type=float,
        default=DEFAULT_CHANGE_RATE,
        help=f"gated: probability that a node's sample changes something decision-relevant "
        f"(default {DEFAULT_CHANGE_RATE:g}: a change every ~{1 / DEFAULT_CHANGE_RATE:.0f} samples)",
    )
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=DEFAULT_HEARTBEAT_S,
        help=f"gated: seconds from a node's last report to its heartbeat (default {DEFAULT_HEARTBEAT_S:g}: "
        "min(agent --heartbeat 3, extender --stale-after 10 / 3))",
    )
    parser.add_argument(
        "--skip-paced-latency",
        action="store_true",
        help="no paced (every-second, worst case) phase in the latency rounds",
    )
    parser.add_argument("--channels", type=int, default=DEFAULT_CHANNELS, help="grpc.aio channels the streams share")
    parser.add_argument("--variants", type=int, default=DEFAULT_VARIANTS, help="versions of each report (varied)")
    parser.add_argument("--rounds", type=int, default=2, help="latency rounds (quiet, loaded, paced each)")
    parser.add_argument("--iterations", type=int, help="filter+prioritize pairs per latency run (default 300)")
    parser.add_argument("--skip-ingest", action="store_true", help="only the scheduling-under-ingest part")
    parser.add_argument("--skip-latency", action="store_true", help="only the ingest-rate part")
    parser.add_argument("--json", type=Path, help="also write the raw results as JSON here")
    parser.add_argument(
        "--extender-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra gpu-extender flag (repeatable), e.g. --extender-arg=--ingest-in-process",
    )
    # the load worker (internal): this script started by itself
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return asyncio.run(worker_main(args))
    if not 0 <= args.change_rate <= 1 or args.heartbeat <= 0 or args.interval <= 0:
        parser.error("--change-rate must be within [0, 1], --heartbeat and --interval > 0")
    args.nodes = args.nodes or (500 if args.quick else DEFAULT_NODES)
    args.window = args.window or (3.0 if args.quick else 10.0)
    args.settle = args.settle if args.settle is not None else (1.0 if args.quick else 2.0)
    exit_on_sigterm()
    try:
        result = run(args)
    except BenchError as exc:
        print(f"bench_ingest: FAILED: {exc}", file=sys.stderr)
        return 1
    print(format_report(result))
    if args.json:
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(asdict(result), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
