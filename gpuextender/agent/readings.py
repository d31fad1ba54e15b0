"""What one NVML sample of a node holds: plain data, no NVML or gRPC types."""

from __future__ import annotations

from dataclasses import dataclass, field


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


@dataclass(slots=True)
class NodeSample:
    """A full snapshot of the node, as read in one pass over its GPUs."""

    sample_time: float  # Unix seconds, the node's clock
    duration_s: float  # wall time spent reading NVML
    driver_version: str = ""
    gpus: list[GpuReading] = field(default_factory=list)
    # Set when NVML is unusable for the whole node (driver not loaded, ...).
    node_error: str = ""
