"""The health of one GPU, from one sample's readings and the events recorded for it. Pure: no NVML,
no I/O, no clock; the same inputs always give the same verdict.

HEALTHY: nothing below. DEGRADED: usable, but prefer other GPUs (and plan a reset or a look).
UNHEALTHY: place no work here. `GpuReading.healthy` is False exactly when UNHEALTHY, and
`unhealthy_reasons` keeps the UNHEALTHY codes (what extenders older than 0.2 read);
`health_reasons` lists every code, UNHEALTHY ones first.

Codes: level; source; condition, and when it clears.
- GpuIsLost, ResetRequired, GpuNotFound, NoHandle, ...: UNHEALTHY; an NVML call of this sample
  (nvml_errors GPU_UNHEALTHY); the error, cleared when the calls work again.
- XidCritical: UNHEALTHY; XidCriticalError events (nvml_events); any XID not in the ignore list
  since the agent started, sticky until `gpu-agent --clear-xid` or an agent restart.
- EccUncorrected: UNHEALTHY; nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE) and
  DoubleBitEccError events; volatile count > 0 (clears on GPU reset / driver reload), or a DBE
  event (sticky like XIDs).
- RowRemapFailure: UNHEALTHY; nvmlDeviceGetRemappedRows; a row remap failed: the GPU needs service.
- GpuUnavailable: UNHEALTHY; GpuUnavailableError events; sticky like XIDs.
- RecoveryActionRequired: UNHEALTHY; GpuRecoveryAction events; the latest action asks for a GPU
  reset, drain-and-reset or reboot; an action NONE clears it.
- RowRemapPending: DEGRADED; nvmlDeviceGetRemappedRows; a remap waits for a GPU reset (see below).
- RetiredPagesPending: DEGRADED; nvmlDeviceGetRetiredPagesPendingStatus (pre-Ampere); a page
  retirement waits for a reset/reload.
- RemappedRowsHigh: DEGRADED; nvmlDeviceGetRemappedRows; correctable + uncorrectable remapped rows
  >= remapped_rows_degraded (default 8).
- ThermalSlowdown: DEGRADED; nvmlDeviceGetCurrentClocksEventReasons; SW or HW thermal slowdown
  bit (0x20, 0x40).
- PowerBrake: DEGRADED; nvmlDeviceGetCurrentClocksEventReasons; HW power brake slowdown bit (0x80).
- HwSlowdown: DEGRADED; nvmlDeviceGetCurrentClocksEventReasons; HW slowdown bit (0x08).
- RecoveryDrainP2P: DEGRADED; GpuRecoveryAction events; the latest action is DRAIN_P2P.

Choices:
- Pending remaps and pending page retirements are DEGRADED, not UNHEALTHY. NVML documents
  nvmlDeviceGetRemappedRows: "A pending remapping won't affect future work on the GPU since
  error-containment and dynamic page blacklisting will take care of that"; the reset only makes
  the repair permanent. When the pending repair comes from an uncorrectable error, the volatile
  uncorrected ECC count is > 0 until that same reset, so EccUncorrected already makes the GPU
  UNHEALTHY; a remap or retirement pending for correctable errors leaves a usable GPU.
- Clock reasons: SW power cap (0x04) is how a GPU at its power limit normally runs, and idle,
  application clocks, sync boost and display clock say nothing about the GPU's health: ignored.
  The reasons are this sample's: a slowdown that ends makes the GPU HEALTHY at the next sample.
- Ignored XIDs (default 13, 31, 43, 45, 68, 109, as NVIDIA's device plugin): errors an application
  causes (illegal address, MMU fault from a kernel, a channel reset on the app's request...); they
  do not make the GPU unhealthy.
- Corrected ECC counts alone are not classified: NVIDIA scopes correctable HBM errors out of its
  memory-error guidance, and the rows they wear out show in RemappedRowsHigh.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpuextender.agent.model.readings import DEGRADED, HEALTHY, UNHEALTHY, GpuReading, NodeSample, XidEvent

DEFAULT_IGNORED_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})
MAX_REPORTED_XIDS = 16  # GpuSample.xids: newest last, at most 16 (the wire contract)
# What extenders accept (report_checks): unhealthy_reasons at most 8 - the bound of 0.1
# extenders, which reject a whole report above it - and health_reasons at most 16. UNHEALTHY
# codes come first, so a cut drops DEGRADED ones; `healthy` and `health` are never cut.
MAX_UNHEALTHY_REASONS = 8
MAX_HEALTH_REASONS = 16

# nvmlClocksEventReason* bits (values from nvml.h; pynvml's names in comments)
REASON_HW_SLOWDOWN = 0x08  # nvmlClocksEventReasonHwSlowdown
REASON_SW_THERMAL = 0x20  # nvmlClocksEventReasonSwThermalSlowdown
REASON_HW_THERMAL = 0x40  # nvmlClocksEventReasonHwThermalSlowdown
REASON_HW_POWER_BRAKE = 0x80  # nvmlClocksEventReasonHwPowerBrakeSlowdown

# nvmlDeviceGpuRecoveryAction_t
RECOVERY_NONE = 0
RECOVERY_DRAIN_P2P = 3

# Every code this module sets (the reader's NVML error names are passed through as they are).
XID_CRITICAL = "XidCritical"
ECC_UNCORRECTED = "EccUncorrected"
ROW_REMAP_FAILURE = "RowRemapFailure"
GPU_UNAVAILABLE = "GpuUnavailable"
RECOVERY_ACTION_REQUIRED = "RecoveryActionRequired"
ROW_REMAP_PENDING = "RowRemapPending"
RETIRED_PAGES_PENDING = "RetiredPagesPending"
REMAPPED_ROWS_HIGH = "RemappedRowsHigh"
THERMAL_SLOWDOWN = "ThermalSlowdown"
POWER_BRAKE = "PowerBrake"
HW_SLOWDOWN = "HwSlowdown"
RECOVERY_DRAIN_P2P_CODE = "RecoveryDrainP2P"
_OWN_CODES = frozenset(
    {
        XID_CRITICAL,
        ECC_UNCORRECTED,
        ROW_REMAP_FAILURE,
        GPU_UNAVAILABLE,
        RECOVERY_ACTION_REQUIRED,
        ROW_REMAP_PENDING,
        RETIRED_PAGES_PENDING,
        REMAPPED_ROWS_HIGH,
        THERMAL_SLOWDOWN,
        POWER_BRAKE,
        HW_SLOWDOWN,
        RECOVERY_DRAIN_P2P_CODE,
    }
)


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    # DEGRADED from this many remapped rows (correctable + uncorrectable) on; None: never. A
    # heuristic (NVIDIA publishes no number): both kinds use up the banks' spare rows, and when
    # a bank has none left the next error there is a RowRemapFailure.
    remapped_rows_degraded: int | None = 8


@dataclass(frozen=True, slots=True)
class GpuEvents:
    """What the NVML event thread recorded for one GPU since the agent started (or the last clear)."""

    xids: tuple[XidEvent, ...] = ()  # critical XIDs, newest last (the store applies the ignore list too)
    double_bit_ecc: int = 0  # DoubleBitEccError events
    gpu_unavailable: bool = False  # a GpuUnavailableError event
    recovery_action: int = RECOVERY_NONE  # the latest GpuRecoveryAction event's action


@dataclass(frozen=True, slots=True)
class Verdict:
    health: str  # HEALTHY / DEGRADED / UNHEALTHY
    unhealthy: tuple[str, ...]
    degraded: tuple[str, ...]

    @property
    def reasons(self) -> list[str]:
        return [*self.unhealthy, *self.degraded]


def parse_xid_list(text: str) -> frozenset[int]:
    """ "13, 31,43" -> {13, 31, 43}; "" -> {} (ignore none). Raises ValueError naming the bad item."""
    xids: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or not 0 < int(item) < 65536:
            raise ValueError(f"{item!r} is not an XID (a number in 1..65535)")
        xids.add(int(item))
    return frozenset(xids)


def critical_xids(events: GpuEvents | None, policy: HealthPolicy) -> list[XidEvent]:
    if events is None:
        return []
    kept = [x for x in events.xids if x.xid not in policy.ignored_xids]
    return kept[-MAX_REPORTED_XIDS:]


def classify(reading: GpuReading, events: GpuEvents | None, policy: HealthPolicy) -> Verdict:
    # The reader's reasons are NVML error names (GpuIsLost, ...); drop our own codes so that
    # classifying a reading twice gives the same verdict.
    unhealthy = [r for r in reading.unhealthy_reasons if r not in _OWN_CODES]
    degraded: list[str] = []
    errors = reading.errors
    if critical_xids(events, policy):
        unhealthy.append(XID_CRITICAL)
    if (errors is not None and (errors.ecc_uncorrected_volatile or 0) > 0) or (events and events.double_bit_ecc > 0):
        unhealthy.append(ECC_UNCORRECTED)
    if errors is not None and errors.remap_failure:
        unhealthy.append(ROW_REMAP_FAILURE)
    if events is not None and events.gpu_unavailable:
        unhealthy.append(GPU_UNAVAILABLE)
    if events is not None and events.recovery_action not in (RECOVERY_NONE, RECOVERY_DRAIN_P2P):
        unhealthy.append(RECOVERY_ACTION_REQUIRED)
    if errors is not None:
        if errors.remap_pending:
            degraded.append(ROW_REMAP_PENDING)
        if errors.retired_pages_pending:
            degraded.append(RETIRED_PAGES_PENDING)
        rows = (errors.remapped_rows_correctable or 0) + (errors.remapped_rows_uncorrectable or 0)
        if policy.remapped_rows_degraded is not None and rows >= policy.remapped_rows_degraded:
            degraded.append(REMAPPED_ROWS_HIGH)
    reasons = reading.clock_event_reasons or 0
    if reasons & (REASON_SW_THERMAL | REASON_HW_THERMAL):
        degraded.append(THERMAL_SLOWDOWN)
    if reasons & REASON_HW_POWER_BRAKE:
        degraded.append(POWER_BRAKE)
    if reasons & REASON_HW_SLOWDOWN:
        degraded.append(HW_SLOWDOWN)
    if events is not None and events.recovery_action == RECOVERY_DRAIN_P2P:
        degraded.append(RECOVERY_DRAIN_P2P_CODE)
    health = UNHEALTHY if unhealthy else DEGRADED if degraded else HEALTHY
    return Verdict(health, tuple(unhealthy), tuple(degraded))


def apply(reading: GpuReading, events: GpuEvents | None, policy: HealthPolicy) -> Verdict:
    """Set the reading's health fields (and its XIDs) from `classify`."""
    verdict = classify(reading, events, policy)
    reading.health = verdict.health
    reading.health_reasons = verdict.reasons[:MAX_HEALTH_REASONS]
    reading.unhealthy_reasons = list(verdict.unhealthy[:MAX_UNHEALTHY_REASONS])
    reading.healthy = verdict.health != UNHEALTHY
    reading.xids = critical_xids(events, policy)
    return verdict


class HealthEnricher:
    """A SampleLoop enricher: classifies every GPU of a sample against the events recorded so far.

    `events` returns the recorded events by GPU UUID (`EventStore.snapshot` of nvml_events); it
    is called once per sample, so one sample sees one consistent set of events."""

    def __init__(self, policy: HealthPolicy, events: Callable[[], Mapping[str, GpuEvents]] | None = None) -> None:
        self._policy = policy
        self._events = events or dict

    def __call__(self, sample: NodeSample) -> None:
        recorded = self._events()
        for reading in sample.gpus:
            apply(reading, recorded.get(reading.uuid) if reading.uuid else None, self._policy)
