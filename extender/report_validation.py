"""Checks a NodeReport before it may change the extender's state (pure)."""

from __future__ import annotations

import re

from gpuextender.v1 import gpu_state_pb2 as pb

_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
MAX_GPUS_PER_NODE = 256


def report_problem(report: pb.NodeReport, bound_node: str | None) -> str | None:
    """None when the report is acceptable, else a one-line reason for the agent."""
    if not _NODE_NAME.match(report.node_name):
        return f"node_name {report.node_name!r} is not a valid Kubernetes node name"
    if bound_node is not None and report.node_name != bound_node:
        return f"node_name changed from {bound_node!r} to {report.node_name!r} within one stream"
    if len(report.gpus) > MAX_GPUS_PER_NODE:
        return f"{len(report.gpus)} GPUs is more than the {MAX_GPUS_PER_NODE} a node can report"
    seen: set[int] = set()
    for gpu in report.gpus:
        if gpu.index in seen:
            return f"GPU index {gpu.index} appears twice"
        seen.add(gpu.index)
        for field in ("utilization_gpu_percent", "utilization_memory_percent"):
            if gpu.HasField(field) and getattr(gpu, field) > 100:
                return f"GPU {gpu.index}: {field}={getattr(gpu, field)} is above 100"
    return None
