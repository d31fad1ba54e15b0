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


class Tolerance(NamedTuple):
    """How far a reading may lie outside the range of nvidia-smi's two readings (taken just before
    and just after ours): max(absolute, relative x the larger of the two), in the field's unit."""

    absolute: float
    relative: float = 0.0

    def allowance(self, low: float, high: float) -> float:
        return max(self.absolute, self.relative * max(abs(low), abs(high)))

    def __str__(self) -> str:
        absolute = f"{self.absolute:g}"
        return absolute if not self.relative else f"max({absolute}, {self.relative:.0%})"


# Tolerances, each compared under every load of bench/gpu_check.py (idle, 8 GiB held, one-thread
# spin, bf16 matrix products; readings of both committed runs, bench/gpu_check*.json, in brackets).
# Each must stay small enough to break on a wrong reading; what each one catches:
TOLERANCE: dict[str, Tolerance] = {
    # MiB rounding alone (the reader's bytes / 2**20 against nvidia-smi's whole MiB: 8810.x against
    # 8811 under the hold load). Catches bytes or KiB for MiB, the v1 struct's "used" that counts the
    # reserved 480 MiB, and free for used (81079 against 0 at idle, 72749 against 8811 held).
    "memory.total": Tolerance(1),
    "memory.used": Tolerance(1),
    "memory.reserved": Tolerance(1),
    # NVML's utilization is a moving average over its sample period (up to 1 s); nvidia-smi's two
    # readings bracket ours. Catches 0 under matrix products or the spin kernel (99-100 measured),
    # 100 at idle or memory held (0 measured), and a 0..1 fraction for a percentage.
    "utilization.gpu": Tolerance(10),
    "utilization.memory": Tolerance(10),
    # Integer degrees that move by at most one within the bracket. Catches Fahrenheit (34 C is
    # 93 F), millidegrees, a threshold (shutdown/slowdown, 80-90 C+) for the current value, and the
    # GPU and memory sensors swapped where they are more than 2 C apart (H100 idle: 34 and 38; on
    # the H200 idle, 37 and 38, a swap would not show).
    "temperature.gpu": Tolerance(2),
    "temperature.memory": Tolerance(2),
    # Both nvidia-smi's power.draw and nvmlDeviceGetPowerUsage are a 1-s average on Hopper; under
    # the matrix products (690-700 W) the average still moves, so 5 % of the reading there, 15 W
    # otherwise. Catches mW for W (x1000), the power limit (700 W) for the draw at idle, memory held
    # or the spin kernel (70-122 W measured), and an idle reading (70-78 W) under the matrix products.
    "power.draw": Tolerance(15, 0.05),
    # Clocks step in 15 MHz bins and, power-capped under the matrix products, move between two
    # nvidia-smi runs: 10 % of the reading (about 145 MHz there), 60 MHz at least. Catches the
    # memory clock (2619 H100, 3201 H200) for the SM clock, the maximum SM clock (1980) for the
    # current one under the matrix products (1425 H100, 1485 H200), the idle clock (345) under a
    # load, and kHz for MHz.
    "clocks.sm": Tolerance(60, 0.10),
    "clocks.mem": Tolerance(60, 0.10),
    "utilization.encoder": Tolerance(10),
    "utilization.decoder": Tolerance(10),
}

# What bench/gpu_check.py and tests/gpu compare under each CUDA load (the agent's readings that a
# load moves; identity, totals and error counters are compared at idle, part 1).
LOADED_FIELDS = ("utilization.gpu", "memory.used", "power.draw", "clocks.sm", "temperature.gpu")


class Bounds(NamedTuple):
    """What a load must read as (a minimum is met from that value up, a maximum only under it),
    from the agent's reader over its last 1-s interval (the first can straddle the load's start:
    34-36 % SM active under the matrix products on both GPUs)."""

    utilization_min: float | None = None
    utilization_max: float | None = None
    sm_active_min: float | None = None  # GPM, %, checked where the GPU supports GPM
    sm_active_max: float | None = None
    tensor_active_min: float | None = None
    memory_used_mib_min: float | None = None


# From the committed runs (bench/gpu_check.json, H100; bench/gpu_check-h200.json, H200), each the
# reader's last interval of bench/gpu_check.py's part 5 and tests/gpu's 1-s readings:
#   idle:   utilization 0, 0; SM active 0.0, 0.0. Under 1 % catches a reading of 100 - x, a GPM
#           metric read from a stale or uninitialised sample, and graphics activity for SM activity
#           (99.5 under the spin kernel);
#   hold:   8 GiB allocated by bench/gpu_load.py: memory 8810 MiB, utilization 0 on both. Catches
#           used memory in GiB (8) or that misses a CUDA allocation, and utilization for a kernel-less
#           process;
#   spin:   one thread of one block: utilization 99-100, SM active 0.75-0.76 (one SM of 132), the
#           case the SM-activity idle rule exists for; under 10 % catches the utilization (100) or
#           graphics activity (99.5) read as SM activity;
#   matmul: bf16 8192^3 products: utilization 99, SM active 95.5 (H100) and 95.3 (H200), tensor
#           active 92.5 and 92.4. Over 80 % catches zeros, a 0..1 fraction (0.95), the occupancy
#           (14.3, 14.2) read as SM activity, and a GPM interval that missed the load.
LOAD_BOUNDS: dict[str, Bounds] = {
    "idle": Bounds(utilization_max=10, sm_active_max=1.0),
    "hold": Bounds(utilization_max=10, sm_active_max=1.0, memory_used_mib_min=8192),
    "spin": Bounds(utilization_min=90, sm_active_max=10.0),
    "matmul": Bounds(utilization_min=90, sm_active_min=80.0, tensor_active_min=80.0),
}


def bound_failures(mode: str, utilization: Any, memory_used_mib: Any, gpm: Any, gpm_supported: bool) -> list[str]:
    """What breaks LOAD_BOUNDS[mode] in one reading (empty: nothing): `gpm` a mapping with sm_active
    and tensor_active (the reader's GpuReading.gpm as a dict), None where none was read."""
    bounds = LOAD_BOUNDS[mode]
    out: list[str] = []

    def check(name: str, value: Any, low: float | None, high: float | None) -> None:
        if low is None and high is None:
            return
        if not isinstance(value, int | float) or isinstance(value, bool):
            out.append(f"{mode}: {name} not read ({value!r})")
        elif low is not None and value < low:
            out.append(f"{mode}: {name} {value} under {low:g}")
        elif high is not None and value >= high:
            out.append(f"{mode}: {name} {value} not under {high:g}")

    check("utilization %", utilization, bounds.utilization_min, bounds.utilization_max)
    check("memory used MiB", memory_used_mib, bounds.memory_used_mib_min, None)
    if gpm_supported:
        gpm = gpm if isinstance(gpm, dict) else {}
        check("SM active %", gpm.get("sm_active"), bounds.sm_active_min, bounds.sm_active_max)
        check("tensor active %", gpm.get("tensor_active"), bounds.tensor_active_min, None)
    return out


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


_fields_cache: list[str] | None = None  # every field name nvidia-smi --help-query-gpu lists

# The power limits, recorded (not compared): what the board may draw, which tells an SXM module
# (700 W on Hopper) from a PCIe card (350-600 W).
POWER_LIMIT_FIELDS = (
    "power.limit",
    "enforced.power.limit",
    "power.default_limit",
    "power.min_limit",
    "power.max_limit",
)


def available_fields(wanted: tuple[str, ...] = WANTED) -> list[str]:
    """Those of `wanted` this nvidia-smi knows (`nvidia-smi --help-query-gpu`), in their order."""
    global _fields_cache
    if _fields_cache is None:
        help_text = subprocess.run(
            ["nvidia-smi", "--help-query-gpu"], capture_output=True, text=True, timeout=30
        ).stdout
        # Lines such as `"name" or "gpu_name"` (a field and its aliases) and `"memory.used"`.
        _fields_cache = sorted({name for line in help_text.splitlines() for name in re.findall(r'"([^"]+)"', line)})
    listed = set(_fields_cache)
    return [field for field in wanted if field in listed]


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


def query(fields: tuple[str, ...] = WANTED) -> list[dict[str, str]]:
    """nvidia-smi's reading of `fields` (those it knows), one dict per GPU in index order."""
    return query_fields(available_fields(fields))


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
    numbers = sorted(v for v in (_number(before), _number(after)) if v is not None)
    if not numbers:
        return False  # we read a value nvidia-smi says it cannot
    low, high = numbers[0], numbers[-1]
    tolerance = TOLERANCE.get(field)
    allowance = tolerance.allowance(low, high) if tolerance is not None else 0.0
    return low - allowance <= float(ours) <= high + allowance


def compare(sample: Any, before: list[dict[str, str]], after: list[dict[str, str]]) -> list[Row]:
    """Each of the GPU's readings in `sample` against the fields nvidia-smi was asked for (those in
    `before`), just before and just after the sample was taken."""
    if len(before) != len(sample.gpus) or len(after) != len(sample.gpus):
        raise ValueError(f"nvidia-smi lists {len(before)}/{len(after)} GPUs, the reader {len(sample.gpus)}")
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
    # nvmlTemperatureSensors_t has only NVML_TEMPERATURE_GPU (0) and NVML_TEMPERATURE_GPU_MAX (1),
    # no memory sensor (sensor 1, tried before as "MEMORY?", answered InvalidArgument on both
    # GPUs): the memory temperature is field value NVML_FI_DEV_MEMORY_TEMP (82), probed below.
    yield (
        "nvmlDeviceGetTemperatureV(GPU)",
        lambda: pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU),
    )
    yield "nvmlDeviceGetFieldValues(MEMORY_TEMP)", lambda: memory_temperature(pynvml, h)
    yield "nvmlDeviceGetEnforcedPowerLimit", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h)
    yield "nvmlDeviceGetPowerManagementLimit", lambda: pynvml.nvmlDeviceGetPowerManagementLimit(h)
    yield (
        "nvmlDeviceGetPowerManagementLimitConstraints",
        lambda: list(pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)),
    )
    yield "nvmlDeviceGetPowerManagementDefaultLimit", lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h)
    yield "nvmlDeviceGetModuleId", lambda: pynvml.nvmlDeviceGetModuleId(h)
    yield "nvmlDeviceGetBoardPartNumber", lambda: as_text(pynvml.nvmlDeviceGetBoardPartNumber(h))
    yield "nvmlGpmQueryDeviceSupport", lambda: pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice
    yield "nvmlGpmQueryIfStreamingEnabled", lambda: pynvml.nvmlGpmQueryIfStreamingEnabled(h)
    yield "nvmlDeviceGetArchitecture", lambda: pynvml.nvmlDeviceGetArchitecture(h)
    yield "nvmlDeviceGetPerformanceState", lambda: pynvml.nvmlDeviceGetPerformanceState(h)
    yield "nvmlDeviceGetPersistenceMode", lambda: pynvml.nvmlDeviceGetPersistenceMode(h)
    yield "nvmlDeviceGetComputeMode", lambda: pynvml.nvmlDeviceGetComputeMode(h)


def memory_temperature(pynvml: Any, h: Any) -> Any:
    """The memory temperature, degrees C, as the agent reads it: field value 82 (NVML_FI_DEV_MEMORY_TEMP)."""
    (value,) = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
    if value.nvmlReturn != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(value.nvmlReturn)
    return field_value(value)


def as_text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _mem(memory: Any) -> dict[str, int]:
    return {k: int(getattr(memory, k)) // MIB for k in ("total", "used", "free", "reserved") if hasattr(memory, k)}


def form_factor(name: str, power_limit_w: float | None = None, power_seen_w: float | None = None) -> tuple[str, str]:
    """(SXM, PCIe or unknown; why), from the NVML name, the board's power limit (max, else enforced)
    or, for a run that did not record it, the highest draw seen. NVML has no form-factor call
    before Blackwell, so: a name saying PCIe, NVL (PCIe cards bridged by NVLink) or SXM decides;
    else a Hopper (H100/H200) allowed or seen over 600 W is an SXM5 module (700 W; Hopper PCIe
    cards stop at 350-600 W: H100 PCIe 350, H100 NVL 400, H200 NVL 600)."""
    upper = name.upper()
    if "PCIE" in upper.replace("-", "").replace(" ", ""):
        return "PCIe", f"the name says so ({name})"
    if " NVL" in upper:
        return "PCIe", f"NVL cards are PCIe ({name})"
    if "SXM" in upper:
        return "SXM", f"the name says so ({name})"
    if "GH200" in upper or "GB200" in upper:
        return "superchip module", f"a Grace superchip ({name})"
    hopper = any(model in upper for model in ("H100", "H200", "H800", "H20"))
    for label, watts in (("power limit", power_limit_w), ("highest draw seen", power_seen_w)):
        if watts is not None and hopper and watts > 600:
            return "SXM", f"a Hopper GPU with a {label} of {watts:g} W; Hopper PCIe cards: 600 W at most"
    return "unknown", f"neither the name ({name}) nor the power ({power_limit_w or power_seen_w} W) tells"
