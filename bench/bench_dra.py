"""DRA at fleet scale (issue 24, "Scale"): 5,000 DRA GPU nodes x 8 devices (40,000 devices in
ResourceSlices, one slice per node, as NVIDIA's DRA driver publishes them) and 20,000 allocated
ResourceClaims (1 or 2 devices each, status.allocation and status.reservedFor as kube-scheduler
writes them), with a churn of claim changes (allocated / deallocated / deleted / created). In-process,
on the real code: every object is JSON as the API server sends it in a watch event, decoded with
orjson and fed to the sink by kube_watch's own line handler (the InventoryStore for DeviceClasses and
ResourceSlices, whose changes rebuild the InventoryView; the ClaimLedger for claims); SchedulerApi
answers filter and prioritize at 5,000 names; every node has fresh agent data.

Measured, side by side in one run:
- memory (tracemalloc's growth): the 5,000 slices loaded (the store's objects, their parsed form,
  the view's DRA inventory; build_dra's part on its own), the 20,000 claims loaded (the ClaimLedger),
  and the DraFree per-node cache one decision fills;
- watch CPU: per ResourceSlice event (decode + store + the view rebuilt) and per ResourceClaim event
  (decode + parse + upsert), by event type; what 100 claim events/s cost as a share of one core;
  and what each costs the next decision (the DraFree recount; after a slice event also the view);
- filter and prioritize at 5,000 names (sequential, in-process, variants alternated per round):
  (a) a pod asking nvidia.com/gpu: 1 on 5,000 device-plugin nodes (no DRA), (b) a pod whose
  ResourceClaim (unallocated) asks for 1 GPU of class gpu.nvidia.com on the 5,000 DRA nodes with
  the 20,000 claims, (c) the same claim pod with one claim event applied before every call (each
  call is the first after a claim change: the DraFree cache is cold). p50 over every call, p99 the
  median of the rounds' p99s, and their ratios to (a) (issue 24's goal: p99 ratio <= 1.1). The
  garbage collector is tuned as the extender tunes it (gpuextender/extender/app.py).

The device-plugin fleet mirrors the DRA one: node n has as many GPUs held (by pods the agent
attributes) as its claims hold devices, so both pods pass and fail the same nodes. The claim pods'
own Pod objects (the PodLedger) are left out: bench_ledger.py measures that part.

Run: `.venv/bin/python bench/bench_dra.py [--quick]`.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson
from benchlib import OUT_DIR, rounds_latency_ms

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.app import _tune_gc as tune_gc
from gpuextender.extender.inventory.kube_watch import KubeSourceTimings, _KindWatcher, _ProblemLog
from gpuextender.extender.model.dra import parse_device_class, parse_resource_slice
from gpuextender.extender.model.kube_objects import (
    DEVICE_CLASS,
    KINDS,
    NODE,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    KindInfo,
)
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.claim_ledger import ClaimLedger
from gpuextender.extender.state.dra_inventory import DraFree, build_dra
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import ViewBuilder
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.dra_objects import allocated_claim, device_class, gpu_device, resource_slice

NOW = 1000.0
GIB = 1024**3
GPUS = 8
CLAIMS_PER_NODE = 4  # 5,000 nodes: 20,000 claims
GPU_RESOURCES = ("nvidia.com/gpu",)
CLASS = "gpu.nvidia.com"
NEW_CLAIM = ("ml", "new-claim")  # the claim pod's claim: unallocated, 1 GPU of CLASS
TARGET_RATIO = 1.1  # issue 24: the claim pod's filter/prioritize p99 <= 1.1x the device-plugin pod's


# -- objects, as the API server serves them ---------------------------------------------------------


def node_obj(name: str, dra: bool) -> dict[str, Any]:
    """A Node; a DRA node's allocatable lists no nvidia.com/gpu (its GPUs come through slices)."""
    allocatable = {"cpu": "192", "memory": "2Ti", "pods": "110"}
    if not dra:
        allocatable["nvidia.com/gpu"] = str(GPUS)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        },
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def gpu_uuid(node: str, minor: int) -> str:
    """GPU `minor`'s NVML UUID: what its agent reports and its slice's `uuid` attribute (one GPU)."""
    return f"GPU-{node}-{minor}"


def nvidia_device(node: str, minor: int) -> dict[str, Any]:
    """One whole GPU with the attributes NVIDIA's driver publishes (tests/extender/dra_objects.py's
    plus index, minor, brand, architecture, driver versions, PCIe bus), its uuid the agent's."""
    d = gpu_device(minor)
    d["attributes"].update(
        {
            "uuid": {"string": gpu_uuid(node, minor)},
            "index": {"int": minor},
            "minor": {"int": minor},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "driverVersion": {"version": "570.124.6"},
            "cudaDriverVersion": {"version": "12.8.0"},
            "pcieBusID": {"string": f"0000:{0x18 + 0x10 * minor:02x}:00.0"},
        }
    )
    return d


def slice_obj(node: str, rv: int, tainted: bool = False) -> dict[str, Any]:
    devices = [nvidia_device(node, i) for i in range(GPUS)]
    if tainted:  # a health event on the last GPU (NVIDIA's driver taints it)
        devices[-1]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    obj = resource_slice(node, devices, name=f"{node}-gpu.nvidia.com-7f2kq")
    obj["metadata"].update(
        {
            "resourceVersion": str(rv),
            "generateName": f"{node}-gpu.nvidia.com-",
            "uid": f"uid-slice-{node}",
            "creationTimestamp": "2026-11-25T10:00:00Z",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": f"uid-{node}"}],
        }
    )
    return obj


def claim_obj(name: str, namespace: str, node: str, devices: list[str], rv: int, state: str) -> dict[str, Any]:
    """A claim for len(devices) GPUs of CLASS. `state`: "allocated" (as kube-scheduler writes it,
    reserved for its pod), "deallocated" (status emptied) or "pending" (just made, no status)."""
    obj = allocated_claim(name, node, devices, namespace=namespace)
    obj["metadata"].update(
        {
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-11-25T10:00:00Z",
            "finalizers": ["resource.kubernetes.io/delete-protection"],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": f"{name}-pod", "uid": f"pod-{name}", "controller": True}
            ],
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
        }
    )
    obj["spec"]["devices"]["requests"][0]["exactly"].update({"allocationMode": "ExactCount", "count": len(devices)})
    if state == "pending":
        del obj["status"]
    elif state == "deallocated":
        obj["status"] = {}
    return obj


def event(etype: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": etype, "object": obj})


# Agent 0.4's DRA fields (gpu_state.proto), where this checkout's contract has them.
_AGENT_DRA = "dra_device" in pb.GpuSample.DESCRIPTOR.fields_by_name
_HOLDER_DRA = "dra_claim_name" in pb.Holder.DESCRIPTOR.fields_by_name


def agent_report(name: str, holders: list[tuple[str, str]], dra: bool) -> pb.NodeReport:
    """8 GPUs; GPU i < len(holders) held and in use by holders[i]'s pod (namespace, claim or pod
    name). On a device-plugin node the agent names the holders (kubelet's PodResources); on a DRA
    node it names them as DRA holders (the claim, agent 0.4) and each GPU's DRA name, where the
    contract has those fields, else none."""
    r = pb.NodeReport(node_name=name, sequence=1, agent_version="bench", allocation_source=pb.ALLOCATION_KUBELET)
    r.sample_time.seconds = 1000
    for i in range(GPUS):
        busy = i < len(holders)
        g = r.gpus.add(
            index=i,
            uuid=gpu_uuid(name, i),
            name="NVIDIA H100 80GB HBM3",
            healthy=True,
            utilization_gpu_percent=70 if busy else 0,
            memory_total_bytes=80 * GIB,
            memory_used_bytes=40 * GIB if busy else GIB // 2,
        )
        if dra and _AGENT_DRA:
            g.dra_device = f"gpu-{i}"
        if not busy:
            continue
        ns, owner = holders[i]
        if not dra:
            g.holders.add(namespace=ns, pod=owner, container="main", resource_name="nvidia.com/gpu", device_id=g.uuid)
        elif _HOLDER_DRA:
            h = g.holders.add(
                namespace=ns, pod=f"{owner}-pod", container="main", resource_name=CLASS, device_id=f"gpu-{i}"
            )
            h.dra_claim_namespace, h.dra_claim_name, h.dra_pool = ns, owner, name
    return r


def fleet_claims(nodes: int, seed: int = 1) -> list[tuple[str, str, str, list[str]]]:
    """(name, namespace, node, devices): CLAIMS_PER_NODE claims per node of 1 or 2 devices each,
    packed from gpu-0 (a node holds 4 to 8 claimed devices; 1 in 16 is full)."""
    rng = random.Random(seed)
    claims = []
    for n in range(nodes):
        node, minor = node_name(n), 0
        for k in range(CLAIMS_PER_NODE):
            size = rng.choice((1, 2))
            claims.append((f"llm-{n:05d}-{k}-gpu", f"team-{n % 40}", node, [f"gpu-{minor + j}" for j in range(size)]))
            minor += size
    return claims


def node_name(n: int) -> str:
    return f"node-{n:05d}"


def holders_per_node(claims: list[tuple[str, str, str, list[str]]]) -> dict[str, list[tuple[str, str]]]:
    """node -> (namespace, claim) per GPU its claims hold, from gpu-0 (fleet_claims packs them)."""
    held: dict[str, list[tuple[str, str]]] = {}
    for name, ns, node, devices in claims:
        held.setdefault(node, []).extend((ns, name) for _ in devices)
    return held


def churn_events(claims: list[tuple[str, str, str, list[str]]], picks: int, seed: int = 2) -> list[bytes]:
    """Watch lines of claim churn: each picked claim is deallocated (its pod done: MODIFIED, status
    emptied), deleted (DELETED), made again for a new pod (ADDED, pending) and allocated again on
    the same devices (MODIFIED, as kube-scheduler writes it): 4 events, the fleet as it was after."""
    rng = random.Random(seed)
    lines = []
    rv = 10_000_000
    for _ in range(picks):
        name, ns, node, devices = claims[rng.randrange(len(claims))]
        for etype, state in (
            ("MODIFIED", "deallocated"),
            ("DELETED", "deallocated"),
            ("ADDED", "pending"),
            ("MODIFIED", "allocated"),
        ):
            rv += 1
            lines.append(event(etype, claim_obj(name, ns, node, devices, rv, state)))
    return lines


CHURN_TYPES = ("deallocated (MODIFIED)", "deleted (DELETED)", "created (ADDED)", "allocated (MODIFIED)")


# -- the extender, in-process ------------------------------------------------------------------------


def watcher(info: KindInfo, sink: Any) -> _KindWatcher:
    """kube_watch's own per-kind watcher, for its line handler (decode, checks, sink call)."""

    def no_client() -> Any:
        raise AssertionError("no API server here: lines are handed to _handle_line")

    return _KindWatcher(
        info, sink, no_client, KubeSourceTimings(), _ProblemLog(30.0), lambda kind: None, random.Random(0)
    )


@dataclass
class World:
    api: SchedulerApi
    store: InventoryStore
    views: ViewBuilder
    claims: ClaimLedger
    state: GpuState
    held: dict[str, int]  # node -> devices its claims hold (GPUs its pods hold)
    slice_watch: _KindWatcher
    claim_watch: _KindWatcher
    load_cpu_s: dict[str, float] = field(default_factory=dict)


def world(nodes: int, dra: bool, claims: list[tuple[str, str, str, list[str]]], *, load: bool = True) -> World:
    """The extender as app.py wires it (store, view, claims, pod ledger), Nodes listed and fresh
    agent data; with `load`, the DRA objects listed too (else: load_slices / load_claims)."""
    store = InventoryStore()
    views = ViewBuilder(store, GPU_RESOURCES)
    state = GpuState(IdleRule())
    settings = ApiSettings(DecisionPolicy(), shortlist=100)  # the shipped config's shortlist
    ledger = PodLedger(GPU_RESOURCES, clock=lambda: NOW)
    ledger.replace_all(POD_KIND, [])
    ledger_claims = ClaimLedger()
    api = SchedulerApi(
        state,
        ExtenderMetrics(state),
        settings,
        inventory=lambda: views.current,
        clock=lambda: NOW,
        sources=ClusterSources(ledger=ledger, claims=ledger_claims),
    )
    views.on_rebuild(api.classes.classes_by_node)
    holders = holders_per_node(claims)
    names = [node_name(n) for n in range(nodes)]
    for info in KINDS:  # every kind listed (empty: no OME objects), as after the extender's start-up
        store.replace_all(info.kind, [])
    store.replace_all(NODE.kind, [orjson.loads(orjson.dumps(node_obj(n, dra))) for n in names])
    store.replace_all(DEVICE_CLASS.kind, [device_class()] if dra else [])
    if not dra:
        ledger_claims.replace_all(RESOURCE_CLAIM.kind, [])
    for n in names:
        state.ingest(agent_report(n, holders.get(n, []), dra), NOW)
    w = World(
        api,
        store,
        views,
        ledger_claims,
        state,
        {n: len(h) for n, h in holders.items()},
        watcher(RESOURCE_SLICE, store),
        watcher(RESOURCE_CLAIM, ledger_claims),
    )
    if dra and load:
        w.load_cpu_s["slices"] = load_slices(w, slice_lines(nodes))
        w.load_cpu_s["claims"] = load_claims(w, claim_lines(claims))
    return w


def slice_lines(nodes: int) -> list[bytes]:
    return [orjson.dumps(slice_obj(node_name(n), 1000 + n)) for n in range(nodes)]


def claim_lines(claims: list[tuple[str, str, str, list[str]]]) -> list[bytes]:
    lines = [orjson.dumps(claim_obj(c[0], c[1], c[2], c[3], 500_000 + i, "allocated")) for i, c in enumerate(claims)]
    ns, name = NEW_CLAIM
    pending = claim_obj(name, ns, "", ["gpu-0"], 900_000, "pending")
    lines.append(orjson.dumps(pending))
    return lines


def load_slices(w: World, lines: list[bytes]) -> float:
    """The LIST of ResourceSlices: each item decoded, one replace_all (the view rebuilt: every slice
    parsed, build_dra)."""
    started = time.process_time()
    w.store.replace_all(RESOURCE_SLICE.kind, [orjson.loads(raw) for raw in lines])
    return time.process_time() - started


def load_claims(w: World, lines: list[bytes]) -> float:
    started = time.process_time()
    w.claims.replace_all(RESOURCE_CLAIM.kind, [orjson.loads(raw) for raw in lines])
    return time.process_time() - started


def pod(claim_pod: bool) -> dict[str, Any]:
    if claim_pod:  # its GPU through its ResourceClaim; no extended resource
        ns, name = NEW_CLAIM
        return {
            "metadata": {"name": "new", "namespace": ns, "uid": "u-new"},
            "spec": {
                "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            },
        }
    return {
        "metadata": {"name": "new", "namespace": "ml", "uid": "u-new"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def request(p: dict[str, Any], names: list[str]) -> bytes:
    return orjson.dumps({"Pod": p, "NodeNames": names})


def time_calls(
    api: SchedulerApi, body: bytes, calls: int, before: Callable[[], None] | None = None
) -> tuple[list[float], list[float]]:
    """`calls` filter + prioritize pairs; `before` (untimed) runs before each call."""
    f_times, p_times = [], []
    p_body = orjson.loads(body)["Pod"]
    for _ in range(calls):
        if before is not None:
            before()
        t0 = time.perf_counter()
        answer = api.filter(parse_extender_args(body))
        t1 = time.perf_counter()
        prio = orjson.dumps({"Pod": p_body, "NodeNames": answer["NodeNames"]})
        if before is not None:
            before()
        t2 = time.perf_counter()
        api.prioritize(parse_extender_args(prio))
        t3 = time.perf_counter()
        f_times.append(t1 - t0)
        p_times.append(t3 - t2)
    return f_times, p_times


class Churn:
    """The churn's watch lines, one per `step`, round and round (4 per claim: churn_events)."""

    def __init__(self, w: World, lines: list[bytes]) -> None:
        self._handle, self._lines, self.applied = w.claim_watch._handle_line, lines, 0

    def step(self) -> None:
        self._handle(self._lines[self.applied % len(self._lines)])
        self.applied += 1

    def settle(self) -> None:
        """On to the end of the current claim's cycle: the fleet as it was."""
        while self.applied % 4:
            self.step()


def check_answer(w: World, names: list[str], answer: dict[str, Any], shortlist: int = 100) -> dict[str, int]:
    """The filter answer is what the fleet says: the nodes whose claims hold all 8 devices fail,
    every other passes (the shortlist's best `shortlist` of them are named)."""
    full = {n for n in names if w.held.get(n, 0) >= GPUS}
    failed = {**(answer.get("FailedNodes") or {}), **(answer.get("FailedAndUnresolvableNodes") or {})}
    passed = answer["NodeNames"] or []
    assert set(failed) == full, (sorted(set(failed) ^ full)[:5], len(failed), len(full))
    assert not full.intersection(passed)
    assert len(passed) == min(shortlist, len(names) - len(full)), (len(passed), len(names), len(full))
    return {"passed": len(names) - len(full), "failed": len(full), "answered": len(passed)}


# -- the measurements --------------------------------------------------------------------------------


def memory(nodes: int, claims: list[tuple[str, str, str, list[str]]]) -> tuple[World, dict[str, int]]:
    """tracemalloc's growth while the slices, then the claims, are listed, and what a decision's
    DraFree cache holds; the parts: the slices parsed, build_dra's inventory. The world is returned
    (the DRA world of the latency rounds)."""
    w = world(nodes, dra=True, claims=claims, load=False)
    s_lines, c_lines = slice_lines(nodes), claim_lines(claims)
    gc.collect()
    tracemalloc.start()
    out: dict[str, int] = {}

    def grown(step: Callable[[], object]) -> int:
        gc.collect()
        base = tracemalloc.get_traced_memory()[0]
        kept = step()
        gc.collect()
        size = tracemalloc.get_traced_memory()[0] - base
        del kept
        return size

    out["slices"] = grown(lambda: load_slices(w, s_lines))
    out["claims"] = grown(lambda: load_claims(w, c_lines))
    objs = w.store.objects(RESOURCE_SLICE.kind)
    parsed = [parse_resource_slice(o) for o in objs]
    classes = [parse_device_class(o) for o in w.store.objects(DEVICE_CLASS.kind)]
    # The parts on their own, each kept while measured (and dropped after): strings shared with the
    # decoded objects are not counted twice.
    out["slices_parsed"] = grown(lambda: [parse_resource_slice(o) for o in objs])
    out["dra_inventory"] = grown(lambda: build_dra(parsed, classes, GPU_RESOURCES))
    names = [node_name(n) for n in range(nodes)]
    body = request(pod(True), names)
    w.api.filter(parse_extender_args(body))  # the plan cache, class membership: not DraFree's
    change = churn_events(claims, 1)
    w.claim_watch._handle_line(change[0])  # a claim change: the DraFree cache cold
    fresh = w.api.decisions._dra_free = DraFree()  # empty: the growth is all it holds (not net of the last one)
    w.api.state.on_offered_change(fresh.summary_changed)
    out["dra_free_cache"] = grown(lambda: w.api.filter(parse_extender_args(body)))
    for raw in change[1:]:  # the claim as it was
        w.claim_watch._handle_line(raw)
    tracemalloc.stop()
    return w, out


def claim_event_cost(w: World, lines: list[bytes]) -> dict[str, float]:
    """CPU seconds per claim watch line (decode + checks + parse + upsert/delete), by event type."""
    per_type: dict[str, float] = {}
    for t, kind in enumerate(CHURN_TYPES):
        mine = lines[t::4]
        # apply in order (each type's cost measured in its own pass would break the cycle), timing
        # only this type's lines
        spent = 0.0
        for i, raw in enumerate(lines):
            if i % 4 == t:
                started = time.process_time()
                w.claim_watch._handle_line(raw)
                spent += time.process_time() - started
            else:
                w.claim_watch._handle_line(raw)
        per_type[kind] = spent / len(mine)
    return per_type


def slice_event_cost(w: World, nodes: int, events: int, body: bytes) -> dict[str, float]:
    """Per ResourceSlice event (a taint set on one GPU, then cleared): CPU of decode + store upsert
    + the view rebuilt (no event loop here: at once, as the extender's ViewBuilder does without
    one; with one, once per loop turn), then the first filter after it (the DraFree recount over
    the new view)."""
    rng = random.Random(3)
    handle, first = [], []
    for i in range(events):
        n = rng.randrange(nodes)
        line = event("MODIFIED", slice_obj(node_name(n), 2_000_000 + i, tainted=True))
        undo = event("MODIFIED", slice_obj(node_name(n), 3_000_000 + i))
        for raw in (line, undo):
            started = time.process_time()
            w.slice_watch._handle_line(raw)
            handle.append(time.process_time() - started)
            t0 = time.perf_counter()
            w.api.filter(parse_extender_args(body))
            first.append(time.perf_counter() - t0)
    return {"handle_ms": statistics.median(handle) * 1000, "first_filter_ms": statistics.median(first) * 1000}


def node_event_cost(w: World, nodes: int, events: int, body: bytes) -> dict[str, float]:
    """Per Node event (a label set on one node, then cleared; slices unchanged): CPU of the store
    upsert + the view rebuilt, then the first claim-pod filter after it (the DRA inventory and
    what DraFree derived from it are kept: the same slices)."""
    rng = random.Random(4)
    handle, first = [], []
    for i in range(events):
        name = node_name(rng.randrange(nodes))
        labelled = orjson.loads(orjson.dumps(node_obj(name, True)))
        labelled["metadata"]["labels"]["bench/event"] = str(i)
        for obj in (labelled, orjson.loads(orjson.dumps(node_obj(name, True)))):
            started = time.process_time()
            w.store.upsert(NODE.kind, obj)
            handle.append(time.process_time() - started)
            t0 = time.perf_counter()
            w.api.filter(parse_extender_args(body))
            first.append(time.perf_counter() - t0)
    return {"handle_ms": statistics.median(handle) * 1000, "first_filter_ms": statistics.median(first) * 1000}


def view_rebuild_parts(w: World, rounds: int) -> dict[str, float]:
    """build_dra alone over every slice, and a whole view rebuild where no slice changed (ms, median)."""
    objs = w.store.objects(RESOURCE_SLICE.kind)
    parsed = [parse_resource_slice(o) for o in objs]
    classes = [parse_device_class(o) for o in w.store.objects(DEVICE_CLASS.kind)]
    dra, whole = [], []
    for _ in range(rounds):
        t0 = time.process_time()
        build_dra(parsed, classes, GPU_RESOURCES)
        t1 = time.process_time()
        w.views.rebuild()
        t2 = time.process_time()
        dra.append(t1 - t0)
        whole.append(t2 - t1)
    return {"build_dra_ms": statistics.median(dra) * 1000, "rebuild_ms": statistics.median(whole) * 1000}


def profile_calls(w: World, body: bytes, calls: int, before: Callable[[], None] | None, top: int = 12) -> list[str]:
    """cProfile of the claim pod's filter (`before`, untimed, before each call), the top functions
    by self time, per call."""
    prof = cProfile.Profile()
    w.api.filter(parse_extender_args(body))  # warm: the caches as the previous variant left them
    for _ in range(calls):
        if before is not None:
            before()
        prof.enable()
        w.api.filter(parse_extender_args(body))
        prof.disable()
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, func), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tottime, cumtime, ncalls, f"{Path(file).parent.name}/{Path(file).name}:{line} {func}"))
    rows.sort(reverse=True)
    return [
        f"{tt / calls * 1000:7.2f} ms self {ct / calls * 1000:7.2f} ms cum {nc / calls:>8.0f} calls  {name}"
        for tt, ct, nc, name in rows[:top]
    ]


def run(
    quick: bool = False,
    *,
    nodes: int | None = None,
    calls: int | None = None,
    rounds: int | None = None,
    write: bool = True,
    profile: bool = True,
) -> dict[str, Any]:
    nodes = nodes if nodes is not None else (500 if quick else 5000)
    calls = calls if calls is not None else (20 if quick else 200)
    rounds = rounds if rounds is not None else (2 if quick else 5)
    claims = fleet_claims(nodes)
    names = [node_name(n) for n in range(nodes)]
    load_before = round(os.getloadavg()[0], 2)  # a shared machine: what else ran shows here
    gc.collect()

    dra, mem = memory(nodes, claims)
    # CPU of the LISTs without tracemalloc's own cost: the same objects into a fresh world (the
    # garbage collector as at start-up: the extender tunes it once the first LISTs are in).
    timed = world(nodes, dra=True, claims=claims)
    load_cpu = dict(timed.load_cpu_s)
    del timed
    plugin = world(nodes, dra=False, claims=claims)
    claim_body, dp_body = request(pod(True), names), request(pod(False), names)
    counts = check_answer(dra, names, dra.api.filter(parse_extender_args(claim_body)))
    assert check_answer(plugin, names, plugin.api.filter(parse_extender_args(dp_body))) == counts
    tune_gc()  # as the extender runs: start-up objects frozen out of collections, young ones less often

    churn_lines = churn_events(claims, max(250, nodes // 5))
    per_type = claim_event_cost(dra, churn_lines)
    per_event = statistics.mean(per_type.values())
    slice_cost = slice_event_cost(dra, nodes, 3 if quick else 10, claim_body)
    node_cost = node_event_cost(dra, nodes, 3 if quick else 10, claim_body)
    rebuild = view_rebuild_parts(dra, 3 if quick else 10)
    churn = Churn(dra, churn_lines)
    variants: dict[str, tuple[World, bytes, Callable[[], None] | None]] = {
        "(a) device-plugin pod": (plugin, dp_body, None),
        "(b) claim pod": (dra, claim_body, None),
        "(c) claim pod, claim churn": (dra, claim_body, churn.step),
    }
    results: dict[str, dict[str, list[list[float]]]] = {k: {"filter": [], "prioritize": []} for k in variants}
    for r in range(rounds):
        order = list(variants)[r % len(variants) :] + list(variants)[: r % len(variants)]
        for key in order:
            w, body, before = variants[key]
            time_calls(w.api, body, 3, before)  # warm
            f, pr = time_calls(w.api, body, calls, before)
            results[key]["filter"].append(f)
            results[key]["prioritize"].append(pr)
    profiles = {}
    if profile:
        profiles["(b) claim pod"] = profile_calls(dra, claim_body, 20 if quick else 100, None)
        profiles["(c) claim pod, claim churn"] = profile_calls(dra, claim_body, 10 if quick else 30, churn.step)
        profiles["(a) device-plugin pod"] = profile_calls(plugin, dp_body, 20 if quick else 100, None)
    churn.settle()  # every picked claim back as it was: the answer is still what the fleet says
    assert check_answer(dra, names, dra.api.filter(parse_extender_args(claim_body))) == counts

    out: dict[str, Any] = {
        "nodes": nodes,
        "devices": sum(len(dra.views.current.dra.devices(n)) for n in names),
        "claims": len(dra.claims),
        "claims_allocated": sum(1 for c in claims if (x := dra.claims.claim(f"{c[1]}/{c[0]}")) and x.allocated),
        "claimed_devices": sum(dra.held.values()),
        "answer": counts,
        "memory_mib": {k: round(v / 2**20, 2) for k, v in mem.items()},
        "bytes_per_device": round(mem["slices"] / max(1, nodes * GPUS)),
        "bytes_per_claim": round(mem["claims"] / max(1, len(claims))),
        "list_cpu_ms": {k: round(v * 1000, 1) for k, v in load_cpu.items()},
        "claim_event_cpu_us": {k: round(v * 1e6, 1) for k, v in per_type.items()},
        "claim_event_cpu_us_mean": round(per_event * 1e6, 1),
        "claim_churn_100_per_s_core_percent": round(per_event * 100 * 100, 3),
        "slice_event_cpu_ms": round(slice_cost["handle_ms"], 2),
        "slice_event_first_filter_ms": round(slice_cost["first_filter_ms"], 2),
        "node_event_cpu_ms": round(node_cost["handle_ms"], 2),
        "node_event_first_filter_ms": round(node_cost["first_filter_ms"], 2),
        "view_rebuild_ms": round(rebuild["rebuild_ms"], 2),
        "build_dra_ms": round(rebuild["build_dra_ms"], 2),
        "latency_ms": rounds_latency_ms(results),
        "filter_profiles": profiles,
        "load_average": [load_before, round(os.getloadavg()[0], 2)],
    }
    base = out["latency_ms"]["(a) device-plugin pod"]
    out["ratios"] = {
        k: {
            verb: {q: round(d[verb][q] / base[verb][q], 2) for q in ("p50", "p99")} for verb in ("filter", "prioritize")
        }
        for k, d in out["latency_ms"].items()
    }
    (b, c) = out["latency_ms"]["(b) claim pod"], out["latency_ms"]["(c) claim pod, claim churn"]
    out["recount_ms_per_call"] = round(c["filter"]["p50"] - b["filter"]["p50"], 2)
    if write:
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        (OUT_DIR / "dra.json").write_text(json.dumps(out, indent=1))
    return out


def ratio_ok(out: dict[str, Any], key: str = "(b) claim pod") -> bool:
    r = out["ratios"][key]
    return r["filter"]["p99"] <= TARGET_RATIO and r["prioritize"]["p99"] <= TARGET_RATIO


def report(out: dict[str, Any]) -> list[str]:
    m, lat, ratios = out["memory_mib"], out["latency_ms"], out["ratios"]
    ev = out["claim_event_cpu_us"]
    lines = [
        f"fleet: {out['nodes']} DRA nodes, {out['devices']} devices in ResourceSlices, {out['claims']} "
        f"ResourceClaims ({out['claims_allocated']} allocated, {out['claimed_devices']} devices held); the "
        f"1-GPU pods pass {out['answer']['passed']} nodes, fail {out['answer']['failed']} (all 8 held)",
        "",
        "| what | figure |",
        "|---|---|",
        f"| memory: {out['devices']} devices (slices) listed | {m['slices']} MiB ({out['bytes_per_device']} B/device: "
        f"the store's objects {m['slices'] - m['slices_parsed'] - m['dra_inventory']:.1f}, parsed "
        f"{m['slices_parsed']}, build_dra's inventory {m['dra_inventory']}) |",
        f"| memory: {out['claims']} claims listed (ClaimLedger) | {m['claims']} MiB "
        f"({out['bytes_per_claim']} B/claim) |",
        f"| memory: DraFree cache after one {out['nodes']}-name call | {m['dra_free_cache']} MiB |",
        f"| LIST CPU, gc as at start-up: slices (decode, store, view rebuilt) / claims (decode, ledger) | "
        f"{out['list_cpu_ms']['slices']} ms / {out['list_cpu_ms']['claims']} ms |",
        f"| watch CPU per claim event (decode + parse + upsert), mean of 4 types | {out['claim_event_cpu_us_mean']} us "
        f"({', '.join(f'{k} {v}' for k, v in ev.items())}) |",
        f"| 100 claim events/s | {out['claim_churn_100_per_s_core_percent']} % of one core (watch side) |",
        f"| the first filter after a claim event: more than (b) (DraFree recount, p50) | "
        f"{out['recount_ms_per_call']} ms |",
        f"| watch CPU per slice event (decode + store + view rebuild; build_dra over every slice alone: "
        f"{out['build_dra_ms']} ms) | {out['slice_event_cpu_ms']} ms |",
        f"| the first filter (claim pod) after a slice event (median) | {out['slice_event_first_filter_ms']} ms |",
        f"| CPU per Node event (store + view rebuild, slices unchanged; a rebuild with nothing changed: "
        f"{out['view_rebuild_ms']} ms) | {out['node_event_cpu_ms']} ms |",
        f"| the first filter (claim pod) after a Node event (median) | {out['node_event_first_filter_ms']} ms |",
        "",
        f"| {out['nodes']} names | filter p50 / p99 ms | prioritize p50 / p99 ms | filter ratio to (a) p50 / p99 "
        "| prioritize ratio to (a) p50 / p99 |",
        "|---|---|---|---|---|",
    ]
    for k, d in lat.items():
        r = ratios[k]
        lines.append(
            f"| {k} | {d['filter']['p50']:.2f} / {d['filter']['p99']:.2f} | {d['prioritize']['p50']:.2f} / "
            f"{d['prioritize']['p99']:.2f} | {r['filter']['p50']:.2f} / {r['filter']['p99']:.2f} | "
            f"{r['prioritize']['p50']:.2f} / {r['prioritize']['p99']:.2f} |"
        )
    lines.append("")
    lines.append(f"(load average at start / end of the run: {out['load_average'][0]} / {out['load_average'][1]})")
    return lines


def markdown(out: dict[str, Any]) -> list[str]:
    return [
        "## DRA at fleet scale (issue 24)",
        "",
        "`bench/bench_dra.py`, in-process on the real code: 5,000 DRA GPU nodes x 8 devices (one NVIDIA-style "
        "ResourceSlice per node) and 20,000 allocated ResourceClaims of 1 or 2 devices, as the API server sends "
        "them in watch events (decoded with orjson by kube_watch's line handler, into the InventoryStore / "
        "ClaimLedger); claim churn as deallocate / delete / create / allocate events; filter + prioritize at "
        "5,000 names, alternated per round: (a) nvidia.com/gpu: 1 on 5,000 device-plugin nodes, (b) a pod whose "
        "unallocated ResourceClaim asks for 1 GPU of class gpu.nvidia.com on the 5,000 DRA nodes, (c) (b) with a "
        "claim event before every call. Fresh agent data on every node; the watch's HTTP transport not counted.",
        "",
        *report(out),
        *[
            line
            for key in ("(b) claim pod", "(c) claim pod, claim churn")
            if out["filter_profiles"].get(key)
            for line in (
                "",
                f"cProfile of filter, {key}, per call, the top functions by self time (profiled: slower):",
                "```",
                *out["filter_profiles"][key][:6],
                "```",
            )
        ],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 nodes, fewer calls")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile of the cold claim-pod call")
    args = parser.parse_args(argv)
    out = run(args.quick, profile=not args.no_profile)
    print("\n".join(report(out)))
    for key, rows in out["filter_profiles"].items():
        print(f"\ncProfile of filter, {key} (per call, by self time):")
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
