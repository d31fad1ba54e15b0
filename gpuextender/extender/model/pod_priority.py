"""A pod's priority as kube-scheduler's preemption reads it (issue 51): `spec.priority`, which the
API server sets from the pod's PriorityClass (int32; absent reads as 0, as kube-scheduler's
PodPriority does), and whether it may preempt at all (`spec.preemptionPolicy: Never` never does).

A value outside int32, or of another type, reads as 0: the API server stores none, and a hostile
or broken one must not make a pod look more important than it is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1  # inclusive: PriorityClass values are int32
NEVER = "Never"  # the one preemptionPolicy that forbids preempting (the default: PreemptLowerPriority)


def priority(spec: Mapping[str, Any]) -> int:
    """`spec.priority`, or 0 where absent or not an int32."""
    value = spec.get("priority")
    if isinstance(value, bool) or not isinstance(value, int) or not INT32_MIN <= value <= INT32_MAX:
        return 0
    return value


def may_preempt(spec: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler may evict lower-priority pods to place this one."""
    return spec.get("preemptionPolicy") != NEVER
