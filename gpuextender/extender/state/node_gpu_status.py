"""What a device-plugin GPU node can still give, for schedulers and autoscalers that read only the
API (issue 35): kube-scheduler and Cluster Autoscaler count its `nvidia.com/gpu` allocatable, which
the extender cannot change. What can be honoured instead:

- a condition (`GPUsUsable`) on every device-plugin GPU node the extender has agent data for:
  True while one GPU is usable, False when none is, Unknown without agent data; its message counts
  the GPUs that are unusable and why;
- a node taint (off unless asked for: it keeps every pod off the node, not only GPU pods) when no
  GPU is usable.

A GPU is unusable when its agent reports it unhealthy, or busy outside Kubernetes: busy by the idle
rule while no container holds it, where the agent read the kubelet (holders known). A busy GPU
whose holders are unknown is never counted unusable. A GPU that stays busy or unhealthy only for a
moment is no mark at all: `marks` gives what is asked now, and publication.py holds each mark back
(state/device_taints.Hysteresis) before it counts here. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuextender.extender.state.gpu_summary import ALLOCATION_FROM_KUBELET, GPU_UNHEALTHY, NodeSummary

CONDITION_TYPE = "GPUsUsable"
UNHEALTHY, BUSY = "unhealthy", "busy"


@dataclass(frozen=True, slots=True)
class NodeGpuStatus:
    """The condition as written (status, reason, message) and whether the node taint is wanted."""

    status: str  # "True", "False", "Unknown"
    reason: str
    message: str
    no_usable_gpu: bool = False


def condition_of(node: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The node's GPUsUsable condition as the API server has it (a Node's JSON), None without one."""
    for c in ((node or {}).get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == CONDITION_TYPE:
            return c
    return None


def taints_with_key(node: Mapping[str, Any] | None, key: str) -> list[tuple[int, dict[str, Any]]]:
    """Each taint of the node whose key is `key`, with its position in spec.taints."""
    taints = ((node or {}).get("spec") or {}).get("taints") or ()
    return [(at, t) for at, t in enumerate(taints) if isinstance(t, dict) and t.get("key") == key]


def has_taint(node: Mapping[str, Any] | None, key: str) -> bool:
    return bool(taints_with_key(node, key))


def mark_key(node: str, position: int) -> str:
    return f"{node}/{position}"


def node_of(key: str) -> str:
    return key.rpartition("/")[0]


def marks(node: str, summary: NodeSummary | None) -> tuple[list[str], list[str]]:
    """The GPUs of `node` its agent reports unhealthy, and those busy with no container holding
    them (holders known only), each as a mark key; nothing for a node without agent data or whose
    NVML is unusable (unknown, not unusable)."""
    if summary is None or summary.node_error:
        return [], []
    positions = summary.positions
    if positions is None:  # shared or MIG GPUs, or not in index order: the cells still say health
        sick = [mark_key(node, i) for i, cell in enumerate(summary.gpus) if cell[1] == GPU_UNHEALTHY]
        return sick, []
    unhealthy = [mark_key(node, at) for at, bad, _ in positions.problems if bad]
    busy: list[str] = []
    if summary.allocation == ALLOCATION_FROM_KUBELET:
        mask = positions.busy_outside
        busy = [mark_key(node, i) for i in range(len(positions.uuids)) if mask >> i & 1]
    return unhealthy, busy


def node_status(summary: NodeSummary | None, unhealthy: int, busy: int, hold_s: float) -> NodeGpuStatus:
    """The condition for a node of `summary` with `unhealthy` and `busy` GPUs past their holds."""
    if summary is None:
        return NodeGpuStatus("Unknown", "NoAgentData", "no gpu-agent report for this node")
    if summary.node_error:
        return NodeGpuStatus("Unknown", "NVMLUnusable", f"the gpu-agent cannot read NVML: {summary.node_error[:200]}")
    total = len(summary.gpus)
    if not total:
        return NodeGpuStatus("Unknown", "NoGPUsReported", "the gpu-agent reports no GPU on this node")
    usable = max(total - unhealthy - busy, 0)
    parts = [f"{usable} of {total} GPUs usable"]
    if unhealthy:
        parts.append(f"{unhealthy} unhealthy")
    if busy:
        parts.append(f"{busy} busy outside Kubernetes for over {hold_s:g}s")
    if summary.allocation != ALLOCATION_FROM_KUBELET:
        parts.append("holders unknown (the agent does not read the kubelet): busy GPUs are not counted")
    message = "; ".join(parts)
    if usable:
        return NodeGpuStatus("True", "GPUsUsable", message)
    return NodeGpuStatus("False", "NoUsableGPU", message, no_usable_gpu=True)


def count_by_node(keys: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in keys:
        node = node_of(key)
        counts[node] = counts.get(node, 0) + 1
    return counts
