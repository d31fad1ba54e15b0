"""Shared plumbing for the benchmarks in bench/ (measures nothing by itself).

- locating the project's console scripts (`gpu-extender`, `gpu-agent`) next to
  the running interpreter (the project's .venv);
- free loopback ports;
- `ManagedProcess`: a subprocess that is always terminated (SIGTERM, then
  SIGKILL) when its `with` block ends, whatever happened inside it;
- /proc readers (CPU ticks, VmRSS/VmHWM) and a tiny Prometheus text parser;
- percentiles and machine facts for the reports.
"""

from __future__ import annotations

import asyncio
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType

import aiohttp

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"  # git-ignored: logs and raw JSON results
LOOPBACK = "127.0.0.1"


class BenchError(RuntimeError):
    """The benchmark cannot go on (a process died, an answer had the wrong shape...)."""


def program(name: str, module: str) -> list[str]:
    """argv prefix for one of the project's console scripts, preferring the one
    installed beside this interpreter (the project's .venv). With BENCH_RUN_MODULES set, always
    `python -m MODULE`: a console script names the entry module of the installed tree, which an
    earlier revision put first on PYTHONPATH (bench_baseline.py) may not have."""
    if os.environ.get("BENCH_RUN_MODULES"):
        return [sys.executable, "-m", module]
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which(name)
    if found:
        return [found]
    return [sys.executable, "-m", module]


def free_port() -> int:
    """A TCP port free on the loopback address now, below the kernel's ephemeral range (tests/harness.py
    says why: a run with thousands of connections took a handed-out port before it was bound)."""
    if str(REPO_ROOT) not in sys.path:  # bench scripts run from bench/
        sys.path.insert(0, str(REPO_ROOT))
    from tests.harness import free_port as below_ephemeral

    return below_ephemeral()


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so every `finally`/`with` cleans up its processes."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


class ManagedProcess:
    """A child process whose output goes to a log file under bench/out/, and
    which is terminated when the `with` block ends (even on errors)."""

    def __init__(self, name: str, argv: Sequence[str]) -> None:
        self.name = name
        self.argv = list(argv)
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = OUT_DIR / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise BenchError(f"{self.name} is not started")
        return self.proc.pid

    def start(self) -> None:
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            code = self.proc.returncode if self.proc is not None else None
            raise BenchError(f"{self.name} exited (code {code}); last log lines:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM, wait, then SIGKILL. Returns the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout_s)
        return proc.returncode

    def __enter__(self) -> ManagedProcess:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# -- /proc ------------------------------------------------------------------


def cpu_ticks(pid: int) -> int:
    """utime + stime of the whole process (all threads), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def tree_pids(pid: int) -> list[int]:
    """`pid` and its descendants (gpu-extender and its ingest process)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # gone meanwhile
            continue
    return out


def tree_cpu_ticks(pid: int) -> int:
    """utime + stime of `pid` and its descendants, in clock ticks."""
    total = 0
    for p in tree_pids(pid):
        try:
            total += cpu_ticks(p)
        except OSError:
            continue
    return total


def tree_memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM summed over `pid` and its descendants (the peaks need not coincide), KiB."""
    out: dict[str, int] = {}
    for p in tree_pids(pid):
        try:
            for key, value in memory_kib(p).items():
                out[key] = out.get(key, 0) + value
        except OSError:
            continue
    return out


def tree_rss_kib(pid: int) -> int:
    """VmRSS of `pid` and its descendants, in KiB."""
    return tree_memory_kib(pid).get("VmRSS", 0)


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in KiB."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0])
    return out


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def system_busy_ticks() -> int:
    """Busy CPU time of the whole machine (all cores, everything but idle/iowait), in ticks."""
    with open("/proc/stat") as f:
        fields = f.readline().split()  # cpu user nice system idle iowait irq softirq steal guest guest_nice
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return user + nice + system + irq + softirq + steal


class BackgroundLoad:
    """How much CPU the rest of the machine used while a benchmark ran: machine-wide
    busy time minus the time of the processes we know about (this one, our children).
    Other work on a 2-core box shows up directly in the latency tails."""

    def __init__(self, *pids: int) -> None:
        self.pids = (os.getpid(), *pids)
        self._t0 = time.monotonic()
        self._busy0 = system_busy_ticks()
        self._ours0 = sum(cpu_ticks(p) for p in self.pids)

    def cores(self) -> float:
        """Average number of cores busy with other processes since construction."""
        wall = time.monotonic() - self._t0
        others = (system_busy_ticks() - self._busy0) - (sum(cpu_ticks(p) for p in self.pids) - self._ours0)
        return max(0.0, others / CLOCK_TICKS / wall) if wall > 0 else 0.0


# -- Prometheus text format -------------------------------------------------


def parse_prometheus(text: str) -> dict[str, float]:
    """`name{labels}` -> value for every sample line (labels kept verbatim)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            samples[key] = float(value)
        except ValueError:
            continue
    return samples


# -- statistics -------------------------------------------------------------


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


# -- machine ----------------------------------------------------------------


def ms_quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of `values` (seconds), in milliseconds (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def rounds_latency_ms(results: dict[str, dict[str, list[list[float]]]]) -> dict[str, dict[str, dict[str, float]]]:
    """variant -> verb -> rounds of call times (s), summarized: p50 over every call, p99 the median of
    the rounds' p99s (one noisy moment moves one round)."""
    return {
        k: {
            verb: {
                "p50": round(ms_quantile([x for r in v for x in r], 0.5), 2),
                "p99": round(statistics.median(ms_quantile(r, 0.99) for r in v), 2),
            }
            for verb, v in d.items()
        }
        for k, d in results.items()
    }


def machine_facts() -> dict[str, str]:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024**2:.1f} GiB"
                break
    except OSError:
        pass
    os_name = platform.system()
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.partition("=")[2].strip().strip('"')
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "cpu": cpu,
        "cores": str(usable),
        "memory": mem,
        "python": platform.python_version(),
        "os": f"{os_name}, kernel {platform.release()}",
    }


# -- the extender as a subprocess ----------------------------------------------


@dataclass(frozen=True, slots=True)
class ExtenderAddrs:
    http_port: int
    grpc_port: int

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def grpc_target(self) -> str:
        return f"{LOOPBACK}:{self.grpc_port}"


def extender_argv(addrs: ExtenderAddrs, extra_args: Sequence[str] = ()) -> list[str]:
    """`gpu-extender` on `addrs`: data never goes stale during a run, it logs only warnings (no
    per-request lines), and /readyz does not wait for agents (benches measure serving)."""
    return [
        *program("gpu-extender", "gpuextender.extender"),
        "--http-addr",
        f"{LOOPBACK}:{addrs.http_port}",
        "--grpc-addr",
        f"{LOOPBACK}:{addrs.grpc_port}",
        "--stale-after",
        "100000",
        "--forget-after",
        "200000",
        "--log-level",
        "warning",
        "--readiness-grace",
        "0",
        *extra_args,
    ]


def extender_process(name: str = "extender", extra_args: Sequence[str] = ()) -> tuple[ManagedProcess, ExtenderAddrs]:
    """A not yet started `gpu-extender` (extender_argv) on free loopback ports."""
    addrs = ExtenderAddrs(http_port=free_port(), grpc_port=free_port())
    return ManagedProcess(name, extender_argv(addrs, extra_args)), addrs


async def wait_http_ok(session: aiohttp.ClientSession, url: str, proc: ManagedProcess, timeout_s: float = 20.0) -> str:
    """Poll `url` until it answers 200 (returns the body); fail fast if `proc` dies."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        proc.check_alive()
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                text = await resp.text()
                if resp.status == 200:
                    return text
                last = f"HTTP {resp.status}: {text.strip()}"
        except (TimeoutError, aiohttp.ClientError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise BenchError(f"{url} not ready after {timeout_s:.0f}s ({last}); {proc.name} log:\n{proc.log_tail()}")
        await asyncio.sleep(0.05)


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """GET a Prometheus /metrics page and parse it."""
    async with session.get(url) as resp:
        text = await resp.text()
        if resp.status != 200:
            raise BenchError(f"GET {url}: HTTP {resp.status}: {text[:200]}")
    return parse_prometheus(text)
