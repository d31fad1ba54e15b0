"""Per-node GPU summary, computed once when a report arrives (never per request).

Idle rule (from the LLM inference autotuner): a GPU is idle when it is healthy,
its utilization is below `max_utilization_percent` AND its memory used is below
`max_memory_used_percent` of its total. A reading the GPU does not provide (e.g.
utilization on a MIG-enabled GPU) does not count against idleness; the other
reading decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuextender.v1 import gpu_state_pb2 as pb


@dataclass(frozen=True, slots=True)
class IdleRule:
    max_utilization_percent: float = 30.0
    max_memory_used_percent: float = 50.0


@dataclass(frozen=True, slots=True)
class NodeSummary:
    node: str
    gpu_count: int
    healthy_gpus: int
    idle_gpus: int  # healthy and idle
    mean_utilization: float | None  # over GPUs that report utilization
    node_error: str  # NVML unusable on the node (then healthy_gpus is 0)
    sequence: int
    sample_time: float  # Unix seconds, agent clock
    received_at: float  # extender monotonic clock: freshness is judged on our own clock


def gpu_is_idle(gpu: pb.GpuSample, rule: IdleRule) -> bool:
    if not gpu.healthy:
        return False
    if gpu.HasField("utilization_gpu_percent") and gpu.utilization_gpu_percent >= rule.max_utilization_percent:
        return False
    if gpu.HasField("memory_used_bytes") and gpu.HasField("memory_total_bytes") and gpu.memory_total_bytes > 0:
        if 100.0 * gpu.memory_used_bytes / gpu.memory_total_bytes >= rule.max_memory_used_percent:
            return False
    return True


def summarize(report: pb.NodeReport, rule: IdleRule, received_at: float) -> NodeSummary:
    healthy = 0
    idle = 0
    utilizations: list[int] = []
    if not report.node_error:
        for gpu in report.gpus:
            if gpu.healthy:
                healthy += 1
                if gpu_is_idle(gpu, rule):
                    idle += 1
            if gpu.HasField("utilization_gpu_percent"):
                utilizations.append(gpu.utilization_gpu_percent)
    return NodeSummary(
        node=report.node_name,
        gpu_count=len(report.gpus),
        healthy_gpus=healthy,
        idle_gpus=idle,
        mean_utilization=sum(utilizations) / len(utilizations) if utilizations else None,
        node_error=report.node_error,
        sequence=report.sequence,
        sample_time=report.sample_time.seconds + report.sample_time.nanos / 1e9,
        received_at=received_at,
    )
