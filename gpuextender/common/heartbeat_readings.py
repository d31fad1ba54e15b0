"""The readings a light heartbeat (contract 0.6, NodeReport.heartbeat_of) carries, taken from a full
report's GPUs: one mapping for the agent, which sends them (agent/report/light.py), and the
extender's ingest worker, which takes a full report that changed nothing else as those readings
(extender/state/summary_refresh.py)."""

from __future__ import annotations

from collections.abc import Iterable

from gpuextender.v1 import gpu_state_pb2 as pb

NO_READING = -1  # where the GPU gave no reading


def heartbeat_readings(gpus: Iterable[pb.GpuSample]) -> tuple[list[int], list[int], list[float]]:
    """Per GPU, in report order: utilization %, memory used bytes and SM activity % (GPM), each
    NO_READING where the report has none."""
    utils: list[int] = []
    used: list[int] = []
    sm_active: list[float] = []
    for g in gpus:
        has = g.HasField
        utils.append(g.utilization_gpu_percent if has("utilization_gpu_percent") else NO_READING)
        used.append(g.memory_used_bytes if has("memory_used_bytes") else NO_READING)
        gpm = g.gpm
        sm_active.append(gpm.sm_active_percent if has("gpm") and gpm.HasField("sm_active_percent") else NO_READING)
    return utils, used, sm_active
