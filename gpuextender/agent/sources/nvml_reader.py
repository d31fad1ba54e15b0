"""Reads every GPU of the node through NVML (`nvidia-ml-py`, imported as `pynvml`).

The reader always calls the real `pynvml` functions. Without a GPU, the fake
backend (`agent.fakes.nvml`) is installed *underneath* pynvml in place of
libnvidia-ml.so.1, so this exact code, pynvml's ctypes wrappers and its error
classes are what tests and the demo run.

Identity (UUID, name, PCI bus id, compute capability, NUMA node) is read once
per GPU and cached; live readings are read every sample: memory (the v2 call),
utilization, temperature, power, and since 0.2 the memory-error counters (ECC
volatile totals, remapped rows, retired pages pending), the clock event reasons,
SM and memory clocks, total energy and the MIG devices of a GPU in MIG mode.
Each reading a GPU does not support (NotSupported, FunctionNotFound) is None:
unknown, never zero, and never a reason to call the GPU unhealthy. The GPU
interconnect (NVLink, PCIe) is read once per NVML init (`topology()`) and
repeated in every sample. How each NVML error is handled is decided in
`agent.sources.nvml_errors`.

NUMA: nvmlDeviceGetNumaNodeId is deliberately not used: NVML documents it for
"platforms where the GPUs are NUMA nodes" (the GPU's own memory node on
Grace Hopper), not the node of the PCIe device that the wire field means. The
reader asks nvmlDeviceGetMemoryAffinity(scope NODE) (the CPU-side node nvidia-smi
topo shows) and falls back to sysfs (/sys/bus/pci/devices/<bdf>/numa_node).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from gpuextender.agent.model.readings import ErrorCounters, GpuLink, GpuReading, MigReading, NodeSample
from gpuextender.agent.sources.nvml_errors import ErrorGroup, classify, error_name
from gpuextender.agent.sources.nvml_gpm import GpmSampler

log = logging.getLogger("gpu_agent.nvml")

ErrorHook = Callable[[str, str], None]  # (nvml call, error name)
# nvmlGpuTopologyLevel_t -> GpuLink.pcie
PCIE_RELATION: dict[int, str] = {
    pynvml.NVML_TOPOLOGY_INTERNAL: "internal",
    pynvml.NVML_TOPOLOGY_SINGLE: "single",
    pynvml.NVML_TOPOLOGY_MULTIPLE: "multiple",
    pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "hostbridge",
    pynvml.NVML_TOPOLOGY_NODE: "node",
    pynvml.NVML_TOPOLOGY_SYSTEM: "system",
}
ENERGY_REFRESH_S = 10.0  # the energy counter is read again after this long (_energy_of)
ABSENT_RECHECK_S = 60.0  # how long a 0.2 reading a GPU answered NotSupported for is not asked again
_AFFINITY_SCOPE_NODE = getattr(pynvml, "NVML_AFFINITY_SCOPE_NODE", 0)  # newer than some nvidia-ml-py we allow
_NUMA_NODE_WORDS = 4  # nvmlDeviceGetMemoryAffinity node set: 4 x 64 bits, up to 256 NUMA nodes
_MIG_NAME = re.compile(r"\bMIG\s+(\S+)\s*$")  # "NVIDIA A100-SXM4-40GB MIG 1g.5gb" -> "1g.5gb"
# Field values read in one nvmlDeviceGetFieldValues call per GPU (nvml.h NVML_FI_DEV_*; ids, not
# pynvml names, which older releases we allow lack).
FI_MEMORY_TEMP = 82
FI_PCIE_REPLAY_COUNTER = 94
FI_NVLINK_THROUGHPUT_DATA_TX = 138  # KiB since the driver loaded, per link (scopeId = link)
FI_NVLINK_THROUGHPUT_DATA_RX = 139
FI_PCIE_COUNT_TX_BYTES = 197  # bytes since the driver loaded (Hopper and later; dcgm's PCIE_TX_BYTES)
FI_PCIE_COUNT_RX_BYTES = 198
_VALUE_MEMBER = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # by nvmlValueType_t
_BUS_ID = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine at all; the message names the cause."""


class _NodeFatal(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


_LIBRARY_HINT = (
    "cannot load NVML: libnvidia-ml.so.1 was not found. Run on a node with the NVIDIA "
    "driver, in a container started by the NVIDIA runtime (runtimeClassName: nvidia, "
    "NVIDIA_DRIVER_CAPABILITIES=utility), or pass --fake SCENARIO.yaml to simulate GPUs."
)


class NvmlReader:
    """Samples all GPUs of the node. Not thread-safe: one sample at a time."""

    def __init__(
        self,
        on_error: ErrorHook | None = None,
        *,
        sysfs_root: Path | None = Path("/sys"),
        clock: Callable[[], float] = time.monotonic,
        gpm: bool = True,
    ) -> None:
        """`sysfs_root`: where the NUMA fallback reads PCI devices; None turns the fallback off
        (pass None with the fake NVML: its bus ids are not this machine's devices). `clock`
        times how long an unsupported reading is not asked again. `gpm`: read GPM where the
        GPU supports it (agent.sources.nvml_gpm)."""
        self._on_error = on_error or (lambda call, name: None)
        self._gpm = GpmSampler(self._on_error) if gpm else None
        self._nvlinks: dict[int, list[int]] = {}  # GPU -> its active NVLinks, read with the topology
        self._energy: dict[int, tuple[int, float]] = {}  # GPU -> (millijoules, clock() when read)
        # GPU -> (PCIe TX bytes, RX bytes, the fields' timestamp in us): the last counters read
        self._pcie: dict[int, tuple[float, float, int]] = {}
        self._sysfs_root = sysfs_root
        self._clock = clock
        self._initialized = False
        self._driver_version = ""
        self._handles: list[Any | None] = []
        self._identity: dict[int, GpuReading] = {}
        self._failing: set[tuple[int, str, str]] = set()  # (gpu, call, error) seen last sample
        self._topology: list[GpuLink] | None = None
        # Drivers before 535 export only the old name of nvmlDeviceGetCurrentClocksEventReasons;
        # decided on the first FunctionNotFound so later samples do not pay a failed lookup.
        self._reasons_fn: Callable[[Any], int] = getattr(
            pynvml, "nvmlDeviceGetCurrentClocksEventReasons", pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        self._mig_slots: dict[int, int] = {}  # GPU -> nvmlDeviceGetMaxMigDeviceCount (static)
        self._absent: dict[tuple[int, str, tuple[Any, ...]], float] = {}  # (GPU, call, args) -> recheck time
        self._mig_static: dict[str, tuple[str, int, int]] = {}  # MIG UUID -> (profile, GI id, CI id)

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Initialise NVML. Raises NvmlUnavailable only when the library is missing;
        a driver that is not ready yet is reported in samples and retried."""
        try:
            self._init()
        except pynvml.NVMLError as exc:
            name = error_name(exc)
            if name == "LibraryNotFound":
                raise NvmlUnavailable(_LIBRARY_HINT) from None
            log.error("NVML init failed (%s): will retry every sample", name)

    def close(self) -> None:
        if self._gpm is not None:
            self._gpm.close()
        if self._initialized:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as exc:
                log.debug("nvmlShutdown failed: %s", error_name(exc))
            self._initialized = False

    def _init(self) -> None:
        pynvml.nvmlInit()
        self._initialized = True
        try:
            self._driver_version = pynvml.nvmlSystemGetDriverVersion()
        except pynvml.NVMLError as exc:
            self._driver_version = ""
            self._on_error("nvmlSystemGetDriverVersion", error_name(exc))
        count = pynvml.nvmlDeviceGetCount()
        self._handles = [None] * count
        self._identity = {}
        self._mig_slots = {}
        self._mig_static = {}
        self._absent = {}
        self._energy = {}
        self._pcie = {}
        log.info("NVML initialised: driver %s, %d GPU(s)", self._driver_version or "?", count)
        self._topology = self._read_topology()

    def topology(self) -> list[GpuLink] | None:
        """The GPU interconnect as read at the last NVML init; None = unknown."""
        return self._topology

    # -- sampling ----------------------------------------------------------

    def sample(self) -> NodeSample:
        started = time.perf_counter()
        sample_time = time.time()
        gpus: list[GpuReading] = []
        node_error = ""
        failing: set[tuple[int, str, str]] = set()
        try:
            if not self._initialized:
                self._init()
            for index in range(len(self._handles)):
                gpus.append(self._read_gpu(index, failing))
        except _NodeFatal as fatal:
            node_error = fatal.name
        except pynvml.NVMLError as exc:  # from _init: nvmlInit / nvmlDeviceGetCount
            node_error = error_name(exc)
        if node_error:
            gpus = []
            self._mark_uninitialized(node_error)
        self._log_transitions(failing)
        return NodeSample(
            sample_time=sample_time,
            duration_s=time.perf_counter() - started,
            driver_version=self._driver_version,
            gpus=gpus,
            node_error=node_error,
            topology=None if node_error else self._topology,
        )

    def _mark_uninitialized(self, node_error: str) -> None:
        if self._initialized:
            log.error("NVML unusable on this node (%s): reporting node error, will re-init", node_error)
        self._initialized = False
        self._handles = []
        self._topology = None
        if self._gpm is not None:
            self._gpm.close()  # the handles its samples were taken on are gone

    def _read_gpu(self, index: int, failing: set[tuple[int, str, str]]) -> GpuReading:
        reading = GpuReading(index=index)
        absent = ""  # the ABSENT error of the last call(): "NotSupported", "FunctionNotFound", "NoData" or ""

        def call(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any | None:
            nonlocal absent
            absent = ""
            try:
                return fn(*args, **kwargs)
            except pynvml.NVMLError as exc:
                err = error_name(exc)
                group = classify(exc)
                if group is ErrorGroup.NODE_FATAL:
                    raise _NodeFatal(err) from None
                if group is ErrorGroup.ABSENT:
                    absent = err
                    return None
                failing.add((index, name, err))
                self._on_error(name, err)
                if group is ErrorGroup.GPU_UNHEALTHY:
                    reading.healthy = False
                    if err not in reading.unhealthy_reasons:
                        reading.unhealthy_reasons.append(err)
                return None

        now = self._clock()

        def optional(name: str, fn: Callable[..., Any], *args: Any) -> Any | None:
            """A 0.2 reading: one this GPU does not support is not asked again for ABSENT_RECHECK_S
            (a consumer GPU would otherwise pay ~9 failing calls per sample). Rechecked because
            some answers change at run time: remapped rows are NotSupported while MIG instances exist."""
            key = (index, name, args[1:])
            if self._absent.get(key, 0.0) > now:
                return None
            value = call(name, fn, *args)
            if absent in ("NotSupported", "FunctionNotFound"):  # not NoData: that one is momentary
                self._absent[key] = now + ABSENT_RECHECK_S
            return value

        handle = self._handles[index]
        if handle is None:
            handle = call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                if reading.healthy:  # no handle and no health verdict: still unusable
                    reading.healthy = False
                    reading.unhealthy_reasons.append("NoHandle")
                return reading
            self._handles[index] = handle

        identity = self._identity.get(index)
        if identity is None:
            identity = self._read_identity(index, handle, call)
        reading.uuid = identity.uuid
        reading.name = identity.name
        reading.pci_bus_id = identity.pci_bus_id
        reading.compute_capability = identity.compute_capability
        reading.numa_node = identity.numa_node
        reading.minor_number = identity.minor_number

        memory = call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2)
        if memory is not None:
            reading.memory_total_bytes = int(memory.total)
            reading.memory_used_bytes = int(memory.used)
            reading.memory_free_bytes = int(memory.free)
            reading.memory_reserved_bytes = int(memory.reserved)
        utilization = call("nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates, handle)
        if utilization is not None:
            reading.utilization_gpu_percent = int(utilization.gpu)
            reading.utilization_memory_percent = int(utilization.memory)
        reading.temperature_celsius = call(
            "nvmlDeviceGetTemperature", pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU
        )
        power_mw = call("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, handle)
        if power_mw is not None:
            reading.power_watts = power_mw / 1000.0
        if self._gpm is not None:
            reading.gpm = self._gpm.read(index, handle)
        self._read_fields(reading, handle, optional)
        encoder = optional("nvmlDeviceGetEncoderUtilization", pynvml.nvmlDeviceGetEncoderUtilization, handle)
        reading.encoder_utilization_percent = int(encoder[0]) if encoder is not None else None
        decoder = optional("nvmlDeviceGetDecoderUtilization", pynvml.nvmlDeviceGetDecoderUtilization, handle)
        reading.decoder_utilization_percent = int(decoder[0]) if decoder is not None else None
        reading.errors = self._read_error_counters(handle, optional)
        reading.clock_event_reasons = optional(
            "nvmlDeviceGetCurrentClocksEventReasons", self._clock_event_reasons, handle
        )
        reading.sm_clock_mhz = optional(
            "nvmlDeviceGetClockInfo", pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM
        )
        reading.memory_clock_mhz = optional(
            "nvmlDeviceGetClockInfo", pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM
        )
        reading.energy_millijoules = self._energy_of(index, handle, now, optional)
        reading.mig_instances = self._read_mig(index, handle, reading.memory_total_bytes, call, optional)
        return reading

    def _energy_of(self, index: int, handle: Any, now: float, optional: Callable[..., Any]) -> int | None:
        """The energy counter, read at most every ENERGY_REFRESH_S: nvmlDeviceGetTotalEnergyConsumption
        took 3.2 ms of a 4.6 ms pass on an H200 (bench/RESULTS-gpu.md), and a counter that only
        feeds rate() over minutes loses nothing by being up to 10 s old."""
        cached = self._energy.get(index)
        if cached is not None and now - cached[1] < ENERGY_REFRESH_S:
            return cached[0]
        energy = optional("nvmlDeviceGetTotalEnergyConsumption", pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        if energy is None:
            self._energy.pop(index, None)
            return None
        self._energy[index] = (int(energy), now)
        return int(energy)

    def _read_fields(self, reading: GpuReading, handle: Any, optional: Callable[..., Any]) -> None:
        """Memory temperature, PCIe replays, PCIe bytes and NVLink data in one nvmlDeviceGetFieldValues
        call; each field NVML does not give stays None."""
        links = self._nvlinks.get(reading.index, [])
        ids: list[Any] = [FI_MEMORY_TEMP, FI_PCIE_REPLAY_COUNTER, FI_PCIE_COUNT_TX_BYTES, FI_PCIE_COUNT_RX_BYTES]
        ids += [
            (field, link) for link in links for field in (FI_NVLINK_THROUGHPUT_DATA_TX, FI_NVLINK_THROUGHPUT_DATA_RX)
        ]
        values = optional("nvmlDeviceGetFieldValues", _field_values, handle, tuple(ids))
        if values is None:
            return
        numbers = [_field_number(v) for v in values]
        reading.memory_temperature_celsius = None if numbers[0] is None else int(numbers[0])
        reading.pcie_replays = None if numbers[1] is None else int(numbers[1])
        self._pcie_rates(reading, numbers[2], numbers[3], int(values[2].timestamp))
        nvlink = numbers[4:]
        if nvlink and None not in nvlink:  # a total over some links only would read as a drop
            reading.nvlink_data_kib = int(sum(n for n in nvlink if n is not None))

    def _pcie_rates(self, reading: GpuReading, tx: float | None, rx: float | None, stamp_us: int) -> None:
        """Bytes per second since the last sample, from NVML's own timestamps (a late sample is not
        a burst). Nothing on the first sample, when a counter went back (driver reload) or when
        the timestamp did not move."""
        index = reading.index
        last = self._pcie.get(index)
        if tx is None or rx is None:
            self._pcie.pop(index, None)
            return
        self._pcie[index] = (tx, rx, stamp_us)
        if last is None:
            return
        seconds = (stamp_us - last[2]) / 1e6
        if seconds <= 0 or tx < last[0] or rx < last[1]:
            return
        reading.pcie_tx_bytes_per_s = (tx - last[0]) / seconds
        reading.pcie_rx_bytes_per_s = (rx - last[1]) / seconds

    @staticmethod
    def _read_error_counters(handle: Any, optional: Callable[..., Any]) -> ErrorCounters | None:
        """ECC volatile totals, row remapping (Ampere+), retired pages (pre-Ampere); None if none is supported."""
        counters = ErrorCounters()
        counters.ecc_uncorrected_volatile = optional(
            "nvmlDeviceGetTotalEccErrors",
            pynvml.nvmlDeviceGetTotalEccErrors,
            handle,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        counters.ecc_corrected_volatile = optional(
            "nvmlDeviceGetTotalEccErrors",
            pynvml.nvmlDeviceGetTotalEccErrors,
            handle,
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        rows = optional("nvmlDeviceGetRemappedRows", pynvml.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            correctable, uncorrectable, pending, failure = rows
            counters.remapped_rows_correctable = int(correctable)
            counters.remapped_rows_uncorrectable = int(uncorrectable)
            counters.remap_pending = bool(pending)
            counters.remap_failure = bool(failure)
        retired = optional(
            "nvmlDeviceGetRetiredPagesPendingStatus", pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle
        )
        if retired is not None:
            counters.retired_pages_pending = retired == pynvml.NVML_FEATURE_ENABLED
        if counters == ErrorCounters():
            return None
        return counters

    def _clock_event_reasons(self, handle: Any) -> int:
        try:
            return int(self._reasons_fn(handle))
        except pynvml.NVMLError_FunctionNotFound:
            if self._reasons_fn is pynvml.nvmlDeviceGetCurrentClocksThrottleReasons:
                raise
            log.info(
                "nvmlDeviceGetCurrentClocksEventReasons is not in this driver: using its old name, "
                "nvmlDeviceGetCurrentClocksThrottleReasons"
            )
            self._reasons_fn = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
            return int(self._reasons_fn(handle))

    def _read_mig(
        self, index: int, handle: Any, gpu_memory: int | None, call: Callable[..., Any], optional: Callable[..., Any]
    ) -> list[MigReading]:
        """MIG devices of a GPU in MIG mode (empty otherwise). Profile and instance ids are read
        once per MIG UUID; a reconfigured GPU has new UUIDs, so the cache cannot go stale."""
        mode = optional("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, handle)
        if mode is None or mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return []
        slots = self._mig_slots.get(index)
        if slots is None:
            slots = call("nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle)
            if slots is None:
                return []
            self._mig_slots[index] = slots = int(slots)
        instances: list[MigReading] = []
        seen_instances: set[int] = set()
        for slot in range(slots):
            mig = call("nvmlDeviceGetMigDeviceHandleByIndex", _mig_device_handle, handle, slot)
            if mig is None:
                continue
            uuid = _text(call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, mig))
            if not uuid:
                continue
            static = self._mig_static.get(uuid) or self._read_mig_static(uuid, mig, gpu_memory, call)
            reading = MigReading(uuid=uuid, profile=static[0], gpu_instance_id=static[1], compute_instance_id=static[2])
            if self._gpm is not None and static[1] not in seen_instances:  # GPM measures GPU instances
                seen_instances.add(static[1])
                reading.gpm = self._gpm.read(index, handle, static[1])
            memory = call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, mig, version=pynvml.nvmlMemory_v2)
            if memory is not None:
                reading.memory_total_bytes = int(memory.total)
                reading.memory_used_bytes = int(memory.used)
            instances.append(reading)
        if self._gpm is not None:
            self._gpm.forget_instances(index, seen_instances)
        return instances

    def _read_mig_static(
        self, uuid: str, mig: Any, gpu_memory: int | None, call: Callable[..., Any]
    ) -> tuple[str, int, int]:
        name = _text(call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, mig))
        gi = call("nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId, mig)
        ci = call("nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId, mig)
        match = _MIG_NAME.search(name)
        profile = match.group(1) if match else ""
        if not profile:  # a driver that names MIG devices differently: from slices and memory
            attrs = call("nvmlDeviceGetAttributes", pynvml.nvmlDeviceGetAttributes, mig)
            if attrs is not None and gpu_memory:
                profile = mig_profile_from_attributes(
                    int(attrs.gpuInstanceSliceCount),
                    int(attrs.computeInstanceSliceCount),
                    int(attrs.memorySizeMB),
                    gpu_memory,
                )
        static = (profile, int(gi) if gi is not None else 0, int(ci) if ci is not None else 0)
        if profile and gi is not None and ci is not None:
            self._mig_static[uuid] = static
        return static

    def _read_identity(self, index: int, handle: Any, call: Callable[..., Any]) -> GpuReading:
        """Static facts; cached only once every one of them was read."""
        identity = GpuReading(index=index)
        uuid = call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle)
        name = call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle)
        pci = call("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, handle)
        capability = call("nvmlDeviceGetCudaComputeCapability", pynvml.nvmlDeviceGetCudaComputeCapability, handle)
        identity.uuid = _text(uuid)
        identity.name = _text(name)
        identity.pci_bus_id = _text(pci.busId) if pci is not None else ""
        identity.compute_capability = (int(capability[0]), int(capability[1])) if capability else None
        identity.numa_node = self._read_numa_node(handle, identity.pci_bus_id, call)
        # Not part of the "all read" condition below: NotSupported on some platforms (vGPU guests).
        minor = call("nvmlDeviceGetMinorNumber", pynvml.nvmlDeviceGetMinorNumber, handle)
        identity.minor_number = int(minor) if minor is not None else None
        if None not in (uuid, name, pci, capability):
            self._identity[index] = identity
        return identity

    def _read_numa_node(self, handle: Any, pci_bus_id: str, call: Callable[..., Any]) -> int | None:
        affinity = call(
            "nvmlDeviceGetMemoryAffinity",
            pynvml.nvmlDeviceGetMemoryAffinity,
            handle,
            _NUMA_NODE_WORDS,
            _AFFINITY_SCOPE_NODE,
        )
        if affinity is not None:
            nodes = [w * 64 + bit for w in range(_NUMA_NODE_WORDS) for bit in range(64) if int(affinity[w]) >> bit & 1]
            if len(nodes) == 1:  # several (or none): no single node to name
                return nodes[0]
            return None
        return sysfs_numa_node(self._sysfs_root, pci_bus_id)

    # -- topology ----------------------------------------------------------

    def _read_topology(self) -> list[GpuLink] | None:
        """NVLinks and PCIe relation of every GPU pair (a < b). A pair NVML cannot relate is left
        out; None when NVML related no pair at all (unknown) on a node of two GPUs or more.

        NVLinks: active links whose remote end is the other GPU, plus, on NVSwitch systems (HGX),
        min(links into the switch fabric) when both GPUs reach a common NVSwitch: that is the
        bandwidth a pair gets, as `nvidia-smi topo -m` shows it (NV18 on an HGX H100)."""
        count = len(self._handles)
        handles: list[Any | None] = []
        buses: dict[tuple[int, int, int, int], int] = {}
        for index in range(count):
            handle = self._quiet(pynvml.nvmlDeviceGetHandleByIndex, index)
            handles.append(handle)
            pci = self._quiet(pynvml.nvmlDeviceGetPciInfo, handle) if handle is not None else None
            key = bus_key(_text(pci.busId)) if pci is not None else None
            if key is not None:
                buses[key] = index
        direct: list[Counter[int]] = []
        switches: list[tuple[int, set[tuple[int, int, int, int] | None]]] = []
        self._nvlinks = {}
        for index, handle in enumerate(handles):
            active: list[int] = []
            peers, switch = self._read_nvlinks(handle, buses, active) if handle is not None else (Counter(), (0, set()))
            direct.append(peers)
            switches.append(switch)
            self._nvlinks[index] = active
        links: list[GpuLink] = []
        for a in range(count):
            for b in range(a + 1, count):
                ha, hb = handles[a], handles[b]
                level = self._quiet(pynvml.nvmlDeviceGetTopologyCommonAncestor, ha, hb) if ha and hb else None
                nvlinks = max(direct[a][b], direct[b][a])
                (na, sa), (nb, sb) = switches[a], switches[b]
                if na and nb and (sa & sb or None in sa or None in sb):  # None: a switch of unknown address
                    nvlinks += min(na, nb)
                pcie = PCIE_RELATION.get(int(level), "") if level is not None else ""
                if pcie or nvlinks:
                    links.append(GpuLink(a=a, b=b, nvlinks=nvlinks, pcie=pcie))
        if count >= 2 and not links:
            return None
        return links

    def _read_nvlinks(
        self, handle: Any, buses: dict[tuple[int, int, int, int], int], active_links: list[int]
    ) -> tuple[Counter[int], tuple[int, set[tuple[int, int, int, int] | None]]]:
        """(active links per peer GPU index, (links into NVSwitches, those switches' bus ids));
        appends the active links' numbers to `active_links`."""
        peers: Counter[int] = Counter()
        switch_links = 0
        switches: set[tuple[int, int, int, int] | None] = set()
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                active = pynvml.nvmlDeviceGetNvLinkState(handle, link)
            except pynvml.NVMLError as exc:
                # An error on link 0 (NotSupported: no NVLink) or InvalidArgument (past the GPU's
                # last link) ends the scan; another error skips only that link.
                if link == 0 or isinstance(exc, pynvml.NVMLError_InvalidArgument):
                    break
                continue
            if not active:
                continue
            active_links.append(link)
            remote = self._quiet(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            key = bus_key(_text(remote.busId)) if remote is not None else None
            kind = self._quiet(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
            if key is not None and key in buses and kind in (None, pynvml.NVML_NVLINK_DEVICE_TYPE_GPU):
                peers[buses[key]] += 1
            elif kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                switch_links += 1
                switches.add(key)
        return peers, (switch_links, switches)

    @staticmethod
    def _quiet(fn: Callable[..., Any], *args: Any) -> Any | None:
        """For the topology, read once: any error leaves that fact unknown (logged at debug)."""
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            log.debug("topology: %s failed with %s", getattr(fn, "__name__", fn), error_name(exc))
            return None

    def _log_transitions(self, failing: set[tuple[int, str, str]]) -> None:
        """Log an error when it starts and when it stops, not every second."""
        for gpu, call, err in sorted(failing - self._failing):
            log.warning("GPU %d: %s failed with NVML error %s", gpu, call, err)
        for gpu, call, err in sorted(self._failing - failing):
            log.info("GPU %d: %s works again (was %s)", gpu, call, err)
        self._failing = failing


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _field_values(handle: Any, ids: tuple[Any, ...]) -> Any:
    """nvmlDeviceGetFieldValues, raising NotSupported when no field is supported (as a reading
    that is not supported, so it is not asked again every sample)."""
    values = pynvml.nvmlDeviceGetFieldValues(handle, ids)
    if all(v.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED for v in values):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    return values


def _field_number(value: Any) -> float | None:
    """The number in an nvmlFieldValue_t; None when NVML did not give this field."""
    if value.nvmlReturn != pynvml.NVML_SUCCESS:
        return None
    kind = int(value.valueType)
    if not 0 <= kind < len(_VALUE_MEMBER):
        return None
    number = float(getattr(value.value, _VALUE_MEMBER[kind]))
    return number if math.isfinite(number) else None  # a double field can hold NaN: unknown, and int() of it raises


def _mig_device_handle(handle: Any, slot: int) -> Any | None:
    try:
        return pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
    except pynvml.NVMLError_NotFound:
        return None  # an empty slot: no error


def bus_key(bus_id: str) -> tuple[int, int, int, int] | None:
    """ "00000000:18:00.0" and "0000:18:00.0" -> (0, 0x18, 0, 0): NVML and sysfs write domains differently."""
    match = _BUS_ID.match(bus_id.strip())
    if match is None:
        return None
    return (int(match[1], 16), int(match[2], 16), int(match[3], 16), int(match[4]))


def sysfs_numa_node(sysfs_root: Path | None, pci_bus_id: str) -> int | None:
    """The kernel's NUMA node of a PCI device; None when unknown (no file, -1 on a non-NUMA machine)."""
    key = bus_key(pci_bus_id)
    if sysfs_root is None or key is None:
        return None
    domain, bus, device, function = key
    path = sysfs_root / "bus" / "pci" / "devices" / f"{domain:04x}:{bus:02x}:{device:02x}.{function}" / "numa_node"
    try:
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def mig_profile_from_attributes(gpu_slices: int, compute_slices: int, memory_mb: int, gpu_memory_bytes: int) -> str:
    """The profile name the device plugin uses ("1g.10gb", "1c.2g.20gb"), from a MIG device's
    attributes: memory is rounded up to eighths of the GPU, then to whole GB, as NVIDIA's
    go-nvlib does (so 4864 MiB of a 40 GB A100 is "5gb"). Media-extension ("+me") profiles
    cannot be told apart this way; the device name, tried first, carries them."""
    if gpu_slices <= 0 or compute_slices <= 0 or memory_mb <= 0 or gpu_memory_bytes <= 0:
        return ""
    fraction = math.ceil(memory_mb * 1024**2 / gpu_memory_bytes * 8) / 8
    total_gb = (gpu_memory_bytes + 1024**3 - 1) // 1024**3
    gb = round(fraction * total_gb)
    if compute_slices == gpu_slices:
        return f"{gpu_slices}g.{gb}gb"
    return f"{compute_slices}c.{gpu_slices}g.{gb}gb"
