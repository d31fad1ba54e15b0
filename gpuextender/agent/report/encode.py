"""Turns a NodeSample into the wire message `gpuextender.v1.NodeReport`."""

from __future__ import annotations

from dataclasses import fields

from google.protobuf.timestamp_pb2 import Timestamp

from gpuextender.agent.model import readings as r
from gpuextender.agent.model.dra_names import gpu_device_name
from gpuextender.agent.model.readings import GpmReading, GpuReading, Holder, NodeSample
from gpuextender.v1 import gpu_state_pb2 as pb

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
    "clock_event_reasons",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "energy_millijoules",
    "numa_node",
)
_ERROR_FIELDS = tuple(pb.ErrorCounters.DESCRIPTOR.fields_by_name)
# GpmReading's fields, each sent as GpmReadings.<name>_percent.
_GPM_FIELDS = tuple(f.name for f in fields(GpmReading))
_HEALTH = {r.HEALTHY: pb.HEALTH_HEALTHY, r.DEGRADED: pb.HEALTH_DEGRADED, r.UNHEALTHY: pb.HEALTH_UNHEALTHY}
_SHARING = {
    r.EXCLUSIVE: pb.SHARING_EXCLUSIVE,
    r.TIME_SLICING: pb.SHARING_TIME_SLICING,
    r.MPS: pb.SHARING_MPS,
    r.MIG: pb.SHARING_MIG,
}
_ALLOCATION = {r.ALLOCATION_KUBELET: pb.ALLOCATION_KUBELET, r.ALLOCATION_UNAVAILABLE: pb.ALLOCATION_UNAVAILABLE}
_PCIE = {
    "internal": pb.PCIE_INTERNAL,
    "single": pb.PCIE_SINGLE,
    "multiple": pb.PCIE_MULTIPLE,
    "hostbridge": pb.PCIE_HOSTBRIDGE,
    "node": pb.PCIE_NODE,
    "system": pb.PCIE_SYSTEM,
}


def _holder(h: Holder) -> pb.Holder:
    return pb.Holder(
        namespace=h.namespace,
        pod=h.pod,
        container=h.container,
        resource_name=h.resource_name,
        device_id=h.device_id,
        dra_claim_namespace=h.dra_claim_namespace,
        dra_claim_name=h.dra_claim_name,
        dra_pool=h.dra_pool,
    )


def _set_time(msg: Timestamp, seconds_f: float) -> None:
    seconds = int(seconds_f)
    msg.seconds = seconds
    msg.nanos = int((seconds_f - seconds) * 1e9)


def gpu_to_proto(reading: GpuReading) -> pb.GpuSample:
    msg = pb.GpuSample(
        index=reading.index,
        uuid=reading.uuid,
        name=reading.name,
        pci_bus_id=reading.pci_bus_id,
        healthy=reading.healthy,
        unhealthy_reasons=reading.unhealthy_reasons,
        holders=[_holder(h) for h in reading.holders],
        health=_HEALTH.get(reading.health, pb.HEALTH_STATE_UNSPECIFIED),
        health_reasons=reading.health_reasons,
        dra_device=gpu_device_name(reading.minor_number),
    )
    if reading.compute_capability is not None:
        msg.compute_capability.major, msg.compute_capability.minor = reading.compute_capability
    for name in _OPTIONAL_FIELDS:
        value = getattr(reading, name)
        if value is not None:
            setattr(msg, name, value)
    if reading.sharing_mode or reading.replicas:
        msg.sharing.mode = _SHARING.get(reading.sharing_mode, pb.SHARING_MODE_UNSPECIFIED)
        msg.sharing.replicas = reading.replicas
    if reading.errors is not None:
        for name in _ERROR_FIELDS:
            value = getattr(reading.errors, name)
            if value is not None:
                setattr(msg.errors, name, value)
    for xid in reading.xids:
        _set_time(msg.xids.add(xid=xid.xid).time, xid.time)
    for mig in reading.mig_instances:
        instance = msg.mig_instances.add(
            uuid=mig.uuid,
            profile=mig.profile,
            gpu_instance_id=mig.gpu_instance_id,
            compute_instance_id=mig.compute_instance_id,
            holders=[_holder(h) for h in mig.holders],
        )
        if mig.memory_total_bytes is not None:
            instance.memory_total_bytes = mig.memory_total_bytes
        if mig.memory_used_bytes is not None:
            instance.memory_used_bytes = mig.memory_used_bytes
        if mig.gpm is not None:
            _set_gpm(instance.gpm, mig.gpm)
    if reading.gpm is not None:
        _set_gpm(msg.gpm, reading.gpm)
    return msg


def _set_gpm(msg: pb.GpmReadings, gpm: GpmReading) -> None:
    msg.SetInParent()  # present even when GPM gave no metric: "supported, nothing measured"
    for name in _GPM_FIELDS:
        value = getattr(gpm, name)
        if value is not None:
            setattr(msg, f"{name}_percent", value)


def sample_to_report(sample: NodeSample, *, node_name: str, sequence: int, agent_version: str) -> pb.NodeReport:
    report = pb.NodeReport(
        node_name=node_name,
        sequence=sequence,
        agent_version=agent_version,
        driver_version=sample.driver_version,
        gpus=[gpu_to_proto(g) for g in sample.gpus],
        node_error=sample.node_error,
        allocation_source=_ALLOCATION.get(sample.allocation_source, pb.ALLOCATION_SOURCE_UNSPECIFIED),
        allocation_problem=sample.allocation_problem,
        sharing_labels=sample.sharing_labels,
    )
    _set_time(report.sample_time, sample.sample_time)
    if sample.topology is not None:
        report.topology.SetInParent()  # present even with no links: "known, nothing connected"
        for link in sample.topology:
            report.topology.links.add(
                a=link.a, b=link.b, nvlinks=link.nvlinks, pcie=_PCIE.get(link.pcie, pb.PCIE_RELATION_UNSPECIFIED)
            )
    return report
