"""Benchmark: the steady-state cost of one gpu-agent on its node.

What it measures: the CPU share and memory of a `gpu-agent` that samples 8
(simulated) GPUs every second and streams each snapshot to a gpu-extender.

How:
1. starts the real `gpu-extender` on free 127.0.0.1 ports and waits for /readyz;
2. starts `gpu-agent --fake bench/scenarios/bench-8gpu.yaml --interval 1
   --node-name bench-node --extender 127.0.0.1:PORT --metrics-addr 127.0.0.1:PORT`
   and waits until its /healthz is up and the extender has its data;
3. after a 5 s warm-up, reads the agent's utime+stime from /proc/PID/stat (all
   threads, in clock ticks of os.sysconf('SC_CLK_TCK')) at the start and end of
   a 30 s window -> percent of one core; at the end reads VmRSS and VmHWM from
   /proc/PID/status;
4. reads the agent's /metrics: the `gpu_agent_sample_duration_seconds`
   histogram (sum/count = mean cost of one NVML pass, whole run and window),
   reports sent and the stream state; and checks that the extender's /metrics
   shows `gpu_extender_nodes_with_data 1.0`.
The agent's /metrics is scraped only outside the CPU window, so scraping does
not count against the agent. The fake NVML runs pynvml and its ctypes layer
unchanged; only the driver underneath is simulated, so real NVML calls (which
talk to the kernel driver) cost more per sample than measured here.

Targets printed next to the figures: agent < 2 % of one core, < 64 MiB RSS.

Run: `.venv/bin/python bench/bench_agent.py [--quick]` (or via bench/run_all.py).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402
    BENCH_DIR,
    BackgroundLoad,
    CLOCK_TICKS,
    LOOPBACK,
    OUT_DIR,
    BenchError,
    ExtenderAddrs,
    ManagedProcess,
    cpu_ticks,
    exit_on_sigterm,
    extender_process,
    free_port,
    memory_kib,
    program,
    scrape,
    wait_http_ok,
)

SCENARIO = BENCH_DIR / "scenarios" / "bench-8gpu.yaml"
NODE_NAME = "bench-node"
TARGET_CPU_PERCENT = 2.0
TARGET_RSS_MIB = 64.0


@dataclass(slots=True)
class AgentBenchResult:
    gpus: int
    interval_s: float
    warmup_s: float
    window_s: float  # measured wall time of the CPU window
    cpu_ticks: int
    cpu_percent: float  # of one core
    rss_start_mib: float
    rss_end_mib: float
    hwm_end_mib: float
    samples_total: int
    sample_mean_ms: float  # whole run, from the agent's histogram
    samples_window: int
    sample_mean_window_ms: float
    reports_sent: int
    stream_connected: float
    nvml_errors: float
    extender_nodes_with_data: float
    extender_cpu_percent: float  # the extender ingesting this one agent, same window
    time_to_first_report_s: float
    background_cores: float  # CPU used by other processes on the machine during the window
    target_cpu_percent: float = TARGET_CPU_PERCENT
    target_rss_mib: float = TARGET_RSS_MIB

    @property
    def cpu_ok(self) -> bool:
        return self.cpu_percent < self.target_cpu_percent

    @property
    def rss_ok(self) -> bool:
        return self.rss_end_mib < self.target_rss_mib


def _sum_count(metrics: dict[str, float], base: str) -> tuple[float, float]:
    return metrics.get(f"{base}_sum", 0.0), metrics.get(f"{base}_count", 0.0)


def _labelled(metrics: dict[str, float], prefix: str) -> float:
    """Sum over every label set of one metric (e.g. all extender targets)."""
    return sum(v for k, v in metrics.items() if k == prefix or k.startswith(prefix + "{"))


async def _sleep_watching(seconds: float, *procs: ManagedProcess) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        for proc in procs:
            proc.check_alive()
        await asyncio.sleep(min(0.5, left))


async def _wait_for_data(session: aiohttp.ClientSession, addrs: ExtenderAddrs, procs: list[ManagedProcess],
                         timeout_s: float = 20.0) -> float:  # fmt: skip
    """Until the extender holds the agent's data; returns when that happened (monotonic)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for proc in procs:
            proc.check_alive()
        metrics = await scrape(session, f"{addrs.base_url}/metrics")
        if metrics.get("gpu_extender_nodes_with_data") == 1.0:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise BenchError(f"extender has no data from the agent after {timeout_s:.0f}s; agent log:\n"
                             f"{procs[-1].log_tail()}")  # fmt: skip
        await asyncio.sleep(0.1)


async def _bench(extender: ManagedProcess, addrs: ExtenderAddrs, agent: ManagedProcess, agent_metrics_url: str,
                 agent_started: float, warmup_s: float, window_s: float) -> AgentBenchResult:  # fmt: skip
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await wait_http_ok(session, agent_metrics_url.replace("/metrics", "/healthz"), agent)
        first_data = await _wait_for_data(session, addrs, [extender, agent])
        await _sleep_watching(max(0.0, agent_started + warmup_s - time.monotonic()), extender, agent)

        before = await scrape(session, agent_metrics_url)
        ticks0, ext_ticks0, t0 = cpu_ticks(agent.pid), cpu_ticks(extender.pid), time.monotonic()
        rss_start = memory_kib(agent.pid).get("VmRSS", 0)
        background = BackgroundLoad(agent.pid, extender.pid)
        await _sleep_watching(window_s, extender, agent)
        ticks1, ext_ticks1, t1 = cpu_ticks(agent.pid), cpu_ticks(extender.pid), time.monotonic()
        mem = memory_kib(agent.pid)
        background_cores = background.cores()

        after = await scrape(session, agent_metrics_url)
        async with session.get(f"{addrs.base_url}/metrics") as resp:
            extender_text = await resp.text()
    if "gpu_extender_nodes_with_data 1.0" not in extender_text.splitlines():
        raise BenchError("extender /metrics does not show `gpu_extender_nodes_with_data 1.0`")
    extender_metrics = {k: v for k, v in (line.rsplit(" ", 1) for line in extender_text.splitlines()
                                          if line and not line.startswith("#"))}  # fmt: skip

    base = "gpu_agent_sample_duration_seconds"
    s0, c0 = _sum_count(before, base)
    s1, c1 = _sum_count(after, base)
    if c1 <= 0:
        raise BenchError("the agent's gpu_agent_sample_duration_seconds histogram is empty")
    gpus = sum(1 for k in after if k.startswith("gpu_agent_gpu_healthy{"))
    elapsed = t1 - t0
    return AgentBenchResult(
        gpus=gpus,
        interval_s=1.0,
        warmup_s=warmup_s,
        window_s=elapsed,
        cpu_ticks=ticks1 - ticks0,
        cpu_percent=100.0 * (ticks1 - ticks0) / CLOCK_TICKS / elapsed,
        rss_start_mib=rss_start / 1024,
        rss_end_mib=mem.get("VmRSS", 0) / 1024,
        hwm_end_mib=mem.get("VmHWM", 0) / 1024,
        samples_total=int(c1),
        sample_mean_ms=1000.0 * s1 / c1,
        samples_window=int(c1 - c0),
        sample_mean_window_ms=1000.0 * (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan"),
        reports_sent=int(_labelled(after, "gpu_agent_reports_sent_total")),
        stream_connected=_labelled(after, "gpu_agent_stream_connected"),
        nvml_errors=_labelled(after, "gpu_agent_nvml_errors_total"),
        extender_nodes_with_data=float(extender_metrics.get("gpu_extender_nodes_with_data", "nan")),
        extender_cpu_percent=100.0 * (ext_ticks1 - ext_ticks0) / CLOCK_TICKS / elapsed,
        time_to_first_report_s=first_data - agent_started,
        background_cores=background_cores,
    )


def run(*, quick: bool = False, warmup_s: float = 5.0, window_s: float = 30.0) -> AgentBenchResult:
    """Start an extender and one agent, measure the agent, stop both (always)."""
    if quick:
        warmup_s, window_s = 3.0, 5.0
    extender, addrs = extender_process("extender-for-agent-bench")
    metrics_port = free_port()
    agent_argv = program("gpu-agent", "gpuextender.agent") + [
        "--fake", str(SCENARIO),
        "--interval", "1",
        "--node-name", NODE_NAME,
        "--extender", addrs.grpc_target,
        "--metrics-addr", f"{LOOPBACK}:{metrics_port}",
    ]  # fmt: skip
    agent = ManagedProcess("agent-bench", agent_argv)
    with extender:

        async def extender_ready() -> None:
            async with aiohttp.ClientSession() as session:
                await wait_http_ok(session, f"{addrs.base_url}/readyz", extender)

        asyncio.run(extender_ready())
        with agent:
            started = time.monotonic()
            result = asyncio.run(
                _bench(extender, addrs, agent, f"http://{LOOPBACK}:{metrics_port}/metrics", started, warmup_s, window_s)
            )
    if result.stream_connected != 1.0 or result.reports_sent < result.samples_window:
        raise BenchError(f"agent stream unhealthy: connected={result.stream_connected}, "
                         f"reports sent={result.reports_sent}, samples in window={result.samples_window}")  # fmt: skip
    return result


def format_result(r: AgentBenchResult) -> str:
    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    return "\n".join([
        f"gpu-agent, {r.gpus} fake GPUs, --interval {r.interval_s:g}s, {r.window_s:.1f}s window after {r.warmup_s:g}s warm-up:",
        f"  CPU       {r.cpu_percent:6.2f} % of one core ({r.cpu_ticks} ticks)   target < {r.target_cpu_percent:g} %   "
        f"{verdict(r.cpu_ok)}",
        f"  RSS       {r.rss_end_mib:6.1f} MiB (peak {r.hwm_end_mib:.1f}, {r.rss_start_mib:.1f} at window start)   "
        f"target < {r.target_rss_mib:g} MiB   {verdict(r.rss_ok)}",
        f"  sample    {r.sample_mean_window_ms:6.3f} ms mean per NVML pass in the window "
        f"({r.samples_window} samples; {r.sample_mean_ms:.3f} ms over all {r.samples_total})",
        f"  stream    {r.reports_sent} reports sent, connected={r.stream_connected:g}, NVML errors={r.nvml_errors:g}, "
        f"first report in the extender {r.time_to_first_report_s:.2f}s after start",
        f"  extender  gpu_extender_nodes_with_data {r.extender_nodes_with_data:g}; "
        f"its CPU for this one agent {r.extender_cpu_percent:.2f} % of one core",
        f"  machine   other processes used {r.background_cores:.2f} cores meanwhile",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 s warm-up and a 5 s window: a smoke check")
    parser.add_argument("--window", type=float, default=30.0, help="CPU measurement window, seconds")
    parser.add_argument("--json", type=Path, help="also write the raw result as JSON here")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    try:
        result = run(quick=args.quick, window_s=args.window)
    except BenchError as exc:
        print(f"bench_agent: FAILED: {exc}", file=sys.stderr)
        return 1
    print(format_result(result))
    if args.json:
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(asdict(result), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
