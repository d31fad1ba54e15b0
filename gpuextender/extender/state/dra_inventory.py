"""The GPUs that come through DRA, per node: what the ResourceSlices publish, for the DeviceClasses
that map devices to a GPU resource the extender decides on (`extendedResourceName: nvidia.com/gpu`,
KEP-5004), and how many of them a pod can still be given.

- Pools: a pool (driver, pool name) may span several slices; only its newest generation counts
  (a driver that republishes writes generation n + 1 and deletes the old slices after). A pool
  whose newest generation names one device twice is unusable (the allocator refuses it too): it
  counts for nothing, and the extender logs it once.
- A node's DRA GPUs are its devices of kind "gpu" (whole GPUs) of a driver a GPU class selects: a
  DeviceClass mapped to a configured GPU resource (`extendedResourceName`), or one whose selectors
  require `type == 'gpu'`. MIG devices and other drivers' devices do not count as whole GPUs.
- Its DRA MIG devices are those of kind "mig" of a driver a MIG class selects (selectors requiring
  `type == 'mig'`: NVIDIA's `mig.nvidia.com`), by profile. A claim for a MIG class asks for MIG
  devices of the profile its selectors (or its class's) require; the node offers, per profile, the
  smaller of the agent's free instances and the devices no claim holds and no taint blocks.
- What a pod can still be given (`DraFree`): those devices less the ones a ResourceClaim holds
  (state/claim_ledger.py) and the ones a NoSchedule / NoExecute taint keeps from the allocator.
  That is "allocatable" for a node whose Node object lists no device-plugin GPUs (`DraAllocatable`):
  the verdicts without fresh agent data count it (decide/README.md, "Whole GPUs"); with fresh data
  a pod can be given the GPUs that are both free devices and available per the agent (`capped`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from itertools import chain

from gpuextender.extender.model.dra import DeviceClassInfo, DeviceRef, DraDevice, ResourceSliceInfo, Toleration
from gpuextender.extender.model.pod_gpus import whole_gpu_resources
from gpuextender.extender.state.claim_ledger import ClaimLedger
from gpuextender.extender.state.gpu_summary import GpuPositions, NodeSummary, quality_table
from gpuextender.extender.state.gpu_topology import tiers_for_mask

log = logging.getLogger("gpu_extender.inventory")

NodeDevices = tuple[tuple[DeviceRef, DraDevice], ...]


@dataclass(frozen=True, slots=True)
class DraInventory:
    gpu_devices: Mapping[str, NodeDevices] = field(default_factory=dict)  # node -> its DRA GPUs
    # The GPU classes, by name: those mapped to a configured GPU resource, and those whose selectors
    # require whole GPUs (type gpu). A claim for one of them asks for whole GPUs.
    classes: Mapping[str, DeviceClassInfo] = field(default_factory=dict)
    invalid_pools: frozenset[tuple[str, str]] = frozenset()  # (driver, pool): counted for nothing
    # One more than the inventory this one followed (`carried_over`), and the nodes whose GPUs
    # differ from that one's (None: any may). What DraFree derives per node follows only those.
    generation: int = 0
    changed: frozenset[str] | None = None
    mig_devices: Mapping[str, NodeDevices] = field(default_factory=dict)  # node -> its DRA MIG devices
    mig_classes: Mapping[str, DeviceClassInfo] = field(default_factory=dict)  # classes of MIG devices

    def devices(self, node: str) -> NodeDevices:
        return self.gpu_devices.get(node, ())


def carried_over(previous: DraInventory, new: DraInventory) -> DraInventory:
    """`new` as the successor of `previous`: a node whose GPUs are equal keeps `previous`'s very
    tuple, and `changed` names the others (added, changed, gone). Cheap where slices did not
    change: their parsed devices are the same objects, so equal tuples compare by identity."""
    changed: set[str] = set()
    devices = _kept(previous.gpu_devices, new.gpu_devices, changed)
    mig = _kept(previous.mig_devices, new.mig_devices, changed)
    return replace(
        new, gpu_devices=devices, mig_devices=mig, generation=previous.generation + 1, changed=frozenset(changed)
    )


def _kept(old: Mapping[str, NodeDevices], new: Mapping[str, NodeDevices], changed: set[str]) -> dict[str, NodeDevices]:
    """`new`, each node's tuple equal to `old`'s replaced by that one; the others added to `changed`."""
    kept: dict[str, NodeDevices] = {}
    changed.update(node for node in old if node not in new)
    for node, mine in new.items():
        theirs = old.get(node)
        if theirs is not None and theirs == mine:
            kept[node] = theirs
        else:
            kept[node] = mine
            changed.add(node)
    return kept


@dataclass(frozen=True, slots=True)
class PoolDevices:
    """One pool's part of the inventory, and what it was made from (`build_dra`'s cache): its newest
    slices (held here, so no other object takes their ids) and how its driver's devices are read."""

    slices: tuple[ResourceSliceInfo, ...]
    whole: bool  # a GPU class selects its driver's whole GPUs
    mig: bool  # a MIG class selects its driver's MIG devices
    gpu: Mapping[str, NodeDevices]  # node -> its whole GPUs in this pool
    mig_devices: Mapping[str, NodeDevices]  # node -> its MIG devices in this pool
    invalid: bool = False  # names a device twice: counted for nothing

    def made_from(self, slices: list[ResourceSliceInfo], whole: bool, mig: bool) -> bool:
        return (
            (whole, mig) == (self.whole, self.mig)
            and len(slices) == len(self.slices)
            and all(a is b for a, b in zip(slices, self.slices, strict=True))
        )


PoolCache = dict[tuple[str, str], PoolDevices]


def build_dra(
    slices: Iterable[ResourceSliceInfo],
    classes: Iterable[DeviceClassInfo],
    gpu_resources: Sequence[str],
    cache: PoolCache | None = None,
) -> DraInventory:
    """The module docstring's per-node GPUs from every slice and class in the inventory. With
    `cache` (the pools of the last build, replaced by this one's), a pool whose newest slices are
    the same objects is not walked again, and a node whose devices are all one pool's keeps that
    pool's very tuple: a slice event costs its pool, not every device of the fleet."""
    resources = set(whole_gpu_resources(gpu_resources))
    gpu_classes = {
        c.name: c for c in classes if c.drivers and (c.extended_resource in resources or c.device_type == "gpu")
    }
    mig_classes = {c.name: c for c in classes if c.drivers and c.device_type == "mig"}
    # driver -> the `type` required ("" any), for the drivers a GPU class selects
    wanted: dict[str, set[str]] = {}
    for c in gpu_classes.values():
        for driver in c.drivers:
            wanted.setdefault(driver, set()).add(c.device_type)
    mig_drivers = {driver for c in mig_classes.values() for driver in c.drivers}
    newest: dict[tuple[str, str], list[ResourceSliceInfo]] = {}
    for s in slices:
        if s.driver not in wanted and s.driver not in mig_drivers:
            continue
        pool = newest.setdefault((s.driver, s.pool), [])
        if pool and pool[0].generation > s.generation:
            continue  # an older generation, not deleted yet
        if pool and pool[0].generation < s.generation:
            pool.clear()
        pool.append(s)
    last = cache if cache is not None else {}
    pools: PoolCache = {}
    for key, pool_slices in newest.items():
        types = wanted.get(key[0], set())
        whole, mig = "" in types or "gpu" in types, key[0] in mig_drivers
        found = last.get(key)
        pools[key] = (
            found
            if found is not None and found.made_from(pool_slices, whole, mig)
            else _pool(key, pool_slices, whole, mig)
        )
    if cache is not None:
        cache.clear()
        cache.update(pools)
    return DraInventory(
        _per_node(p.gpu for p in pools.values()),
        gpu_classes,
        frozenset(key for key, p in pools.items() if p.invalid),
        mig_devices=_per_node(p.mig_devices for p in pools.values()),
        mig_classes=mig_classes,
    )


def _pool(key: tuple[str, str], pool_slices: list[ResourceSliceInfo], whole: bool, mig: bool) -> PoolDevices:
    driver, pool_name = key
    names = [d.name for s in pool_slices for _, d in s.devices]
    if len(names) != len(set(names)):
        return PoolDevices(tuple(pool_slices), whole, mig, {}, {}, invalid=True)
    per_node: dict[str, list[tuple[DeviceRef, DraDevice]]] = {}
    mig_per_node: dict[str, list[tuple[DeviceRef, DraDevice]]] = {}
    for s in pool_slices:
        for node, device in s.devices:
            if node is None:
                continue
            if whole and device.kind == "gpu":
                per_node.setdefault(node, []).append(((driver, pool_name, device.name), device))
            elif mig and device.kind == "mig" and device.profile:
                mig_per_node.setdefault(node, []).append(((driver, pool_name, device.name), device))
    return PoolDevices(
        tuple(pool_slices),
        whole,
        mig,
        {n: tuple(d) for n, d in per_node.items()},
        {n: tuple(d) for n, d in mig_per_node.items()},
    )


def _per_node(parts: Iterable[Mapping[str, NodeDevices]]) -> dict[str, NodeDevices]:
    """Node -> its devices over every pool, in pool order; one pool's tuple as it is."""
    merged: dict[str, NodeDevices] = {}
    for part in parts:
        for node, devices in part.items():
            have = merged.get(node)
            merged[node] = devices if have is None else have + devices
    return merged


@dataclass(frozen=True, slots=True)
class DraNode:
    """A node's DRA GPUs as the join to its agent's GPUs needs them: how many a pod can still be
    given (`free`), and the keys of those and of all its DRA GPUs. A device is keyed by its `uuid`
    attribute (what NVML reports) and, when its driver publishes none, by its name (the agent
    reports each GPU's name in NVIDIA's DRA driver, model/dra_names on the agent)."""

    free: int
    free_uuids: frozenset[str]
    free_names: frozenset[str]
    uuids: frozenset[str]
    names: frozenset[str]
    # Free devices a taint with effect None marks (a driver's or an administrator's note, e.g.
    # NVIDIA's gpu.nvidia.com/xid for an application XID): usable, ranked as degraded.
    marked: frozenset[str] = frozenset()
    whole: bool = True  # the node publishes whole GPUs (else only MIG devices: nothing to cap above)
    mig_free: tuple[tuple[str, int], ...] | None = None  # per profile (mig_free); None: no MIG devices

    def free_mask(self, positions: GpuPositions) -> int | None:
        """Bit i set when the agent's GPU at report position i is one of the free devices; None
        when none of the agent's GPUs is any of the node's DRA devices (nothing to join on)."""
        mask, joined = 0, False
        uuids, names = self.uuids, self.names
        free_uuids, free_names = self.free_uuids, self.free_names
        for i, (uuid, name) in enumerate(zip(positions.uuids, positions.dra_names, strict=True)):
            if uuid in uuids or name in names:
                joined = True
                if uuid in free_uuids or name in free_names:
                    mask |= 1 << i
        return mask if joined else None

    def marked_mask(self, positions: GpuPositions) -> int:
        """Bit i set when the agent's GPU at position i is a free device a None-effect taint marks."""
        marked = self.marked
        if not marked:
            return 0
        return sum(
            1 << i
            for i, (uuid, name) in enumerate(zip(positions.uuids, positions.dra_names, strict=True))
            if (uuid and uuid in marked) or (name and name in marked)
        )


def dra_node(devices: NodeDevices, held: AbstractSet[DeviceRef], tolerations: tuple[Toleration, ...] = ()) -> DraNode:
    """A node's DraNode; with `tolerations`, for a claim that tolerates those taints."""
    free_uuids: set[str] = set()
    free_names: set[str] = set()
    uuids: set[str] = set()
    names: set[str] = set()
    count = 0
    marked: set[str] = set()
    for ref, device in devices:
        usable = device.allocatable_with(tolerations) if tolerations else device.allocatable
        free = usable and ref not in held
        count += free
        if free and device.taints:  # usable, with taints: effect None (or tolerated): ranked lower
            marked.add(device.uuid or device.name)
        if device.uuid:
            uuids.add(device.uuid)
            if free:
                free_uuids.add(device.uuid)
        else:
            names.add(device.name)
            if free:
                free_names.add(device.name)
    return DraNode(
        count, frozenset(free_uuids), frozenset(free_names), frozenset(uuids), frozenset(names), frozenset(marked)
    )


class FreeCounter:
    """`free(node)`: a node's DRA GPUs a pod can still be given, or None for a node without DRA
    GPUs; `node(node)`: all DraFree knows of it. Computed once per node per key."""

    __slots__ = ("_allocated_on", "_devices", "_mig", "_nodes")

    def __init__(
        self,
        devices: Mapping[str, NodeDevices],
        allocated_on: Callable[[str], AbstractSet[DeviceRef]],
        nodes: dict[str, DraNode],
        mig_devices: Mapping[str, NodeDevices] | None = None,
    ) -> None:
        self._devices, self._allocated_on, self._nodes = devices, allocated_on, nodes
        self._mig = mig_devices or {}

    def node(self, node: str) -> DraNode | None:
        found = self._nodes.get(node)
        if found is None:
            devices, mig = self._devices.get(node), self._mig.get(node)
            if devices is None and mig is None:
                return None
            held = self._allocated_on(node)
            found = dra_node(devices or (), held)
            if mig is not None:
                found = replace(found, whole=devices is not None, mig_free=mig_free(mig, held))
            self._nodes[node] = found
        return found

    def __call__(self, node: str) -> int | None:
        found = self.node(node) if node in self._devices else None
        return None if found is None else found.free


class DraFree:
    """The decisions' view of DRA nodes, kept current by change, not recomputed per request: per
    node its free DRA GPUs (`DraNode`, lazily) and the summary a decision reads, the agent's with a
    DRA node's joined to its free devices (`capped`), in one dict whose `get` is the lookup (a
    5,000-name filter asks every node twice: a Python function per ask cost 3 ms).

    What invalidates what: a new DRA inventory the nodes whose GPUs changed (`DraInventory.changed`,
    when it follows the one seen last; else everything; an inventory rebuilt for a Node or OME
    object is the same one, nothing); a claims version the nodes whose held devices changed
    (ClaimLedger.nodes_changed_since); a node's agent summary (a report, its bound pods:
    `summary_changed`, a GpuState listener) that node's entry."""

    def __init__(self) -> None:
        self._dra: DraInventory | None = None
        self._claims_version = 0
        self._nodes: dict[str, DraNode] = {}
        self._merged: dict[str, NodeSummary] = {}
        self._stale: set[str] = set()  # nodes whose merged entry must be made again
        self._rebuild = True

    def summary_changed(self, node: str) -> None:
        self._stale.add(node)

    def refresh(
        self, dra: DraInventory, claims: ClaimLedger | None, offered: Mapping[str, NodeSummary]
    ) -> tuple[FreeCounter, Callable[[str], NodeSummary | None]]:
        """(free devices per node, the summary lookup) for a decision now."""
        if dra is not self._dra:
            last, self._dra = self._dra, dra
            if last is not None and dra.changed is not None and dra.generation == last.generation + 1:
                self._forget(dra.changed)
            else:
                self._nodes, self._rebuild = {}, True
        claims_version = claims.version if claims is not None else 0
        if claims_version != self._claims_version:
            changed = claims.nodes_changed_since(self._claims_version) if claims is not None else None
            self._claims_version = claims_version
            if changed is None:
                self._nodes, self._rebuild = {}, True
            elif not self._rebuild:
                self._forget(changed)
        held = claims.allocated_on if claims is not None else _nothing_held
        counter = FreeCounter(dra.gpu_devices, held, self._nodes, dra.mig_devices)
        merged = self._merged
        if self._rebuild:
            merged.clear()
            merged.update(offered)
            for node in chain(dra.gpu_devices, dra.mig_devices):
                s, dra_node_ = merged.get(node), counter.node(node)
                if s is not None and dra_node_ is not None:
                    merged[node] = joined(s, dra_node_)
            self._rebuild = False
            self._stale.clear()
        elif self._stale:
            for node in self._stale:
                s = offered.get(node)
                if s is None:
                    merged.pop(node, None)
                    continue
                dra_node_ = counter.node(node)
                merged[node] = s if dra_node_ is None else joined(s, dra_node_)
            self._stale.clear()
        return counter, merged.get

    def _forget(self, nodes: Iterable[str]) -> None:
        for node in nodes:
            self._nodes.pop(node, None)
            self._stale.add(node)


def _nothing_held(node: str) -> frozenset[DeviceRef]:
    return frozenset()


class DraAllocatable(Mapping[str, int]):
    """Allocatable GPUs per node, with a node that lists no device-plugin GPUs (none, or 0) and
    publishes DRA GPUs counted by those: its untainted devices no claim holds (`free`, from
    DraFree). A device-plugin count wins where there is one, as kube-scheduler uses DRA for an
    extended resource only where the Node's allocatable does not list it."""

    __slots__ = ("_base", "_dra", "_free")

    def __init__(self, base: Mapping[str, int], dra: DraInventory, free: Callable[[str], int | None]) -> None:
        self._base, self._dra, self._free = base, dra, free

    def __getitem__(self, node: str) -> int:
        listed = self._base.get(node)
        if listed:
            return listed
        count = self._free(node)
        if count is None:
            return self._base[node]  # KeyError for a node nobody knows
        return count

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        yield from (n for n in self._dra.gpu_devices if n not in self._base)

    def __len__(self) -> int:
        return len(self._base) + sum(1 for n in self._dra.gpu_devices if n not in self._base)


def mig_free(devices: NodeDevices, held: AbstractSet[DeviceRef]) -> tuple[tuple[str, int], ...]:
    """Per profile (sorted), the node's DRA MIG devices no claim holds and no taint blocks."""
    counts: dict[str, int] = {}
    for ref, device in devices:
        counts[device.profile] = counts.get(device.profile, 0) + (device.allocatable and ref not in held)
    return tuple(sorted(counts.items()))


def joined(summary: NodeSummary, dra: DraNode) -> NodeSummary:
    """The agent's summary of a DRA node with what a pod can be given there: whole GPUs (`capped`)
    and MIG devices (`mig_capped`), for the kinds of device the node publishes."""
    s = capped(summary, dra) if dra.whole else summary
    return s if dra.mig_free is None else mig_capped(s, dra.mig_free)


def mig_capped(summary: NodeSummary, free: tuple[tuple[str, int], ...]) -> NodeSummary:
    """The agent's free MIG instances per profile, none above that profile's free DRA devices: a
    claimed MIG device whose pod has not started reads free to the agent. A profile the node's
    slices do not publish keeps the agent's count (no claim can be given it; a device-plugin pod may)."""
    dra = dict(free)
    mine = tuple((p, min(n, dra[p]) if p in dra else n) for p, n in summary.mig_free)
    return summary if mine == summary.mig_free else replace(summary, mig_free=mine)


def capped(summary: NodeSummary, dra: DraNode, extra: int = 0) -> NodeSummary:
    """An agent's summary of a DRA node with what a pod can be given there: GPUs the agent reads
    available (healthy, idle, held by no container) whose DRA device no claim holds and no taint
    blocks. The allocator hands out only such devices, and a claimed GPU whose pod has not started
    reads idle to the agent: the agent alone would offer it.

    Exact, GPU by GPU, when the agent's GPUs join the slice's devices (by `uuid`, or by DRA name
    where the driver publishes no uuid); their topology then ranks the joined GPUs only. When no
    GPU joins (an agent before 0.4 on a driver without uuids), the smaller of the agent's available
    GPUs and the free devices: exact when the claimed GPUs are the idle ones or the busy ones, an
    upper bound otherwise. `extra`: GPUs (report positions) a pod may have though the agent does not
    offer them (a claim that tolerates the taint on a quarantined GPU: device_taints.TolerantView)."""
    positions = summary.positions
    if positions is not None:
        joined = dra.free_mask(positions)
        if joined is not None:
            mask = (positions.available | extra) & joined
            idle = max(0, mask.bit_count() - summary.bound_pod_units)
            degraded = min(((positions.degraded | dra.marked_mask(positions)) & mask).bit_count(), idle)
            tiers = tiers_for_mask(positions.topology_key, len(positions.uuids), mask)
            free_gpus = None if summary.free_gpus is None else ((positions.unheld | extra) & joined).bit_count()
            quality = quality_table(idle, degraded, tiers)
            if (idle, free_gpus, degraded, tiers, quality) == (
                summary.idle_gpus,
                summary.free_gpus,
                summary.degraded_idle_gpus,
                summary.set_tiers,
                summary.quality,
            ):
                # The usual case once claimed GPUs' pods run (the agent reads them held): the agent's
                # own object, which decisions then read where they read device-plugin nodes'.
                return summary
            return replace(
                summary,
                idle_gpus=idle,
                free_gpus=free_gpus,
                degraded_idle_gpus=degraded,
                set_tiers=tiers,
                quality=quality,
            )
    free = dra.free
    if summary.idle_gpus <= free and (summary.free_gpus is None or summary.free_gpus <= free):
        return summary
    idle = min(summary.idle_gpus, free)
    return replace(
        summary,
        idle_gpus=idle,
        free_gpus=None if summary.free_gpus is None else min(summary.free_gpus, free),
        degraded_idle_gpus=min(summary.degraded_idle_gpus, idle),
        quality=summary.quality[: idle + 1],
    )
