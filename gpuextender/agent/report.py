"""Turns a NodeSample into the wire message `gpuextender.v1.NodeReport`."""

from __future__ import annotations

from gpuextender.v1 import gpu_state_pb2 as pb

from gpuextender.agent.readings import GpuReading, NodeSample

# Optional proto fields copied as-is when the reading exists (absent stays absent).
_OPTIONAL_FIELDS = (
    "memory_total_bytes",
    "memory_used_bytes",
    "memory_free_bytes",
    "memory_reserved_bytes",
    "utilization_gpu_percent",
    "utilization_memory_percent",
    "temperature_celsius",
    "power_watts",
)


def gpu_to_proto(reading: GpuReading) -> pb.GpuSample:
    msg = pb.GpuSample(
        index=reading.index,
        uuid=reading.uuid,
        name=reading.name,
        pci_bus_id=reading.pci_bus_id,
        healthy=reading.healthy,
        unhealthy_reasons=reading.unhealthy_reasons,
    )
    if reading.compute_capability is not None:
        msg.compute_capability.major, msg.compute_capability.minor = reading.compute_capability
    for name in _OPTIONAL_FIELDS:
        value = getattr(reading, name)
        if value is not None:
            setattr(msg, name, value)
    return msg


def sample_to_report(sample: NodeSample, *, node_name: str, sequence: int, agent_version: str) -> pb.NodeReport:
    report = pb.NodeReport(
        node_name=node_name,
        sequence=sequence,
        agent_version=agent_version,
        driver_version=sample.driver_version,
        gpus=[gpu_to_proto(g) for g in sample.gpus],
        node_error=sample.node_error,
    )
    seconds = int(sample.sample_time)
    report.sample_time.seconds = seconds
    report.sample_time.nanos = int((sample.sample_time - seconds) * 1e9)
    return report
