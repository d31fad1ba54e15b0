"""Checks a NodeReport before it may change the extender's state (pure).

Every string and repeated field is bounded: with `--agent-auth none` any client
that reaches the gRPC port can report, and a stored report is kept until its
node is forgotten (--forget-after). The bounds come from what NVML and the
agent really produce, so a real agent never meets them.
"""

from __future__ import annotations

import re

from gpuextender.v1 import gpu_state_pb2 as pb

_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
MAX_GPUS_PER_NODE = 256
# String bounds in characters (NVML's strings are ASCII: characters = bytes), from nvml.h's buffer
# sizes, which include the terminating NUL.
MAX_UUID_CHARS = 95  # NVML_DEVICE_UUID_V2_BUFFER_SIZE 96; "GPU-<uuid>" is 40
MAX_GPU_NAME_CHARS = 95  # NVML_DEVICE_NAME_V2_BUFFER_SIZE 96; "NVIDIA H100 80GB HBM3" is 21
MAX_PCI_BUS_ID_CHARS = 31  # NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32; "00000000:18:00.0" is 16
MAX_DRIVER_VERSION_CHARS = 79  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80; "550.127.05" is 10
MAX_AGENT_VERSION_CHARS = 64  # a PEP 440 version with a local part ("0.1.0.dev12+g1234abc.d20250101" is 30)
MAX_NODE_ERROR_CHARS = 256  # the agent sends an NVML error name (23 characters at most today)
# The agent lists each distinct reason once: the 7 NVML errors that mark a GPU unhealthy
# (gpuextender/agent/nvml_errors.py) plus NoHandle; a reason is such a name (23 characters at most) or "Code<n>".
MAX_UNHEALTHY_REASONS = 8
MAX_UNHEALTHY_REASON_CHARS = 32
# The largest report gRPC accepts (grpc.max_receive_message_length on the extender). A 256-GPU
# report with every field at the bounds above is 150,960 bytes (147.4 KiB; an 8-GPU node sends
# ~2 KB): this leaves ~108 KiB, ~430 bytes per GPU at 256 GPUs, for the per-GPU pod lists a later
# report version adds. Anything larger ends the stream with RESOURCE_EXHAUSTED before it is parsed.
MAX_REPORT_BYTES = 256 * 1024

_NODE_STRINGS = (
    ("agent_version", MAX_AGENT_VERSION_CHARS),
    ("driver_version", MAX_DRIVER_VERSION_CHARS),
    ("node_error", MAX_NODE_ERROR_CHARS),
)
_GPU_STRINGS = (("uuid", MAX_UUID_CHARS), ("name", MAX_GPU_NAME_CHARS), ("pci_bus_id", MAX_PCI_BUS_ID_CHARS))


def report_problem(report: pb.NodeReport, bound_node: str | None) -> str | None:
    """None when the report is acceptable, else a one-line reason for the agent."""
    if not _NODE_NAME.match(report.node_name):
        return f"node_name {report.node_name[:300]!r} is not a valid Kubernetes node name"
    if bound_node is not None and report.node_name != bound_node:
        return f"node_name changed from {bound_node!r} to {report.node_name!r} within one stream"
    for field, limit in _NODE_STRINGS:
        if len(getattr(report, field)) > limit:
            return f"{field} is {len(getattr(report, field))} characters, more than the {limit} allowed"
    if not 0 <= report.sample_time.nanos <= 999_999_999:
        return f"sample_time.nanos={report.sample_time.nanos} is outside 0..999999999"
    if len(report.gpus) > MAX_GPUS_PER_NODE:
        return f"{len(report.gpus)} GPUs is more than the {MAX_GPUS_PER_NODE} a node can report"
    seen: set[int] = set()
    for gpu in report.gpus:
        if gpu.index in seen:
            return f"GPU index {gpu.index} appears twice"
        seen.add(gpu.index)
        problem = _gpu_problem(gpu)
        if problem is not None:
            return f"GPU {gpu.index}: {problem}"
    return None


def _gpu_problem(gpu: pb.GpuSample) -> str | None:
    for field, limit in _GPU_STRINGS:
        if len(getattr(gpu, field)) > limit:
            return f"{field} is {len(getattr(gpu, field))} characters, more than the {limit} allowed"
    if len(gpu.unhealthy_reasons) > MAX_UNHEALTHY_REASONS:
        return f"{len(gpu.unhealthy_reasons)} unhealthy_reasons, more than the {MAX_UNHEALTHY_REASONS} allowed"
    for reason in gpu.unhealthy_reasons:
        if len(reason) > MAX_UNHEALTHY_REASON_CHARS:
            return (f"an unhealthy_reason is {len(reason)} characters, more than the "
                    f"{MAX_UNHEALTHY_REASON_CHARS} allowed")  # fmt: skip
    for field in ("utilization_gpu_percent", "utilization_memory_percent"):
        if gpu.HasField(field) and getattr(gpu, field) > 100:
            return f"{field}={getattr(gpu, field)} is above 100"
    # The idle rule divides used by total: a GPU with no total, or more used than it has, would be
    # counted idle whatever it runs. NVML reports both from one call, so they come together.
    has_total, has_used = gpu.HasField("memory_total_bytes"), gpu.HasField("memory_used_bytes")
    if has_total != has_used:
        return "memory_used_bytes and memory_total_bytes must come together (one NVML reading)"
    if has_total and gpu.memory_total_bytes == 0:
        return "memory_total_bytes is 0: a GPU has memory"
    if has_total and gpu.memory_used_bytes > gpu.memory_total_bytes:
        return f"memory_used_bytes is above memory_total_bytes={gpu.memory_total_bytes}"
    return None


def clock_skew_problem(report: pb.NodeReport, wall_now_s: float, max_skew_s: float) -> str | None:
    """None when the report's sample_time is within `max_skew_s` of the extender's wall clock
    (exactly `max_skew_s` apart is within), else the reason. Compared in whole nanoseconds."""
    sample_ns = report.sample_time.seconds * 1_000_000_000 + report.sample_time.nanos
    skew_ns = sample_ns - round(wall_now_s * 1e9)
    if abs(skew_ns) <= round(max_skew_s * 1e9):
        return None
    # Whole seconds: a stepped clock stays the same amount off, so the agent sees one reason (and
    # logs it once), not a new one every report.
    direction = "ahead of" if skew_ns > 0 else "behind"
    return (f"sample_time is {round(abs(skew_ns) / 1e9)}s {direction} the extender's clock, more than "
            f"--max-clock-skew {max_skew_s:g}s: fix the node's clock (NTP); its reports are stored again "
            "once it is within the bound")  # fmt: skip
