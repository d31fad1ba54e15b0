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
- What a pod can still be given (`DraFree`): those devices less the ones a ResourceClaim holds
  (state/claim_ledger.py) and the ones a NoSchedule / NoExecute taint keeps from the allocator.
  That is "allocatable" for a node whose Node object lists no device-plugin GPUs (`DraAllocatable`):
  the verdicts without fresh agent data count it (decide/README.md, "Whole GPUs"); with fresh data
  it caps what the agent reports available (`capped`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from gpuextender.extender.model.dra import DeviceClassInfo, DeviceRef, DraDevice, ResourceSliceInfo
from gpuextender.extender.model.pod_gpus import whole_gpu_resources
from gpuextender.extender.state.gpu_summary import NodeSummary

log = logging.getLogger("gpu_extender.inventory")

NodeDevices = tuple[tuple[DeviceRef, DraDevice], ...]


@dataclass(frozen=True, slots=True)
class DraInventory:
    gpu_devices: Mapping[str, NodeDevices] = field(default_factory=dict)  # node -> its DRA GPUs
    # The GPU classes, by name: those mapped to a configured GPU resource, and those whose selectors
    # require whole GPUs (type gpu). A claim for one of them asks for whole GPUs.
    classes: Mapping[str, DeviceClassInfo] = field(default_factory=dict)
    invalid_pools: frozenset[tuple[str, str]] = frozenset()  # (driver, pool): counted for nothing

    def devices(self, node: str) -> NodeDevices:
        return self.gpu_devices.get(node, ())


def build_dra(
    slices: Iterable[ResourceSliceInfo], classes: Iterable[DeviceClassInfo], gpu_resources: Sequence[str]
) -> DraInventory:
    """The module docstring's per-node GPUs from every slice and class in the inventory."""
    resources = set(whole_gpu_resources(gpu_resources))
    gpu_classes = {
        c.name: c for c in classes if c.drivers and (c.extended_resource in resources or c.device_type == "gpu")
    }
    # driver -> the `type` required ("" any), for the drivers a GPU class selects
    wanted: dict[str, set[str]] = {}
    for c in gpu_classes.values():
        for driver in c.drivers:
            wanted.setdefault(driver, set()).add(c.device_type)
    newest: dict[tuple[str, str], list[ResourceSliceInfo]] = {}
    for s in slices:
        if s.driver not in wanted:
            continue
        pool = newest.setdefault((s.driver, s.pool), [])
        if pool and pool[0].generation > s.generation:
            continue  # an older generation, not deleted yet
        if pool and pool[0].generation < s.generation:
            pool.clear()
        pool.append(s)
    per_node: dict[str, list[tuple[DeviceRef, DraDevice]]] = {}
    invalid: set[tuple[str, str]] = set()
    for (driver, pool_name), pool_slices in newest.items():
        names = [d.name for s in pool_slices for _, d in s.devices]
        if len(names) != len(set(names)):
            invalid.add((driver, pool_name))
            continue
        types = wanted[driver]
        for s in pool_slices:
            for node, device in s.devices:
                if node is None or device.kind != "gpu":
                    continue
                if "" not in types and device.kind not in types:
                    continue
                per_node.setdefault(node, []).append(((driver, pool_name, device.name), device))
    return DraInventory({n: tuple(d) for n, d in per_node.items()}, gpu_classes, frozenset(invalid))


class DraFree:
    """Per node, its DRA GPUs that no claim holds and no NoSchedule / NoExecute taint blocks, each
    node counted at most once per (inventory version, claims version): a decision asks per node,
    and a fleet of 5,000 DRA nodes has 40,000 devices."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._counts: dict[str, int] = {}
        # node -> (the agent's summary, it capped): rebuilt only when the summary or the key changes
        self._capped: dict[str, tuple[NodeSummary, NodeSummary]] = {}

    def counter(
        self, dra: DraInventory, allocated_on: Callable[[str], AbstractSet[DeviceRef]], key: tuple[int, int]
    ) -> Callable[[str], int | None]:
        """`free(node)`: the count, or None for a node without DRA GPUs. `key` changes whenever the
        inventory or the claims do."""
        if key != self._key:
            self._key, self._counts, self._capped = key, {}, {}
        counts, devices_of = self._counts, dra.gpu_devices

        def free(node: str) -> int | None:
            count = counts.get(node)
            if count is None:
                devices = devices_of.get(node)
                if devices is None:
                    return None
                held = allocated_on(node)
                count = counts[node] = sum(1 for ref, device in devices if device.allocatable and ref not in held)
            return count

        return free

    def summaries(
        self, lookup: Callable[[str], NodeSummary | None], free: Callable[[str], int | None]
    ) -> Callable[[str], NodeSummary | None]:
        """The agents' summaries with a DRA node's capped at its free DRA GPUs (`capped`); a capped
        summary is made once per report and (inventory, claims) version, not per request."""
        done = self._capped

        def summary(node: str) -> NodeSummary | None:
            s = lookup(node)
            if s is None:
                return None
            count = free(node)
            if count is None:
                return s
            cached = done.get(node)
            if cached is not None and cached[0] is s:
                return cached[1]
            result = capped(s, count)
            done[node] = (s, result)
            return result

        return summary


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


def capped(summary: NodeSummary, free: int) -> NodeSummary:
    """An agent's summary of a DRA node with its available GPUs capped at the node's `free` DRA GPUs.

    The agent does not attribute DRA holders yet (it reads no `dynamic_resources`), so a GPU a claim
    holds but its pod does not use yet reads free and idle. Without joining each device to its GPU,
    the GPUs a new pod can get are at most the agent's available ones and at most the devices no
    claim holds and no taint blocks: the smaller of the two. Exact when the claimed GPUs are the idle
    ones (pods not started yet) or the busy ones (pods running); an upper bound otherwise."""
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
