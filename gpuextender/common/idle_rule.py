"""The idle rule, one definition for the agent and the extender: a GPU is idle when it is healthy,
its utilization is below `max_utilization_percent` AND its memory used is below
`max_memory_used_percent` of its total. A reading the GPU does not give does not count against
idleness (the other readings decide). The extender decides with it (state/gpu_summary.py inlines
it on its hot path, held equal to this one by a test); each extender says its rule in its acks, so
an agent streams a report when a GPU turns busy or idle under it (agent/report/gate.py).

A GPU that reports GPM SM activity (Hopper and later; contract 0.5) is judged by it instead of its
utilization, busy at or above `max_sm_active_percent` (10 by default; None turns it off).
Utilization only says that some kernel ran during NVML's sample period, so one thread spinning
reads 100 % while 131 of an H100's 132 SMs sit empty (measured: 100 % utilization, 0.75 % SM
active; bench/RESULTS-gpu.md). A GPU without GPM (older GPUs, agents before 0.5, `--no-gpm`) keeps
the utilization rule. The memory rule applies either way. Why 10: gpuextender/extender/decide/README.md,
*Which reading judges a GPU*."""

from __future__ import annotations

from dataclasses import dataclass

from gpuextender.v1 import gpu_state_pb2 as pb

DEFAULT_MAX_SM_ACTIVE_PERCENT = 10.0
# Which reading judged a GPU's idleness (explain, the fleet page, gpu_extender_node_gpus_judged).
JUDGED_BY_SM_ACTIVE = "sm-active"
JUDGED_BY_UTILIZATION = "utilization"


@dataclass(frozen=True, slots=True)
class IdleRule:
    max_utilization_percent: float = 30.0
    max_memory_used_percent: float = 50.0
    # None: utilization decides on every GPU, GPM or not
    max_sm_active_percent: float | None = DEFAULT_MAX_SM_ACTIVE_PERCENT


def sm_active_of(gpm: pb.GpmReadings, has_gpm: bool) -> float | None:
    """SM activity in percent when the device reported it; None otherwise."""
    return gpm.sm_active_percent if has_gpm and gpm.HasField("sm_active_percent") else None


def readings_busy(
    utilization: float | None, memory_percent: float | None, sm_active: float | None, rule: IdleRule
) -> bool:
    """The rule on a healthy GPU's readings (None: not given): busy by SM activity where the rule
    and the GPU have it, else by utilization; busy by memory either way."""
    max_sm = rule.max_sm_active_percent
    if max_sm is not None and sm_active is not None:
        if sm_active >= max_sm:
            return True
    elif utilization is not None and utilization >= rule.max_utilization_percent:
        return True
    return memory_percent is not None and memory_percent >= rule.max_memory_used_percent


def gpu_is_idle(gpu: pb.GpuSample, rule: IdleRule) -> bool:
    if not gpu.healthy:
        return False
    sm_active = sm_active_of(gpu.gpm, gpu.HasField("gpm")) if rule.max_sm_active_percent is not None else None
    utilization = gpu.utilization_gpu_percent if gpu.HasField("utilization_gpu_percent") else None
    if gpu.HasField("memory_used_bytes") and gpu.HasField("memory_total_bytes") and gpu.memory_total_bytes > 0:
        memory_percent: float | None = 100.0 * gpu.memory_used_bytes / gpu.memory_total_bytes
    else:
        memory_percent = None
    return not readings_busy(utilization, memory_percent, sm_active, rule)


def mig_instance_is_idle(instance: pb.MigInstance, rule: IdleRule) -> bool:
    """A MIG instance is idle by its memory (NVML gives no per-instance utilization) and, with
    `max_sm_active_percent` set, by its GPM SM activity where it reports one; a reading that is
    not reported does not count against it."""
    if rule.max_sm_active_percent is not None:
        sm_active = sm_active_of(instance.gpm, instance.HasField("gpm"))
        if sm_active is not None and sm_active >= rule.max_sm_active_percent:
            return False
    if instance.HasField("memory_used_bytes") and instance.memory_total_bytes > 0:
        return 100.0 * instance.memory_used_bytes / instance.memory_total_bytes < rule.max_memory_used_percent
    return True
