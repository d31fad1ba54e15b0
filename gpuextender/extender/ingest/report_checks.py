"""Checks a NodeReport before it may change the extender's state (pure).

Every string and repeated field is bounded: with `--agent-auth none` any client
that reaches the gRPC port can report, and a stored report is kept until its
node is forgotten (--forget-after). The bounds come from what NVML and the
agent really produce, so a real agent never meets them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from operator import attrgetter

from gpuextender.v1 import gpu_state_pb2 as pb

_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
MAX_GPUS_PER_NODE = 256
# String bounds in characters (NVML's strings are ASCII: characters = bytes), from nvml.h's buffer
# sizes, which include the terminating NUL.
MAX_UUID_CHARS = 95  # NVML_DEVICE_UUID_V2_BUFFER_SIZE 96; "GPU-<uuid>" is 40
MAX_GPU_NAME_CHARS = 95  # NVML_DEVICE_NAME_V2_BUFFER_SIZE 96; "NVIDIA H100 80GB HBM3" is 21
MAX_PCI_BUS_ID_CHARS = 31  # NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32; "00000000:18:00.0" is 16
MAX_DRIVER_VERSION_CHARS = 79  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80; "550.127.05" is 10
MAX_AGENT_VERSION_CHARS = 64  # a PEP 440 version with a local part ("0.1.0.dev12+g1234abc.d20250101" is 30)
MAX_NODE_ERROR_CHARS = 256  # the agent sends an NVML error name (23 characters at most today)
# The agent lists each distinct reason once: the 7 NVML errors that mark a GPU unhealthy
# (gpuextender/agent/sources/nvml_errors.py) plus NoHandle; a reason is such a name (23 characters at
# most) or "Code<n>".
MAX_UNHEALTHY_REASONS = 8
MAX_UNHEALTHY_REASON_CHARS = 32

# -- 0.2 facts. Kubernetes' own limits for the names a Holder carries.
MAX_NAMESPACE_CHARS = 63  # a DNS label
MAX_POD_NAME_CHARS = 253  # a DNS subdomain
MAX_CONTAINER_NAME_CHARS = 63
MAX_RESOURCE_NAME_CHARS = 316  # a qualified name: 253-character prefix + "/" + 63-character name - 1 slack
MAX_DEVICE_ID_CHARS = 256  # "GPU-<uuid>::<replica>" is ~45; device plugins use short IDs
# -- 0.4: DRA. resource.k8s.io's own limits: a device name is a DNS label, a pool name at most 253
# characters, a claim a namespaced object name.
MAX_DRA_DEVICE_CHARS = 63
MAX_DRA_POOL_CHARS = 253
MAX_CLAIM_NAME_CHARS = 253
# A GPU's holders: one per container per device ID. Time-slicing advertises up to `replicas` IDs per
# GPU (GFD labels commonly 2-16; NVIDIA's examples stop at 10): 64 leaves room for wide sharing.
MAX_HOLDERS_PER_GPU = 64
# Advertised replicas of one shared GPU: the extender counts capacity in them (gpu_summary), so an
# unbounded count would be unbounded capacity. As many as a GPU can have holders.
MAX_SHARING_REPLICAS = MAX_HOLDERS_PER_GPU
MAX_HEALTH_REASONS = 16  # each code once; the agent's classifier has fewer codes than this
MAX_XIDS_PER_GPU = 16  # the agent keeps the 16 newest
MAX_MIG_INSTANCES = 7  # MIG's maximum on any GPU (A100/H100/H200/B200: 7; A30: 4)
MAX_MIG_PROFILE_CHARS = 32  # "1g.10gb", "7g.80gb", "1g.12gb+me"
MAX_NVLINKS = 18  # NVML_NVLINK_MAX_LINKS
MAX_SHARING_LABELS = 8
MAX_LABEL_KEY_CHARS = 316  # qualified name, as resource names
MAX_LABEL_VALUE_CHARS = 63
MAX_ALLOCATION_PROBLEM_CHARS = 64
_HOLDER_STRINGS = (
    ("namespace", MAX_NAMESPACE_CHARS),
    ("pod", MAX_POD_NAME_CHARS),
    ("container", MAX_CONTAINER_NAME_CHARS),
    ("resource_name", MAX_RESOURCE_NAME_CHARS),
    ("device_id", MAX_DEVICE_ID_CHARS),
    ("dra_claim_namespace", MAX_NAMESPACE_CHARS),
    ("dra_claim_name", MAX_CLAIM_NAME_CHARS),
    ("dra_pool", MAX_DRA_POOL_CHARS),
)

_NODE_STRINGS = (
    ("agent_version", MAX_AGENT_VERSION_CHARS),
    ("driver_version", MAX_DRIVER_VERSION_CHARS),
    ("node_error", MAX_NODE_ERROR_CHARS),
    ("allocation_problem", MAX_ALLOCATION_PROBLEM_CHARS),
)
_GPM_FIELDS = tuple(pb.GpmReadings.DESCRIPTOR.fields_by_name)
_GPU_STRINGS = (
    ("uuid", MAX_UUID_CHARS),
    ("name", MAX_GPU_NAME_CHARS),
    ("pci_bus_id", MAX_PCI_BUS_ID_CHARS),
    ("dra_device", MAX_DRA_DEVICE_CHARS),
)


def report_problem(report: pb.NodeReport, bound_node: str | None) -> str | None:
    """None when the report is acceptable, else a one-line reason for the agent."""
    if not _NODE_NAME.match(report.node_name):
        return f"node_name {report.node_name[:300]!r} is not a valid Kubernetes node name"
    if bound_node is not None and report.node_name != bound_node:
        return f"node_name changed from {bound_node!r} to {report.node_name!r} within one stream"
    for field, limit in _NODE_STRINGS:
        if len(getattr(report, field)) > limit:
            return f"{field} is {len(getattr(report, field))} characters, more than the {limit} allowed"
    if not 0 <= report.sample_time.nanos <= 999_999_999:
        return _NANOS_PROBLEM.format(report.sample_time.nanos)
    if len(report.gpus) > MAX_GPUS_PER_NODE:
        return f"{len(report.gpus)} GPUs is more than the {MAX_GPUS_PER_NODE} a node can report"
    if report.heartbeat_utilization_percent or report.heartbeat_memory_used_bytes or report.heartbeat_sm_active_percent:
        return "heartbeat readings in a full report (heartbeat_of 0)"
    seen: set[int] = set()
    for gpu in report.gpus:
        if gpu.index in seen:
            return f"GPU index {gpu.index} appears twice"
        seen.add(gpu.index)
        if _gpu_suspect(gpu):  # the common case skips the checks that find the reason
            problem = _gpu_problem(gpu)
            if problem is not None:
                return f"GPU {gpu.index}: {problem}"
    return _node_extras_problem(report, seen)


_NANOS_PROBLEM = "sample_time.nanos={} is outside 0..999999999"


def readings_problem(report: pb.NodeReport, bound_node: str) -> str | None:
    """report_problem for a full report on the stream of `bound_node` whose every field but its
    readings is that of a report report_problem passed (its summary_refresh.shape_key is that one's:
    an agent before 0.6 at its heartbeat): the checks of what it may change, its sample time and its
    GPUs' readings (22 us against report_problem's 87-95 for bench_apply's 8-GPU reports with
    holders, 2-core VM)."""
    if report.node_name != bound_node:  # (the shape held may be another node's)
        return f"node_name changed from {bound_node!r} to {report.node_name!r} within one stream"
    if not 0 <= report.sample_time.nanos <= 999_999_999:
        return _NANOS_PROBLEM.format(report.sample_time.nanos)
    for gpu in report.gpus:
        if _readings_suspect(gpu):
            problem = _gpu_readings_problem(gpu)
            if problem is not None:
                return f"GPU {gpu.index}: {problem}"
    return None


# What a light heartbeat (contract 0.6) may carry: everything else belongs to full reports.
_HEARTBEAT_FIELDS = frozenset(
    (
        "node_name",
        "sequence",
        "sample_time",
        "heartbeat_of",
        "heartbeat_utilization_percent",
        "heartbeat_memory_used_bytes",
        "heartbeat_sm_active_percent",
    )
)
# The rest of NodeReport's fields, from its descriptor (a field added to the contract is refused in
# heartbeats until it is named above): set where ListFields would list it, found without building
# ListFields' pairs on every heartbeat (~3 us of the ~10 this check costs, bench/RESULTS.md).
_FULL_ONLY = [f for f in pb.NodeReport.DESCRIPTOR.fields if f.name not in _HEARTBEAT_FIELDS]
_FULL_ONLY_PRESENCE = tuple(f.name for f in _FULL_ONLY if f.has_presence)  # set: HasField
_FULL_ONLY_VALUES = attrgetter(*(f.name for f in _FULL_ONLY if not f.has_presence))  # set: not the default


def heartbeat_problem(report: pb.NodeReport, bound_node: str | None) -> str | None:
    """None when a light heartbeat (report.heartbeat_of set) is well formed for the stream's node
    `bound_node` (None: no full report stored on the stream yet), else the reason. Whether its
    readings fit the full report it repeats is for gpuextender/extender/state/summary_refresh.py to say."""
    if bound_node is None:
        return "a heartbeat before any full report on this stream: send a full report first"
    if report.node_name != bound_node:
        return f"node_name changed from {bound_node!r} to {report.node_name[:300]!r} within one stream"
    if any(_FULL_ONLY_VALUES(report)) or any(map(report.HasField, _FULL_ONLY_PRESENCE)):
        extra = sorted(f.name for f, _ in report.ListFields() if f.name not in _HEARTBEAT_FIELDS)
        return f"a heartbeat carries only readings, not {', '.join(extra)}"
    if not 0 <= report.sample_time.nanos <= 999_999_999:
        return _NANOS_PROBLEM.format(report.sample_time.nanos)
    utils, used, sms = (
        report.heartbeat_utilization_percent,
        report.heartbeat_memory_used_bytes,
        report.heartbeat_sm_active_percent,
    )
    if max(len(utils), len(used), len(sms)) > MAX_GPUS_PER_NODE:
        return f"heartbeat readings for more than the {MAX_GPUS_PER_NODE} GPUs a node can report"
    if utils and not (-1 <= min(utils) and max(utils) <= 100):
        return "a heartbeat utilization is outside 0..100 (-1: no reading)"
    if used and min(used) < -1:
        return "a heartbeat memory reading is below 0 (-1: no reading)"
    # NaN fails every comparison, so it is refused here too.
    if not all(value == -1.0 or 0.0 <= value <= 100.0 for value in sms):
        return "a heartbeat SM activity is outside 0..100 (-1: no reading)"
    return None


def _gpu_suspect(g: pb.GpuSample) -> bool:
    """False only when _gpu_problem would find nothing: every report of every agent passes
    here (bench: 52 -> ~15 us for an 8-GPU report), so the cheapest expression of its checks
    decides first. Anything uncommon (reasons, holders, XIDs, MIG) goes to the full checks.
    An absent proto3 optional reads 0, which passes every bound here."""
    return bool(
        len(g.uuid) > MAX_UUID_CHARS
        or len(g.name) > MAX_GPU_NAME_CHARS
        or len(g.pci_bus_id) > MAX_PCI_BUS_ID_CHARS
        or len(g.dra_device) > MAX_DRA_DEVICE_CHARS
        or (g.memory_total_bytes == 0 and g.HasField("memory_total_bytes"))
        or g.sharing.replicas > MAX_SHARING_REPLICAS
        or g.unhealthy_reasons
        or g.health_reasons
        or g.xids
        or g.mig_instances
        or (bool(g.holders) and _holders_suspect(g.holders))
        or _readings_suspect(g)
    )


def _readings_suspect(g: pb.GpuSample) -> bool:
    """False only when _gpu_readings_problem would find nothing."""
    return bool(
        g.utilization_gpu_percent > 100
        or g.utilization_memory_percent > 100
        or g.memory_used_bytes > g.memory_total_bytes
        or g.HasField("memory_total_bytes") != g.HasField("memory_used_bytes")
        or (g.HasField("gpm") and _gpm_suspect(g.gpm))
    )


def _gpm_suspect(m: pb.GpmReadings) -> bool:
    """A GPM percentage outside 0..100 (NaN included: every comparison with it is False). Unset
    fields read 0 and pass."""
    return not (
        0.0 <= m.sm_active_percent <= 100.0
        and 0.0 <= m.sm_occupancy_percent <= 100.0
        and 0.0 <= m.tensor_active_percent <= 100.0
        and 0.0 <= m.dram_active_percent <= 100.0
        and 0.0 <= m.graphics_active_percent <= 100.0
    )


def _gpm_problem(m: pb.GpmReadings) -> str | None:
    # The idle rule compares SM activity with a bound: NaN would compare as "below" it, so idle.
    for field in _GPM_FIELDS:
        value = getattr(m, field)
        if not 0.0 <= value <= 100.0:
            return f"gpm.{field}={value} is outside 0..100"
    return None


def _holders_suspect(holders: Sequence[pb.Holder]) -> bool:
    """_holders_problem's checks, each holder's strings in one expression."""
    return len(holders) > MAX_HOLDERS_PER_GPU or any(
        len(h.namespace) > MAX_NAMESPACE_CHARS
        or len(h.pod) > MAX_POD_NAME_CHARS
        or len(h.container) > MAX_CONTAINER_NAME_CHARS
        or len(h.resource_name) > MAX_RESOURCE_NAME_CHARS
        or len(h.device_id) > MAX_DEVICE_ID_CHARS
        or len(h.dra_claim_namespace) > MAX_NAMESPACE_CHARS
        or len(h.dra_claim_name) > MAX_CLAIM_NAME_CHARS
        or len(h.dra_pool) > MAX_DRA_POOL_CHARS
        for h in holders
    )


def _node_extras_problem(report: pb.NodeReport, indexes: set[int]) -> str | None:
    if len(report.sharing_labels) > MAX_SHARING_LABELS:
        return f"{len(report.sharing_labels)} sharing_labels, more than the {MAX_SHARING_LABELS} allowed"
    for key, value in report.sharing_labels.items():
        if len(key) > MAX_LABEL_KEY_CHARS or len(value) > MAX_LABEL_VALUE_CHARS:
            return (
                f"a sharing label is longer than {MAX_LABEL_KEY_CHARS} (key) or "
                f"{MAX_LABEL_VALUE_CHARS} (value) characters"
            )
    if not report.topology.links:
        return None
    # An agent reads its topology once and repeats it in every report: judged once per
    # (topology, GPU indexes), not per report (28 links of an 8-GPU node: ~18 us). Only small
    # topologies are remembered: the cache holds its keys, and 256 reports of 256 KiB each with a
    # new topology would otherwise keep 64 MiB.
    topology = report.topology.SerializeToString()
    if len(topology) > MAX_CACHED_TOPOLOGY_BYTES:
        return _links_problem.__wrapped__(topology, frozenset(indexes))
    return _links_problem(topology, frozenset(indexes))


MAX_CACHED_TOPOLOGY_BYTES = 4096  # a 16-GPU node's 120 links serialize to ~1.3 KB


@lru_cache(maxsize=256)
def _links_problem(topology: bytes, indexes: frozenset[int]) -> str | None:
    # At most one link per pair of reported GPUs (a pair as one int: indexes are uint32).
    pairs: set[int] = set()
    for link in pb.Topology.FromString(topology).links:
        a, b = link.a, link.b
        if not (a < b and a in indexes and b in indexes):
            return f"topology link ({a}, {b}) does not join two reported GPUs a < b"
        pair = a << 32 | b
        if pair in pairs:
            return f"topology link ({a}, {b}) appears twice"
        pairs.add(pair)
        if link.nvlinks > MAX_NVLINKS:
            return f"topology link ({a}, {b}) has {link.nvlinks} NVLinks, more than {MAX_NVLINKS}"
    return None


def _holders_problem(holders: Sequence[pb.Holder]) -> str | None:
    if len(holders) > MAX_HOLDERS_PER_GPU:
        return f"{len(holders)} holders, more than the {MAX_HOLDERS_PER_GPU} allowed"
    for holder in holders:
        for field, limit in _HOLDER_STRINGS:
            if len(getattr(holder, field)) > limit:
                return f"a holder's {field} is {len(getattr(holder, field))} characters, more than the {limit} allowed"
    return None


def _gpu_extras_problem(gpu: pb.GpuSample) -> str | None:
    problem = _holders_problem(gpu.holders)
    if problem is not None:
        return problem
    if gpu.sharing.replicas > MAX_SHARING_REPLICAS:
        return f"sharing.replicas {gpu.sharing.replicas} is more than the {MAX_SHARING_REPLICAS} allowed"
    if len(gpu.health_reasons) > MAX_HEALTH_REASONS:
        return f"{len(gpu.health_reasons)} health_reasons, more than the {MAX_HEALTH_REASONS} allowed"
    if any(len(reason) > MAX_UNHEALTHY_REASON_CHARS for reason in gpu.health_reasons):
        return f"a health_reason is longer than {MAX_UNHEALTHY_REASON_CHARS} characters"
    if len(gpu.xids) > MAX_XIDS_PER_GPU:
        return f"{len(gpu.xids)} xids, more than the {MAX_XIDS_PER_GPU} allowed"
    if len(gpu.mig_instances) > MAX_MIG_INSTANCES:
        return f"{len(gpu.mig_instances)} mig_instances, more than the {MAX_MIG_INSTANCES} allowed"
    for mig in gpu.mig_instances:
        if len(mig.uuid) > MAX_UUID_CHARS or len(mig.profile) > MAX_MIG_PROFILE_CHARS:
            return (
                f"a MIG instance's uuid or profile is longer than {MAX_UUID_CHARS}/{MAX_MIG_PROFILE_CHARS} characters"
            )
        if (
            mig.HasField("memory_used_bytes")
            and mig.HasField("memory_total_bytes")
            and mig.memory_used_bytes > mig.memory_total_bytes
        ):
            return f"MIG instance {mig.uuid[:MAX_UUID_CHARS]!r}: memory_used_bytes is above memory_total_bytes"
        problem = _holders_problem(mig.holders) or _gpm_problem(mig.gpm)
        if problem is not None:
            return f"MIG instance {mig.uuid[:MAX_UUID_CHARS]!r}: {problem}"
    return None


def _gpu_problem(gpu: pb.GpuSample) -> str | None:
    for field, limit in _GPU_STRINGS:
        if len(getattr(gpu, field)) > limit:
            return f"{field} is {len(getattr(gpu, field))} characters, more than the {limit} allowed"
    if len(gpu.unhealthy_reasons) > MAX_UNHEALTHY_REASONS:
        return f"{len(gpu.unhealthy_reasons)} unhealthy_reasons, more than the {MAX_UNHEALTHY_REASONS} allowed"
    for reason in gpu.unhealthy_reasons:
        if len(reason) > MAX_UNHEALTHY_REASON_CHARS:
            return (
                f"an unhealthy_reason is {len(reason)} characters, more than the {MAX_UNHEALTHY_REASON_CHARS} allowed"
            )
    if gpu.HasField("memory_total_bytes") and gpu.memory_total_bytes == 0:
        return "memory_total_bytes is 0: a GPU has memory"
    return _gpu_readings_problem(gpu) or _gpu_extras_problem(gpu)


def _gpu_readings_problem(gpu: pb.GpuSample) -> str | None:
    """The checks of what a GPU's readings may change (summary_refresh.READING_GPU_FIELDS)."""
    for field in ("utilization_gpu_percent", "utilization_memory_percent"):
        if gpu.HasField(field) and getattr(gpu, field) > 100:
            return f"{field}={getattr(gpu, field)} is above 100"
    # The idle rule divides used by total: a GPU with no total, or more used than it has, would be
    # counted idle whatever it runs. NVML reports both from one call, so they come together.
    has_total, has_used = gpu.HasField("memory_total_bytes"), gpu.HasField("memory_used_bytes")
    if has_total != has_used:
        return "memory_used_bytes and memory_total_bytes must come together (one NVML reading)"
    if has_total and gpu.memory_used_bytes > gpu.memory_total_bytes:
        return f"memory_used_bytes is above memory_total_bytes={gpu.memory_total_bytes}"
    return _gpm_problem(gpu.gpm)


def clock_skew_problem(report: pb.NodeReport, wall_now_s: float, max_skew_s: float) -> str | None:
    """None when the report's sample_time is within `max_skew_s` of the extender's wall clock
    (exactly `max_skew_s` apart is within), else the reason. Compared in whole nanoseconds."""
    sample_ns = report.sample_time.seconds * 1_000_000_000 + report.sample_time.nanos
    skew_ns = sample_ns - round(wall_now_s * 1e9)
    if abs(skew_ns) <= round(max_skew_s * 1e9):
        return None
    # Whole seconds: a stepped clock stays the same amount off, so the agent sees one reason (and
    # logs it once), not a new one every report.
    direction = "ahead of" if skew_ns > 0 else "behind"
    return (
        f"sample_time is {round(abs(skew_ns) / 1e9)}s {direction} the extender's clock, more than "
        f"--max-clock-skew {max_skew_s:g}s: fix the node's clock (NTP); its reports are stored again "
        "once it is within the bound"
    )
