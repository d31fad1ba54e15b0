"""Benchmark: the steady-state cost of one gpu-agent on its node.

What it measures: the CPU share and memory of a `gpu-agent` that samples 8
(simulated) GPUs every second, asks the kubelet who holds them on every sample,
watches NVML events in its event thread and streams each snapshot to a
gpu-extender -- what the agent does on a real GPU node (issue 11's target:
<= 1 % of one core and <= 48 MiB RSS at 1 Hz with 8 GPUs).

How:
1. starts, for each variant (below), the real `gpu-extender` on free 127.0.0.1
   ports and waits for /readyz; for the `node` variants also a fake kubelet
   process (`python -m gpuextender.agent.fakes.kubelet`, a real gRPC
   PodResources server on a unix socket under /tmp) serving
   bench/scenarios/bench-kubelet.yaml (5 of the 8 GPUs held by two pods, 14 pods
   in all) and a GFD labels file;
2. starts `gpu-agent --fake bench/scenarios/bench-8gpu-node.yaml --interval 1
   --node-name bench-node --extender 127.0.0.1:PORT --metrics-addr 127.0.0.1:PORT
   --pod-resources-socket SOCKET --gfd-labels-file FILE --control-dir DIR`: the
   scenario has every 0.2 reading (ECC, remapped rows, clock event reasons,
   clocks, energy, NUMA, topology) and NVML events on all 8 GPUs, so the event
   thread runs (the default) and waits on them. The agent gets the literal `env`
   entries of deploy/base/agent/daemonset.yaml, as in the cluster, and sees
   NODE_CPUS (128) CPUs: an 8-GPU node has 64-224, and gRPC starts one
   event-engine thread per CPU up to 16 (4 at least), each waking ~10 times a
   second. A small LD_PRELOAD shim (built into bench/out/ with the C compiler;
   without one the agents see this machine's CPUs, as the report says) makes
   sysconf(_SC_NPROCESSORS_CONF/ONLN) answer that; nothing else changes. The
   bench waits until the agent's /healthz is up, the extender has its data and
   the agent's /metrics shows the kubelet's holders (train-0 on 4 GPUs, infer-0 on 1);
3. after a 5 s warm-up, reads each agent's utime+stime from /proc/PID/stat (all
   threads, in clock ticks of os.sysconf('SC_CLK_TCK')) at the start and end of
   a 30 s window -> percent of one core; at the end reads VmRSS, VmHWM, RssAnon,
   RssFile and Threads from /proc/PID/status. Inside the window each agent's
   /metrics is scraped every 15 s, as Prometheus does (dcgm-exporter names
   included), so scraping counts against the agent (`--scrape-every 0`: none);
4. reads the agent's /metrics outside the window: the
   `gpu_agent_sample_duration_seconds` histogram (sum/count = mean cost of one
   NVML pass, whole run and window), reports sent (whole run and window, summed
   over its extenders) and the stream state; and checks that every extender's
   /metrics shows `gpu_extender_nodes_with_data 1.0` and that each agent has one
   connected stream per extender and sent at least one report per heartbeat to each.

Variants run side by side, at the same time, each with its own extender(s) (so
host noise hits them alike); the first is the measured agent of the result:
- `node`: all of the above (the figures the targets are judged on);
- `bare`: the agent as the earlier benchmark ran it, without the new features:
  bench-8gpu.yaml (no 0.2 readings), `--no-health-events`,
  `--pod-resources-socket=`, `--gfd-labels-file=`; the report gives every
  variant's ratio to it, i.e. the cost of the new features;
- `node-here`: `node` seeing this machine's CPUs (on a 2-CPU VM: 4 gRPC
  event-engine threads instead of 16), i.e. what the CPU emulation changes;
- `node-every`: `node` streaming every sample (`--heartbeat 0`, as agents did before
  0.3 sent reports on change with a heartbeat), i.e. what the report gate saves;
- `node-3x`: `node` streaming to 3 real extender replicas (3 `gpu-extender`
  processes on their own ports, the agent given `--extender 127.0.0.1:PORT` once
  per replica: one stream each, as the DaemonSet's --extender-service opens one per
  address of the headless Service, which needs one IP per replica), with the default
  gate (--heartbeat 3): issue 13's target, agent CPU with 3 extender replicas
  <= 1 % of a core, is judged on it (`replicas3_*` fields of the result);
- `node-3x-every`: `node-3x` with the gate off (`--heartbeat 0`: every sample to
  every replica, as agents did before 0.3), i.e. what the gate saves at 3 replicas.
The table gives every variant's CPU and RSS ratio to `bare` and to `node` (the same
agent with one extender). All 6 (10 extenders, 6 kubelets) run in the one window, so
the default run is the 30 s window plus ~15 s of start-up and warm-up.
`--variants node` runs the node alone; `--variants node,node-3x,node-3x-every` the
replica comparison alone.

The fake NVML runs pynvml and its ctypes layer unchanged; only the driver
underneath is simulated, so real NVML calls (which talk to the kernel driver)
cost more per sample than measured here, and the real libnvidia-ml.so adds its
own pages to the RSS. The fake also loads what the agent on a node does not
(PyYAML, the scenario parser, the fake driver: ~2 MiB, bench/agent_imports.py
measures it, and what the rest of the RSS is made of).

Run: `.venv/bin/python bench/bench_agent.py [--quick] [--window S] [--variants node,node-3x,...]`
(or via bench/run_all.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (
    BENCH_DIR,
    CLOCK_TICKS,
    LOOPBACK,
    OUT_DIR,
    REPO_ROOT,
    BackgroundLoad,
    BenchError,
    ManagedProcess,
    cpu_ticks,
    exit_on_sigterm,
    extender_process,
    free_port,
    program,
    scrape,
    tree_cpu_ticks,
    wait_http_ok,
)

SCENARIO = BENCH_DIR / "scenarios" / "bench-8gpu-node.yaml"
BARE_SCENARIO = BENCH_DIR / "scenarios" / "bench-8gpu.yaml"
KUBELET_SCENARIO = BENCH_DIR / "scenarios" / "bench-kubelet.yaml"
DAEMONSET = REPO_ROOT / "deploy" / "base" / "agent" / "daemonset.yaml"
NODE_NAME = "bench-node"
# GFD's labels file on a node with exclusive GPUs (the agent keeps the sharing ones).
GFD_LABELS = """\
nvidia.com/cuda.driver.major=550
nvidia.com/gpu.count=8
nvidia.com/gpu.family=hopper
nvidia.com/gpu.machine=DGX-H100
nvidia.com/gpu.memory=81559
nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3
nvidia.com/gpu.replicas=1
nvidia.com/gpu.sharing-strategy=none
nvidia.com/mig.capable=true
nvidia.com/mig.strategy=single
"""
# Holders the fake kubelet's scenario gives (pod -> GPUs): the agent must show them.
EXPECTED_HOLDERS = {"train-0": 4, "infer-0": 1}
TARGET_CPU_PERCENT = 1.0
TARGET_RSS_MIB = 48.0
SCRAPE_EVERY_S = 15.0
# CPUs the measured agents see: an 8-GPU node has 64-224. gRPC sizes its event-engine thread pool
# from sysconf(_SC_NPROCESSORS_CONF) (clamped to 4..16 threads), and those threads wake ~10 times a
# second each, so on a small bench VM the agent would run fewer threads than on a real node.
NODE_CPUS = 128
# LD_PRELOAD shim: sysconf(_SC_NPROCESSORS_CONF / _ONLN) answers $BENCH_AGENT_CPUS, nothing else
# changes (glibc's own malloc arena limit still sees the real CPUs).
_CPUS_SHIM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>
long sysconf(int name) {
    static long (*real)(int);
    if (!real) real = (long (*)(int))dlsym(RTLD_NEXT, "sysconf");
    if (name == _SC_NPROCESSORS_CONF || name == _SC_NPROCESSORS_ONLN) {
        const char *n = getenv("BENCH_AGENT_CPUS");
        if (n && atol(n) > 0) return atol(n);
    }
    return real(name);
}
"""


@dataclass(frozen=True, slots=True)
class Variant:
    """One agent configuration measured side by side with the others."""

    name: str
    what: str
    scenario: Path
    kubelet: bool  # a fake kubelet process and a GFD labels file for this agent
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # on top of the DaemonSet's env (a name set to "" is removed)
    daemonset_env: bool = True
    node_cpus: bool = True  # the agent sees NODE_CPUS CPUs (when the shim can be built), else this machine's
    extenders: int = 1  # extender replicas it streams to (each its own process)


HEARTBEAT_S = 3.0  # gpu-agent's --heartbeat default
NODE = Variant(
    "node", "all on: 0.2 readings, NVML event thread, kubelet List + GFD labels each sample", SCENARIO, kubelet=True
)
BARE = Variant(
    "bare",
    "as before 0.2: no 0.2 readings, no event thread, no kubelet, no GFD labels",
    BARE_SCENARIO,
    kubelet=False,
    args=("--no-health-events", "--pod-resources-socket=", "--gfd-labels-file="),
)
EVERY = Variant(
    "node-every",
    "as node, but streaming every sample (--heartbeat 0, as before 0.3)",
    SCENARIO,
    kubelet=True,
    args=("--heartbeat=0",),
)
HERE = Variant(
    "node-here",
    "as node, but seeing this machine's CPUs (gRPC: fewer event-engine threads)",
    SCENARIO,
    kubelet=True,
    node_cpus=False,
)
THREE = Variant(
    "node-3x",
    "as node, streaming to 3 extender replicas (issue 13: <= 1 % of a core)",
    SCENARIO,
    kubelet=True,
    extenders=3,
)
THREE_EVERY = Variant(
    "node-3x-every",
    "as node-3x, but streaming every sample to each (--heartbeat 0)",
    SCENARIO,
    kubelet=True,
    args=("--heartbeat=0",),
    extenders=3,
)
VARIANTS = {v.name: v for v in (NODE, BARE, HERE, EVERY, THREE, THREE_EVERY)}
DEFAULT_VARIANTS = ("node", "bare", "node-here", "node-every", "node-3x", "node-3x-every")


@dataclass(slots=True)
class VariantResult:
    """The figures of one side-by-side variant (same window as the others)."""

    name: str
    what: str
    cpu_ticks: int
    cpu_percent: float
    rss_start_mib: float
    rss_end_mib: float
    hwm_end_mib: float
    rss_anon_mib: float
    rss_file_mib: float
    threads: int
    sample_mean_window_ms: float
    cpus_seen: int = 0  # what sysconf told the agent
    env: dict[str, str] = field(default_factory=dict)
    extenders: int = 1  # extender replicas it streamed to
    reports_sent: int = 0  # whole run, summed over its extenders
    reports_window: int = 0  # inside the window, summed over its extenders
    streams_connected: float = 0.0  # sum of gpu_agent_stream_connected: one per extender when healthy
    extender_cpu_percent: float = 0.0  # all its extender replicas (process trees) together, same window
    cpu_vs_node: float | None = None  # cpu_percent / the `node` variant's (1 extender), when both ran
    rss_vs_node: float | None = None


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
    # What the measured agent ran with (the `node` variant unless --variants says otherwise).
    variant: str = NODE.name
    rss_anon_mib: float = 0.0
    rss_file_mib: float = 0.0
    threads: int = 0
    cpus_seen: int = 0  # CPUs sysconf reports to the agent (NODE_CPUS when emulated)
    scrape_every_s: float = SCRAPE_EVERY_S
    kubelet_holders: dict[str, int] = field(default_factory=dict)  # pod -> GPUs, from the agent's /metrics
    env: dict[str, str] = field(default_factory=dict)  # environment given to the agent beyond the bench's own
    compare: list[VariantResult] = field(default_factory=list)  # every variant, the measured one first
    # Issue 13: the agent streaming to 3 extender replicas with the default gate (variant `node-3x`),
    # and with the gate off (`node-3x-every`); None when that variant did not run. Its target is
    # target_cpu_percent (replicas3_cpu_ok); the ratios are to the `node` variant (1 extender).
    replicas3_variant: str | None = None
    replicas3_cpu_percent: float | None = None
    replicas3_rss_mib: float | None = None
    replicas3_cpu_vs_node: float | None = None
    replicas3_every_cpu_percent: float | None = None
    replicas3_every_rss_mib: float | None = None
    replicas3_every_cpu_vs_node: float | None = None

    @property
    def cpu_ok(self) -> bool:
        return self.cpu_percent <= self.target_cpu_percent

    @property
    def replicas3_cpu_ok(self) -> bool | None:
        """Agent CPU with 3 extender replicas <= target_cpu_percent (None: `node-3x` did not run)."""
        if self.replicas3_cpu_percent is None:
            return None
        return self.replicas3_cpu_percent <= self.target_cpu_percent

    @property
    def rss_ok(self) -> bool:
        return self.rss_end_mib <= self.target_rss_mib


def daemonset_env(path: Path = DAEMONSET) -> dict[str, str]:
    """The gpu-agent container's `env` entries with a literal value in the DaemonSet."""
    doc = yaml.safe_load(path.read_text())
    containers = doc["spec"]["template"]["spec"]["containers"]
    agent = next(c for c in containers if c["name"] == "gpu-agent")
    return {e["name"]: str(e["value"]) for e in agent.get("env", []) if "value" in e}


def cpus_shim() -> Path | None:
    """Build the sysconf shim into bench/out/ with the C compiler, or None when there is none."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    src, lib = OUT_DIR / "bench_agent_cpus.c", OUT_DIR / "bench_agent_cpus.so"
    if lib.exists() and src.exists() and src.read_text() == _CPUS_SHIM_C:
        return lib
    src.write_text(_CPUS_SHIM_C)
    built = subprocess.run(
        [cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"], capture_output=True, text=True
    )
    if built.returncode != 0:
        print(
            f"bench_agent: cannot build the CPU-count shim ({built.stderr.strip()[:200]}); "
            "agents see this machine's CPUs",
            file=sys.stderr,
        )
        return None
    return lib


def _proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile (KiB) and Threads of a process."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
                out[key] = int(rest.split()[0])
    return out


def _sum_count(metrics: dict[str, float], base: str) -> tuple[float, float]:
    return metrics.get(f"{base}_sum", 0.0), metrics.get(f"{base}_count", 0.0)


def _labelled(metrics: dict[str, float], prefix: str) -> float:
    """Sum over every label set of one metric (e.g. all extender targets)."""
    return sum(v for k, v in metrics.items() if k == prefix or k.startswith(prefix + "{"))


def _holders(metrics: dict[str, float]) -> dict[str, int]:
    """pod -> number of GPUs it holds, from the dcgm-exporter style series."""
    out: dict[str, int] = {}
    for key in metrics:
        if not key.startswith("DCGM_FI_DEV_GPU_UTIL{"):
            continue
        pod = key.partition('pod="')[2].partition('"')[0]
        if pod:
            out[pod] = out.get(pod, 0) + 1
    return out


class _Agent:
    """One variant's processes: its extender, its agent, maybe a fake kubelet."""

    def __init__(self, variant: Variant, workdir: Path, shim: Path | None) -> None:
        self.variant = variant
        self.replicas = [
            extender_process(f"extender-for-agent-bench-{variant.name}-{i}") for i in range(variant.extenders)
        ]
        self.extender, self.addrs = self.replicas[0]
        self.metrics_port = free_port()
        self.kubelet: ManagedProcess | None = None
        here = workdir / variant.name
        here.mkdir()
        args: list[str] = []
        if variant.kubelet:
            socket = here / "kubelet.sock"
            if len(str(socket)) > 100:
                raise BenchError(f"{socket}: too long for a unix socket path")
            self.socket = socket
            self.kubelet = ManagedProcess(
                f"fake-kubelet-{variant.name}",
                [
                    sys.executable,
                    "-m",
                    "gpuextender.agent.fakes.kubelet",
                    "--socket",
                    str(socket),
                    "--scenario",
                    str(KUBELET_SCENARIO),
                    "--node",
                    NODE_NAME,
                ],
            )
            labels = here / "gfd"
            labels.write_text(GFD_LABELS)
            args += [f"--pod-resources-socket={socket}", f"--gfd-labels-file={labels}"]
        args += variant.args  # last: a variant's flags win over the ones above
        sockets = [a for a in args if a.startswith("--pod-resources-socket=")]
        self.expects_holders = variant.kubelet and sockets[-1] == f"--pod-resources-socket={self.socket}"
        env = daemonset_env() if variant.daemonset_env else {}
        self.cpus_seen = os.cpu_count() or 0
        if variant.node_cpus and shim is not None:
            env.update(LD_PRELOAD=str(shim), BENCH_AGENT_CPUS=str(NODE_CPUS))
            self.cpus_seen = NODE_CPUS
        env.update(variant.env)
        self.env = {k: v for k, v in env.items() if v != ""}
        unset = [k for k, v in env.items() if v == ""]
        # `env` execs the agent: the measured PID is the agent's own.
        prefix = ["env", *(f"-u{k}" for k in unset), *(f"{k}={v}" for k, v in self.env.items())]
        argv = (
            prefix
            + program("gpu-agent", "gpuextender.agent")
            + [
                "--fake",
                str(variant.scenario),
                "--interval",
                "1",
                "--node-name",
                NODE_NAME,
                *(a for _, addrs in self.replicas for a in ("--extender", addrs.grpc_target)),
                "--metrics-addr",
                f"{LOOPBACK}:{self.metrics_port}",
                "--control-dir",
                str(here / "control"),
                *args,
            ]
        )
        self.agent = ManagedProcess(f"agent-bench-{variant.name}", argv)
        self.started = 0.0

    @property
    def metrics_url(self) -> str:
        return f"http://{LOOPBACK}:{self.metrics_port}/metrics"

    @property
    def procs(self) -> list[ManagedProcess]:
        return [p for p in (*(e for e, _ in self.replicas), self.kubelet, self.agent) if p is not None]

    def check_alive(self) -> None:
        for proc in self.procs:
            proc.check_alive()


async def _sleep_watching(seconds: float, agents: Sequence[_Agent]) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        for a in agents:
            a.check_alive()
        await asyncio.sleep(min(0.5, left))


async def _wait_for_data(session: aiohttp.ClientSession, a: _Agent, timeout_s: float = 20.0) -> float:
    """Until every extender replica holds the agent's data (and, with a kubelet, the agent shows
    its holders); returns when the first replica had it (monotonic)."""
    deadline = time.monotonic() + timeout_s
    first: float | None = None
    waiting = [addrs for _, addrs in a.replicas]
    while True:
        a.check_alive()
        for addrs in list(waiting):
            metrics = await scrape(session, f"{addrs.base_url}/metrics")
            if metrics.get("gpu_extender_nodes_with_data") == 1.0:
                waiting.remove(addrs)
                if addrs is a.addrs:
                    first = time.monotonic()
        if not waiting and first is not None:
            if not a.expects_holders or _holders(await scrape(session, a.metrics_url)) == EXPECTED_HOLDERS:
                return first
        if time.monotonic() > deadline:
            what = (
                f"{len(waiting)} of {len(a.replicas)} extender(s) have no data from the agent"
                if waiting
                else "the extender sees no kubelet holders in the agent"
            )
            raise BenchError(f"[{a.variant.name}] {what} after {timeout_s:.0f}s; agent log:\n{a.agent.log_tail()}")
        await asyncio.sleep(0.1)


async def _scrape_during(
    session: aiohttp.ClientSession, agents: Sequence[_Agent], seconds: float, every_s: float
) -> None:
    """Sleep `seconds` watching the processes; scrape each agent every `every_s` (0: never),
    the first time half an interval in, as a Prometheus whose schedule is not ours."""
    if every_s <= 0:
        await _sleep_watching(seconds, agents)
        return
    end = time.monotonic() + seconds
    next_scrape = time.monotonic() + every_s / 2
    while True:
        await _sleep_watching(max(0.0, min(next_scrape, end) - time.monotonic()), agents)
        if time.monotonic() >= end:
            return
        for a in agents:
            async with session.get(a.metrics_url) as resp:
                await resp.read()
        next_scrape += every_s


async def _bench(agents: Sequence[_Agent], warmup_s: float, window_s: float, scrape_every_s: float) -> AgentBenchResult:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        firsts = []
        for a in agents:
            await wait_http_ok(session, a.metrics_url.replace("/metrics", "/healthz"), a.agent)
            firsts.append(await _wait_for_data(session, a))
        started = max(a.started for a in agents)
        await _sleep_watching(max(0.0, started + warmup_s - time.monotonic()), agents)

        before = [await scrape(session, a.metrics_url) for a in agents]
        rss_start = [_proc_status(a.agent.pid).get("VmRSS", 0) for a in agents]
        ext_ticks0 = [[tree_cpu_ticks(e.pid) for e, _ in a.replicas] for a in agents]
        ticks0, t0 = [cpu_ticks(a.agent.pid) for a in agents], time.monotonic()
        background = BackgroundLoad(*(p.pid for a in agents for p in a.procs))
        await _scrape_during(session, agents, window_s, scrape_every_s)
        ticks1, t1 = [cpu_ticks(a.agent.pid) for a in agents], time.monotonic()
        ext_ticks1 = [[tree_cpu_ticks(e.pid) for e, _ in a.replicas] for a in agents]
        status = [_proc_status(a.agent.pid) for a in agents]
        background_cores = background.cores()

        after = [await scrape(session, a.metrics_url) for a in agents]
        m = agents[0]
        async with session.get(f"{m.addrs.base_url}/metrics") as resp:
            extender_text = await resp.text()
        for a in agents:
            for _, addrs in a.replicas:
                if (await scrape(session, f"{addrs.base_url}/metrics")).get("gpu_extender_nodes_with_data") != 1.0:
                    raise BenchError(
                        f"[{a.variant.name}] extender {addrs.grpc_target} /metrics does not show "
                        "`gpu_extender_nodes_with_data 1.0`"
                    )
    if "gpu_extender_nodes_with_data 1.0" not in extender_text.splitlines():
        raise BenchError("extender /metrics does not show `gpu_extender_nodes_with_data 1.0`")
    extender_metrics = {
        k: v
        for k, v in (line.rsplit(" ", 1) for line in extender_text.splitlines() if line and not line.startswith("#"))
    }

    base = "gpu_agent_sample_duration_seconds"
    elapsed = t1 - t0
    compare: list[VariantResult] = []
    for i, a in enumerate(agents):
        s0, c0 = _sum_count(before[i], base)
        s1, c1 = _sum_count(after[i], base)
        if c1 <= 0:
            raise BenchError(f"[{a.variant.name}] the agent's gpu_agent_sample_duration_seconds histogram is empty")
        st = status[i]
        compare.append(
            VariantResult(
                name=a.variant.name,
                what=a.variant.what,
                cpu_ticks=ticks1[i] - ticks0[i],
                cpu_percent=100.0 * (ticks1[i] - ticks0[i]) / CLOCK_TICKS / elapsed,
                rss_start_mib=rss_start[i] / 1024,
                rss_end_mib=st.get("VmRSS", 0) / 1024,
                hwm_end_mib=st.get("VmHWM", 0) / 1024,
                rss_anon_mib=st.get("RssAnon", 0) / 1024,
                rss_file_mib=st.get("RssFile", 0) / 1024,
                threads=st.get("Threads", 0),
                sample_mean_window_ms=1000.0 * (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan"),
                cpus_seen=a.cpus_seen,
                env=a.env,
                extenders=len(a.replicas),
                reports_sent=int(_labelled(after[i], "gpu_agent_reports_sent_total")),
                reports_window=int(
                    _labelled(after[i], "gpu_agent_reports_sent_total")
                    - _labelled(before[i], "gpu_agent_reports_sent_total")
                ),
                streams_connected=_labelled(after[i], "gpu_agent_stream_connected"),
                extender_cpu_percent=100.0 * (sum(ext_ticks1[i]) - sum(ext_ticks0[i])) / CLOCK_TICKS / elapsed,
            )
        )
    node = next((v for v in compare if v.name == NODE.name), None)
    if node is not None:
        for v in compare:
            v.cpu_vs_node = v.cpu_percent / node.cpu_percent if node.cpu_percent > 0 else None
            v.rss_vs_node = v.rss_end_mib / node.rss_end_mib if node.rss_end_mib > 0 else None
    three = next((v for v in compare if v.name == THREE.name), None)
    three_every = next((v for v in compare if v.name == THREE_EVERY.name), None)
    s0, c0 = _sum_count(before[0], base)
    s1, c1 = _sum_count(after[0], base)
    main_result = compare[0]
    return AgentBenchResult(
        gpus=sum(1 for k in after[0] if k.startswith("gpu_agent_gpu_healthy{")),
        interval_s=1.0,
        warmup_s=warmup_s,
        window_s=elapsed,
        cpu_ticks=main_result.cpu_ticks,
        cpu_percent=main_result.cpu_percent,
        rss_start_mib=main_result.rss_start_mib,
        rss_end_mib=main_result.rss_end_mib,
        hwm_end_mib=main_result.hwm_end_mib,
        samples_total=int(c1),
        sample_mean_ms=1000.0 * s1 / c1,
        samples_window=int(c1 - c0),
        sample_mean_window_ms=main_result.sample_mean_window_ms,
        reports_sent=int(_labelled(after[0], "gpu_agent_reports_sent_total")),
        stream_connected=_labelled(after[0], "gpu_agent_stream_connected"),
        nvml_errors=_labelled(after[0], "gpu_agent_nvml_errors_total"),
        extender_nodes_with_data=float(extender_metrics.get("gpu_extender_nodes_with_data", "nan")),
        extender_cpu_percent=100.0 * (ext_ticks1[0][0] - ext_ticks0[0][0]) / CLOCK_TICKS / elapsed,
        time_to_first_report_s=firsts[0] - m.started,
        background_cores=background_cores,
        variant=m.variant.name,
        rss_anon_mib=main_result.rss_anon_mib,
        rss_file_mib=main_result.rss_file_mib,
        threads=main_result.threads,
        cpus_seen=main_result.cpus_seen,
        scrape_every_s=scrape_every_s,
        kubelet_holders=_holders(after[0]),
        env=m.env,
        compare=compare,
        replicas3_variant=None if three is None else three.name,
        replicas3_cpu_percent=None if three is None else three.cpu_percent,
        replicas3_rss_mib=None if three is None else three.rss_end_mib,
        replicas3_cpu_vs_node=None if three is None else three.cpu_vs_node,
        replicas3_every_cpu_percent=None if three_every is None else three_every.cpu_percent,
        replicas3_every_rss_mib=None if three_every is None else three_every.rss_end_mib,
        replicas3_every_cpu_vs_node=None if three_every is None else three_every.cpu_vs_node,
    )


@contextlib.contextmanager
def _running(agents: Sequence[_Agent]) -> Iterator[None]:
    """Start every variant's extender and kubelet, then the agents; stop all of them (always)."""
    with contextlib.ExitStack() as stack:
        for a in agents:
            for extender, _ in a.replicas:
                stack.enter_context(extender)
            if a.kubelet is not None:
                stack.enter_context(a.kubelet)

        async def ready() -> None:
            async with aiohttp.ClientSession() as session:
                for a in agents:
                    for extender, addrs in a.replicas:
                        await wait_http_ok(session, f"{addrs.base_url}/readyz", extender)
            deadline = time.monotonic() + 20.0
            for a in agents:
                while a.kubelet is not None and not a.socket.exists():
                    a.kubelet.check_alive()
                    if time.monotonic() > deadline:
                        raise BenchError(f"fake kubelet: no socket {a.socket} after 20s:\n{a.kubelet.log_tail()}")
                    await asyncio.sleep(0.05)

        asyncio.run(ready())
        for a in agents:
            stack.enter_context(a.agent)
            a.started = time.monotonic()
        yield


def run_variants(
    variants: Sequence[Variant],
    *,
    warmup_s: float = 5.0,
    window_s: float = 30.0,
    scrape_every_s: float = SCRAPE_EVERY_S,
) -> AgentBenchResult:
    """Measure the variants side by side; the first one is the measured agent of the result."""
    workdir = Path(tempfile.mkdtemp(prefix="gab-", dir="/tmp"))  # short: unix socket paths are <= 107 bytes
    try:
        shim = cpus_shim() if any(v.node_cpus for v in variants) else None
        agents = [_Agent(v, workdir, shim) for v in variants]
        with _running(agents):
            result = asyncio.run(_bench(agents, warmup_s, window_s, scrape_every_s))
        holders_expected = agents[0].expects_holders
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    # Reports go on change and at least every heartbeat (the agent's default 3 s: the bench's
    # extender never goes stale), so a healthy stream sent about one per heartbeat to each extender
    # (one fewer allowed: the window's edges and timer slack).
    least = max(1, int(result.window_s / HEARTBEAT_S) - 1)
    for v in result.compare:
        if v.streams_connected != v.extenders or v.reports_window < v.extenders * least:
            raise BenchError(
                f"[{v.name}] agent stream unhealthy: connected={v.streams_connected:g} of "
                f"{v.extenders}, reports sent={v.reports_sent} ({v.reports_window} in the "
                f"{result.window_s:.1f}s window)"
            )
    if holders_expected and result.kubelet_holders != EXPECTED_HOLDERS:
        raise BenchError(f"the agent lost the kubelet's holders: {result.kubelet_holders}")
    return result


def run(
    *,
    quick: bool = False,
    warmup_s: float = 5.0,
    window_s: float = 30.0,
    variants: Sequence[str] = DEFAULT_VARIANTS,
    scrape_every_s: float = SCRAPE_EVERY_S,
) -> AgentBenchResult:
    """Start the extenders, kubelet and agents, measure the agents, stop them all (always)."""
    if quick:
        warmup_s, window_s = 3.0, 5.0
    return run_variants(
        [VARIANTS[v] for v in variants], warmup_s=warmup_s, window_s=window_s, scrape_every_s=scrape_every_s
    )


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def format_compare(r: AgentBenchResult) -> list[str]:
    """The side-by-side table (ratios to `bare`, else the last variant, and to `node`), when more
    than one ran."""
    if len(r.compare) < 2:
        return []
    ref = next((v for v in r.compare if v.name == BARE.name), r.compare[-1])
    node = next((v for v in r.compare if v.name == NODE.name), None)
    w = max(10, *(len(v.name) for v in r.compare))
    vs_node = "" if node is None or node is ref else f"  vs {node.name} (CPU, RSS)"
    lines = [
        f"  side by side, same window ({len(r.compare)} agents at once, each with its own extender(s); "
        f"ext: extender replicas streamed to, rep: reports sent to them in the window):",
        f"    {'variant':{w}s} {'CPU %':>6s} {'ticks':>5s} {'VmRSS':>6s} {'VmHWM':>6s} {'anon':>6s} "
        f"{'file':>6s} {'thr':>3s} {'CPUs':>4s} {'pass ms':>7s} {'ext':>3s} {'rep':>4s}  "
        f"vs {ref.name} (CPU, RSS){vs_node}",
    ]
    for v in r.compare:
        ratios = f"{_ratio(v.cpu_percent, ref.cpu_percent):>5s} {_ratio(v.rss_end_mib, ref.rss_end_mib):>5s}"
        if vs_node and node is not None:
            ratios += (
                f"{'':{len(ref.name) + 6}s}{_ratio(v.cpu_percent, node.cpu_percent):>5s} "
                f"{_ratio(v.rss_end_mib, node.rss_end_mib):>5s}"
            )
        lines.append(
            f"    {v.name:{w}s} {v.cpu_percent:6.2f} {v.cpu_ticks:5d} {v.rss_end_mib:6.1f} {v.hwm_end_mib:6.1f} "
            f"{v.rss_anon_mib:6.1f} {v.rss_file_mib:6.1f} {v.threads:3d} {v.cpus_seen:4d} "
            f"{v.sample_mean_window_ms:7.3f} {v.extenders:3d} {v.reports_window:4d}  {ratios}  "
            f"{v.what}"
        )
    return lines


def format_result(r: AgentBenchResult) -> str:
    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    shown = {
        k: v for k, v in r.env.items() if not k.startswith("NVIDIA_") and k not in ("LD_PRELOAD", "BENCH_AGENT_CPUS")
    }
    env = " ".join(f"{k}={v}" for k, v in shown.items()) or "none"
    cpus = (
        f"sees {r.cpus_seen} CPUs (sysconf shim)"
        if "BENCH_AGENT_CPUS" in r.env
        else f"sees this machine's {r.cpus_seen} CPUs"
    )
    scraped = f"scraped every {r.scrape_every_s:g}s in the window" if r.scrape_every_s > 0 else "not scraped"
    holders = ", ".join(f"{p} {n}" for p, n in sorted(r.kubelet_holders.items())) or "none"
    replicas3 = []
    if r.replicas3_cpu_percent is not None and r.replicas3_cpu_ok is not None:
        vs = "" if r.replicas3_cpu_vs_node is None else f", {r.replicas3_cpu_vs_node:.2f}x the 1-extender node"
        replicas3.append(
            f"  3 repl.   {r.replicas3_cpu_percent:6.2f} % of one core with 3 extender replicas "
            f"(`{r.replicas3_variant}`, RSS {r.replicas3_rss_mib:.1f} MiB{vs})   "
            f"target <= {r.target_cpu_percent:g} %   {verdict(r.replicas3_cpu_ok)}"
        )
    if r.replicas3_every_cpu_percent is not None:
        vs = "" if r.replicas3_every_cpu_vs_node is None else f", {r.replicas3_every_cpu_vs_node:.2f}x node"
        replicas3.append(
            f"            {r.replicas3_every_cpu_percent:6.2f} % with the gate off, every sample to "
            f"each (`{THREE_EVERY.name}`, RSS {r.replicas3_every_rss_mib:.1f} MiB{vs})"
        )
    return "\n".join(
        [
            f"gpu-agent, {r.gpus} fake GPUs, --interval {r.interval_s:g}s, "
            f"{r.window_s:.1f}s window after {r.warmup_s:g}s warm-up:",
            f"  CPU       {r.cpu_percent:6.2f} % of one core ({r.cpu_ticks} ticks)   "
            f"target <= {r.target_cpu_percent:g} %   "
            f"{verdict(r.cpu_ok)}",
            f"  RSS       {r.rss_end_mib:6.1f} MiB (peak {r.hwm_end_mib:.1f}, {r.rss_start_mib:.1f} at window start)   "
            f"target <= {r.target_rss_mib:g} MiB   {verdict(r.rss_ok)}",
            *replicas3,
            f"  memory    {r.rss_anon_mib:.1f} MiB anonymous + {r.rss_file_mib:.1f} MiB file-backed; "
            f"{r.threads} threads; "
            f"env {env}",
            f"  agent     variant `{r.variant}`, {cpus}, {scraped}; kubelet holders (pod GPUs): {holders}",
            f"  sample    {r.sample_mean_window_ms:6.3f} ms mean per NVML pass in the window "
            f"({r.samples_window} samples; {r.sample_mean_ms:.3f} ms over all {r.samples_total})",
            f"  stream    {r.reports_sent} reports sent, connected={r.stream_connected:g}, "
            f"NVML errors={r.nvml_errors:g}, "
            f"first report in the extender {r.time_to_first_report_s:.2f}s after start",
            f"  extender  gpu_extender_nodes_with_data {r.extender_nodes_with_data:g}; "
            f"its CPU for this one agent {r.extender_cpu_percent:.2f} % of one core",
            f"  machine   other processes used {r.background_cores:.2f} cores meanwhile",
            *format_compare(r),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 s warm-up and a 5 s window: a smoke check")
    parser.add_argument("--window", type=float, default=30.0, help="CPU measurement window, seconds")
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated, run side by side; the first is the measured agent (known: {', '.join(VARIANTS)})",
    )
    parser.add_argument(
        "--scrape-every",
        type=float,
        default=SCRAPE_EVERY_S,
        metavar="SECONDS",
        help="scrape each agent's /metrics this often inside the window (0: never)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw result as JSON here")
    args = parser.parse_args(argv)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if not names or unknown:
        parser.error(f"--variants: unknown {unknown} (known: {', '.join(VARIANTS)})")
    exit_on_sigterm()
    try:
        result = run(quick=args.quick, window_s=args.window, variants=names, scrape_every_s=args.scrape_every)
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
