"""What one sample of a node holds: plain data, no NVML, kubelet or gRPC types.

NVML fills the GPU readings (nvml_reader), the kubelet's PodResources API fills who holds which
GPU (allocation), the health classifier fills `health`; report.py turns it into the wire message.
A reading that is not supported or could not be read is None: unknown, never zero."""

from __future__ import annotations

from dataclasses import dataclass, field

HEALTHY = "healthy"
DEGRADED = "degraded"
UNHEALTHY = "unhealthy"

# How a physical GPU is shared (wire: SharingMode). "" = unknown.
EXCLUSIVE = "exclusive"
TIME_SLICING = "time-slicing"
MPS = "mps"
MIG = "mig"

# Where NodeSample.gpus[*].holders came from (wire: AllocationSource). "" = not asked.
ALLOCATION_KUBELET = "kubelet"
ALLOCATION_UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class Holder:
    """A container holding a GPU, a time-slicing replica of it, or a MIG instance."""

    namespace: str
    pod: str
    container: str
    resource_name: str  # e.g. "nvidia.com/gpu"; for a DRA device its driver, "gpu.nvidia.com"
    # As the device plugin named it: "GPU-<uuid>", "GPU-<uuid>::2", "MIG-<uuid>"; for a DRA device
    # its name in the ResourceSlice, "gpu-3".
    device_id: str
    # Set when DRA allocated the device through a ResourceClaim (PodResources dynamic_resources).
    dra_claim_namespace: str = ""
    dra_claim_name: str = ""
    dra_pool: str = ""


@dataclass(slots=True)
class ErrorCounters:
    """NVML's memory-error counters for one GPU; None = not supported / not readable."""

    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_volatile: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pages_pending: bool | None = None


@dataclass(frozen=True, slots=True)
class XidEvent:
    xid: int
    time: float  # Unix seconds, the node's clock, when the agent received it


@dataclass(frozen=True, slots=True)
class GpmReading:
    """NVML GPM (Hopper and later) over the last sample interval, in percent; None: not given."""

    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    graphics_active: float | None = None


@dataclass(slots=True)
class MigReading:
    uuid: str  # "MIG-<uuid>"
    profile: str  # e.g. "1g.10gb"
    gpu_instance_id: int
    compute_instance_id: int
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    holders: list[Holder] = field(default_factory=list)
    gpm: GpmReading | None = None  # 0.5: None where GPM cannot measure the instance


@dataclass(frozen=True, slots=True)
class GpuLink:
    """How GPUs `a` < `b` (indexes) reach each other."""

    a: int
    b: int
    nvlinks: int  # active NVLink links between them, 0 = none
    pcie: str  # "internal", "single", "multiple", "hostbridge", "node", "system", or "" (unknown)


@dataclass(slots=True)
class GpuReading:
    """One GPU. A reading that NVML does not support (or failed to give) is None."""

    index: int
    uuid: str = ""
    name: str = ""
    pci_bus_id: str = ""
    compute_capability: tuple[int, int] | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    utilization_gpu_percent: int | None = None
    utilization_memory_percent: int | None = None
    temperature_celsius: int | None = None
    power_watts: float | None = None
    healthy: bool = True
    unhealthy_reasons: list[str] = field(default_factory=list)
    # -- 0.2: health beyond "NVML answered"
    health: str = HEALTHY  # HEALTHY / DEGRADED / UNHEALTHY; healthy is False exactly when UNHEALTHY
    health_reasons: list[str] = field(default_factory=list)  # stable codes for DEGRADED and UNHEALTHY
    errors: ErrorCounters | None = None
    xids: list[XidEvent] = field(default_factory=list)  # critical XIDs since start (ignore list applied)
    clock_event_reasons: int | None = None  # nvmlClocksEventReason* bitmask
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    energy_millijoules: int | None = None
    numa_node: int | None = None
    mig_instances: list[MigReading] = field(default_factory=list)
    # -- 0.4: nvmlDeviceGetMinorNumber (/dev/nvidia<minor>): NVIDIA's DRA driver names the GPU by it
    minor_number: int | None = None
    # -- 0.5: GPU Performance Monitoring (None: not supported, or the first sample of an interval)
    gpm: GpmReading | None = None
    # -- /metrics only (dcgm-exporter's remaining default counters); None: not supported
    memory_temperature_celsius: int | None = None
    pcie_replays: int | None = None  # nvmlDeviceGetPcieReplayCounter, since the driver loaded
    encoder_utilization_percent: int | None = None
    decoder_utilization_percent: int | None = None
    nvlink_data_kib: int | None = None  # NVLink data sent + received over all links, KiB since the driver loaded
    # PCIe bytes sent / received per second between the last two samples (NVML's PCIe byte counters,
    # fields 197/198); None on the first sample, after a counter went back, or where not supported.
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    # -- 0.2: allocation (from the kubelet) and sharing
    holders: list[Holder] = field(default_factory=list)
    sharing_mode: str = ""  # EXCLUSIVE / TIME_SLICING / MPS / MIG, "" = unknown
    replicas: int = 0  # advertised replicas under time-slicing/MPS (1 when exclusive), 0 = unknown


@dataclass(slots=True)
class NodeSample:
    """A full snapshot of the node, as read in one pass over its GPUs."""

    sample_time: float  # Unix seconds, the node's clock
    duration_s: float  # wall time spent reading NVML
    driver_version: str = ""
    gpus: list[GpuReading] = field(default_factory=list)
    # Set when NVML is unusable for the whole node (driver not loaded, ...).
    node_error: str = ""
    # -- 0.2
    allocation_source: str = ""  # ALLOCATION_KUBELET / ALLOCATION_UNAVAILABLE, "" = not asked
    allocation_problem: str = ""  # short code when ALLOCATION_UNAVAILABLE
    topology: list[GpuLink] | None = None  # None = unknown
    sharing_labels: dict[str, str] = field(default_factory=dict)  # GFD's nvidia.com/gpu.replicas, ...
