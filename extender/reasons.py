"""Why a node fails the filter: every reason the extender can give, written once.

kube-scheduler copies the message word for word into the pod's
FailedScheduling event and counts identical strings together ("3 gpu-extender:
not enough idle GPUs ..."), so messages carry no node-specific numbers. The
numbers are in the extender's log and its /metrics.

`unresolvable` decides the map: True puts the node under
FailedAndUnresolvableNodes, so kube-scheduler's preemption does not try to
evict pods there (evicting pods does not repair a lost GPU), and the no-fit
fallback never lets such a node through. Busy or stale nodes are soft failures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reason:
    code: str  # machine-stable, used as a metric label
    sentence: str
    unresolvable: bool

    @property
    def message(self) -> str:
        return f"gpu-extender: {self.sentence} ({self.code})"


INSUFFICIENT_IDLE_GPUS = Reason(
    "InsufficientIdleGPUs", "not enough idle GPUs for the pod", unresolvable=False
)
INSUFFICIENT_GPUS = Reason(
    "InsufficientGPUs", "the node has fewer GPUs than the pod needs", unresolvable=True
)
INSUFFICIENT_HEALTHY_GPUS = Reason(
    "InsufficientHealthyGPUs", "not enough healthy GPUs for the pod", unresolvable=True
)
NVML_UNAVAILABLE = Reason(
    "NvmlUnavailable", "the node's GPU agent cannot read NVML", unresolvable=True
)
STALE_GPU_DATA = Reason(
    "StaleGPUData", "GPU data from the node's agent is stale", unresolvable=False
)

ALL_REASONS = (INSUFFICIENT_GPUS, INSUFFICIENT_IDLE_GPUS, INSUFFICIENT_HEALTHY_GPUS, NVML_UNAVAILABLE, STALE_GPU_DATA)
