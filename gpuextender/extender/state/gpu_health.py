"""Why a GPU is unhealthy or degraded, as one short value fit for a Kubernetes label or taint value
(DRA device taints, state/device_taints.py): "xid-79", "gpu-is-lost", "ecc-uncorrected",
"thermal-slowdown". From the agent's stable health codes (GpuSample.health_reasons; an agent before
0.2 sends unhealthy_reasons only); a critical XID names its number, the newest one."""

from __future__ import annotations

import re

from gpuextender.v1 import gpu_state_pb2 as pb

MAX_VALUE_CHARS = 63  # a label value
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_ALLOWED = re.compile(r"[^a-z0-9.-]+")


def problem_of(gpu: pb.GpuSample) -> str:
    """The GPU's first health reason as a label value ("unknown" when it gives none)."""
    reasons = list(gpu.health_reasons) or list(gpu.unhealthy_reasons)
    if not reasons:
        return "unknown"
    first = reasons[0]
    if first == "XidCritical" and gpu.xids:
        return f"xid-{gpu.xids[-1].xid}"
    value = _NOT_ALLOWED.sub("-", _CAMEL.sub("-", first).lower()).strip("-.")
    return value[:MAX_VALUE_CHARS].rstrip("-.") or "unknown"
