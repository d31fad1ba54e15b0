"""Benchmark: placement quality through a REAL kube-scheduler (issue 12 item 7, second part).

The same simulated fleet, trace, ground truth and metrics as bench/bench_placement.py
(bench/placement_sim.py, unchanged: its docstring defines "free idle healthy" and every metric),
smaller by default (60 nodes, 240 pods: bench_placement --quick's fleet and stream), but the node
choice is made by a real kube-scheduler instead of the bench replaying its steps. "Where the real
control-plane harness is available, run a smaller version of the same fleet through the real kube-
scheduler and report the same numbers."

How (tests/control_plane.py starts etcd + kube-apiserver from $KUBEBUILDER_ASSETS; there is no
kubelet and no controller-manager, the bench does their part):
- the fleet's Nodes are created Ready and untainted, with `nvidia.com/gpu` capacity and
  allocatable as the simulation's Node (time-slicing L40S nodes advertise 4x their GPUs) and the
  sim's labels (hostname, GFD product, gpu.count, gpu.replicas); the AcceleratorClass CRD and one
  class per product (with its hourly cost) are created as bench_placement's `--inventory` has them;
- per variant: the namespace `bench` is emptied, the simulation's pre-existing pods are created
  already bound (spec.nodeName, requests = limits = their GPUs, so kube-scheduler counts them);
  for extender variants a fresh `gpu-extender --kubernetes` starts (HTTPS and gRPC TLS with a
  trustme CA, `--stale-after 3`, `--node-strategy`), lists the Nodes and classes from the
  apiserver, and gets the nodes' GPU state over gRPC exactly as in bench_placement (one
  StreamNodeReports stream per node, full 0.2 NodeReports with holders, same refresh rules, dead
  agents hang up); then one kube-scheduler starts from the shipped
  deploy/base/scheduler/kube-scheduler-config.yaml (profile `gpu-scheduler`, weight 5,
  percentageOfNodesToScore 100, nodeCacheCapable, managedResources nvidia.com/gpu), with the
  extender's URL and the test CA as caData; changed for the bench: leaderElect false (no Lease to
  wait for between variants) and client qps/burst 1000;
- per tick of the trace: pods that finished are deleted (grace 0) and the bench waits for the
  deletion to show in its watch; the tick's reports are sent; each pod to try is created
  (schedulerName gpu-scheduler, requests nvidia.com/gpu) and the bench waits, on a watch, until it
  is bound (spec.nodeName) or marked PodScheduled=False/Unschedulable. Bound: the node the
  scheduler chose is recorded in the simulation (`Simulation.place`, judged against the ground
  truth at that moment exactly as in bench_placement) and that node's agent reports again (its
  holders now include the pod). Unschedulable: the pod is deleted from the apiserver (so that
  kube-scheduler does not place it later on its own) and the simulation's retry rule applies (tried
  again, re-created, after the next `retry_after` pods, at most `max_retries` times).

Variants:
- `none`: kube-scheduler alone: the shipped config with `extenders` removed, every plugin at its
  default. NOTE: the default NodeResourcesFit scoring (LeastAllocated) weighs cpu and memory
  only, not nvidia.com/gpu; these pods request no cpu/memory (scored as 100m/200MB each), so on
  these nodes it barely ranks them (emptier in pod count first) and the choice among fitting
  nodes is close to random. This is what an unconfigured kube-scheduler does, and differs from
  bench_placement's `none`, which models LeastAllocated on the GPU count;
- `none-gpu`: the same with NodeResourcesFit LeastAllocated scoring
  nvidia.com/gpu (weight 1) in place of cpu/memory: the real counterpart of bench_placement's `none`;
- `spread`, `binpack`, `random`, `cost`: the real gpu-extender with that `--node-strategy`.
Default: none, none-gpu, spread, binpack.

Expected differences to bench_placement's replay: kube-scheduler adds its own Score plugins to the
extender's (the extender's 0-10 score x weight 5 x 10, i.e. 50 per step, plus NodeResourcesFit,
BalancedAllocation, ImageLocality... 0-100 each x their weights; here they differ by a few points
at most between nodes, so they mostly break the extender's ties, toward nodes with fewer pods,
where bench_placement breaks them with a seeded RNG); its tie-breaking is not seeded, so no
variant repeats exactly; the decision happens when kube-scheduler calls the extender, a few ms
before the bench sees the bind and judges it; and the fleet is smaller. Compare the variants of
one run with each other, not with bench_placement's figures.

pods/s: pods bound per second of the replay loop (from the first pod to the last decision): it
includes the bench's own work per pod (create, watch, report sends, deletes), so it is a rate of
this harness on a 2-core machine, not kube-scheduler's throughput (bench/bench_scheduler.py
measures that). `bind ms`: mean time from the pod's create request to the bench seeing it bound.

Run: `KUBEBUILDER_ASSETS=DIR .venv/bin/python bench/bench_placement_kube.py [--nodes N] [--pods N]
[--seed S] [--variant NAME ...] [--json PATH]` (the default run takes about 30 s on 2 cores).
Without KUBEBUILDER_ASSETS (or with binaries missing) it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import json
import os
import shutil
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
import yaml

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))  # for tests.control_plane, tests.harness
from bench_placement import GPU_RESOURCE, NAMESPACE, Agents, inventory_objects, summarize  # noqa: E402
from bench_scheduler import Api, gather_limited, klog_errors  # noqa: E402
from benchlib import (  # noqa: E402
    OUT_DIR,
    REPO_ROOT,
    BenchError,
    exit_on_sigterm,
    extender_process,
    machine_facts,
    parse_prometheus,
)
from placement_sim import METRIC_HEADER, METRIC_LEGEND, Node, SimConfig, Simulation, metric_cells  # noqa: E402

SCHEDULER_CONFIG = REPO_ROOT / "deploy" / "base" / "scheduler" / "kube-scheduler-config.yaml"
CRD = REPO_ROOT / "deploy" / "components" / "acceleratorclass-crd" / "acceleratorclasses.ome.io.yaml"
WORKDIR = OUT_DIR / "placement-kube"
VARIANTS = ("none", "none-gpu", "spread", "binpack", "random", "cost")
DEFAULT_VARIANTS = ("none", "none-gpu", "spread", "binpack")
STRATEGIES = ("spread", "binpack", "random", "cost")
DEFAULT_NODES, DEFAULT_PODS = 60, 240  # bench_placement --quick's fleet and stream
ATTEMPT_LABEL = "bench.gpu-extender.io/attempt"
CLIENT_QPS = 1000
DECISION_TIMEOUT_S = 30.0
DELETE_TIMEOUT_S = 30.0
PODS_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"


# -- the cluster's objects -----------------------------------------------------------------------


def shipped_scheduler_config() -> dict[str, Any]:
    return dict(yaml.safe_load(SCHEDULER_CONFIG.read_text()))


def scheduler_config(base: dict[str, Any], variant: str, url: str | None, ca_pem: bytes) -> dict[str, Any]:
    """The shipped second scheduler's config, changed only where the bench needs it."""
    config = copy.deepcopy(base)
    config["leaderElection"]["leaderElect"] = False  # no Lease to wait for between variants
    config["clientConnection"] = {"qps": CLIENT_QPS, "burst": CLIENT_QPS}  # kubeconfig: set by ControlPlane
    if url is None:
        del config["extenders"]
        if variant == "none-gpu":
            config["profiles"][0]["pluginConfig"] = [
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "scoringStrategy": {
                            "type": "LeastAllocated",
                            "resources": [{"name": GPU_RESOURCE, "weight": 1}],
                        }
                    },
                }
            ]
        return config
    ext = config["extenders"][0]
    ext["urlPrefix"] = url
    tls = ext["tlsConfig"]
    tls.pop("caFile", None)
    tls["caData"] = base64.b64encode(ca_pem).decode()
    return config


def scheduler_name(base: dict[str, Any]) -> str:
    return str(base["profiles"][0]["schedulerName"])


def pod_manifest(
    name: str, gpus: int, *, scheduler: str, attempt: int | None = None, node: str | None = None
) -> dict[str, Any]:
    labels = {"app": "bench-placement"}
    if attempt is not None:
        labels[ATTEMPT_LABEL] = str(attempt)
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}
        ],  # requests default to limits
    }
    if node is not None:
        spec["nodeName"] = node  # already bound: a pre-existing pod
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


async def create_fleet(api: Api, fleet: Sequence[Node]) -> None:
    """Nodes (Ready, untainted, allocatable as the sim's) and one AcceleratorClass per product."""
    objects = inventory_objects(fleet)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    async def node(obj: dict[str, Any]) -> None:
        body = copy.deepcopy(obj)
        del body["apiVersion"], body["kind"]
        body["status"]["conditions"] = [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "bench node",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ]
        name = body["metadata"]["name"]
        await api.call("POST", "/api/v1/nodes", body)
        await api.call("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, "application/merge-patch+json")

    await gather_limited(node(o) for o in objects if o["kind"] == "Node")
    for obj in objects:
        if obj["kind"] == "AcceleratorClass":
            await api.call("POST", "/apis/ome.io/v1beta1/acceleratorclasses", obj)
    for n in (fleet[0], fleet[-1]):  # the status really kept on create, no taint left
        got = await api.call("GET", f"/api/v1/nodes/{n.name}")
        if got["status"].get("allocatable", {}).get(GPU_RESOURCE) != str(n.allocatable) or got["spec"].get("taints"):
            raise BenchError(f"node {n.name} is not schedulable as created: {json.dumps(got)[:500]}")


async def install_crd(api: Api) -> None:
    for doc in yaml.safe_load_all(CRD.read_text()):
        if not doc:
            continue
        await api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
        name = doc["metadata"]["name"]
        deadline = time.monotonic() + 30
        while True:
            crd = await api.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            if any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions") or []
            ):
                break
            if time.monotonic() > deadline:
                raise BenchError(f"CRD {name} not established in 30 s")
            await asyncio.sleep(0.1)


async def empty_namespace(api: Api) -> None:
    await api.call("DELETE", PODS_PATH, {"gracePeriodSeconds": 0})
    deadline = time.monotonic() + DELETE_TIMEOUT_S
    while (await api.call("GET", f"{PODS_PATH}?limit=1"))["items"]:
        if time.monotonic() > deadline:
            raise BenchError(f"pods still listed {DELETE_TIMEOUT_S:.0f} s after deleting them")
        await asyncio.sleep(0.1)


# -- the bench's view of the pods: one watch ------------------------------------------------------


class PodWatch:
    """One watch on the namespace's pods. `expect(name, attempt)` before creating a pod: its
    future gives ("bound", node) or ("unschedulable", message). `expect_gone(name)` before
    deleting one: its future resolves on the DELETED event. A re-created pod (a retry) carries
    its attempt number as a label, so events of an earlier attempt never answer a later one."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.waiting: dict[str, tuple[str, asyncio.Future[tuple[str, str]]]] = {}
        self.gone: dict[str, asyncio.Future[None]] = {}
        self.task: asyncio.Task[None] | None = None
        self.restarts = 0

    async def start(self) -> None:
        listed = await self.api.call("GET", f"{PODS_PATH}?limit=1")
        connected = asyncio.Event()
        self.task = asyncio.create_task(self._run(listed["metadata"]["resourceVersion"], connected))
        opened = asyncio.ensure_future(connected.wait())
        done, _ = await asyncio.wait({self.task, opened}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        opened.cancel()
        if self.task in done:
            self.task.result()
        if not connected.is_set():
            raise BenchError("the pod watch did not open in 10 s")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self, resource_version: str, connected: asyncio.Event) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        while True:
            url = f"{self.api.base}{PODS_PATH}?watch=1&allowWatchBookmarks=true&resourceVersion={resource_version}"
            try:
                async with self.api.session.get(url, timeout=timeout) as resp:
                    if resp.status != 200:
                        raise BenchError(f"watch pods -> {resp.status}: {(await resp.text())[:300]}")
                    connected.set()
                    async for line in resp.content:
                        event = orjson.loads(line)
                        pod = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            raise BenchError(f"watch ERROR event: {pod}")
                        resource_version = pod["metadata"]["resourceVersion"]
                        if event.get("type") != "BOOKMARK":
                            self._on(event["type"], pod)
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
                pass  # reopened from the last resourceVersion, like an informer
            self.restarts += 1
            if self.restarts > 50:
                raise BenchError("the pod watch kept ending")

    def _on(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        name = meta["name"]
        if kind == "DELETED":
            gone = self.gone.pop(name, None)
            if gone is not None and not gone.done():
                gone.set_result(None)
            return
        entry = self.waiting.get(name)
        if entry is None or (meta.get("labels") or {}).get(ATTEMPT_LABEL) != entry[0]:
            return
        future = entry[1]
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            outcome = ("bound", str(node))
        else:
            conditions = (pod.get("status") or {}).get("conditions") or []
            failed = [
                c
                for c in conditions
                if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
            ]
            if not failed:
                return  # e.g. SchedulerError (an extender error; ignorable: false): it is retried
            outcome = ("unschedulable", str(failed[0].get("message", "")))
        del self.waiting[name]
        if not future.done():
            future.set_result(outcome)

    def expect(self, name: str, attempt: int) -> asyncio.Future[tuple[str, str]]:
        future: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()
        self.waiting[name] = (str(attempt), future)
        return future

    def expect_gone(self, name: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.gone[name] = future
        return future

    async def wait(self, futures: Sequence[asyncio.Future[Any]], timeout: float, what: str) -> list[Any]:
        """The futures' results; fails if the watch ends or `timeout` passes first."""
        assert self.task is not None
        pending = {f for f in futures if not f.done()}
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
            done, pending = await asyncio.wait(pending | {self.task}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if self.task in done:
                self.task.result()
                raise BenchError("the pod watch ended")
            pending.discard(self.task)
        return [f.result() for f in futures]


# -- one variant ----------------------------------------------------------------------------------


@dataclass(slots=True)
class KubeVariantResult:
    variant: str
    metrics: dict[str, Any]
    pods_per_s: float  # pods bound per second of the replay loop
    bind_mean_ms: float | None  # create request to bind seen, bound pods only
    replay_s: float  # the replay loop: first pod to last decision
    wall_s: float  # the whole variant: namespace reset, prefill, processes, replay
    reports_sent: int
    extender_calls: dict[str, int] = field(default_factory=dict)  # filter/prioritize answered with 200
    unschedulable_messages: list[str] = field(default_factory=list)  # a few, for context
    scheduler_log_errors: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Tls:
    ca_pem: bytes
    cert: Path
    key: Path
    server_name: str
    client: ssl.SSLContext


class OffsetClock:
    """time.monotonic() plus what `skip` added: `none` has no agents, so its freshness ground truth
    (bench_placement's rules) runs on a clock whose waits cost nothing."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    async def skip(self, seconds: float) -> None:
        self.offset += seconds


async def _extender_metrics(session: aiohttp.ClientSession, base: str) -> dict[str, float]:
    async with session.get(f"{base}/metrics") as resp:
        text = await resp.text()
        if resp.status != 200:
            raise BenchError(f"GET {base}/metrics: HTTP {resp.status}: {text[:200]}")
    return parse_prometheus(text)


def _calls(metrics: dict[str, float]) -> dict[str, int]:
    return {
        verb: int(metrics.get(f'gpu_extender_requests_total{{code="200",verb="{verb}"}}', 0))
        for verb in ("filter", "prioritize")
    }


async def run_variant(
    plane: Any, api: Api, variant: str, cfg: SimConfig, stale_after: float, base_config: dict[str, Any], tls: Tls
) -> KubeVariantResult:
    started = time.monotonic()
    sim = Simulation(cfg, stale_after)
    sched = scheduler_name(base_config)
    await empty_namespace(api)
    # The pre-existing pods, bound where the simulation put them (same for every variant).
    await gather_limited(
        api.call("POST", PODS_PATH, pod_manifest(r.spec.name, r.spec.gpus, scheduler=sched, node=r.node))
        for r in sim.running.values()
    )
    watch = PodWatch(api)
    await watch.start()
    strategy = variant if variant in STRATEGIES else None
    result_calls: dict[str, int] = {}
    agents: Agents | None = None
    proc = None
    async with AsyncExitStack() as stack:
        stack.push_async_callback(watch.stop)
        if strategy is None:
            vclock = OffsetClock()
            clock: Callable[[], float] = vclock
            wait: Callable[[float], Awaitable[None]] = vclock.skip

            async def publish(nodes: Sequence[Node]) -> None:
                for n in nodes:
                    n.last_report_at = vclock()
                    n.dirty = False

            async def hang_up(node: Node) -> None:
                return None

            url = None
            check_extender: Callable[[], None] = lambda: None  # noqa: E731
        else:
            ext, addrs = extender_process(
                f"extender-placement-kube-{strategy}",
                [
                    "--kubernetes",
                    "--kubeconfig",
                    str(plane.kubeconfig),
                    "--tls-cert",
                    str(tls.cert),
                    "--tls-key",
                    str(tls.key),
                    "--stale-after",
                    str(stale_after),
                    "--node-strategy",
                    strategy,
                    "--random-seed",
                    str(cfg.seed),
                ],
            )
            stack.enter_context(ext)
            check_extender = ext.check_alive
            url = f"https://127.0.0.1:{addrs.http_port}"
            session = await stack.enter_async_context(
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=2, ssl=tls.client), timeout=aiohttp.ClientTimeout(total=30)
                )
            )
            await _wait_inventory(session, url, ext, cfg.nodes)
            creds = grpc.ssl_channel_credentials(root_certificates=tls.ca_pem)
            channel = await stack.enter_async_context(
                grpc.aio.secure_channel(
                    addrs.grpc_target, creds, options=(("grpc.ssl_target_name_override", tls.server_name),)
                )
            )
            await asyncio.wait_for(channel.channel_ready(), timeout=10)
            agents = Agents(sim, channel, time.monotonic)
            stack.push_async_callback(agents.close)
            clock, wait, publish, hang_up = time.monotonic, asyncio.sleep, agents.send_all, agents.hang_up
            result_calls = _calls(await _extender_metrics(session, url))

        await publish(sim.fleet)  # every agent reports once
        published = clock()
        # The scheduler starts (ControlPlane.scheduler waits for /healthz: in a thread).
        config = scheduler_config(base_config, variant, url, tls.ca_pem)
        proc = await asyncio.to_thread(plane.scheduler, config, f"kube-scheduler-placement-{variant}")
        stack.push_async_callback(asyncio.to_thread, proc.stop)
        # Agents dead from the start are stale from the first pod (bench_placement's rule).
        left = stale_after + 0.5 - (clock() - published)
        if left > 0:
            await wait(left)

        refresh = stale_after / 3
        dead: set[str] = set()
        attempts: dict[str, int] = {}
        bind_ms: list[float] = []
        unschedulable: list[str] = []
        replay_started = time.monotonic()
        while not sim.finished():
            before = set(sim.running)
            pods = sim.begin_tick()
            finished = sorted(before - set(sim.running))
            if finished:  # the pods' containers ended: the kubelet would delete them
                await _delete(api, watch, finished)
            for node in sim.fleet:
                if not node.agent_alive and node.name not in dead:
                    dead.add(node.name)
                    await hang_up(node)
            now = clock()
            await publish(
                [
                    n
                    for n in sim.fleet
                    if n.agent_alive and (n.dirty or n.last_report_at is None or now - n.last_report_at >= refresh)
                ]
            )
            for pod in pods:
                check_extender()
                if not proc.alive():
                    raise BenchError(f"kube-scheduler exited:\n{proc.log()[-3000:]}")
                candidates = sim.candidates(pod)
                attempt = attempts[pod.name] = attempts.get(pod.name, 0) + 1
                future = watch.expect(pod.name, attempt)
                t0 = time.monotonic()
                await api.call("POST", PODS_PATH, pod_manifest(pod.name, pod.gpus, scheduler=sched, attempt=attempt))
                try:
                    [(outcome, detail)] = await watch.wait([future], DECISION_TIMEOUT_S, f"pod {pod.name} decided")
                except BenchError as exc:
                    raise BenchError(f"{variant}: {exc}; kube-scheduler log:\n{proc.log()[-3000:]}") from None
                latency = (time.monotonic() - t0) * 1000
                if outcome == "bound":
                    choice: Node | None = sim.by_name.get(detail)
                    if choice is None:
                        raise BenchError(f"{pod.name} bound to {detail}, not a fleet node")
                    if choice.kube_free < pod.gpus:
                        raise BenchError(
                            f"{pod.name} ({pod.gpus} GPUs) bound to {detail}, where the "
                            f"simulation has {choice.kube_free} unallocated: the scheduler's "
                            "count differs"
                        )
                    bind_ms.append(latency)
                else:
                    choice = None
                    if len(unschedulable) < 5:
                        unschedulable.append(f"{pod.name} ({pod.gpus} GPUs): {detail}")
                sim.place(pod, choice, candidates, clock(), latency)
                if choice is None:  # out of the scheduler's queue; the simulation retries it
                    await _delete(api, watch, [pod.name])
                elif choice.agent_alive:
                    await publish([choice])  # the kubelet's allocation shows in the agent's next report
        replay_s = time.monotonic() - replay_started
        m = sim.finish()
        log_errors = klog_errors(proc.log())
        if strategy is not None:
            assert url is not None
            after = _calls(await _extender_metrics(session, url))
            result_calls = {k: after[k] - result_calls.get(k, 0) for k in after}
            have = (await _extender_metrics(session, url)).get("gpu_extender_nodes_with_data")
            if have != float(cfg.nodes):
                raise BenchError(f"the extender holds data for {have} nodes, expected {cfg.nodes}")
            if result_calls["filter"] < m.placed:
                raise BenchError(
                    f"{variant}: the extender answered {result_calls} for {m.placed} bound pods: "
                    f"was it called? kube-scheduler errors: {log_errors}"
                )
    return KubeVariantResult(
        variant=variant,
        metrics=summarize(m),
        pods_per_s=m.placed / replay_s if replay_s > 0 else 0.0,
        bind_mean_ms=sum(bind_ms) / len(bind_ms) if bind_ms else None,
        replay_s=replay_s,
        wall_s=time.monotonic() - started,
        reports_sent=agents.sent if agents is not None else 0,
        extender_calls=result_calls,
        unschedulable_messages=unschedulable,
        scheduler_log_errors=log_errors,
    )


async def _delete(api: Api, watch: PodWatch, names: Sequence[str]) -> None:
    """Delete pods (grace 0: no kubelet) and wait until the watch has seen them go."""
    futures = [watch.expect_gone(n) for n in names]
    await asyncio.gather(*(api.call("DELETE", f"{PODS_PATH}/{n}", {"gracePeriodSeconds": 0}) for n in names))
    await watch.wait(futures, DELETE_TIMEOUT_S, f"pods deleted: {', '.join(names[:3])}")


async def _wait_inventory(session: aiohttp.ClientSession, url: str, ext: Any, nodes: int) -> None:
    """Ready, and the apiserver's Nodes and classes listed (reports for unknown nodes are capped)."""
    deadline = time.monotonic() + 60
    want = {
        'gpu_extender_inventory_objects{kind="Node"}': float(nodes),
        'gpu_extender_inventory_objects{kind="AcceleratorClass"}': 3.0,
    }
    last = "no answer"
    while True:
        ext.check_alive()
        try:
            async with session.get(f"{url}/readyz") as resp:
                ready = resp.status == 200
            got = await _extender_metrics(session, url) if ready else {}
            if ready and all(got.get(k) == v for k, v in want.items()):
                return
            last = f"ready {ready}, " + ", ".join(f"{k} {got.get(k)}" for k in want)
        except (TimeoutError, aiohttp.ClientError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise BenchError(f"gpu-extender not ready with the inventory in 60 s ({last}):\n{ext.log_tail()}")
        await asyncio.sleep(0.1)


# -- the whole bench ------------------------------------------------------------------------------


def make_tls(workdir: Path, server_name: str) -> Tls:
    import trustme

    from tests.harness import client_ssl_context, write_ca, write_leaf

    ca = trustme.CA(organization_name="bench placement kube")
    cert, key = write_leaf(workdir, ca, "extender", "127.0.0.1", server_name)
    ca_file = write_ca(workdir, ca, "extender-ca")
    return Tls(ca_file.read_bytes(), cert, key, server_name, client_ssl_context(ca))


async def _bench(
    plane: Any, cfg: SimConfig, variants: Sequence[str], stale_after: float, say: Callable[[str], None]
) -> list[KubeVariantResult]:
    base_config = shipped_scheduler_config()
    tls = make_tls(WORKDIR, base_config["extenders"][0]["tlsConfig"]["serverName"])
    fleet = Simulation(cfg, stale_after).fleet
    api = Api(plane)
    results: list[KubeVariantResult] = []
    try:
        t0 = time.monotonic()
        await api.call("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        # No controller-manager: the ServiceAccount admission needs `default` to exist.
        await api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": "default"}})
        await install_crd(api)
        await create_fleet(api, fleet)
        say(
            f"created {cfg.nodes} nodes and {len({n.product.key for n in fleet})} products' classes "
            f"in {time.monotonic() - t0:.1f}s"
        )
        for variant in variants:
            say(f"  {variant}: {cfg.pods} pods on {cfg.nodes} nodes through kube-scheduler...")
            r = await run_variant(plane, api, variant, cfg, stale_after, base_config, tls)
            say(f"  {variant}: done in {r.wall_s:.1f}s (replay {r.replay_s:.1f}s, {r.pods_per_s:.1f} pods/s)")
            results.append(r)
    finally:
        await api.close()
    return results


def run(
    cfg: SimConfig, variants: Sequence[str], stale_after: float, say: Callable[[str], None]
) -> list[KubeVariantResult]:
    from tests.control_plane import ControlPlane

    shutil.rmtree(WORKDIR, ignore_errors=True)
    WORKDIR.mkdir(parents=True)
    plane = ControlPlane(WORKDIR, Path(os.environ["KUBEBUILDER_ASSETS"]))
    try:
        t0 = time.monotonic()
        plane.start()
        say(f"control plane up in {time.monotonic() - t0:.1f}s (logs in {WORKDIR.relative_to(REPO_ROOT)})")
        return asyncio.run(_bench(plane, cfg, variants, stale_after, say))
    finally:
        plane.stop()


def format_table(results: Sequence[KubeVariantResult]) -> str:
    head = f"{'variant':<9} {METRIC_HEADER} {'pods/s':>7} {'bind ms':>8} {'time s':>7}"
    lines = [head, "-" * len(head)]
    for r in results:
        ms = f"{r.bind_mean_ms:8.1f}" if r.bind_mean_ms is not None else f"{'-':>8}"
        lines.append(f"{r.variant:<9} {metric_cells(r.metrics)} {r.pods_per_s:>7.1f} {ms} {r.wall_s:>7.1f}")
    return "\n".join(lines)


LEGEND = f"""\
{METRIC_LEGEND}
pods/s:    pods bound per second of the replay loop (includes the bench's own work per pod)
bind ms:   mean, pod create request to the bind seen on the bench's watch
time s:    the whole variant (namespace reset, pre-existing pods, extender and scheduler start, replay)
none: stock kube-scheduler (LeastAllocated scores cpu/memory, not GPUs); kube-scheduler's own scores add
           to the extender's (weight 5): compare variants of one run, not with bench_placement"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=DEFAULT_NODES, help=f"fleet size (default {DEFAULT_NODES})")
    parser.add_argument("--pods", type=int, default=DEFAULT_PODS, help=f"pods in the stream (default {DEFAULT_PODS})")
    parser.add_argument("--seed", type=int, default=SimConfig().seed)
    parser.add_argument("--stale-after", type=float, default=3.0, help="the extender's --stale-after (seconds)")
    parser.add_argument(
        "--variant",
        action="append",
        choices=VARIANTS,
        help=f"run only this variant (repeatable; default {' '.join(DEFAULT_VARIANTS)})",
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    from tests.control_plane import skip_reason

    reason = skip_reason()
    if reason is not None:
        print(f"bench_placement_kube: skipped: {reason}")
        return 0
    exit_on_sigterm()
    if args.nodes < 2 or args.pods < 1 or args.stale_after <= 0:
        parser.error("need --nodes >= 2, --pods >= 1 and a positive --stale-after")
    cfg = SimConfig(nodes=args.nodes, pods=args.pods, seed=args.seed)
    variants = list(dict.fromkeys(args.variant or DEFAULT_VARIANTS))
    started = time.perf_counter()

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        results = run(cfg, variants, args.stale_after, say)
    except BenchError as exc:
        print(f"bench_placement_kube: FAILED: {exc}", file=sys.stderr)
        return 1
    total = time.perf_counter() - started
    print(
        f"real kube-scheduler: {cfg.nodes} nodes, {cfg.pods} pods, seed {cfg.seed}, "
        f"--stale-after {args.stale_after:g}s (total {total:.0f}s)"
    )
    print(format_table(results))
    print(LEGEND)
    for r in results:
        if r.scheduler_log_errors:
            print(f"{r.variant}: kube-scheduler error lines: {r.scheduler_log_errors[:2]}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "config": asdict(cfg),
            "stale_after_s": args.stale_after,
            "total_s": total,
            "machine": machine_facts(),
            "legend": LEGEND.splitlines(),
            "results": [asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
