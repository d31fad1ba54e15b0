"""Benchmark: what publishing GPU state to the API costs at fleet scale (issue 35, item 3): API writes
per second, the extender's CPU, and the objects the API server keeps, at 5,000 nodes x 8 GPUs with
2 % of the GPUs changing state per minute; and a flapping GPU set, which must write nothing.

How (tests/control_plane.py starts etcd + kube-apiserver from $KUBEBUILDER_ASSETS, DeviceTaintRules
served as resource.k8s.io/v1beta2):
1. the fleet is created in the API server, 32 requests in flight: half the nodes DRA (no
   nvidia.com/gpu allocatable, one ResourceSlice of 8 GPUs each whose `uuid` attributes are the
   agents' GPU UUIDs, one DeviceClass), half device-plugin (8 nvidia.com/gpu allocatable). The
   not-ready taint that admission adds on create is left (no kubelet; nothing here reads it).
2. the real writer runs in this process, wired as app.py wires it: `DeviceTaintWriter` (Lease
   election, then its `_lead` loop) with a `Publication` (--device-taint-after 3, --busy-hold 60)
   and its `ChangeFeed` (told of every report, as gpu_state's on_offered_change tells it), and a
   `NodeStatusWriter` (--node-taint on), `--publish-writes-per-second 20`. The node writer's
   `node_of` reads the real inventory: a `KubeInventorySource` watching Nodes into an
   `InventoryStore`, as in the extender. `inputs()` gives the DRA inventory of the slices created
   (built once: they do not change), the device-plugin nodes' allocatable, the simulated agents'
   summaries (`gpu_summary.summarize` of a NodeReport per node, rebuilt when one of its GPUs
   changes; the agent reads the kubelet, no container holds a GPU) and no allocated claim. Every
   node's agent also reports every `--heartbeat` s (the same states, a new `received_at`).
3. time is scaled: simulated time runs `--speed` times wall time, and the writer, its Publication,
   its token bucket and the node writer all read that clock, so a 60 s hold lasts 60 / speed wall
   seconds and the budget is 20 writes per simulated second. The writer's tick (`interval_s`, 0.5 s
   in production) is `--tick / --speed` wall seconds of sleep; the tick achieved (sleep plus the
   work done in it) is reported. The Lease (whole wall seconds) is not scaled.
4. the phases, each measured on its own:
   - start-up: the fleet starts with 5 % of GPUs busy outside Kubernetes, 0.5 % unhealthy, and 1 %
     of the device-plugin nodes with every GPU busy; from the leader's first pass until everything
     that stands is written (every rule, condition and taint): writes, simulated time, budget;
   - steady: `--minutes` simulated minutes in which `--change-rate` of all GPUs change state per
     minute, at uniformly random moments (seeded): 45 % idle -> busy outside Kubernetes, 45 % busy
     -> idle, 5 % idle -> unhealthy, 5 % unhealthy -> idle. Writes are counted by the writer
     (`status.writes`, `status.node_writes`) and by the API server (`apiserver_request_total`,
     its write verbs; the Lease's renewals among them). The expected count comes from the change
     log, replayed in continuous time through the holds: a busy mark stands after 60 s busy
     without a break and goes after 60 s not busy without a break, a health mark after 3 s and at
     once: every mark that changes is one write (a DRA rule created or deleted; a device-plugin
     node's condition, whose message counts its marks; plus its taint when no GPU is left usable);
     a change undone within its hold is none;
   - settle, then flapping: no other change; `--flap-share` of the GPUs (idle ones) toggle idle <->
     busy every `--flap-period` simulated seconds (phases staggered) for `--flap-minutes`: writes
     must be 0; then 0.1 % of the GPUs toggle healthy <-> unhealthy every `--flap-period` s for one
     minute (health is held 3 s on, none off: each toggle writes, by design);
   - 1 % of the device-plugin nodes made busy on every GPU (their taint stands), settled;
   - cold leader: the first writer stops and a fresh one (new Publication and ChangeFeed, another
     Lease, as a replica started after the last leader went) takes over the published fleet with
     no GPU changing, for the hold plus 60 s: its writes are what a cold leader start costs.
5. CPU: this process's (time.process_time) per simulated minute of the steady phase, split into
   Publication.update (the leader's `_track_forever` and `_lead` loops each call `track()` every
   tick), the rest of the writer (writes, the Node watch, the loop), and this bench's own driver
   (changes, heartbeats, backlog samples: subtracted); kube-apiserver's and etcd's from
   /proc/<pid>/stat. At 4x the leader ticks less often per simulated second than in production,
   so the CPU at production cadence is also given, from parts timed on their own (median of
   `--update-samples`): Publication.update with no report since the last tick, with one tick of
   heartbeats, and looking at every node (before the writer starts); and, at the end, the leader's
   tick with nothing to write (`track()`, the rules' pass, the nodes' pass). At the end of the
   steady phase and of the run, the objects the API server keeps: DeviceTaintRules labelled
   app.kubernetes.io/managed-by=gpu-extender, Nodes with a GPUsUsable condition, Nodes with the
   gpu-extender.io/no-usable-gpu taint, each checked against what the Publication says stands.

Run: `KUBEBUILDER_ASSETS=DIR .venv/bin/python bench/bench_publish.py [--nodes 5000] [--minutes 10]
[--speed 4] [--seed 1] [--json PATH]` (the default run takes about 7 minutes on 2 cores). Without
KUBEBUILDER_ASSETS (or with binaries missing) it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import math
import os
import random
import re
import shutil
import ssl
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))  # for tests.control_plane and tests.extender.dra_objects
from benchlib import OUT_DIR, BenchError, exit_on_sigterm, machine_facts  # noqa: E402

from gpuextender.common.idle_rule import IdleRule  # noqa: E402
from gpuextender.extender.inventory.device_taint_writer import AlsoWritten, DeviceTaintWriter, WriterPace  # noqa: E402
from gpuextender.extender.inventory.kube_watch import KubeInventorySource  # noqa: E402
from gpuextender.extender.inventory.node_status_writer import (  # noqa: E402
    NodeStatusWriter,
    condition_of,
    has_taint,
)
from gpuextender.extender.kube.connection import load_kube_config  # noqa: E402
from gpuextender.extender.model.dra import DeviceRef, parse_device_class, parse_resource_slice  # noqa: E402
from gpuextender.extender.model.kube_objects import NODE  # noqa: E402
from gpuextender.extender.settings import DEFAULT_NODE_TAINT_KEY  # noqa: E402
from gpuextender.extender.state.device_taints import TaintWriterStatus  # noqa: E402
from gpuextender.extender.state.dra_inventory import DraInventory, build_dra  # noqa: E402
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize  # noqa: E402
from gpuextender.extender.state.inventory_store import InventoryStore  # noqa: E402
from gpuextender.extender.state.node_gpu_status import NodeGpuStatus  # noqa: E402
from gpuextender.extender.state.publication import ChangeFeed, Publication, PublishInputs  # noqa: E402
from gpuextender.v1 import gpu_state_pb2 as pb  # noqa: E402

WORKDIR = OUT_DIR / "publish"
GPUS = 8
GIB = 1024**3
IDLE, BUSY, SICK = "idle", "busy", "unhealthy"
HEALTH_AFTER_S = 3.0  # --device-taint-after's default
START_BUSY, START_SICK, START_FULL_NODES = 0.05, 0.005, 0.01
# Of each minute's changes: (from, to, share).
CHANGES = ((IDLE, BUSY, 0.45), (BUSY, IDLE, 0.45), (IDLE, SICK, 0.05), (SICK, IDLE, 0.05))
HEALTH_FLAP_SHARE = 0.001
LEASE_NAMESPACES = ("gpu-extender", "gpu-extender-cold")
DRA_API = "/apis/resource.k8s.io/v1"
RULES_API = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
MANAGED = "app.kubernetes.io/managed-by=gpu-extender"
API_CONCURRENCY = 32
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
NO_CLAIMS: frozenset[DeviceRef] = frozenset()
NO_HOLDERS: dict[DeviceRef, str] = {}
BACKLOG_EVERY_S = 5.0  # simulated seconds between two samples of the writer's backlog


# -- time ------------------------------------------------------------------------------------------


class SimClock:
    """Simulated seconds since the bench started: `speed` times wall time."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self._t0 = time.monotonic()

    def __call__(self) -> float:
        return (time.monotonic() - self._t0) * self.speed

    async def sleep(self, sim_s: float) -> None:
        await asyncio.sleep(max(sim_s, 0.0) / self.speed)

    async def sleep_until(self, at: float) -> None:
        await self.sleep(at - self())


# -- the simulated fleet ---------------------------------------------------------------------------


class Pool:
    """A set of GPUs (node, index) with a uniform random pick in O(1)."""

    def __init__(self) -> None:
        self._items: list[tuple[str, int]] = []
        self._at: dict[tuple[str, int], int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def add(self, gpu: tuple[str, int]) -> None:
        if gpu not in self._at:
            self._at[gpu] = len(self._items)
            self._items.append(gpu)

    def discard(self, gpu: tuple[str, int]) -> None:
        at = self._at.pop(gpu, None)
        if at is None:
            return
        last = self._items.pop()
        if at < len(self._items):
            self._items[at] = last
            self._at[last] = at

    def pick(self, rng: random.Random) -> tuple[str, int]:
        return self._items[rng.randrange(len(self._items))]


def node_report(node: str, states: list[str]) -> pb.NodeReport:
    """An agent's report: busy 90 % / 80 % memory, idle 2 % / 1 %, unhealthy XID 79; the agent read
    the kubelet and no container holds a GPU (so a busy GPU is busy outside Kubernetes)."""
    report = pb.NodeReport(node_name=node, sequence=1, agent_version="bench", driver_version="550.127.05")
    report.sample_time.seconds = 1000
    report.allocation_source = pb.ALLOCATION_KUBELET
    for index, state in enumerate(states):
        hot = state == BUSY
        g = report.gpus.add(
            index=index,
            uuid=f"GPU-{node}-{index}",
            name="NVIDIA H100 80GB HBM3",
            healthy=state != SICK,
            utilization_gpu_percent=90 if hot else 2,
            memory_total_bytes=80 * GIB,
            memory_used_bytes=(64 if hot else 1) * GIB,
        )
        if state == SICK:
            g.health = pb.HEALTH_UNHEALTHY
            g.health_reasons.append("XidCritical")
            g.xids.add(xid=79)
    return report


class Fleet:
    """Every node's GPU states and its agent's summary; every change logged with its simulated time."""

    def __init__(self, nodes: int, rng: random.Random) -> None:
        half = nodes // 2
        self.dra_nodes = [f"dra-{i:05d}" for i in range(half)]
        self.dp_nodes = [f"dp-{i:05d}" for i in range(nodes - half)]
        self.all_nodes = self.dra_nodes + self.dp_nodes
        self.states: dict[str, list[str]] = {}
        self.pools = {IDLE: Pool(), BUSY: Pool(), SICK: Pool()}
        self.summaries: dict[str, NodeSummary] = {}
        # Each replica's ChangeFeed.node_changed, as gpu_state's on_offered_change calls it per report.
        self.listeners: list[Callable[[str], None]] = []
        self._cursor = 0
        self._due = 0.0
        self.start: dict[tuple[str, int], str] = {}
        self.log: list[tuple[float, str, int, str]] = []  # (sim time, node, index, new state)
        full = set(rng.sample(self.dp_nodes, max(1, round(len(self.dp_nodes) * START_FULL_NODES))))
        for node in self.dra_nodes + self.dp_nodes:
            states = []
            for _ in range(GPUS):
                x = rng.random()
                states.append(BUSY if node in full or x < START_BUSY else SICK if x < START_BUSY + START_SICK else IDLE)
            self.states[node] = states
            for i, s in enumerate(states):
                self.pools[s].add((node, i))
                self.start[(node, i)] = s
            self._summarize(node, 0.0)

    @property
    def gpus(self) -> int:
        return len(self.states) * GPUS

    def _summarize(self, node: str, now: float) -> None:
        self.summaries[node] = summarize(node_report(node, self.states[node]), IdleRule(), now)
        for listener in self.listeners:
            listener(node)

    def heartbeats(self, sim_s: float, every_s: float, now: float) -> int:
        """The reports `sim_s` of heartbeats bring (each node once every `every_s`, round robin): the
        same GPU states, new readings (`received_at`); each one tells the listeners. How many."""
        nodes = self.all_nodes
        self._due += len(nodes) * sim_s / every_s
        count = int(self._due)
        self._due -= count
        for _ in range(count):
            node = nodes[self._cursor]
            self._cursor = (self._cursor + 1) % len(nodes)
            self.summaries[node] = dataclasses.replace(self.summaries[node], received_at=now)
            for listener in self.listeners:
                listener(node)
        return count

    def set(self, gpu: tuple[str, int], state: str, now: float, *, pooled: bool = True) -> None:
        node, index = gpu
        old = self.states[node][index]
        if old == state:
            return
        self.pools[old].discard(gpu)
        if pooled:
            self.pools[state].add(gpu)
        self.states[node][index] = state
        self._summarize(node, now)
        self.log.append((now, node, index, state))

    def change(self, rng: random.Random, now: float) -> None:
        """One random change of CHANGES' mix (idle -> busy when the pool it would take from is empty)."""
        x, acc = rng.random(), 0.0
        src, dst = IDLE, BUSY
        for a, b, share in CHANGES:
            acc += share
            if x < acc:
                src, dst = a, b
                break
        if not self.pools[src]:
            src, dst = IDLE, BUSY
        self.set(self.pools[src].pick(rng), dst, now)

    def counts(self) -> dict[str, int]:
        return {s: len(p) for s, p in self.pools.items()}


# -- the expected writes: the change log through the holds, in continuous time ---------------------


def flips(timeline: list[tuple[float, bool]], standing: bool, on_s: float, off_s: float) -> list[float]:
    """When a mark asked for as `timeline` says (time, asked), standing as `standing` at the first
    entry, changes what stands (Hysteresis: asked without a break for on_s, not asked for off_s)."""
    out: list[float] = []
    since: float | None = None
    for i, (t, asked) in enumerate(timeline):
        end = timeline[i + 1][0] if i + 1 < len(timeline) else float("inf")
        if asked == standing:
            since = None
            continue
        if since is None:
            since = t
        at = since + (on_s if asked else off_s)
        if at < end:
            out.append(at)
            standing, since = asked, None
    return out


def expected_writes(fleet: Fleet, settled: float, begin: float, end: float, hold_s: float) -> dict[str, int]:
    """Writes the changes logged since `settled` (what stood then was written) ask for in [begin, end)."""
    per_gpu: dict[tuple[str, int], list[tuple[float, str]]] = {}
    state_at = dict(fleet.start)
    for t, node, index, state in fleet.log:
        if t < settled:
            state_at[(node, index)] = state
        elif t < end:
            per_gpu.setdefault((node, index), []).append((t, state))
    out = {"rules": 0, "conditions": 0, "taints": 0}
    node_flips: dict[str, list[tuple[float, int, str]]] = {}
    for gpu, events in per_gpu.items():
        first = state_at[gpu]
        timeline = [(settled, first), *events]
        for what, on_s, off_s in ((BUSY, hold_s, hold_s), (SICK, HEALTH_AFTER_S, 0.0)):
            asked = [(t, s == what) for t, s in timeline]
            for at in flips(asked, first == what, on_s, off_s):
                if at >= end:
                    continue
                if not gpu[0].startswith("dra-"):
                    node_flips.setdefault(gpu[0], []).append((at, gpu[1], what))
                elif at >= begin:
                    out["rules"] += 1  # a DeviceTaintRule created or deleted
    for node, fl in node_flips.items():
        fl.sort()
        # The node's marks that stand (a GPU can hold both for a while: busy going, unhealthy come).
        marks = {(i, state_at[(node, i)]) for i in range(GPUS) if state_at[(node, i)] in (BUSY, SICK)}
        out["conditions"] += len({t for t, _, _ in fl if t >= begin})  # its message counts the marks
        for t, index, what in fl:
            was_full = len(marks) >= GPUS
            marks ^= {(index, what)}
            if t >= begin and was_full != (len(marks) >= GPUS):
                out["taints"] += 1
    return out


# -- the API ---------------------------------------------------------------------------------------


class Api:
    def __init__(self, server: str, ca_file: Path, token: str) -> None:
        self.base = server
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=API_CONCURRENCY, ssl=ssl.create_default_context(cafile=str(ca_file))),
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=aiohttp.ClientTimeout(total=120),
        )

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        async with self.session.request(method, self.base + path, data=data, headers=headers) as resp:
            text = await resp.text()
            if resp.status >= 300:
                raise BenchError(f"{method} {path} -> {resp.status}: {text[:300]}")
            return json.loads(text) if text and resp.content_type == "application/json" else text

    async def close(self) -> None:
        await self.session.close()


async def gather_limited(jobs: Iterable[Awaitable[Any]], limit: int = API_CONCURRENCY) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(job: Awaitable[Any]) -> None:
        async with gate:
            await job

    await asyncio.gather(*(one(j) for j in jobs))


def gpu_slice_of(node: str) -> dict[str, Any]:
    from tests.extender.dra_objects import gpu_slice

    return gpu_slice(node, GPUS, uuid_of=lambda minor: f"GPU-{node}-{minor}")


async def create_fleet(api: Api, fleet: Fleet) -> None:
    from tests.extender.dra_objects import device_class

    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for ns in LEASE_NAMESPACES:
        await api.call("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    await api.call("POST", f"{DRA_API}/deviceclasses", device_class())

    def node_body(name: str, gpus: int | None) -> dict[str, Any]:
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
        if gpus is not None:
            resources["nvidia.com/gpu"] = str(gpus)
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "bench node",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        return {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": resources, "allocatable": resources, "conditions": [ready]},
        }

    async def dra(name: str) -> None:
        await api.call("POST", "/api/v1/nodes", node_body(name, None))
        await api.call("POST", f"{DRA_API}/resourceslices", gpu_slice_of(name))

    async def dp(name: str) -> None:
        await api.call("POST", "/api/v1/nodes", node_body(name, GPUS))

    await gather_limited([*(dra(n) for n in fleet.dra_nodes), *(dp(n) for n in fleet.dp_nodes)])
    got = await api.call("GET", f"/api/v1/nodes/{fleet.dp_nodes[-1]}")
    if got["status"].get("allocatable", {}).get("nvidia.com/gpu") != str(GPUS):
        raise BenchError(f"node {fleet.dp_nodes[-1]} kept no allocatable on create: {json.dumps(got)[:400]}")


async def request_counts(api: Api) -> dict[tuple[str, str], float]:
    """apiserver_request_total summed by (verb, resource[/subresource])."""
    text = await api.call("GET", "/metrics")
    out: dict[tuple[str, str], float] = {}
    for line in str(text).splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        resource = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        key = (labels.get("verb", ""), resource)
        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def diff_counts(after: dict[tuple[str, str], float], before: dict[tuple[str, str], float]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, value in after.items():
        d = int(value - before.get(key, 0.0))
        if d:
            out[f"{key[0]} {key[1]}"] = d
    return dict(sorted(out.items()))


def proc_cpu_s(pid: int) -> float:
    """user + system CPU seconds of `pid` (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def objects_kept(api: Api) -> dict[str, Any]:
    rules = await api.call("GET", f"{RULES_API}?labelSelector={MANAGED}")
    nodes = await api.call("GET", "/api/v1/nodes")
    by_status: dict[str, int] = {}
    tainted = 0
    for n in nodes["items"]:
        cond = condition_of(n)
        if cond is not None:
            by_status[cond["status"]] = by_status.get(cond["status"], 0) + 1
        tainted += has_taint(n, DEFAULT_NODE_TAINT_KEY)
    names = {r["metadata"]["name"] for r in rules["items"]}
    return {
        "rules": len(names),
        "rule_names": names,
        "conditions": sum(by_status.values()),
        "conditions_by_status": dict(sorted(by_status.items())),
        "tainted": tainted,
    }


# -- the writer, instrumented ----------------------------------------------------------------------


class TimedPublication(Publication):
    """Publication whose every update's CPU (process time) is added up."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0
        self.cpu_s = 0.0

    def update(self, inputs: PublishInputs, now: float) -> None:
        t = time.process_time()
        super().update(inputs, now)
        self.cpu_s += time.process_time() - t
        self.calls += 1


class CountingNodeWriter(NodeStatusWriter):
    """NodeStatusWriter that counts the leader's passes (one per `_lead` tick)."""

    passes = 0

    async def reconcile(self, *args: Any, **kwargs: Any) -> None:
        self.passes += 1
        await super().reconcile(*args, **kwargs)


@dataclass
class Writer:
    writer: DeviceTaintWriter
    publication: TimedPublication
    nodes: CountingNodeWriter
    task: asyncio.Task[None]

    def counts(self) -> dict[str, int]:
        s = self.writer.status
        return {
            **{f"rule {k}": v for k, v in s.writes.items()},
            **{f"node {k}": v for k, v in s.node_writes.items()},
            "deferred": s.deferred,
        }

    def total(self) -> int:
        s = self.writer.status
        return sum(s.writes.values()) + sum(s.node_writes.values())

    def settled_after(self, at: float) -> bool:
        """Whether the Publication was updated at or after `at` (simulated): every hold that ends
        by then is in what stands."""
        updated = self.publication.updated_at
        return updated is not None and updated >= at

    def backlog(self, store: InventoryStore) -> int:
        """Writes what stands still asks for: rules missing or not standing, nodes whose condition or
        taint (as the Node watch has it) differs."""
        pub = self.publication
        owned = set(self.writer._owned)  # the rules as the leader last wrote or listed them
        todo = len(owned ^ set(pub.rules))
        for name, status in pub.nodes.items():
            todo += _node_todo(store.get(NODE.kind, name), status, self.nodes)
        return todo


def _node_todo(have: dict[str, Any] | None, status: NodeGpuStatus, writer: NodeStatusWriter) -> int:
    if have is None:
        return 0
    cond = condition_of(have)
    seen = (cond.get("status"), cond.get("reason"), cond.get("message")) if cond else None
    todo = int(seen != (status.status, status.reason, status.message))
    return todo + int(writer.wanted_taint(status) != has_taint(have, DEFAULT_NODE_TAINT_KEY))


def start_writer(
    connection: Any,
    store: InventoryStore,
    fleet: Fleet,
    dra: DraInventory,
    clock: SimClock,
    args: argparse.Namespace,
    namespace: str,
    identity: str,
) -> Writer:
    dp = dict.fromkeys(fleet.dp_nodes, GPUS)
    feed = ChangeFeed()  # this replica's, fed by every report as app.py feeds it
    fleet.listeners.append(feed.node_changed)

    def inputs() -> PublishInputs:  # as app.py's: the claims listed, none allocated
        return PublishInputs(
            dra,
            dp,
            fleet.summaries.get,
            lambda _node: NO_CLAIMS,
            lambda _node: NO_HOLDERS,
            args.stale_after,
            changed=feed.drain(dra, dp, 0, lambda _version: set()),
        )

    publication = TimedPublication(HEALTH_AFTER_S, args.busy_hold)
    nodes = CountingNodeWriter(
        lambda name: store.get(NODE.kind, name),
        TaintWriterStatus(),
        taint=True,
        taint_key=DEFAULT_NODE_TAINT_KEY,
        taint_effect="NoSchedule",
        clock=clock,
    )
    writer = DeviceTaintWriter(
        connection,
        publication,
        inputs,
        namespace=namespace,
        also=AlsoWritten(nodes=nodes),
        pace=WriterPace(writes_per_s=args.writes_per_second, interval_s=args.tick / args.speed),
        identity=identity,
        clock=clock,
    )
    return Writer(writer, publication, nodes, asyncio.create_task(writer.run()))


async def stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with suppress(asyncio.CancelledError):
        await task


# -- the phases ------------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    sim_s: float = 0.0
    writes: dict[str, int] = field(default_factory=dict)
    api_writes: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


class Bench:
    def __init__(self, args: argparse.Namespace, say: Callable[[str], None]) -> None:
        self.args, self.say = args, say
        self.rng = random.Random(args.seed)
        self.clock = SimClock(args.speed)
        self.fleet = Fleet(args.nodes, self.rng)
        self.phases: list[Phase] = []
        self.result: dict[str, Any] = {}
        self.driver_cpu_s = 0.0  # this bench's own work in the loop (changes, heartbeats, backlog samples)
        self.reports = 0

    async def until(self, check: Callable[[], bool], what: str, timeout_sim_s: float, step_sim_s: float = 1.0) -> None:
        deadline = self.clock() + timeout_sim_s
        while True:
            t = time.process_time()
            done = check()
            self.driver_cpu_s += time.process_time() - t
            if done:
                return
            if self.clock() > deadline:
                raise BenchError(f"timed out ({timeout_sim_s:g} simulated s) waiting for {what}")
            await self.clock.sleep(step_sim_s)

    def timed(self, fn: Callable[[], Any]) -> Any:
        t = time.process_time()
        try:
            return fn()
        finally:
            self.driver_cpu_s += time.process_time() - t

    async def run(self, api: Api, plane: Any) -> dict[str, Any]:
        args, fleet, clock, say = self.args, self.fleet, self.clock, self.say
        t0 = time.monotonic()
        await create_fleet(api, fleet)
        created = time.monotonic() - t0
        objects = len(fleet.dra_nodes) * 2 + len(fleet.dp_nodes) + 1
        say(f"created {len(fleet.states)} nodes, {len(fleet.dra_nodes)} ResourceSlices in {created:.1f}s")
        self.result["create"] = {"objects": objects, "wall_s": created, "per_s": objects / created}

        slices = [parse_resource_slice(gpu_slice_of(n)) for n in fleet.dra_nodes]
        from tests.extender.dra_objects import device_class

        dra = build_dra(slices, [parse_device_class(device_class())], ("nvidia.com/gpu",))
        self.result["update_ms"] = self.time_update(dra)
        say(f"Publication.update at {len(fleet.states)} nodes: {self.result['update_ms']} ms (median, p90, max)")

        connection = await load_kube_config(plane.kubeconfig)
        store = InventoryStore(kinds=[NODE.kind])
        watch = KubeInventorySource(store, connection, kinds=(NODE,))
        watch_task = asyncio.create_task(watch.run())
        await watch.wait_ready()
        beats = asyncio.create_task(self.heartbeats())
        apiserver = next(p.popen.pid for p in plane.processes if p.name == "kube-apiserver")
        etcd = next(p.popen.pid for p in plane.processes if p.name == "etcd")
        try:
            w = start_writer(connection, store, fleet, dra, clock, args, LEASE_NAMESPACES[0], "bench-leader")
            try:
                await self.startup(w, store)
                await self.steady(w, store, api, apiserver, etcd)
                await self.settle(w, store, "settle after steady")
                self.result["kept"] = await self.kept(api, w)
                await self.flapping(w, store, api)
                await self.full_nodes(w, store)
            finally:
                await stop(w.task)
            before = await objects_kept(api)
            cold = start_writer(connection, store, fleet, dra, clock, args, LEASE_NAMESPACES[1], "bench-cold")
            try:
                await self.cold_leader(cold, store, api, before)
                self.result["kept_end"] = await self.kept(api, cold)
                self.result["pass_ms"] = await self.time_pass(cold, store, connection)
                say(f"a pass with nothing to write (ms, median): {self.result['pass_ms']}")
            finally:
                await stop(cold.task)
        finally:
            await stop(beats)
            await stop(watch_task)
        self.result["phases"] = [p.__dict__ for p in self.phases]
        return self.result

    def time_update(self, dra: DraInventory) -> dict[str, list[float]]:
        """One Publication.update at this fleet size, what stands settled (ms: median, p90, max of
        --update-samples), as its ChangeFeed says which nodes to look at: none (no report since the
        last tick), one tick of heartbeats (every node reports every --heartbeat s: nodes x tick /
        heartbeat reports, same GPU states, new readings), every node (the first pass, a relist)."""
        fleet, args = self.fleet, self.args
        dp = dict.fromkeys(fleet.dp_nodes, GPUS)
        nodes = fleet.dra_nodes + fleet.dp_nodes
        per_tick = min(len(nodes), round(len(nodes) * args.tick / args.heartbeat))

        def inputs(changed: frozenset[str] | None) -> PublishInputs:
            return PublishInputs(
                dra,
                dp,
                fleet.summaries.get,
                lambda _n: NO_CLAIMS,
                lambda _n: NO_HOLDERS,
                args.stale_after,
                changed=changed,
            )

        pub = Publication(HEALTH_AFTER_S, args.busy_hold)
        pub.update(inputs(None), 0.0)
        pub.update(inputs(None), args.busy_hold + 1)  # every mark stands
        now = args.busy_hold + 2
        out: dict[str, list[float]] = {}
        rng = random.Random(args.seed)
        for name in ("quiet", "heartbeats", "every node"):
            samples = []
            for _ in range(args.update_samples):
                changed: frozenset[str] | None = frozenset()
                if name == "heartbeats":
                    changed = frozenset(rng.sample(nodes, per_tick))
                    for node in changed:
                        fleet.summaries[node] = dataclasses.replace(fleet.summaries[node], received_at=now)
                elif name == "every node":
                    changed = None
                t = time.perf_counter()
                pub.update(inputs(changed), now)
                samples.append((time.perf_counter() - t) * 1000)
                now += args.tick
            samples.sort()
            out[name] = [
                round(statistics.median(samples), 2),
                round(samples[int(0.9 * (len(samples) - 1))], 2),
                round(samples[-1], 2),
            ]
        out["heartbeat reports per tick"] = [float(per_tick)]
        return out

    async def heartbeats(self) -> None:
        """Every node's agent reports every --heartbeat simulated seconds, for the whole run."""
        step = 0.5
        while True:
            await self.clock.sleep(step)
            t = time.process_time()
            self.reports += self.fleet.heartbeats(step, self.args.heartbeat, self.clock())
            self.driver_cpu_s += time.process_time() - t

    async def time_pass(self, w: Writer, store: InventoryStore, connection: Any) -> dict[str, float]:
        """The leader's tick with nothing to write, by part (ms, median of --update-samples): track()
        (Publication.update and its counts: twice a tick in the leader), the rules' pass and the
        nodes' pass (each comparing what stands with what the API server has)."""
        from kubernetes_asyncio import client as k8s

        await self.until(lambda: w.backlog(store) == 0, "nothing left to write", 600)
        api_client = k8s.ApiClient(connection)
        core, custom = k8s.CoreV1Api(api_client), k8s.CustomObjectsApi(api_client)
        parts: dict[str, list[float]] = {"update": [], "track": [], "rules pass": [], "nodes pass": []}
        calls = w.writer.status.writes.copy(), w.writer.status.node_writes.copy()
        try:
            for _ in range(self.args.update_samples):
                t = time.perf_counter()
                w.publication.update(w.writer._inputs(), self.clock())
                parts["update"].append(time.perf_counter() - t)
                t = time.perf_counter()
                w.writer.track()
                parts["track"].append(time.perf_counter() - t)
                t = time.perf_counter()
                await w.writer._reconcile(custom, "v1beta2")
                parts["rules pass"].append(time.perf_counter() - t)
                t = time.perf_counter()
                await w.nodes._pass(core, w.publication.nodes, lambda: True, self.clock())
                parts["nodes pass"].append(time.perf_counter() - t)
                await asyncio.sleep(0)
        finally:
            await api_client.close()
        if calls != (w.writer.status.writes, w.writer.status.node_writes):
            raise BenchError("the timed passes wrote something: not a pass with nothing to write")
        return {k: round(1000 * statistics.median(v), 2) for k, v in parts.items()}

    async def startup(self, w: Writer, store: InventoryStore) -> None:
        args, clock = self.args, self.clock
        await self.until(lambda: w.writer.status.mode == "writing", "the leader", 120 * args.speed, 0.1)
        begin = clock()
        passes0 = w.nodes.passes
        # Everything that stands written: past the busy hold (the busy marks stand), nothing left.
        await self.until(
            lambda: w.settled_after(begin + args.busy_hold + args.tick) and w.backlog(store) == 0,
            "the start-up writes",
            3600,
        )
        took = clock() - begin
        phase = Phase("start-up", took, w.counts())
        phase.extra = {
            "passes": w.nodes.passes - passes0,
            "standing_rules": len(w.publication.rules),
            "nodes": len(w.publication.nodes),
            "budget_floor_s": round(w.total() / args.writes_per_second, 1),
            "fleet": self.fleet.counts(),
        }
        self.phases.append(phase)
        self.say(f"start-up: {w.total()} writes in {took:.0f} simulated s ({phase.writes}); {phase.extra}")

    async def steady(self, w: Writer, store: InventoryStore, api: Api, apiserver: int, etcd: int) -> None:
        args, clock, fleet = self.args, self.clock, self.fleet
        settled = clock()
        # The changes start a hold before the measurement: its first minutes see changes that
        # stand and changes that go, as every later minute does.
        warm = math.ceil(args.busy_hold / 60)
        for m in range(warm):
            await self.changes(w, store, settled + 60 * m)
        self.say(f"  {warm} simulated minute(s) of changes before the measurement")
        begin = clock()
        before, api_before = w.counts(), await request_counts(api)
        cpu0, upd_cpu0, upd0, passes0, drv0 = self.cpu_marks(w)
        reports0 = self.reports
        srv0, etcd0 = proc_cpu_s(apiserver), proc_cpu_s(etcd)
        wall0 = time.monotonic()
        per_minute: list[int] = []
        backlog_max = 0
        for m in range(args.minutes):
            total0 = w.total()
            backlog_max = max(backlog_max, await self.changes(w, store, begin + 60 * m))
            per_minute.append(w.total() - total0)
            self.say(f"  steady minute {m + 1}: {per_minute[-1]} writes, fleet {fleet.counts()}")
        end = clock()
        wall = time.monotonic() - wall0
        cpu = time.process_time() - cpu0
        upd_cpu = w.publication.cpu_s - upd_cpu0
        drv = self.driver_cpu_s - drv0
        minutes = (end - begin) / 60
        after, api_after = w.counts(), await request_counts(api)
        phase = Phase("steady", end - begin, {k: after[k] - before[k] for k in after})
        phase.api_writes = diff_counts(api_after, api_before)
        updates = w.publication.calls - upd0
        passes = w.nodes.passes - passes0
        expected = expected_writes(fleet, settled, begin, end, args.busy_hold)
        phase.extra = {
            "changes": sum(1 for t, *_ in fleet.log if begin <= t < end),
            "heartbeat_reports": self.reports - reports0,
            "expected": expected,
            "per_minute": per_minute,
            "backlog_max": backlog_max,
            "updates": updates,
            "passes": passes,
            "sim_tick_s": round((end - begin) / max(passes, 1), 3),
            "cpu_s_per_min": round(cpu / minutes, 2),
            "update_cpu_s_per_min": round(upd_cpu / minutes, 2),
            "driver_cpu_s_per_min": round(drv / minutes, 2),
            "rest_cpu_s_per_min": round((cpu - upd_cpu - drv) / minutes, 2),
            "update_ms_in_run": round(1000 * upd_cpu / max(updates, 1), 1),
            "wall_cpu_share": round(cpu / wall, 3),
            "apiserver_cpu_s_per_min": round((proc_cpu_s(apiserver) - srv0) / minutes, 2),
            "etcd_cpu_s_per_min": round((proc_cpu_s(etcd) - etcd0) / minutes, 2),
            "wall_s": round(wall, 1),
        }
        self.phases.append(phase)
        self.say(f"steady: {phase.writes}; api {phase.api_writes}; {phase.extra}")

    async def changes(self, w: Writer, store: InventoryStore, start: float) -> int:
        """One simulated minute from `start` of random changes (--change-rate of the GPUs, at uniformly
        random moments); the largest backlog seen."""
        clock, fleet = self.clock, self.fleet
        times = sorted(start + 60 * self.rng.random() for _ in range(round(self.args.change_rate * fleet.gpus)))
        i, backlog, sampled = 0, 0, start
        while i < len(times):
            await clock.sleep_until(min(times[i], clock() + 1.0))
            t = time.process_time()
            now = clock()
            while i < len(times) and times[i] <= now:
                fleet.change(self.rng, now)
                i += 1
            if now >= sampled + BACKLOG_EVERY_S:  # a pass over every node: not at every change
                backlog, sampled = max(backlog, w.backlog(store)), now
            self.driver_cpu_s += time.process_time() - t
        await clock.sleep_until(start + 60)
        return backlog

    async def settle(self, w: Writer, store: InventoryStore, name: str) -> None:
        clock, args = self.clock, self.args
        begin, before = clock(), w.counts()
        last = self.fleet.log[-1][0] if self.fleet.log else 0.0
        await self.until(
            lambda: w.settled_after(last + args.busy_hold + args.tick) and w.backlog(store) == 0, name, 3600
        )
        after = w.counts()
        self.phases.append(Phase(name, clock() - begin, {k: after[k] - before[k] for k in after}))

    async def flapping(self, w: Writer, store: InventoryStore, api: Api) -> None:
        args, clock, fleet = self.args, self.clock, self.fleet
        period = args.flap_period
        for share, minutes, states, name in (
            (args.flap_share, args.flap_minutes, (IDLE, BUSY), "flapping busy"),
            (HEALTH_FLAP_SHARE, 1, (IDLE, SICK), "flapping health"),
        ):
            idle = fleet.pools[IDLE]
            gpus: list[tuple[str, int]] = []
            while len(gpus) < max(1, round(share * fleet.gpus)):
                g = idle.pick(self.rng)
                idle.discard(g)  # out of the pools while it flaps
                gpus.append(g)
            offsets = {g: self.rng.random() * period for g in gpus}
            begin = clock()
            before, api_before = w.counts(), await request_counts(api)
            cpu0, upd_cpu0, upd0, passes0, drv0 = self.cpu_marks(w)
            end = begin + 60 * minutes
            toggles = 0
            while clock() < end:
                now = clock()
                t = time.process_time()
                for g in gpus:
                    k = int((now - begin + offsets[g]) // period)
                    state = states[k % 2]
                    if fleet.states[g[0]][g[1]] != state:
                        fleet.set(g, state, now, pooled=False)
                        toggles += 1
                self.driver_cpu_s += time.process_time() - t
                await clock.sleep(0.5)
            for g in gpus:
                fleet.set(g, IDLE, clock(), pooled=False)
                fleet.pools[IDLE].add(g)
            cpu1, upd_cpu1, upd1, passes1, drv1 = self.cpu_marks(w)
            after, api_after = w.counts(), await request_counts(api)
            phase = Phase(name, clock() - begin, {k: after[k] - before[k] for k in after})
            phase.api_writes = diff_counts(api_after, api_before)
            per_min = 60 / phase.sim_s
            phase.extra = {
                "gpus": len(gpus),
                "toggles": toggles,
                "period_s": period,
                "passes": passes1 - passes0,
                "updates": upd1 - upd0,
                "update_cpu_s_per_min": round((upd_cpu1 - upd_cpu0) * per_min, 2),
                "rest_cpu_s_per_min": round((cpu1 - cpu0 - (upd_cpu1 - upd_cpu0) - (drv1 - drv0)) * per_min, 2),
                "driver_cpu_s_per_min": round((drv1 - drv0) * per_min, 2),
            }
            self.phases.append(phase)
            self.say(f"{name}: {len(gpus)} GPUs, {toggles} toggles: {phase.writes}; api {phase.api_writes}")
            await self.settle(w, store, f"settle after {name}")

    def cpu_marks(self, w: Writer) -> tuple[float, float, int, int, float]:
        """This process's CPU, the updates' CPU and count, the leader's passes, the driver's CPU."""
        pub = w.publication
        return time.process_time(), pub.cpu_s, pub.calls, w.nodes.passes, self.driver_cpu_s

    async def full_nodes(self, w: Writer, store: InventoryStore) -> None:
        """START_FULL_NODES of the device-plugin nodes (healthy ones) made busy on every GPU, and
        settled: each one's taint stands before the cold leader starts."""
        fleet, now = self.fleet, self.clock()
        healthy = [n for n in fleet.dp_nodes if SICK not in fleet.states[n]]
        for node in self.rng.sample(healthy, max(1, round(len(fleet.dp_nodes) * START_FULL_NODES))):
            for i in range(GPUS):
                fleet.set((node, i), BUSY, now)
        await self.settle(w, store, "nodes made busy on every GPU")

    async def cold_leader(self, w: Writer, store: InventoryStore, api: Api, before: dict[str, Any]) -> None:
        """A fresh leader over the published fleet, no GPU changing: what it writes before its holds
        pass (marks it does not know yet) and after (the same marks back)."""
        args, clock = self.args, self.clock
        await self.until(lambda: w.writer.status.mode == "writing", "the cold leader", 120 * args.speed, 0.1)
        begin = clock()
        await clock.sleep_until(begin + args.busy_hold - 2 * args.tick)
        early = w.counts()
        mid = await objects_kept(api)
        await self.until(
            lambda: w.settled_after(begin + args.busy_hold + 60) and w.backlog(store) == 0, "the cold leader", 3600
        )
        phase = Phase("cold leader", clock() - begin, w.counts())
        phase.extra = {
            "within_hold": early,
            "before": {k: v for k, v in before.items() if k != "rule_names"},
            "within_hold_objects": {k: v for k, v in mid.items() if k != "rule_names"},
        }
        self.phases.append(phase)
        self.say(f"cold leader: {phase.writes}; within the hold {early}; objects then {phase.extra}")

    async def kept(self, api: Api, w: Writer) -> dict[str, Any]:
        got = await objects_kept(api)
        pub = w.publication
        got["rules_match"] = got.pop("rule_names") == set(pub.rules)
        got["standing_rules"] = len(pub.rules)
        got["wanted_conditions"] = len(pub.nodes)
        got["wanted_taints"] = sum(1 for s in pub.nodes.values() if w.nodes.wanted_taint(s))
        self.say(f"objects kept: {got}")
        return got


# -- report ----------------------------------------------------------------------------------------


def _n(writes: dict[str, int]) -> int:
    return sum(v for k, v in writes.items() if k != "deferred")


def _short(writes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in writes.items() if v and k != "deferred") or "none"


def report(result: dict[str, Any], args: argparse.Namespace) -> str:
    phases = {p["name"]: p for p in result["phases"]}
    s, st = phases["steady"], phases["start-up"]
    x, sim = s["extra"], s["sim_s"]
    total, exp = _n(s["writes"]), x["expected"]
    api_writes = {k: v for k, v in s["api_writes"].items() if k.split(" ")[0] in WRITE_VERBS}
    lease = sum(v for k, v in api_writes.items() if "leases" in k)
    upd = result["update_ms"]
    quiet, beats = upd["quiet"][0], upd["heartbeats"][0]
    # At production cadence (a tick every --tick s): the leader calls track() twice a tick (one of
    # them after the tick's reports), then passes over the rules and the nodes; a standby, once.
    ticks = 60 / args.tick
    part = result.get("pass_ms", {"track": quiet, "rules pass": 0.0, "nodes pass": 0.0})
    pass_ms = part["rules pass"] + part["nodes pass"]
    writes_per_min = total / (sim / 60)
    passes_per_min = x["passes"] / (sim / 60)
    write_ms = 1000 * max(x["rest_cpu_s_per_min"] - passes_per_min * pass_ms / 1000, 0.0) / max(writes_per_min, 1e-9)
    standby_tick = part["track"] + beats - quiet
    leader_tick = standby_tick + part["track"] + pass_ms
    leader = ticks * leader_tick / 1000 + writes_per_min * write_ms / 1000
    lines = [
        f"fleet: {args.nodes} nodes x {GPUS} GPUs ({args.nodes // 2} DRA, {args.nodes - args.nodes // 2} "
        f"device-plugin); speed {args.speed:g}x; budget {args.writes_per_second:g} writes/s; hold {args.busy_hold:g} s",
        f"created {result['create']['objects']} objects in {result['create']['wall_s']:.1f} s "
        f"({result['create']['per_s']:.0f}/s)",
        f"Publication.update at this size, ms (median, p90, max of {args.update_samples}): no report since the "
        f"last tick {upd['quiet']}, a tick of heartbeats ({upd['heartbeat reports per tick'][0]:.0f} reports) "
        f"{upd['heartbeats']}, every node looked at {upd['every node']}",
        f"start-up: {_n(st['writes'])} writes ({_short(st['writes'])}) in {st['sim_s']:.0f} simulated s "
        f"(the budget alone: {st['extra']['budget_floor_s']} s)",
        f"steady, {sim / 60:.1f} simulated minutes, {x['changes']} GPU changes, {x['heartbeat_reports']} "
        f"heartbeat reports:",
        f"  writes (writer) {total} = {total / sim:.2f}/s: {_short(s['writes'])}; "
        f"budget refusals {s['writes']['deferred']}",
        f"  writes (API server, write verbs) {sum(api_writes.values())}: {api_writes} (of them {lease} Lease "
        f"renewals, paced by the wall clock: 0.5/s in production)",
        f"  expected from the changes through the holds: {sum(exp.values())} = {sum(exp.values()) / sim:.2f}/s {exp}",
        f"  per minute {x['per_minute']}; backlog max {x['backlog_max']} (sampled every {BACKLOG_EVERY_S:g} s)",
        f"  CPU s per simulated minute: this process {x['cpu_s_per_min']} = updates {x['update_cpu_s_per_min']} "
        f"({x['updates']} updates, {x['update_ms_in_run']} ms each) + rest {x['rest_cpu_s_per_min']} + "
        f"bench driver {x['driver_cpu_s_per_min']}; kube-apiserver {x['apiserver_cpu_s_per_min']}, "
        f"etcd {x['etcd_cpu_s_per_min']}",
        f"  leader passes {x['passes']} (one per {x['sim_tick_s']} simulated s)",
        f"  at production cadence (a tick every {args.tick:g} s): track() {part['track']} ms with no report (twice "
        f"a tick in the leader), + {beats - quiet:.2f} ms for a tick's heartbeats, rules pass {part['rules pass']} "
        f"ms, nodes pass {part['nodes pass']} ms, a write {write_ms:.1f} ms => leader {leader:.1f} CPU s/min "
        f"({100 * leader / 60:.0f} % of a core), a standby {ticks * standby_tick / 1000:.1f} "
        f"({100 * standby_tick / 1000 / args.tick:.0f} %)",
    ]
    for name in ("flapping busy", "flapping health", "cold leader"):
        p = phases.get(name)
        if p is not None:
            lines.append(
                f"{name}: {_n(p['writes'])} writes in {p['sim_s']:.0f} simulated s ({_short(p['writes'])}) {p['extra']}"
            )
    for key in ("kept", "kept_end"):
        if key in result:
            lines.append(f"objects kept ({key}): {result[key]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000, help="fleet size: half DRA, half device-plugin, 8 GPUs each")
    parser.add_argument("--minutes", type=int, default=10, help="simulated minutes of the steady phase")
    parser.add_argument(
        "--speed", type=float, default=4.0, help="simulated seconds per wall second (the holds and budget scale)"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the fleet's start and of every change")
    parser.add_argument("--change-rate", type=float, default=0.02, help="share of all GPUs changing state per minute")
    parser.add_argument("--flap-share", type=float, default=0.01, help="share of GPUs flapping idle <-> busy")
    parser.add_argument("--flap-period", type=float, default=10.0, help="simulated seconds between a flapper's toggles")
    parser.add_argument("--flap-minutes", type=int, default=3, help="simulated minutes of the flapping phase")
    parser.add_argument("--busy-hold", type=float, default=60.0, help="the extender's --busy-hold (simulated s)")
    parser.add_argument("--writes-per-second", type=float, default=20.0, help="--publish-writes-per-second")
    parser.add_argument("--tick", type=float, default=0.5, help="the writer's interval_s, in simulated seconds")
    parser.add_argument(
        "--heartbeat", type=float, default=3.0, help="simulated s between two reports of a node's agent (its gate)"
    )
    parser.add_argument("--stale-after", type=float, default=10.0, help="the extender's --stale-after (s)")
    parser.add_argument("--update-samples", type=int, default=30, help="Publication.update calls timed")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    from tests.control_plane import ADMIN_TOKEN, ControlPlane, skip_reason

    reason = skip_reason()
    if reason is not None:
        print(f"bench_publish: skipped: {reason}")
        return 0
    if args.nodes < 2 or args.minutes < 1 or args.speed <= 0 or not 0 < args.change_rate < 1:
        parser.error("need --nodes >= 2, --minutes >= 1, --speed > 0 and 0 < --change-rate < 1")
    exit_on_sigterm()
    started = time.monotonic()

    def say(line: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {line}", file=sys.stderr, flush=True)

    shutil.rmtree(WORKDIR, ignore_errors=True)
    WORKDIR.mkdir(parents=True)
    logging.basicConfig(
        filename=WORKDIR / "writer.log", level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    plane = ControlPlane(WORKDIR, Path(os.environ["KUBEBUILDER_ASSETS"]))
    bench = Bench(args, say)

    async def go() -> dict[str, Any]:
        api = Api(plane.server, plane.ca_file, ADMIN_TOKEN)
        try:
            return await bench.run(api, plane)
        finally:
            await api.close()

    try:
        t0 = time.monotonic()
        plane.start()
        say(f"control plane up in {time.monotonic() - t0:.1f}s (logs in {WORKDIR})")
        result = asyncio.run(go())
    finally:
        plane.stop()
    result["machine"] = machine_facts()
    result["args"] = vars(args) | {"json": str(args.json) if args.json else None}
    result["wall_s"] = round(time.monotonic() - started, 1)
    print(report(result, args))
    print(f"total wall time {result['wall_s']} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
