"""Benchmark: how soon gpu-agents stream again after the extender was down.

What it measures: for N agents (default 20) with the default flags
(`--reconnect-initial-backoff 0.2 --reconnect-max-backoff 5`), the seconds from
the moment a restarted extender listens again until each agent's report is
accepted by it, after outages of 20 s and 90 s. Target: every agent back within
max backoff + 2 s (7 s).

How:
1. starts the real `gpu-extender` on fixed loopback ports and N real
   `gpu-agent --fake bench/scenarios/bench-8gpu.yaml` processes, and waits until
   the extender has data from every node (`gpu_extender_nodes_with_data` = N);
2. per outage: stops the extender (SIGTERM, waits for it to exit), keeps it down
   for the outage, starts a new one on the same ports; the moment it listens is
   when its gRPC port first accepts a TCP connection (polled every 10 ms);
3. polls the new extender's `gpu_extender_nodes_with_data` every 100 ms (it
   starts at 0) and records when it reaches 1, 2, ... N: the k-th agent back.
Agents run in both variants:
- `fixed`: the agent as shipped;
- `pre-fix`: the same agent, its channels opened with only the options it used
  before the fix (keepalive; no local subchannel pool, gRPC's default reconnect
  backoff), by patching `grpc.aio.insecure_channel` at start-up. This shows
  the old behaviour: gRPC's shared subchannel pool kept the failed connection
  and its own backoff (1 s growing to 120 s) across our fresh channels.

Run: `.venv/bin/python bench/bench_reconnect.py [--quick] [--agents N]
[--outage SECONDS ...] [--variant fixed|pre-fix]` (or via bench/run_all.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (
    BENCH_DIR,
    LOOPBACK,
    OUT_DIR,
    BenchError,
    ExtenderAddrs,
    ManagedProcess,
    exit_on_sigterm,
    extender_argv,
    free_port,
    scrape,
    wait_http_ok,
)

SCENARIO = BENCH_DIR / "scenarios" / "bench-8gpu.yaml"
MAX_BACKOFF_S = 5.0  # the agent's default --reconnect-max-backoff
TARGET_S = MAX_BACKOFF_S + 2.0
GIVE_UP_S = 150.0  # gRPC's own backoff reaches 120 s (+ jitter): the pre-fix agents may need that long
VARIANTS = ("fixed", "pre-fix")

_RUN_AGENT = "import sys\nfrom gpuextender.agent.cli import main\nsys.exit(main(sys.argv[1:]))\n"
# The channel options the agent passed before the fix: everything else it adds now is dropped.
_PRE_FIX = """
import grpc.aio
_insecure_channel = grpc.aio.insecure_channel
_KEPT = ("grpc.keepalive_time_ms", "grpc.keepalive_timeout_ms")
def _pre_fix_channel(target, options=None, *args, **kwargs):
    return _insecure_channel(target, [o for o in options or () if o[0] in _KEPT], *args, **kwargs)
grpc.aio.insecure_channel = _pre_fix_channel
"""


@dataclass(slots=True)
class OutageResult:
    variant: str
    agents: int
    outage_s: float  # from the old extender's exit to the new one listening
    back_s: list[float]  # per agent back, seconds after the new extender listened (sorted)
    listen_s: float  # from starting the new extender process to its gRPC port accepting

    @property
    def all_back(self) -> bool:
        return len(self.back_s) == self.agents

    @property
    def last_s(self) -> float:
        return self.back_s[-1] if self.all_back else float("inf")

    @property
    def ok(self) -> bool:
        return self.last_s <= TARGET_S


def agent_argv(variant: str, name: str, metrics_port: int, target: str) -> list[str]:
    boot = (_PRE_FIX if variant == "pre-fix" else "") + _RUN_AGENT
    return [
        sys.executable,
        "-c",
        boot,
        "--fake",
        str(SCENARIO),
        "--node-name",
        name,
        "--extender",
        target,
        "--metrics-addr",
        f"{LOOPBACK}:{metrics_port}",
        "--log-level",
        "warning",
    ]


async def _listening(port: int, proc: ManagedProcess, timeout_s: float = 30.0) -> float:
    """When `port` first accepts a TCP connection (monotonic)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _, writer = await asyncio.open_connection(LOOPBACK, port)
        except OSError:
            if time.monotonic() > deadline:
                why = f"{proc.name} not listening on {port} after {timeout_s:.0f}s:\n{proc.log_tail()}"
                raise BenchError(why) from None
            proc.check_alive()
            await asyncio.sleep(0.01)
            continue
        at = time.monotonic()
        writer.close()
        return at


async def _arrivals(
    session: aiohttp.ClientSession,
    addrs: ExtenderAddrs,
    proc: ManagedProcess,
    agents: list[ManagedProcess],
    since: float,
    timeout_s: float,
) -> list[float]:
    """Seconds after `since` at which the extender's nodes_with_data reached 1, 2, ... (up to all agents)."""
    back: list[float] = []
    deadline = since + timeout_s
    while len(back) < len(agents) and time.monotonic() < deadline:
        for p in (proc, *agents):
            p.check_alive()
        try:
            metrics = await scrape(session, f"{addrs.base_url}/metrics")
        except aiohttp.ClientError:  # HTTP comes up just after gRPC
            metrics = {}
        now = time.monotonic() - since
        count = int(metrics.get("gpu_extender_nodes_with_data", 0))
        back += [now] * (count - len(back))
        await asyncio.sleep(0.1)
    return back


async def _variant(variant: str, n: int, outages: list[float]) -> list[OutageResult]:
    addrs = ExtenderAddrs(http_port=free_port(), grpc_port=free_port())
    results: list[OutageResult] = []
    with contextlib.ExitStack() as stack:
        extender = stack.enter_context(ManagedProcess(f"reconnect-{variant}-extender-0", extender_argv(addrs)))
        agents = [
            stack.enter_context(
                ManagedProcess(
                    f"reconnect-{variant}-agent-{i}", agent_argv(variant, f"node-{i}", free_port(), addrs.grpc_target)
                )
            )
            for i in range(n)
        ]
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            await wait_http_ok(session, f"{addrs.base_url}/readyz", extender)
            started = time.monotonic()
            back = await _arrivals(session, addrs, extender, agents, started, 120.0)
            if len(back) < n:
                raise BenchError(f"only {len(back)} of {n} agents streaming after 120 s:\n{agents[-1].log_tail()}")
            for k, outage in enumerate(outages, start=1):
                extender.stop()
                down_at = time.monotonic()
                await asyncio.sleep(outage)
                name = f"reconnect-{variant}-extender-{k}"
                extender = stack.enter_context(ManagedProcess(name, extender_argv(addrs)))
                spawned = time.monotonic()
                listening = await _listening(addrs.grpc_port, extender)
                back = await _arrivals(session, addrs, extender, agents, listening, GIVE_UP_S)
                result = OutageResult(variant, n, listening - down_at, back, listening - spawned)
                print(format_row(result), flush=True)
                results.append(result)
    return results


def run(
    *,
    quick: bool = False,
    agents: int | None = None,
    outages: list[float] | None = None,
    variants: tuple[str, ...] = VARIANTS,
) -> list[OutageResult]:
    n = agents or (5 if quick else 20)
    outages = outages or ([10.0] if quick else [20.0, 90.0])
    results: list[OutageResult] = []
    for variant in variants:
        results += asyncio.run(_variant(variant, n, outages))
    return results


HEADER = (
    "| variant | agents | outage s | first back s | median s | all back s | "
    f"target <= {TARGET_S:g} s |\n|---|---:|---:|---:|---:|---:|---|"
)


def format_row(r: OutageResult) -> str:
    median = f"{statistics.median(r.back_s):.2f}" if r.back_s else "-"
    first = f"{r.back_s[0]:.2f}" if r.back_s else "-"
    last = f"{r.last_s:.2f}" if r.all_back else f"> {GIVE_UP_S:g} ({len(r.back_s)}/{r.agents} back)"
    return (
        f"| {r.variant} | {r.agents} | {r.outage_s:.1f} | {first} | {median} | {last} | {'PASS' if r.ok else 'MISS'} |"
    )


def format_table(results: list[OutageResult]) -> str:
    return "\n".join([HEADER, *(format_row(r) for r in results)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 agents, one 10 s outage: a smoke check")
    parser.add_argument("--agents", type=int, help="number of agents (default 20; 5 with --quick)")
    parser.add_argument("--outage", type=float, action="append", help="outage seconds, repeatable (default 20 and 90)")
    parser.add_argument("--variant", choices=VARIANTS, action="append", help="repeatable (default: both)")
    parser.add_argument("--json", type=Path, help="also write the raw results as JSON here")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    print("seconds after the restarted extender listens until agents' reports are accepted", flush=True)
    print(HEADER, flush=True)
    try:
        results = run(
            quick=args.quick, agents=args.agents, outages=args.outage, variants=tuple(args.variant or VARIANTS)
        )
    except BenchError as exc:
        print(f"bench_reconnect: FAILED: {exc}", file=sys.stderr)
        return 1
    if args.json:
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
