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
- What a pod can still be given (`DraAllocatable`): those devices less the ones a ResourceClaim
  holds (state/claim_ledger.py) and the ones a NoSchedule / NoExecute taint keeps from the
  allocator. That is "allocatable" for a node whose Node object lists no device-plugin GPUs: the
  verdicts without fresh agent data count it (decide/README.md, "Whole GPUs").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from gpuextender.extender.model.dra import DeviceClassInfo, DeviceRef, DraDevice, ResourceSliceInfo
from gpuextender.extender.model.pod_gpus import whole_gpu_resources

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


class DraAllocatable(Mapping[str, int]):
    """Allocatable GPUs per node, with a node that lists no device-plugin GPUs (none, or 0) and
    publishes DRA GPUs counted by those: its untainted devices no claim holds. A device-plugin
    count wins where there is one, as kube-scheduler uses DRA for an extended resource only where
    the Node's allocatable does not list it."""

    __slots__ = ("_allocated_on", "_base", "_dra")

    def __init__(
        self,
        base: Mapping[str, int],
        dra: DraInventory,
        allocated_on: Callable[[str], AbstractSet[DeviceRef]],
    ) -> None:
        self._base, self._dra, self._allocated_on = base, dra, allocated_on

    def __getitem__(self, node: str) -> int:
        listed = self._base.get(node)
        if listed:
            return listed
        devices = self._dra.gpu_devices.get(node)
        if devices is None:
            return self._base[node]  # KeyError for a node nobody knows
        held = self._allocated_on(node)
        return sum(1 for ref, device in devices if device.allocatable and ref not in held)

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        yield from (n for n in self._dra.gpu_devices if n not in self._base)

    def __len__(self) -> int:
        return len(self._base) + sum(1 for n in self._dra.gpu_devices if n not in self._base)
