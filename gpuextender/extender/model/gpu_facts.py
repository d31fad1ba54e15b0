"""A GPU's static facts as its agent reports them: what AcceleratorClass capability checks read
(model/ome/node_class.py), kept per node where reports are summarized (state/facts_reader.py)."""

from __future__ import annotations

from typing import Any, NamedTuple


class GpuFacts(NamedTuple):
    """One GPU as the agent reports it (plain 3-tuples are accepted where these are)."""

    name: str  # raw NVML product name, "NVIDIA H100 80GB HBM3"
    memory_total_bytes: int | None  # None: NVML gave no reading
    compute_capability: str  # "9.0"; "" when unknown


def facts_from_report(report: Any) -> tuple[GpuFacts, ...]:
    """GpuFacts from an agent NodeReport (gpuextender.v1.NodeReport): absent readings stay None/""."""
    out = []
    for gpu in report.gpus:
        total = gpu.memory_total_bytes if gpu.HasField("memory_total_bytes") else None
        cc = (
            f"{gpu.compute_capability.major}.{gpu.compute_capability.minor}"
            if gpu.HasField("compute_capability")
            else ""
        )
        out.append(GpuFacts(gpu.name, total, cc))
    return tuple(out)
