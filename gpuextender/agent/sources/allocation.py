"""Who holds which GPU: the kubelet's device IDs mapped onto the GPUs of one sample.

Pure (no I/O, no gRPC types): pod_resources.py asks the kubelet and hands the answer here as
plain data, so every case can be replayed from its input.

Device IDs are what NVIDIA's device plugin advertised to the kubelet (k8s-device-plugin,
internal/rm): the NVML UUID of a GPU ("GPU-<uuid>") or of a MIG device ("MIG-<uuid>"); under
time-slicing or MPS every advertised replica is "<id>::<n>" with n = 0 .. replicas-1
(NewAnnotatedID); with `--device-id-strategy=index` a whole GPU is its NVML index ("3") and a
MIG device "<gpu index>:<mig index>". Resources may be renamed by the plugin's sharing config
(`renameByDefault` gives "<name>.shared").

Sharing mode of a GPU, strongest evidence first:
1. the GPU has MIG instances -> MIG;
2. the device IDs the kubelet can allocate for it (GetAllocatableResources) or, when those are
   unknown, the IDs containers hold: two or more "::n" replicas -> TIME_SLICING with
   replicas = their count (MPS when GFD's nvidia.com/gpu.sharing-strategy label says "mps": the
   plugin names MPS replicas the same way), one plain ID -> EXCLUSIVE;
3. GFD's labels alone: nvidia.com/gpu.sharing-strategy "time-slicing"/"mps" with
   nvidia.com/gpu.replicas >= 2, or "none" -> EXCLUSIVE;
4. otherwise unknown ("", 0).
The kubelet's IDs win over the labels because GFD relabels only every 60 s and its labels
describe the node's `nvidia.com/gpu` resource, not each GPU.

Devices DRA allocated (PodResources `dynamic_resources`) carry no device ID, only the name NVIDIA's
DRA driver gave the device in its ResourceSlice (model/dra_names.py: "gpu-<minor>" for a whole GPU):
the holder is the GPU with that NVML minor number, or the MIG instance of that GPU with that profile
(when the GPU has one instance of it: NVML does not tell the agent an instance's placement yet, so
two instances of one profile leave the name unmatched, logged, never guessed). A DRA holder names
its claim; it is not evidence of time-slicing (DRA shares per claim, GpuConfig.sharing).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from gpuextender.agent.model.dra_names import name_form, parse_device_name
from gpuextender.agent.model.readings import (
    ALLOCATION_KUBELET,
    ALLOCATION_UNAVAILABLE,
    EXCLUSIVE,
    MIG,
    MPS,
    TIME_SLICING,
    GpuReading,
    Holder,
    MigReading,
    NodeSample,
)

# Extended resources that name NVIDIA GPUs or MIG devices (fnmatch patterns, case-sensitive like
# Kubernetes resource names). "nvidia.com/mig-*" also covers "nvidia.com/mig-1g.10gb.shared".
DEFAULT_GPU_RESOURCES: tuple[str, ...] = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")

REPLICA_SEPARATOR = "::"  # k8s-device-plugin's AnnotatedID: "<id>::<replica>"

# GFD node labels (also in its features.d file) that say how GPUs are shared.
LABEL_REPLICAS = "nvidia.com/gpu.replicas"
LABEL_SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"
_LABEL_STRATEGY_MODE = {"time-slicing": TIME_SLICING, "mps": MPS}

# The most holders one GPU or MIG instance may report: the extender refuses a whole report with more
# (extender.ingest.report_checks.MAX_HOLDERS_PER_GPU; a test keeps the two equal). Past it the node's
# allocation is reported unknown rather than cut short, which would show held replicas as free.
MAX_HOLDERS_PER_DEVICE = 64
PROBLEM_TOO_MANY_HOLDERS = "too_many_holders"
# The most replicas the extender takes for one shared GPU (report_checks.MAX_SHARING_REPLICAS,
# kept equal by a test): it counts capacity in them. More are reported as 0 (unknown: the extender
# then counts the GPU once), never as a count it would refuse the whole report for.
MAX_REPLICAS = 64

_INDEX_ID = re.compile(r"[0-9]{1,5}")  # --device-id-strategy=index, whole GPU


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    """The devices of one extended resource that the kubelet assigned to one container."""

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DraAssignment:
    """One device DRA allocated to one container through a ResourceClaim (NVIDIA's driver only)."""

    namespace: str
    pod: str
    container: str
    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    device: str  # its name in the ResourceSlice, e.g. "gpu-3"


@dataclass(frozen=True, slots=True)
class KubeletAllocations:
    """One answer of the kubelet, as plain data, or why there is none."""

    # From List; meaningful only when problem == "".
    assignments: tuple[DeviceAssignment, ...] = ()
    # From GetAllocatableResources: GPU resource name -> every device ID the kubelet can
    # allocate (the last good answer, also kept while List fails). None = unknown.
    allocatable: Mapping[str, tuple[str, ...]] | None = None
    # "" when List answered; else a short stable code (pod_resources.PROBLEM_*).
    problem: str = ""
    # Device IDs left out of `assignments` for being longer than any GPU's ID can be.
    dropped_device_ids: int = 0
    # From List's dynamic_resources: GPUs DRA allocated. Meaningful only when problem == "".
    claims: tuple[DraAssignment, ...] = ()


@dataclass(frozen=True, slots=True)
class AllocationResult:
    # Device IDs of GPU resources held by containers that name no GPU or MIG instance of the
    # sample (sorted, unique): a device plugin naming devices some other way, or NVML and the
    # kubelet disagreeing. The caller logs them; they are not holders of anything.
    unmatched_device_ids: tuple[str, ...] = ()


class GpuResourceNames:
    """Which extended resources are GPUs or MIG devices, from fnmatch patterns."""

    _CACHE_MAX = 1024  # distinct resource names remembered; a node has a handful

    def __init__(self, patterns: Iterable[str] = DEFAULT_GPU_RESOURCES) -> None:
        self.patterns = tuple(patterns)
        self._cache: dict[str, bool] = {}

    def __call__(self, resource_name: str) -> bool:
        known = self._cache.get(resource_name)
        if known is not None:
            return known
        matches = any(fnmatchcase(resource_name, p) for p in self.patterns)
        if len(self._cache) < self._CACHE_MAX:
            self._cache[resource_name] = matches
        return matches

    def __repr__(self) -> str:
        return f"GpuResourceNames({list(self.patterns)!r})"


def split_device_id(device_id: str) -> tuple[str, str | None]:
    """("GPU-x::3") -> ("GPU-x", "3"); ("GPU-x") -> ("GPU-x", None). Like the plugin, the
    first "::" separates the device from its replica; the replica need not be a number."""
    base, sep, replica = device_id.partition(REPLICA_SEPARATOR)
    return base, (replica if sep else None)


class _DeviceIndex:
    """Finds the GPU or MIG instance of the sample a device ID names."""

    def __init__(self, gpus: list[GpuReading]) -> None:
        self.gpus = {g.uuid: g for g in gpus if g.uuid}
        self.by_index = {str(g.index): g for g in gpus}
        self.migs = {m.uuid: m for g in gpus for m in g.mig_instances if m.uuid}
        self.by_minor = {g.minor_number: g for g in gpus if g.minor_number is not None}

    def find_dra(self, device_name: str) -> GpuReading | MigReading | None:
        """The GPU or MIG instance a device name of NVIDIA's DRA driver names (module docstring)."""
        name = parse_device_name(device_name)
        gpu = self.by_minor.get(name.minor) if name is not None else None
        if name is None or gpu is None:
            return None
        if not name.mig_profile:
            return gpu
        wanted = name_form(name.mig_profile)  # both sides in name form: the name has no dots
        same = [m for m in gpu.mig_instances if name_form(m.profile) == wanted]
        return same[0] if len(same) == 1 else None

    def find(self, base_id: str) -> GpuReading | MigReading | None:
        found: GpuReading | MigReading | None = self.migs.get(base_id) or self.gpus.get(base_id)
        if found is None and _INDEX_ID.fullmatch(base_id):
            found = self.by_index.get(str(int(base_id)))
        return found


def apply_allocation(
    sample: NodeSample,
    answer: KubeletAllocations,
    *,
    is_gpu_resource: Callable[[str], bool] | None = None,
) -> AllocationResult:
    """Set holders, sharing mode/replicas and the allocation source on `sample` (in place;
    calling it again with another answer replaces what an earlier call set)."""
    is_gpu = is_gpu_resource or GpuResourceNames()
    index = _DeviceIndex(sample.gpus)
    for device in _devices(sample):
        device.holders = []

    unmatched: set[str] = set()
    held: dict[int, list[str]] = {}  # id(GpuReading) -> device IDs containers hold on it
    if answer.problem:
        sample.allocation_source = ALLOCATION_UNAVAILABLE
        sample.allocation_problem = answer.problem
    else:
        sample.allocation_source = ALLOCATION_KUBELET
        sample.allocation_problem = ""
        seen: set[tuple[int, str, str, str, str]] = set()
        for a in answer.assignments:
            if not is_gpu(a.resource_name):
                continue
            for device_id in a.device_ids:
                target = index.find(split_device_id(device_id)[0])
                if target is None:
                    unmatched.add(device_id)
                    continue
                key = (id(target), a.namespace, a.pod, a.container, device_id)
                if key in seen:  # the same container listed twice: one holder per device ID
                    continue
                seen.add(key)
                target.holders.append(Holder(a.namespace, a.pod, a.container, a.resource_name, device_id))
                if isinstance(target, GpuReading):
                    held.setdefault(id(target), []).append(device_id)
        for c in answer.claims:
            target = index.find_dra(c.device)
            if target is None:
                unmatched.add(f"{c.driver}/{c.pool}/{c.device}")
                continue
            key = (id(target), c.namespace, c.pod, c.container, f"dra:{c.device}")
            if key in seen:  # one device in two claims of one container cannot be; listed twice can
                continue
            seen.add(key)
            target.holders.append(
                Holder(c.namespace, c.pod, c.container, c.driver, c.device, c.claim_namespace, c.claim_name, c.pool)
            )

    if any(len(d.holders) > MAX_HOLDERS_PER_DEVICE for d in _devices(sample)):
        for device in _devices(sample):
            device.holders = []
        held.clear()
        sample.allocation_source = ALLOCATION_UNAVAILABLE
        sample.allocation_problem = PROBLEM_TOO_MANY_HOLDERS

    allocatable = _allocatable_by_gpu(answer.allocatable, index, is_gpu)
    for gpu in sample.gpus:
        gpu.sharing_mode, gpu.replicas = _sharing(gpu, allocatable, held, sample.sharing_labels)
    return AllocationResult(tuple(sorted(unmatched)))


def _devices(sample: NodeSample) -> Iterator[GpuReading | MigReading]:
    for gpu in sample.gpus:
        yield gpu
        yield from gpu.mig_instances


def _allocatable_by_gpu(
    allocatable: Mapping[str, tuple[str, ...]] | None, index: _DeviceIndex, is_gpu: Callable[[str], bool]
) -> dict[int, list[str]] | None:
    if allocatable is None:
        return None
    by_gpu: dict[int, list[str]] = {}
    for resource_name, device_ids in allocatable.items():
        if not is_gpu(resource_name):
            continue
        for device_id in device_ids:
            target = index.find(split_device_id(device_id)[0])
            if isinstance(target, GpuReading):  # MIG IDs: the GPU's mode is MIG whatever they say
                by_gpu.setdefault(id(target), []).append(device_id)
    return by_gpu


def _sharing(
    gpu: GpuReading,
    allocatable: dict[int, list[str]] | None,
    held: dict[int, list[str]],
    labels: Mapping[str, str],
) -> tuple[str, int]:
    mode, replicas = _sharing_evidence(gpu, allocatable, held, labels)
    return mode, (replicas if replicas <= MAX_REPLICAS else 0)


def _sharing_evidence(
    gpu: GpuReading,
    allocatable: dict[int, list[str]] | None,
    held: dict[int, list[str]],
    labels: Mapping[str, str],
) -> tuple[str, int]:
    if gpu.mig_instances:
        return MIG, 0
    label_mode = _LABEL_STRATEGY_MODE.get(labels.get(LABEL_SHARING_STRATEGY, "").strip().lower())
    label_replicas = _label_int(labels.get(LABEL_REPLICAS))
    advertised = allocatable.get(id(gpu)) if allocatable is not None else None
    evidence = advertised or held.get(id(gpu))
    if evidence:
        replicated = sum(1 for d in evidence if split_device_id(d)[1] is not None)
        if replicated == 0 or (advertised and replicated == 1 and len(advertised) == 1):
            return EXCLUSIVE, 1  # one ID for the GPU: one container at a time
        mode = MPS if label_mode == MPS else TIME_SLICING
        if advertised:
            return mode, replicated
        # Only held IDs: a lower bound, not what is advertised; the labels may know the count.
        return mode, (label_replicas if label_mode is not None and label_replicas >= 2 else 0)
    if label_mode is not None and label_replicas >= 2:
        return label_mode, label_replicas
    if labels.get(LABEL_SHARING_STRATEGY, "").strip().lower() == "none":
        return EXCLUSIVE, 1
    return "", 0


def _label_int(value: str | None) -> int:
    if value is None:
        return 0
    value = value.strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 6 else 0
