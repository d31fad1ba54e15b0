"""How the agent reacts to each kind of NVMLError.

NVML signals everything through `pynvml.NVMLError` subclasses. They fall into
four groups, and the group, not the call, decides what happens:

- ABSENT: the reading does not exist on this device (MIG utilization, power on
  some boards). The field is left out of the report; nothing is wrong.
- GPU_UNHEALTHY: the device itself is broken (lost, needs a reset). The GPU is
  reported unhealthy with the error's name as the reason; the agent goes on.
- NODE_FATAL: NVML as a whole is unusable (driver not loaded, library/driver
  mismatch). The node's report carries `node_error`; the agent retries init.
- TRANSIENT: anything else (timeouts, permissions, out of memory). The reading is
  left out for this sample and the error is counted and logged.
"""

from __future__ import annotations

import enum

import pynvml


class ErrorGroup(enum.Enum):
    ABSENT = "absent"
    GPU_UNHEALTHY = "gpu_unhealthy"
    NODE_FATAL = "node_fatal"
    TRANSIENT = "transient"


_GROUP_BY_NAME: dict[str, ErrorGroup] = {
    "NotSupported": ErrorGroup.ABSENT,
    "FunctionNotFound": ErrorGroup.ABSENT,
    "NoData": ErrorGroup.ABSENT,
    "GpuIsLost": ErrorGroup.GPU_UNHEALTHY,
    "ResetRequired": ErrorGroup.GPU_UNHEALTHY,
    "GpuNotFound": ErrorGroup.GPU_UNHEALTHY,
    "InsufficientPower": ErrorGroup.GPU_UNHEALTHY,
    "IrqIssue": ErrorGroup.GPU_UNHEALTHY,
    "CorruptedInforom": ErrorGroup.GPU_UNHEALTHY,
    "Unknown": ErrorGroup.GPU_UNHEALTHY,
    "DriverNotLoaded": ErrorGroup.NODE_FATAL,
    "LibraryNotFound": ErrorGroup.NODE_FATAL,
    "LibRmVersionMismatch": ErrorGroup.NODE_FATAL,
    "Uninitialized": ErrorGroup.NODE_FATAL,
}


def error_name(exc: pynvml.NVMLError) -> str:
    """`NVMLError_GpuIsLost` -> `GpuIsLost`; a code pynvml has no class for -> `Code42`."""
    cls_name = type(exc).__name__
    if cls_name.startswith("NVMLError_"):
        return cls_name.removeprefix("NVMLError_")
    return f"Code{getattr(exc, 'value', 'Unknown')}"


def classify(exc: pynvml.NVMLError) -> ErrorGroup:
    return _GROUP_BY_NAME.get(error_name(exc), ErrorGroup.TRANSIENT)


def known_error_names() -> dict[str, int]:
    """Every NVML error pynvml knows, name -> return code (e.g. GpuIsLost -> 15)."""
    return {cls.__name__.removeprefix("NVMLError_"): code for code, cls in pynvml.NVMLError._valClassMapping.items()}
