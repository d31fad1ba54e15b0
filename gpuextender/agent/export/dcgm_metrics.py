"""The latest NodeSample under NVIDIA dcgm-exporter's metric names, units and labels, so a
dcgm-exporter user can point dashboards and alerts at gpu-agent unchanged (gpu-agent
--dcgm-names=false turns this off).

Names and units follow dcgm-exporter's etc/default-counters.csv (see
/work/shared/reference/peers.md §4.1): utilization in %, framebuffer in whole MiB (bytes // 2**20,
rounded down like DCGM's integer fields), temperature in °C, power in W, energy in mJ, clocks in
MHz (ROW_REMAP_PENDING is a DCGM field outside the shipped CSVs, served under its DCGM name as
dcgm-exporter serves any field a user lists). XID_ERRORS is the value of the last critical XID the
agent saw since it started (after its ignore list; dcgm-exporter reports any XID), 0 when none. A
reading that is None is left out, never rendered as 0.

Labels are dcgm-exporter's render_metrics.go set: `gpu` (index), `UUID`, `pci_bus_id`,
`device`, `modelName` (raw NVML name), `Hostname` (the node name; at dcgm-exporter HEAD after tag
4.5.3-4.8.2 it became lowercase `hostname`, we keep the released spelling),
`DCGM_FI_DRIVER_VERSION`, and `pod`, `namespace`, `container` as dcgm-exporter --kubernetes adds
them. MIG instances add `GPU_I_PROFILE` and `GPU_I_ID` (their `UUID` is the parent GPU's, as in
dcgm-exporter).

Pods, one series per holder: a GPU held by nobody gets one series with pod="", namespace="",
container="" (what dcgm-exporter --kubernetes printed for an unallocated GPU; with our PodMonitor's
honorLabels, Prometheus keeps an exposed label even when empty instead of attaching the agent pod's
own `pod`/`namespace`/`container`, then drops it as empty). A GPU held by several containers
(time-slicing, MPS) gets one series per distinct (namespace, pod, container), like dcgm-exporter
--kubernetes-virtual-gpus, but without its `vgpu` label (the label set stays the same on every
series; a container holding two replicas of a GPU is one series), and keeping the series of a GPU
nobody holds (that mode's pod mapper, as read, emits held GPUs only). Without that flag
dcgm-exporter names one holder only (its issue #151). Take `max by (Hostname, gpu)` before summing.
A device DRA allocated adds dcgm-exporter's DRA labels to its holder's series: `dra_claim_name`,
`dra_claim_namespace`, `dra_driver_name`, `dra_pool_name`, `dra_device_name` (absent on every
other series, as in dcgm-exporter).

Types: every family is a gauge, dcgm's counters (TOTAL_ENERGY_CONSUMPTION, ECC totals, remapped
rows) included. prometheus_client's text exposition writes a counter family's samples as
`<name>_total`, and dcgm's counter names have no `_total`: typed as counters they would be served
as DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total, which no dcgm query matches. PromQL does not read
the TYPE line, so rate() and increase() work on these as on dcgm-exporter's; only tools reading
metric metadata see "gauge".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gpuextender.agent.model.readings import ErrorCounters, GpmReading, GpuReading, Holder, MigReading, NodeSample

MIB = 2**20

# dcgm-exporter's label names, in its order.
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")
POD_LABELS = ("pod", "namespace", "container")
DRA_LABELS = ("dra_claim_name", "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name")
MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")


@dataclass(frozen=True, slots=True)
class DcgmField:
    name: str
    help: str
    read: Callable[[GpuReading], float | None]
    read_mig: Callable[[MigReading], float | None] | None = None  # served per MIG instance too


def _mib(value: int | None) -> float | None:
    return None if value is None else float(value // MIB)


def _error(read: Callable[[ErrorCounters], int | bool | None]) -> Callable[[GpuReading], float | None]:
    def from_gpu(gpu: GpuReading) -> float | None:
        value = read(gpu.errors) if gpu.errors is not None else None
        return None if value is None else float(value)

    return from_gpu


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def _ratio(percent: float | None) -> float | None:
    """dcgm-exporter serves DCGM_FI_PROF_* as ratios (0..1); GPM gives percent."""
    return None if percent is None else percent / 100.0


def _prof(name: str, help_text: str, pick: Callable[[GpmReading], float | None]) -> DcgmField:
    """A DCGM_FI_PROF_* field from GPM, per GPU and per MIG instance (absent without GPM)."""

    def of(device: GpuReading | MigReading) -> float | None:
        return None if device.gpm is None else _ratio(pick(device.gpm))

    return DcgmField(name, help_text, of, of)


def _last_xid(gpu: GpuReading) -> float:
    return float(gpu.xids[-1].xid) if gpu.xids else 0.0


# Profiling fields from NVML GPM (agent.sources.nvml_gpm), per GPU and per MIG instance; absent where
# GPM is not supported.
PROF_FIELDS: tuple[DcgmField, ...] = (
    _prof(
        "DCGM_FI_PROF_SM_ACTIVE",
        "Ratio of cycles an SM has at least 1 warp assigned (NVML GPM SM utilization, 0..1).",
        lambda m: m.sm_active,
    ),
    _prof(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "Ratio of warps resident on SMs to the maximum (NVML GPM SM occupancy, 0..1).",
        lambda m: m.sm_occupancy,
    ),
    _prof(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles any tensor pipe is active (NVML GPM, 0..1).",
        lambda m: m.tensor_active,
    ),
    _prof(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active (NVML GPM DRAM bandwidth, 0..1).",
        lambda m: m.dram_active,
    ),
    _prof(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active (NVML GPM graphics utilization, 0..1).",
        lambda m: m.graphics_active,
    ),
)

GPU_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: _number(g.utilization_gpu_percent)),
    DcgmField(
        "DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda g: _number(g.utilization_memory_percent)
    ),
    DcgmField("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda g: _mib(g.memory_used_bytes)),
    DcgmField("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", lambda g: _mib(g.memory_free_bytes)),
    DcgmField(
        "DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", lambda g: _mib(g.memory_reserved_bytes)
    ),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: _number(g.temperature_celsius)),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: _number(g.power_watts)),
    DcgmField(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since the driver loaded (in mJ); a counter, exposed as a gauge.",
        lambda g: _number(g.energy_millijoules),
    ),
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: _number(g.sm_clock_mhz)),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda g: _number(g.memory_clock_mhz)),
    DcgmField(
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last critical XID error seen since gpu-agent started (0: none).",
        _last_xid,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Single-bit (corrected) volatile ECC errors since the driver loaded; a counter, exposed as a gauge.",
        _error(lambda e: e.ecc_corrected_volatile),
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Double-bit (uncorrected) volatile ECC errors since the driver loaded; a counter, exposed as a gauge.",
        _error(lambda e: e.ecc_uncorrected_volatile),
    ),
    DcgmField(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Rows remapped for uncorrectable errors; a counter, exposed as a gauge.",
        _error(lambda e: e.remapped_rows_uncorrectable),
    ),
    DcgmField(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Rows remapped for correctable errors; a counter, exposed as a gauge.",
        _error(lambda e: e.remapped_rows_correctable),
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed (1: yes).",
        _error(lambda e: e.remap_failure),
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "Whether remapping of rows is pending (1: yes).",
        _error(lambda e: e.remap_pending),
    ),
    DcgmField("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", lambda g: _number(g.memory_temperature_celsius)),
    DcgmField(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "PCIe replays since the driver loaded; a counter, exposed as a gauge.",
        lambda g: _number(g.pcie_replays),
    ),
    DcgmField("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", lambda g: _number(g.encoder_utilization_percent)),
    DcgmField("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", lambda g: _number(g.decoder_utilization_percent)),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "NVLink data sent and received over all links since the driver loaded (in KiB, NVML's "
        "NVLINK_THROUGHPUT_DATA fields); a counter, exposed as a gauge.",
        lambda g: _number(g.nvlink_data_kib),
    ),
    DcgmField(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "PCIe bytes sent by the GPU per second since the last sample (NVML's PCIe byte counter, in B/s).",
        lambda g: g.pcie_tx_bytes_per_s,
    ),
    DcgmField(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "PCIe bytes received by the GPU per second since the last sample (NVML's PCIe byte counter, in B/s).",
        lambda g: g.pcie_rx_bytes_per_s,
    ),
    *PROF_FIELDS,
)

# Per MIG instance (only these two: MIG readings carry memory alone).
MIG_FB_USED = "DCGM_FI_DEV_FB_USED"
MIG_FB_FREE = "DCGM_FI_DEV_FB_FREE"

METRIC_NAMES: frozenset[str] = frozenset(f.name for f in GPU_FIELDS)


def _pods(holders: Sequence[Holder]) -> list[dict[str, str]]:
    series = {_pod_labels(h) for h in holders}
    if not series:
        return [{"pod": "", "namespace": "", "container": ""}]
    return [dict(labels) for labels in sorted(series)]


def _pod_labels(h: Holder) -> tuple[tuple[str, str], ...]:
    labels = (("pod", h.pod), ("namespace", h.namespace), ("container", h.container))
    if not h.dra_claim_name:
        return labels
    dra = (h.dra_claim_name, h.dra_claim_namespace, h.resource_name, h.dra_pool, h.device_id)
    return (*labels, *zip(DRA_LABELS, dra, strict=True))


def _gpu_labels(gpu: GpuReading, hostname: str, driver_version: str) -> dict[str, str]:
    return {
        "gpu": str(gpu.index),
        "UUID": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        # dcgm-exporter uses the device's minor number (/dev/nvidia<minor>); it equals the
        # NVML index on standard systems, and the agent does not read the minor number.
        "device": f"nvidia{gpu.index}",
        "modelName": gpu.name,
        "Hostname": hostname,
        "DCGM_FI_DRIVER_VERSION": driver_version,
    }


def _mig_memory(mig: MigReading) -> tuple[float | None, float | None]:
    used = _mib(mig.memory_used_bytes)
    free = None
    if mig.memory_total_bytes is not None and mig.memory_used_bytes is not None:
        free = float(max(0, mig.memory_total_bytes - mig.memory_used_bytes) // MIB)
    return used, free


def render(sample: NodeSample | None, hostname: str) -> list[Metric]:
    """Every dcgm family, empty ones included (so the names are known before the first sample)."""
    families = {f.name: Metric(f.name, f.help, "gauge") for f in GPU_FIELDS}
    gpus = sample.gpus if sample is not None else []
    driver = sample.driver_version if sample is not None else ""
    for gpu in gpus:
        base = _gpu_labels(gpu, hostname, driver)
        pods = _pods(gpu.holders)
        for field in GPU_FIELDS:
            value = field.read(gpu)
            if value is None:
                continue
            for pod in pods:
                families[field.name].add_sample(field.name, {**base, **pod}, value)
        for mig in gpu.mig_instances:
            instance = {**base, "GPU_I_PROFILE": mig.profile, "GPU_I_ID": str(mig.gpu_instance_id)}
            used, free = _mig_memory(mig)
            values = [(MIG_FB_USED, used), (MIG_FB_FREE, free)]
            values += [(f.name, f.read_mig(mig)) for f in GPU_FIELDS if f.read_mig is not None]
            for name, value in values:
                if value is None:
                    continue
                for pod in _pods(mig.holders):
                    families[name].add_sample(name, {**instance, **pod}, value)
    return list(families.values())


class DcgmCollector(Collector):
    """Renders at scrape time: a GPU that disappears disappears from /metrics too."""

    def __init__(self, hostname: str, latest: Callable[[], NodeSample | None]) -> None:
        self._hostname = hostname
        self._latest = latest

    def collect(self) -> Iterator[Metric]:
        yield from render(self._latest(), self._hostname)
