"""nvidia-smi, read back, and the agent's readings compared with it (real-GPU checks only).

Used by tests/gpu (the asserts) and bench/gpu_check.py (the table in bench/RESULTS-gpu.md), so
the tolerances live in one place. Nothing here loads NVML at import time.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

# nvidia-smi --query-gpu fields we compare, asked only where this driver's nvidia-smi has them
# (an unknown field fails the whole query).
WANTED = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "memory.reserved",
    "utilization.gpu",
    "utilization.memory",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "clocks.sm",
    "clocks.mem",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "utilization.encoder",
    "utilization.decoder",
)

MIB = 2**20
# Tolerances: how far a reading may be from nvidia-smi's, beyond the range of nvidia-smi's own
# two readings (taken just before and just after ours). Why each: memory used moves with any CUDA
# context on the machine (none here, but MiB rounding: 1); utilization is a moving average over
# NVML's sample period (up to 1 s); temperature and power move within a second; clocks step.
TOLERANCE: dict[str, float] = {
    "memory.total": 1,  # MiB
    "memory.used": 1,
    "memory.reserved": 1,
    "utilization.gpu": 10,  # percentage points
    "utilization.memory": 10,
    "temperature.gpu": 2,  # degrees C
    "temperature.memory": 2,
    "power.draw": 15,  # W
    "clocks.sm": 60,  # MHz
    "clocks.mem": 60,
    "utilization.encoder": 10,
    "utilization.decoder": 10,
}

# GPM metrics read by bench/gpu_check.py (nvml.h's NVML_GPM_METRIC_* ids, as pynvml has them).
GPM_METRICS: tuple[tuple[str, int], ...] = (
    ("graphics_util", 1),
    ("sm_util", 2),
    ("sm_occupancy", 3),
    ("any_tensor_util", 5),
    ("hmma_tensor_util", 7),
    ("dram_bw_util", 10),
)
# Field values tried once per GPU (NVML_FI_DEV_*): the counters dcgm-exporter serves that have
# no call of their own.
FIELD_PROBES: tuple[tuple[str, int], ...] = (
    ("MEMORY_TEMP", 82),
    ("PCIE_REPLAY_COUNTER", 94),
    ("NVLINK_LINK_COUNT", 91),
    ("NVLINK_BANDWIDTH_C0_TOTAL", 66),
    ("NVLINK_BANDWIDTH_C1_TOTAL", 73),
    ("NVLINK_THROUGHPUT_DATA_TX", 138),
    ("NVLINK_THROUGHPUT_DATA_RX", 139),
    ("NVLINK_THROUGHPUT_RAW_TX", 140),
    ("NVLINK_THROUGHPUT_RAW_RX", 141),
    ("POWER_INSTANT", 186),
    ("ENERGY", 191),
    ("PCIE_COUNT_TX_BYTES", 197),
    ("PCIE_COUNT_RX_BYTES", 198),
)


class Row(NamedTuple):
    gpu: int
    field: str
    ours: str
    smi_before: str
    smi_after: str
    tolerance: str
    ok: bool


def real_nvml_missing() -> str:
    """'' when libnvidia-ml loads and nvmlInit works (checked in a child process, so this process
    never loads it and a fake NVML a test installed is never in the way); else why not."""
    code = "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())"
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run a probe for NVML ({exc})"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return f"no real NVML here ({last})"
    if int(proc.stdout.strip() or 0) < 1:
        return "NVML loads but sees no GPU"
    if shutil.which("nvidia-smi") is None:
        return "NVML loads but nvidia-smi is not on PATH"
    return ""


_fields_cache: list[str] | None = None


def available_fields() -> list[str]:
    global _fields_cache
    if _fields_cache is None:
        help_text = subprocess.run(
            ["nvidia-smi", "--help-query-gpu"], capture_output=True, text=True, timeout=30
        ).stdout
        # Lines such as `"name" or "gpu_name"` (a field and its aliases) and `"memory.used"`.
        listed = {name for line in help_text.splitlines() for name in re.findall(r'"([^"]+)"', line)}
        _fields_cache = [field for field in WANTED if field in listed]
    return _fields_cache


def query_fields(fields: list[str]) -> list[dict[str, str]]:
    proc = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [
        dict(zip(fields, (v.strip() for v in line.split(",")), strict=True))
        for line in proc.stdout.strip().splitlines()
    ]


def query() -> list[dict[str, str]]:
    return query_fields(available_fields())


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]", "Disabled", ...


def _ours(gpu: Any, field: str) -> Any:
    errors = gpu.errors
    values: dict[str, Callable[[], Any]] = {
        "index": lambda: gpu.index,
        "uuid": lambda: gpu.uuid,
        "name": lambda: gpu.name,
        "pci.bus_id": lambda: gpu.pci_bus_id,
        "memory.total": lambda: None if gpu.memory_total_bytes is None else gpu.memory_total_bytes / MIB,
        "memory.used": lambda: None if gpu.memory_used_bytes is None else gpu.memory_used_bytes / MIB,
        "memory.reserved": lambda: None if gpu.memory_reserved_bytes is None else gpu.memory_reserved_bytes / MIB,
        "utilization.gpu": lambda: gpu.utilization_gpu_percent,
        "utilization.memory": lambda: gpu.utilization_memory_percent,
        "temperature.gpu": lambda: gpu.temperature_celsius,
        "temperature.memory": lambda: gpu.memory_temperature_celsius,
        "power.draw": lambda: gpu.power_watts,
        "clocks.sm": lambda: gpu.sm_clock_mhz,
        "clocks.mem": lambda: gpu.memory_clock_mhz,
        "ecc.errors.corrected.volatile.total": lambda: errors and errors.ecc_corrected_volatile,
        "ecc.errors.uncorrected.volatile.total": lambda: errors and errors.ecc_uncorrected_volatile,
        "remapped_rows.correctable": lambda: errors and errors.remapped_rows_correctable,
        "remapped_rows.uncorrectable": lambda: errors and errors.remapped_rows_uncorrectable,
        "remapped_rows.pending": lambda: errors and errors.remap_pending,
        "remapped_rows.failure": lambda: errors and errors.remap_failure,
        "utilization.encoder": lambda: gpu.encoder_utilization_percent,
        "utilization.decoder": lambda: gpu.decoder_utilization_percent,
    }
    return values[field]()


def _same(field: str, ours: Any, before: str, after: str) -> bool:
    """Is our reading what nvidia-smi says? Unknown on our side must match 'not supported' there."""
    smi_unknown = _number(before) is None and before.lower() not in ("yes", "no")
    if field in ("uuid", "name", "pci.bus_id"):
        return str(ours).lower() == before.lower() or (
            field == "pci.bus_id" and str(ours).lower().endswith(before.lower()[-12:])
        )
    if ours is None:
        return smi_unknown
    if isinstance(ours, bool):
        return before.lower() in (("yes", "1") if ours else ("no", "0"))
    low, high = sorted(v for v in (_number(before), _number(after)) if v is not None) or [None, None]
    if low is None:
        return False  # we read a value nvidia-smi says it cannot
    tolerance = TOLERANCE.get(field, 0)
    return low - tolerance <= float(ours) <= (high or low) + tolerance


def compare(sample: Any, before: list[dict[str, str]], after: list[dict[str, str]]) -> list[Row]:
    rows: list[Row] = []
    for gpu in sample.gpus:
        b, a = before[gpu.index], after[gpu.index]
        for field in b:
            ours = _ours(gpu, field)
            rows.append(
                Row(
                    gpu=gpu.index,
                    field=field,
                    ours=short(ours),
                    smi_before=b[field],
                    smi_after=a[field],
                    tolerance=str(TOLERANCE.get(field, "exact")),
                    ok=_same(field, ours, b[field], a[field]),
                )
            )
    return rows


def short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."


def field_value(value: Any) -> Any:
    """The number in an nvmlFieldValue_t, by its valueType."""
    kind = int(value.valueType)
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(kind)
    return getattr(value.value, member) if member else None


def nvml_probes(pynvml: Any, h: Any) -> Iterator[tuple[str, Callable[[], Any]]]:
    """Every call the agent makes per GPU, and the ones it could make, as (name, thunk)."""
    yield "nvmlDeviceGetUUID", lambda: pynvml.nvmlDeviceGetUUID(h)
    yield "nvmlDeviceGetName", lambda: pynvml.nvmlDeviceGetName(h)
    yield "nvmlDeviceGetPciInfo", lambda: pynvml.nvmlDeviceGetPciInfo(h).busId
    yield "nvmlDeviceGetCudaComputeCapability", lambda: pynvml.nvmlDeviceGetCudaComputeCapability(h)
    yield "nvmlDeviceGetMinorNumber", lambda: pynvml.nvmlDeviceGetMinorNumber(h)
    yield "nvmlDeviceGetMemoryAffinity(NODE)", lambda: list(pynvml.nvmlDeviceGetMemoryAffinity(h, 4, 0))
    yield "nvmlDeviceGetMemoryInfo(v1)", lambda: _mem(pynvml.nvmlDeviceGetMemoryInfo(h))
    yield "nvmlDeviceGetMemoryInfo(v2)", lambda: _mem(pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2))
    yield (
        "nvmlDeviceGetUtilizationRates",
        lambda: (lambda u: (u.gpu, u.memory))(pynvml.nvmlDeviceGetUtilizationRates(h)),
    )
    yield "nvmlDeviceGetTemperature(GPU)", lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    yield "nvmlDeviceGetPowerUsage", lambda: pynvml.nvmlDeviceGetPowerUsage(h)
    yield "nvmlDeviceGetTotalEnergyConsumption", lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    yield "nvmlDeviceGetClockInfo(SM)", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    yield "nvmlDeviceGetClockInfo(MEM)", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
    yield "nvmlDeviceGetCurrentClocksEventReasons", lambda: hex(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
    for name, kind in (
        ("UNCORRECTED", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ("CORRECTED", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
    ):
        yield (
            f"nvmlDeviceGetTotalEccErrors({name}, VOLATILE)",
            lambda kind=kind: pynvml.nvmlDeviceGetTotalEccErrors(h, kind, pynvml.NVML_VOLATILE_ECC),
        )
    yield "nvmlDeviceGetEccMode", lambda: pynvml.nvmlDeviceGetEccMode(h)
    yield "nvmlDeviceGetRemappedRows", lambda: pynvml.nvmlDeviceGetRemappedRows(h)
    yield "nvmlDeviceGetRetiredPagesPendingStatus", lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h)
    yield "nvmlDeviceGetMigMode", lambda: pynvml.nvmlDeviceGetMigMode(h)
    yield "nvmlDeviceGetMaxMigDeviceCount", lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(h)
    yield "nvmlDeviceGetSupportedEventTypes", lambda: hex(pynvml.nvmlDeviceGetSupportedEventTypes(h))
    yield "nvmlDeviceGetNvLinkState(0)", lambda: pynvml.nvmlDeviceGetNvLinkState(h, 0)
    yield "nvmlDeviceGetComputeRunningProcesses(v3)", lambda: len(pynvml.nvmlDeviceGetComputeRunningProcesses(h))
    yield "nvmlDeviceGetEncoderUtilization", lambda: pynvml.nvmlDeviceGetEncoderUtilization(h)
    yield "nvmlDeviceGetDecoderUtilization", lambda: pynvml.nvmlDeviceGetDecoderUtilization(h)
    yield "nvmlDeviceGetPcieReplayCounter", lambda: pynvml.nvmlDeviceGetPcieReplayCounter(h)
    yield "nvmlDeviceGetTemperatureV(MEMORY?)", lambda: pynvml.nvmlDeviceGetTemperatureV(h, 1)
    yield "nvmlGpmQueryDeviceSupport", lambda: pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice
    yield "nvmlGpmQueryIfStreamingEnabled", lambda: pynvml.nvmlGpmQueryIfStreamingEnabled(h)
    yield "nvmlDeviceGetArchitecture", lambda: pynvml.nvmlDeviceGetArchitecture(h)
    yield "nvmlDeviceGetPerformanceState", lambda: pynvml.nvmlDeviceGetPerformanceState(h)
    yield "nvmlDeviceGetPersistenceMode", lambda: pynvml.nvmlDeviceGetPersistenceMode(h)
    yield "nvmlDeviceGetComputeMode", lambda: pynvml.nvmlDeviceGetComputeMode(h)


def _mem(memory: Any) -> dict[str, int]:
    return {k: int(getattr(memory, k)) // MIB for k in ("total", "used", "free", "reserved") if hasattr(memory, k)}
