"""Allocated-but-idle GPUs: how long each GPU has been idle, and per pod, how many of the GPUs
it holds have been idle for at least a window.

Pure bookkeeping over NodeSamples with an injected clock, so tests step time exactly.

Rules (each one a choice; the metric help texts repeat them):
- Idle means NVML's utilization.gpu is known and <= the threshold. An unknown reading (None:
  not supported, a failed call, MIG mode) is never idle, and ends an idle period: we only claim
  "idle for 10 minutes" when every sample in those 10 minutes said so.
- A pod's GPU counts once its idle period AND the pod's hold on it both reach the window: a GPU
  idle for an hour that a pod got a minute ago is not that pod's waste (yet).
- Time-slicing / MPS: a GPU held by several pods counts for each of them (each holds a GPU it
  is not using); a pod holding several replicas of one GPU counts it once. Summing the gauge
  over pods therefore counts a shared GPU once per holder pod.
- MIG instances are not counted: NVML has no per-instance utilization.
- When the kubelet could not be asked (ALLOCATION_UNAVAILABLE) holders are unknown: no pod
  figures are given, and the hold times already seen are kept, so a kubelet blip does not
  restart every pod's window.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gpuextender.agent.model.readings import ALLOCATION_UNAVAILABLE, NodeSample

DEFAULT_THRESHOLD_PERCENT = 1.0
DEFAULT_WINDOW_S = 600.0

PodKey = tuple[str, str]  # (namespace, pod)


@dataclass(frozen=True, slots=True)
class GpuIdle:
    index: int
    uuid: str
    model: str
    idle_s: float  # 0.0 when busy


class IdleTracker:
    def __init__(
        self,
        *,
        threshold_percent: float = DEFAULT_THRESHOLD_PERCENT,
        window_s: float = DEFAULT_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if threshold_percent < 0 or window_s < 0:
            raise ValueError("idle threshold and window must be >= 0")
        self.threshold_percent = threshold_percent
        self.window_s = window_s
        self._clock = clock
        self._idle_since: dict[str, float] = {}  # GPU UUID -> clock when its idle period began
        self._held_since: dict[tuple[str, str, str], float] = {}  # (UUID, namespace, pod) -> first seen
        self._gpus: list[tuple[int, str, str]] = []  # (index, UUID, model) of GPUs with a known reading
        self._holders: dict[str, set[PodKey]] | None = None  # UUID -> pods; None = allocation unknown

    def observe(self, sample: NodeSample) -> None:
        now = self._clock()
        gpus: list[tuple[int, str, str]] = []
        idle_since: dict[str, float] = {}
        for gpu in sample.gpus:
            if not gpu.uuid or gpu.utilization_gpu_percent is None:
                continue  # unknown: neither idle nor busy, and no idle period survives it
            gpus.append((gpu.index, gpu.uuid, gpu.name))
            if gpu.utilization_gpu_percent <= self.threshold_percent:
                idle_since[gpu.uuid] = self._idle_since.get(gpu.uuid, now)
        self._gpus, self._idle_since = gpus, idle_since  # GPUs gone from the sample are forgotten

        if sample.allocation_source == ALLOCATION_UNAVAILABLE:
            self._holders = None  # unknown; keep _held_since for when the kubelet answers again
            return
        holders: dict[str, set[PodKey]] = {}
        held_since: dict[tuple[str, str, str], float] = {}
        for gpu in sample.gpus:
            if not gpu.uuid:
                continue
            pods = {(h.namespace, h.pod) for h in gpu.holders}
            holders[gpu.uuid] = pods
            for namespace, pod in pods:
                key = (gpu.uuid, namespace, pod)
                held_since[key] = self._held_since.get(key, now)
        self._holders, self._held_since = holders, held_since

    def gpu_idle(self) -> list[GpuIdle]:
        """Every GPU whose utilization was known in the last sample, with its idle time so far."""
        now = self._clock()
        return [
            GpuIdle(index, uuid, model, now - self._idle_since[uuid] if uuid in self._idle_since else 0.0)
            for index, uuid, model in self._gpus
        ]

    def pod_idle_gpus(self) -> dict[PodKey, int] | None:
        """Per pod holding a whole GPU (or a replica of one): its GPUs idle for >= the window, 0
        included. None when allocation is unknown."""
        if self._holders is None:
            return None
        now = self._clock()
        counts: dict[PodKey, int] = {}
        for uuid, pods in self._holders.items():
            idle_since = self._idle_since.get(uuid)
            for pod in pods:
                counts.setdefault(pod, 0)
                if idle_since is None:
                    continue
                since = max(idle_since, self._held_since[(uuid, *pod)])
                if now - since >= self.window_s:
                    counts[pod] += 1
        return counts
