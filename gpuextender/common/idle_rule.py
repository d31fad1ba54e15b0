"""The idle rule, one definition for the agent and the extender: a GPU is idle when it is healthy,
its utilization is below `max_utilization_percent` AND its memory used is below
`max_memory_used_percent` of its total. A reading the GPU does not give does not count against
idleness (the other readings decide). The extender decides with it (state/gpu_summary.py inlines
it on its hot path, held equal to this one by a test); each extender says its rule in its acks, so
an agent streams a report when a GPU turns busy or idle under it (agent/report/gate.py)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuextender.v1 import gpu_state_pb2 as pb


@dataclass(frozen=True, slots=True)
class IdleRule:
    max_utilization_percent: float = 30.0
    max_memory_used_percent: float = 50.0


def gpu_is_idle(gpu: pb.GpuSample, rule: IdleRule) -> bool:
    if not gpu.healthy:
        return False
    if gpu.HasField("utilization_gpu_percent") and gpu.utilization_gpu_percent >= rule.max_utilization_percent:
        return False
    if gpu.HasField("memory_used_bytes") and gpu.HasField("memory_total_bytes") and gpu.memory_total_bytes > 0:
        if 100.0 * gpu.memory_used_bytes / gpu.memory_total_bytes >= rule.max_memory_used_percent:
            return False
    return True


def mig_instance_is_idle(instance: pb.MigInstance, rule: IdleRule) -> bool:
    """A MIG instance is idle by its memory alone (NVML gives no per-instance utilization); an
    instance whose memory is not reported does not count against it."""
    if instance.HasField("memory_used_bytes") and instance.memory_total_bytes > 0:
        return 100.0 * instance.memory_used_bytes / instance.memory_total_bytes < rule.max_memory_used_percent
    return True
