"""A stand-in for libnvidia-ml.so.1 that runs underneath the real pynvml.

pynvml is a thin ctypes layer: each function looks up a C symbol on the loaded
library (`pynvml.nvmlLib`), calls it with ctypes out-parameters and turns a
non-zero return code into the matching `NVMLError_*` class. `install()` puts a
`FakeNvmlLibrary` where that library handle lives, so the agent's reader, every
pynvml wrapper and pynvml's own error mapping run unchanged; only the bottom
layer, the driver, is simulated from a `Scenario`.

Like the real library it returns NVML_ERROR_UNINITIALIZED before nvmlInit,
NVML_ERROR_ARGUMENT_VERSION_MISMATCH for a wrong struct version, and a missing
symbol surfaces as NVMLError_FunctionNotFound. A reading the scenario does not
define answers NVML_ERROR_NOT_SUPPORTED, as on a GPU without the feature.

Events: `nvmlEventSetWait` blocks (a threading.Condition, real time) up to its
timeout and returns NVML_ERROR_TIMEOUT, or the next scripted event whose time
(the fake's clock) has come, for a GPU registered for its type. Tests that drive
a manual clock call `wake()` after moving it; `push_event()` delivers one now.

MIG: a GPU whose scenario has `mig:` is in MIG mode; its MIG device handles are
pointers to their own structs, accepted only by the calls real NVML takes them
in (UUID, name, memory, instance ids, attributes), others answer NotSupported.
"""

from __future__ import annotations

import ctypes
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pynvml

from gpuextender.agent.fakes.scenario import (
    EVENT_TYPES,
    MAX_MIG_DEVICES,
    FakeEvent,
    FakeGpu,
    FakeMig,
    Scenario,
    ScenarioFile,
)
from gpuextender.agent.sources.nvml_gpm import METRICS as GPM_METRICS
from gpuextender.agent.sources.nvml_reader import (
    FI_MEMORY_TEMP,
    FI_NVLINK_THROUGHPUT_DATA_RX,
    FI_NVLINK_THROUGHPUT_DATA_TX,
    FI_PCIE_COUNT_RX_BYTES,
    FI_PCIE_COUNT_TX_BYTES,
    FI_PCIE_REPLAY_COUNTER,
)

_OK = pynvml.NVML_SUCCESS
_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
_INVALID = pynvml.NVML_ERROR_INVALID_ARGUMENT
# Symbols that work before nvmlInit, as in the real library.
_NO_INIT_NEEDED = {"nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString"}
# pynvml functions that take a MIG device handle (the rest answer NotSupported for one).
_MIG_OK = {
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
}
# What nvmlDeviceGetSupportedEventTypes answers for a GPU with events (the fake's model of a data-center GPU).
SUPPORTED_EVENTS = (
    pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypePState
    | pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeClock
    | pynvml.nvmlEventMigConfigChange
    | EVENT_TYPES["gpu_unavailable"]
    | EVENT_TYPES["recovery_action"]
)
_NVLINK_SLOTS = 18  # links per GPU (H100); links past the scripted ones are inactive
_NVSWITCHES = 4  # switch links are spread over this many NVSwitch PCI devices, as on an HGX board
_NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId of an event not tied to a MIG instance
# Calls whose first argument is a device handle (what injected errors and MIG checks look at).
_DEVICE_CALLS = ("nvmlDevice", "nvmlGpmSampleGet", "nvmlGpmMigSampleGet", "nvmlGpmQueryDeviceSupport")
# GPM metric ids (nvml.h NVML_GPM_METRIC_*) the fake measures, and the FakeGpm field of each: the
# agent's (agent.sources.nvml_gpm.METRICS), as the fake answers what the reader asks.
_GPM_METRIC_FIELDS = {metric_id: name for name, metric_id in GPM_METRICS}
_GPM_MEAN_POINTS = 9  # a GPM metric is the mean over the interval: sampled at this many points


class _EventSet:
    def __init__(self) -> None:
        self.struct = pynvml.struct_c_nvmlEventSet_t()
        self.masks: dict[int, int] = {}  # GPU index -> registered nvmlEventType* bits
        self.delivered: set[tuple[Any, ...]] = set()


# C symbols whose pynvml function has another name.
_PYNVML_NAME = {"nvmlInitWithFlags": "nvmlInit"}


def _pynvml_name(symbol: str) -> str:
    """`nvmlDeviceGetCount_v2` -> `nvmlDeviceGetCount`: scenarios name the pynvml function."""
    head, sep, tail = symbol.rpartition("_v")
    base = head if sep and tail.isdigit() else symbol
    return _PYNVML_NAME.get(base, base)


class _Symbol:
    """What ctypes would hand out for one exported function (attributes like
    `restype` may be set on it, as pynvml does for nvmlErrorString)."""

    def __init__(self, lib: FakeNvmlLibrary, name: str, impl: Callable[..., Any]) -> None:
        self._lib = lib
        self._name = name
        self._impl = impl

    def __call__(self, *args: Any) -> Any:
        return self._lib._dispatch(self._name, self._impl, args)


class FakeNvmlLibrary:
    """Simulated NVML driver library for one node."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        uuid_seed: str = "",
        clock: Callable[[], float] = time.monotonic,
        follow: ScenarioFile | None = None,
    ) -> None:
        self.scenario = scenario
        self._follow = follow  # the file edited while running: GPU readings follow it
        self._clock = clock
        self._started = clock()
        self._wall_start = time.time()  # field values' timestamps: wall time at start + the fake's elapsed time
        self._init_count = 0
        # One C struct per GPU: a handle is a pointer to it, as with the real driver.
        self._devices = [pynvml.struct_c_nvmlDevice_t() for _ in scenario.gpus]
        self._index_by_address = {ctypes.addressof(d): i for i, d in enumerate(self._devices)}
        namespace = uuid.uuid5(uuid.NAMESPACE_DNS, f"fake-gpu.{uuid_seed or 'node'}")
        self._uuids = [f"GPU-{uuid.uuid5(namespace, str(i))}" for i in range(len(scenario.gpus))]
        self._namespace = namespace
        # MIG device handles: MAX_MIG_DEVICES structs per GPU, whatever the scenario has now.
        self._mig_devices = [[pynvml.struct_c_nvmlDevice_t() for _ in range(MAX_MIG_DEVICES)] for _ in scenario.gpus]
        self._mig_by_address = {
            ctypes.addressof(d): (gpu, slot)
            for gpu, slots in enumerate(self._mig_devices)
            for slot, d in enumerate(slots)
        }
        self._energy: dict[int, tuple[float, float]] = {}  # GPU -> (fake time, millijoules) at the last read
        self._events = threading.Condition()
        self._event_sets: dict[int, _EventSet] = {}
        self._pushed: list[tuple[int, FakeEvent]] = []  # (sequence, event) from push_event()
        # GPM sample buffers by address: None until nvmlGpmSampleGet fills one with
        # (GPU, GPU instance id or None, fake time); the ctypes buffers are kept alive here.
        self._gpm_samples: dict[int, tuple[int, int | None, float] | None] = {}
        self._gpm_buffers: dict[int, Any] = {}
        self.calls = 0  # how many C calls were made (benchmarks read it)

    def __getattr__(self, symbol: str) -> _Symbol:
        impl = getattr(type(self), f"_c_{symbol}", None)
        if impl is None or symbol.startswith("_"):
            raise AttributeError(symbol)  # pynvml turns this into NVMLError_FunctionNotFound
        return _Symbol(self, symbol, impl.__get__(self))

    def elapsed(self) -> float:
        return self._clock() - self._started

    def wake(self) -> None:
        """Make waiting nvmlEventSetWait calls look at the clock again (after a test moved it)."""
        with self._events:
            self._events.notify_all()

    def push_event(self, gpu: int, kind: str, data: int = 0) -> None:
        """Deliver an event now (in addition to the scenario's), e.g. `push_event(1, "xid", 79)`."""
        with self._events:
            event = FakeEvent(self.elapsed(), gpu, kind, EVENT_TYPES[kind], data)
            self._pushed.append((len(self._pushed), event))
            self._events.notify_all()

    # -- dispatch: init state and injected errors, in one place ------------

    def _dispatch(self, symbol: str, impl: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        self.calls += 1
        if self._follow is not None:
            self.scenario = self._follow.current()
        if symbol == "nvmlErrorString":
            return impl(*args)
        gpu, mig_slot = self._gpu_of(symbol, args)
        injected = self._injected(symbol, gpu)
        if injected is not None:
            return injected
        if symbol not in _NO_INIT_NEEDED and self._init_count == 0:
            return pynvml.NVML_ERROR_UNINITIALIZED
        if gpu is not None and not 0 <= gpu < len(self._devices):
            return _INVALID
        if gpu is not None and mig_slot is not None:
            if _pynvml_name(symbol) not in _MIG_OK:
                return _NOT_SUPPORTED
            if self._mig(gpu, mig_slot) is None:  # the scenario was edited: the device is gone
                return _INVALID
        return impl(*args)

    def _gpu_of(self, symbol: str, args: tuple[Any, ...]) -> tuple[int | None, int | None]:
        """(GPU index, MIG slot) a call is about: the MIG slot is None for a whole-GPU handle."""
        if not args:
            return None, None
        if symbol.startswith("nvmlDeviceGetHandleByIndex"):
            return int(args[0].value), None
        if symbol.startswith(_DEVICE_CALLS) and not symbol.startswith("nvmlDeviceGetCount"):
            handle = args[0]
            if not isinstance(handle, pynvml.c_nvmlDevice_t) or not handle:
                return -1, None  # NULL or not a handle: invalid argument
            address = ctypes.addressof(handle.contents)
            if address in self._mig_by_address:
                return self._mig_by_address[address]
            return self._index_by_address.get(address, -1), None
        return None, None

    def _mig(self, gpu: int, slot: int) -> FakeMig | None:
        devices = self.scenario.gpus[gpu].mig
        return devices[slot] if devices is not None and slot < len(devices) else None

    def _injected(self, symbol: str, gpu: int | None) -> int | None:
        names = ("*", symbol, _pynvml_name(symbol))
        t = self.elapsed()
        for err in self.scenario.errors:
            if err.call not in names or not err.active(t):
                continue
            if err.gpus is not None and (gpu is None or gpu not in err.gpus):
                continue
            return err.code
        return None

    def _gpu(self, handle: Any) -> FakeGpu:
        return self.scenario.gpus[self._index_by_address[ctypes.addressof(handle.contents)]]

    def _index(self, handle: Any) -> int:
        return self._index_by_address[ctypes.addressof(handle.contents)]

    def _mig_of(self, handle: Any) -> tuple[int, int, FakeMig] | None:
        """(GPU, slot, device) for a MIG device handle (validated by _dispatch), None for a GPU handle."""
        found = self._mig_by_address.get(ctypes.addressof(handle.contents))
        if found is None:
            return None
        mig = self._mig(*found)
        assert mig is not None
        return found[0], found[1], mig

    @staticmethod
    def _bus_id(index: int) -> tuple[int, str]:
        bus = 0x18 + 0x10 * index
        return bus, f"00000000:{bus:02X}:00.0"

    @staticmethod
    def _write_string(buffer: Any, size: Any, text: str) -> int:
        data = text.encode()
        if len(data) + 1 > int(size.value):
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        buffer.value = data
        return _OK

    # -- the C functions the agent uses --------------------------------------

    def _c_nvmlInitWithFlags(self, flags: int) -> int:
        self._init_count += 1
        return _OK

    def _c_nvmlShutdown(self) -> int:
        self._init_count = max(0, self._init_count - 1)
        return _OK

    def _c_nvmlErrorString(self, code: int) -> bytes:
        return f"NVML error {int(code)} (fake)".encode()

    def _c_nvmlSystemGetDriverVersion(self, buffer: Any, size: Any) -> int:
        return self._write_string(buffer, size, self.scenario.driver_version)

    def _c_nvmlDeviceGetCount_v2(self, count_ref: Any) -> int:
        count_ref._obj.value = len(self._devices)
        return _OK

    def _c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, handle_ref: Any) -> int:
        handle_ref._obj.contents = self._devices[int(index.value)]
        return _OK

    def _c_nvmlDeviceGetName(self, handle: Any, buffer: Any, size: Any) -> int:
        mig = self._mig_of(handle)
        if mig is not None:  # as the driver names a MIG device: "<GPU name> MIG <profile>"
            return self._write_string(buffer, size, f"{self.scenario.gpus[mig[0]].product} MIG {mig[2].profile}")
        return self._write_string(buffer, size, self._gpu(handle).product)

    def _c_nvmlDeviceGetUUID(self, handle: Any, buffer: Any, size: Any) -> int:
        mig = self._mig_of(handle)
        if mig is not None:  # a new MIG UUID when the device is re-created with another profile
            gpu, slot, device = mig
            return self._write_string(
                buffer, size, f"MIG-{uuid.uuid5(self._namespace, f'{gpu}/{slot}/{device.profile}')}"
            )
        return self._write_string(buffer, size, self._uuids[self._index(handle)])

    def _c_nvmlDeviceGetPciInfo_v3(self, handle: Any, info_ref: Any) -> int:
        bus, bus_id = self._bus_id(self._index(handle))
        info = info_ref._obj
        info.domain, info.bus, info.device = 0, bus, 0
        info.busId = bus_id.encode()
        info.busIdLegacy = f"0000:{bus:02X}:00.0".encode()
        return _OK

    def _c_nvmlDeviceGetMinorNumber(self, handle: Any, minor_ref: Any) -> int:
        # /dev/nvidia<minor>: the kernel numbers GPUs in PCI order, which is NVML's index order here.
        minor_ref._obj.value = self._index(handle)
        return _OK

    def _c_nvmlDeviceGetCudaComputeCapability(self, handle: Any, major_ref: Any, minor_ref: Any) -> int:
        major_ref._obj.value, minor_ref._obj.value = self._gpu(handle).compute_capability
        return _OK

    def _c_nvmlDeviceGetMemoryInfo_v2(self, handle: Any, memory_ref: Any) -> int:
        memory = memory_ref._obj
        if memory.version != pynvml.nvmlMemory_v2:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        mig = self._mig_of(handle)
        if mig is not None:
            device = mig[2]
            memory.total, memory.reserved = device.memory_bytes, 0
            memory.used = int(device.memory_bytes * device.memory_used_percent.at(self.elapsed()) / 100)
            memory.free = memory.total - memory.used
            return _OK
        gpu = self._gpu(handle)
        total = gpu.memory_bytes
        reserved = min(total, 512 * 1024**2)  # the driver keeps some; v2 reports it apart
        used = min(total - reserved, int(total * gpu.memory_used_percent.at(self.elapsed()) / 100))
        memory.total, memory.reserved, memory.used = total, reserved, used
        memory.free = total - reserved - used
        return _OK

    def _c_nvmlDeviceGetUtilizationRates(self, handle: Any, util_ref: Any) -> int:
        gpu = self._gpu(handle)
        if gpu.mig is not None:
            return _NOT_SUPPORTED  # as on a real MIG-enabled GPU
        t = self.elapsed()
        util_ref._obj.gpu = round(gpu.utilization_percent.at(t))
        util_ref._obj.memory = round(gpu.utilization_percent.at(t) / 2)
        return _OK

    def _c_nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, temp_ref: Any) -> int:
        if int(sensor.value) != pynvml.NVML_TEMPERATURE_GPU:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        temp_ref._obj.value = round(self._gpu(handle).temperature_c.at(self.elapsed()))
        return _OK

    def _c_nvmlDeviceGetPowerUsage(self, handle: Any, power_ref: Any) -> int:
        power_ref._obj.value = round(self._gpu(handle).power_watts.at(self.elapsed()) * 1000)
        return _OK

    # -- memory errors, clocks, energy, NUMA ---------------------------------

    def _c_nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: Any, counter_type: Any, count_ref: Any) -> int:
        ecc = self._gpu(handle).ecc
        if ecc is None:
            return _NOT_SUPPORTED
        # The fake keeps one counter per type: aggregate (lifetime) reads the volatile one.
        if int(error_type.value) == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            count_ref._obj.value = round(ecc.uncorrected.at(self.elapsed()))
        elif int(error_type.value) == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            count_ref._obj.value = round(ecc.corrected.at(self.elapsed()))
        else:
            return _INVALID
        return _OK

    def _c_nvmlDeviceGetRemappedRows(self, handle: Any, corr: Any, unc: Any, pending: Any, failure: Any) -> int:
        gpu = self._gpu(handle)
        if gpu.remapped_rows is None or gpu.mig:
            return _NOT_SUPPORTED  # NVML: not supported on MIG-enabled GPUs with active instances
        rows = gpu.remapped_rows
        corr._obj.value, unc._obj.value = rows.correctable, rows.uncorrectable
        pending._obj.value, failure._obj.value = int(rows.pending), int(rows.failure)
        return _OK

    def _c_nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any, pending_ref: Any) -> int:
        pending = self._gpu(handle).retired_pages_pending
        if pending is None:
            return _NOT_SUPPORTED
        pending_ref._obj.value = pynvml.NVML_FEATURE_ENABLED if pending else pynvml.NVML_FEATURE_DISABLED
        return _OK

    def _c_nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any, reasons_ref: Any) -> int:
        reasons = self._gpu(handle).clock_event_reasons
        if reasons is None:
            return _NOT_SUPPORTED
        reasons_ref._obj.value = reasons
        return _OK

    # The pre-535 name of the same call (drivers older than the rename export only this one).
    _c_nvmlDeviceGetCurrentClocksThrottleReasons = _c_nvmlDeviceGetCurrentClocksEventReasons

    def _c_nvmlDeviceGetClockInfo(self, handle: Any, clock_type: Any, clock_ref: Any) -> int:
        gpu = self._gpu(handle)
        kind = int(clock_type.value)
        if kind in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS):
            pattern = gpu.sm_clock_mhz
        elif kind == pynvml.NVML_CLOCK_MEM:
            pattern = gpu.memory_clock_mhz
        else:
            return _NOT_SUPPORTED
        if pattern is None:
            return _NOT_SUPPORTED
        clock_ref._obj.value = round(pattern.at(self.elapsed()))
        return _OK

    def _c_nvmlDeviceGetTotalEnergyConsumption(self, handle: Any, energy_ref: Any) -> int:
        index = self._index(handle)
        gpu = self.scenario.gpus[index]
        if gpu.energy_start_mj is None:
            return _NOT_SUPPORTED
        now = self.elapsed()
        last_t, energy = self._energy.get(index, (0.0, gpu.energy_start_mj))
        if now > last_t:  # trapezoid: exact for constant and ramping power
            energy += (gpu.power_watts.at(last_t) + gpu.power_watts.at(now)) / 2 * (now - last_t) * 1000
            self._energy[index] = (now, energy)
        energy_ref._obj.value = int(energy)
        return _OK

    def _c_nvmlDeviceGetMemoryAffinity(self, handle: Any, node_set_size: int, affinity_ref: Any, scope: Any) -> int:
        node = self._gpu(handle).numa_node
        if node is None:
            return _NOT_SUPPORTED
        if int(scope.value) != 0:  # NVML_AFFINITY_SCOPE_NODE
            return _NOT_SUPPORTED
        if node >= 64 * int(node_set_size):
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        affinity_ref._obj[node // 64] = 1 << (node % 64)
        return _OK

    # -- MIG -----------------------------------------------------------------

    def _c_nvmlDeviceGetMigMode(self, handle: Any, current_ref: Any, pending_ref: Any) -> int:
        if self._gpu(handle).mig is None:
            return _NOT_SUPPORTED
        current_ref._obj.value = pending_ref._obj.value = pynvml.NVML_DEVICE_MIG_ENABLE
        return _OK

    def _c_nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, count_ref: Any) -> int:
        if self._gpu(handle).mig is None:
            return _NOT_SUPPORTED
        count_ref._obj.value = MAX_MIG_DEVICES
        return _OK

    def _c_nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, mig_ref: Any) -> int:
        gpu = self._index(handle)
        devices = self.scenario.gpus[gpu].mig
        if devices is None:
            return _NOT_SUPPORTED
        slot = int(index.value)
        if slot >= MAX_MIG_DEVICES:
            return _INVALID
        if slot >= len(devices):
            return pynvml.NVML_ERROR_NOT_FOUND  # an empty slot
        mig_ref._obj.contents = self._mig_devices[gpu][slot]
        return _OK

    def _c_nvmlDeviceIsMigDeviceHandle(self, handle: Any, is_mig_ref: Any) -> int:
        is_mig_ref._obj.value = int(self._mig_of(handle) is not None)
        return _OK

    def _c_nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any, device_ref: Any) -> int:
        mig = self._mig_of(handle)
        if mig is None:
            return _INVALID
        device_ref._obj.contents = self._devices[mig[0]]
        return _OK

    def _c_nvmlDeviceGetGpuInstanceId(self, handle: Any, id_ref: Any) -> int:
        mig = self._mig_of(handle)
        if mig is None:
            return _INVALID  # NVML: only for MIG device handles
        id_ref._obj.value = mig[1] + 1
        return _OK

    def _c_nvmlDeviceGetComputeInstanceId(self, handle: Any, id_ref: Any) -> int:
        if self._mig_of(handle) is None:
            return _INVALID
        id_ref._obj.value = 0
        return _OK

    def _c_nvmlDeviceGetAttributes_v2(self, handle: Any, attrs_ref: Any) -> int:
        mig = self._mig_of(handle)
        if mig is None:
            return _NOT_SUPPORTED  # the fake answers for MIG devices only
        device = mig[2]
        attrs = attrs_ref._obj
        attrs.multiprocessorCount = 16 * device.compute_slices
        attrs.sharedCopyEngineCount = attrs.sharedDecoderCount = attrs.sharedJpegCount = attrs.sharedOfaCount = 1
        attrs.sharedEncoderCount = 0
        attrs.gpuInstanceSliceCount = device.gpu_slices
        attrs.computeInstanceSliceCount = device.compute_slices
        attrs.memorySizeMB = device.memory_bytes // 1024**2
        return _OK

    # -- topology --------------------------------------------------------------

    def _c_nvmlDeviceGetTopologyCommonAncestor(self, handle1: Any, handle2: Any, level_ref: Any) -> int:
        topology = self.scenario.topology
        if topology is None:
            return _NOT_SUPPORTED
        other = self._index_by_address.get(ctypes.addressof(handle2.contents)) if handle2 else None
        if other is None:
            return _INVALID
        index = self._index(handle1)
        level_ref._obj.value = pynvml.NVML_TOPOLOGY_INTERNAL if index == other else topology.pcie_level(index, other)
        return _OK

    def _links(self, index: int) -> list[int | None]:
        """The GPU's active NVLinks in link order: the peer GPU's index, or None for an NVSwitch."""
        topology = self.scenario.topology
        if topology is None:
            return []
        links: list[int | None] = []
        for (a, b), count in sorted(topology.nvlinks.items()):
            if index in (a, b):
                links.extend([b if index == a else a] * count)
        return links + [None] * topology.nvswitch_links

    def _link(self, handle: Any, link: int) -> tuple[int, list[int | None]] | int:
        """(link, active links) or an NVML error code."""
        links = self._links(self._index(handle))
        if not links:
            return _NOT_SUPPORTED  # no NVLink on this GPU
        if not 0 <= int(link) < max(_NVLINK_SLOTS, len(links)):
            return _INVALID
        return int(link), links

    def _c_nvmlDeviceGetNvLinkState(self, handle: Any, link: int, active_ref: Any) -> int:
        found = self._link(handle, link)
        if isinstance(found, int):
            return found
        active_ref._obj.value = int(found[0] < len(found[1]))
        return _OK

    def _c_nvmlDeviceGetNvLinkRemotePciInfo_v2(self, handle: Any, link: int, pci_ref: Any) -> int:
        found = self._link(handle, link)
        if isinstance(found, int):
            return found
        number, links = found
        if number >= len(links):
            return _NOT_SUPPORTED  # an inactive link has no remote end
        peer = links[number]
        info = pci_ref._obj
        if peer is None:
            info.domain, info.bus, info.device = 0, 0xC0 + number % _NVSWITCHES, 0
            info.busId = f"00000000:{info.bus:02X}:00.0".encode()
        else:
            bus, bus_id = self._bus_id(peer)
            info.domain, info.bus, info.device = 0, bus, 0
            info.busId = bus_id.encode()
        return _OK

    def _c_nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int, type_ref: Any) -> int:
        found = self._link(handle, link)
        if isinstance(found, int):
            return found
        number, links = found
        if number >= len(links):
            return _NOT_SUPPORTED
        type_ref._obj.value = (
            pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH if links[number] is None else pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
        )
        return _OK

    # -- events ----------------------------------------------------------------

    def _event_set(self, set_ptr: Any) -> _EventSet | None:
        if not set_ptr:
            return None
        return self._event_sets.get(ctypes.addressof(set_ptr.contents))

    def _c_nvmlEventSetCreate(self, set_ref: Any) -> int:
        event_set = _EventSet()
        with self._events:
            self._event_sets[ctypes.addressof(event_set.struct)] = event_set
        set_ref._obj.contents = event_set.struct
        return _OK

    def _c_nvmlDeviceGetSupportedEventTypes(self, handle: Any, types_ref: Any) -> int:
        if not self._gpu(handle).events_supported:
            return _NOT_SUPPORTED
        types_ref._obj.value = SUPPORTED_EVENTS
        return _OK

    def _c_nvmlDeviceRegisterEvents(self, handle: Any, event_types: Any, set_ptr: Any) -> int:
        with self._events:
            event_set = self._event_set(set_ptr)
            if event_set is None:
                return _INVALID
            types = int(event_types.value)
            if not self._gpu(handle).events_supported or types & ~SUPPORTED_EVENTS:
                return _NOT_SUPPORTED  # NVML: some of the requested types are not supported
            index = self._index(handle)
            event_set.masks[index] = event_set.masks.get(index, 0) | types
        return _OK

    def _c_nvmlEventSetWait_v2(self, set_ptr: Any, data_ref: Any, timeout_ms: Any) -> int:
        deadline = time.monotonic() + int(timeout_ms.value) / 1000
        with self._events:
            while True:
                event_set = self._event_set(set_ptr)
                if event_set is None:
                    return _INVALID  # freed (or never created)
                if self._follow is not None:
                    self.scenario = self._follow.current()
                due, next_at = self._next_event(event_set)
                if due is not None:
                    key, event = due
                    event_set.delivered.add(key)
                    data = data_ref._obj
                    data.device = ctypes.pointer(self._devices[event.gpu])
                    data.eventType, data.eventData = event.event_type, event.data
                    data.gpuInstanceId = data.computeInstanceId = _NO_INSTANCE
                    return _OK
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return pynvml.NVML_ERROR_TIMEOUT
                # Sleep until the next scripted event is due (assuming the fake's clock runs in real
                # time; a test that moves a manual clock calls wake()), or the timeout.
                timeout = remaining if next_at is None else min(remaining, max(0.001, next_at))
                if self._follow is not None:  # an event edited into the file is seen within a check
                    timeout = min(timeout, max(0.01, self._follow.check_every_s))
                self._events.wait(timeout)

    def _next_event(self, event_set: _EventSet) -> tuple[tuple[tuple[Any, ...], FakeEvent] | None, float | None]:
        """The earliest undelivered event that is due for this set, and else the seconds until the next one."""
        now = self.elapsed()
        candidates: list[tuple[tuple[Any, ...], FakeEvent]] = [
            (("scenario", e.at_s, e.gpu, e.event_type, e.data), e) for e in self.scenario.events
        ]
        candidates += [(("pushed", seq), e) for seq, e in self._pushed]
        due: tuple[tuple[Any, ...], FakeEvent] | None = None
        next_at: float | None = None
        for key, event in candidates:
            if key in event_set.delivered or not event_set.masks.get(event.gpu, 0) & event.event_type:
                continue
            if event.at_s <= now:
                if due is None or event.at_s < due[1].at_s:
                    due = (key, event)
            elif next_at is None or event.at_s - now < next_at:
                next_at = event.at_s - now
        return due, next_at

    def _c_nvmlEventSetFree(self, set_ptr: Any) -> int:
        with self._events:
            if self._event_set(set_ptr) is None:
                return _INVALID
            del self._event_sets[ctypes.addressof(set_ptr.contents)]
            self._events.notify_all()
        return _OK

    # -- GPM (nvmlGpm*) ----------------------------------------------------------

    def _c_nvmlGpmQueryDeviceSupport(self, handle: Any, support_ref: Any) -> int:
        support = support_ref._obj
        if support.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        support.isSupportedDevice = int(self._gpm_of(self._index(handle)) is not None)
        return _OK

    def _gpm_of(self, index: int) -> Any | None:
        gpu = self.scenario.gpus[index]
        return gpu.gpm if gpu.compute_capability >= (9, 0) else None  # GPM: Hopper and later

    def _c_nvmlGpmSampleAlloc(self, sample_ref: Any) -> int:
        buffer = ctypes.create_string_buffer(16)  # opaque to the caller, as the driver's is
        address = ctypes.addressof(buffer)
        self._gpm_buffers[address] = buffer
        self._gpm_samples[address] = None
        sample_ref._obj.contents = ctypes.cast(buffer, pynvml.c_nvmlGpmSample_t).contents
        return _OK

    def _gpm_sample_address(self, sample: Any) -> int | None:
        if not sample:
            return None
        address = ctypes.addressof(sample.contents)
        return address if address in self._gpm_samples else None

    def _c_nvmlGpmSampleFree(self, sample: Any) -> int:
        address = self._gpm_sample_address(sample)
        if address is None:
            return _INVALID
        del self._gpm_samples[address], self._gpm_buffers[address]
        return _OK

    def _c_nvmlGpmSampleGet(self, handle: Any, sample: Any) -> int:
        return self._gpm_fill(handle, None, sample)

    def _c_nvmlGpmMigSampleGet(self, handle: Any, gpu_instance_id: Any, sample: Any) -> int:
        index = self._index(handle)
        devices = self.scenario.gpus[index].mig or ()
        instance = int(gpu_instance_id.value) if hasattr(gpu_instance_id, "value") else int(gpu_instance_id)
        if not 1 <= instance <= len(devices):  # GPU instance ids here are slot + 1
            return pynvml.NVML_ERROR_NOT_FOUND
        return self._gpm_fill(handle, instance, sample)

    def _gpm_fill(self, handle: Any, instance: int | None, sample: Any) -> int:
        index = self._index(handle)
        if self._gpm_of(index) is None:
            return _NOT_SUPPORTED
        address = self._gpm_sample_address(sample)
        if address is None:
            return _INVALID
        self._gpm_samples[address] = (index, instance, self.elapsed())
        return _OK

    def _c_nvmlGpmMetricsGet(self, request_ref: Any) -> int:
        request = request_ref._obj
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        first = self._gpm_samples.get(self._gpm_sample_address(request.sample1) or -1)
        second = self._gpm_samples.get(self._gpm_sample_address(request.sample2) or -1)
        if first is None or second is None or first[:2] != second[:2] or not first[2] < second[2]:
            return _INVALID  # unfilled, of different devices, or not an interval
        if not 0 < int(request.numMetrics) <= len(request.metrics):
            return _INVALID
        gpm = self._gpm_of(first[0])
        if gpm is None:
            return _NOT_SUPPORTED
        t1, t2 = first[2], second[2]
        for i in range(int(request.numMetrics)):
            metric = request.metrics[i]
            field_name = _GPM_METRIC_FIELDS.get(int(metric.metricId))
            if field_name is None:
                metric.nvmlReturn, metric.value = _NOT_SUPPORTED, 0.0
                continue
            pattern = getattr(gpm, field_name)
            points = [t1 + (t2 - t1) * k / (_GPM_MEAN_POINTS - 1) for k in range(_GPM_MEAN_POINTS)]
            metric.nvmlReturn, metric.value = _OK, sum(pattern.at(t) for t in points) / _GPM_MEAN_POINTS
        return _OK

    # -- dcgm-exporter's other default counters ------------------------------------

    def _c_nvmlDeviceGetFieldValues(self, handle: Any, count: Any, values_ref: Any) -> int:
        gpu = self._gpu(handle)
        t = self.elapsed()
        links = len(self._links(self._index(handle)))
        values = values_ref._obj
        for i in range(int(count.value)):
            value = values[i]
            fid, scope = int(value.fieldId), int(value.scopeId)
            number: float | None = None
            if fid == FI_MEMORY_TEMP and gpu.memory_temperature_c is not None:
                number = round(gpu.memory_temperature_c.at(t))
            elif fid == FI_PCIE_REPLAY_COUNTER and gpu.pcie_replays is not None:
                number = gpu.pcie_replays
            elif fid == FI_PCIE_COUNT_TX_BYTES and gpu.pcie_tx_bytes_per_s is not None:
                number = int(_integral(gpu.pcie_tx_bytes_per_s, t))
            elif fid == FI_PCIE_COUNT_RX_BYTES and gpu.pcie_rx_bytes_per_s is not None:
                number = int(_integral(gpu.pcie_rx_bytes_per_s, t))
            elif (
                fid in (FI_NVLINK_THROUGHPUT_DATA_TX, FI_NVLINK_THROUGHPUT_DATA_RX)
                and gpu.nvlink_data_kib_per_s is not None
            ):
                if 0 <= scope < links:  # half sent, half received, spread over the active links
                    number = int(_integral(gpu.nvlink_data_kib_per_s, t) / 2 / links)
            value.timestamp = int((self._wall_start + t) * 1e6)  # moves with the fake clock, as counters do
            if number is None:
                value.nvmlReturn = _NOT_SUPPORTED
                continue
            value.nvmlReturn, value.valueType = _OK, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            value.value.ullVal = int(number)
        return _OK

    def _c_nvmlDeviceGetEncoderUtilization(self, handle: Any, util_ref: Any, period_ref: Any) -> int:
        return self._codec(self._gpu(handle).encoder_utilization_percent, util_ref, period_ref)

    def _c_nvmlDeviceGetDecoderUtilization(self, handle: Any, util_ref: Any, period_ref: Any) -> int:
        return self._codec(self._gpu(handle).decoder_utilization_percent, util_ref, period_ref)

    def _codec(self, pattern: Any, util_ref: Any, period_ref: Any) -> int:
        if pattern is None:
            return _NOT_SUPPORTED
        util_ref._obj.value = round(pattern.at(self.elapsed()))
        period_ref._obj.value = 100_000  # microseconds, what an H100 answered
        return _OK

    def _c_nvmlDeviceGetPcieReplayCounter(self, handle: Any, count_ref: Any) -> int:
        replays = self._gpu(handle).pcie_replays
        if replays is None:
            return _NOT_SUPPORTED
        count_ref._obj.value = replays
        return _OK


def _integral(pattern: Any, t: float, steps: int = 64) -> float:
    """The area under a pattern from 0 to t (a counter that grows at the pattern's rate)."""
    if t <= 0:
        return 0.0
    width = t / steps
    return sum(pattern.at((k + 0.5) * width) for k in range(steps)) * width


def install(lib: FakeNvmlLibrary) -> None:
    """Load `lib` as pynvml's NVML library (in place of libnvidia-ml.so.1)."""
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
