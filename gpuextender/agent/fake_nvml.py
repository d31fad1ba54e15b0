"""A stand-in for libnvidia-ml.so.1 that runs underneath the real pynvml.

pynvml is a thin ctypes layer: each function looks up a C symbol on the loaded
library (`pynvml.nvmlLib`), calls it with ctypes out-parameters and turns a
non-zero return code into the matching `NVMLError_*` class. `install()` puts a
`FakeNvmlLibrary` where that library handle lives, so the agent's reader, every
pynvml wrapper and pynvml's own error mapping run unchanged; only the bottom
layer, the driver, is simulated from a `Scenario`.

Like the real library it returns NVML_ERROR_UNINITIALIZED before nvmlInit,
NVML_ERROR_ARGUMENT_VERSION_MISMATCH for a wrong struct version, and a missing
symbol surfaces as NVMLError_FunctionNotFound.
"""

from __future__ import annotations

import ctypes
import time
import uuid
from collections.abc import Callable
from typing import Any

import pynvml

from gpuextender.agent.fake_scenario import FakeGpu, Scenario, ScenarioFile

_OK = pynvml.NVML_SUCCESS
# Symbols that work before nvmlInit, as in the real library.
_NO_INIT_NEEDED = {"nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString"}


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
        self._init_count = 0
        # One C struct per GPU: a handle is a pointer to it, as with the real driver.
        self._devices = [pynvml.struct_c_nvmlDevice_t() for _ in scenario.gpus]
        self._index_by_address = {ctypes.addressof(d): i for i, d in enumerate(self._devices)}
        namespace = uuid.uuid5(uuid.NAMESPACE_DNS, f"fake-gpu.{uuid_seed or 'node'}")
        self._uuids = [f"GPU-{uuid.uuid5(namespace, str(i))}" for i in range(len(scenario.gpus))]
        self.calls = 0  # how many C calls were made (benchmarks read it)

    def __getattr__(self, symbol: str) -> _Symbol:
        impl = getattr(type(self), f"_c_{symbol}", None)
        if impl is None or symbol.startswith("_"):
            raise AttributeError(symbol)  # pynvml turns this into NVMLError_FunctionNotFound
        return _Symbol(self, symbol, impl.__get__(self))

    def elapsed(self) -> float:
        return self._clock() - self._started

    # -- dispatch: init state and injected errors, in one place ------------

    def _dispatch(self, symbol: str, impl: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        self.calls += 1
        if self._follow is not None:
            self.scenario = self._follow.current()
        if symbol == "nvmlErrorString":
            return impl(*args)
        gpu = self._gpu_of(symbol, args)
        injected = self._injected(symbol, gpu)
        if injected is not None:
            return injected
        if symbol not in _NO_INIT_NEEDED and self._init_count == 0:
            return pynvml.NVML_ERROR_UNINITIALIZED
        if gpu is not None and not 0 <= gpu < len(self._devices):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        return impl(*args)

    def _gpu_of(self, symbol: str, args: tuple[Any, ...]) -> int | None:
        if not args:
            return None
        if symbol.startswith("nvmlDeviceGetHandleByIndex"):
            return int(args[0].value)
        if symbol.startswith("nvmlDevice") and not symbol.startswith("nvmlDeviceGetCount"):
            handle = args[0]
            if not isinstance(handle, pynvml.c_nvmlDevice_t) or not handle:
                return -1  # NULL or not a handle: invalid argument
            return self._index_by_address.get(ctypes.addressof(handle.contents), -1)
        return None

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
        return self._write_string(buffer, size, self._gpu(handle).product)

    def _c_nvmlDeviceGetUUID(self, handle: Any, buffer: Any, size: Any) -> int:
        return self._write_string(buffer, size, self._uuids[self._index_by_address[ctypes.addressof(handle.contents)]])

    def _c_nvmlDeviceGetPciInfo_v3(self, handle: Any, info_ref: Any) -> int:
        index = self._index_by_address[ctypes.addressof(handle.contents)]
        bus = 0x18 + 0x10 * index
        info = info_ref._obj
        info.domain, info.bus, info.device = 0, bus, 0
        info.busId = f"00000000:{bus:02X}:00.0".encode()
        info.busIdLegacy = f"0000:{bus:02X}:00.0".encode()
        return _OK

    def _c_nvmlDeviceGetCudaComputeCapability(self, handle: Any, major_ref: Any, minor_ref: Any) -> int:
        major_ref._obj.value, minor_ref._obj.value = self._gpu(handle).compute_capability
        return _OK

    def _c_nvmlDeviceGetMemoryInfo_v2(self, handle: Any, memory_ref: Any) -> int:
        memory = memory_ref._obj
        if memory.version != pynvml.nvmlMemory_v2:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        gpu = self._gpu(handle)
        total = gpu.memory_bytes
        reserved = min(total, 512 * 1024**2)  # the driver keeps some; v2 reports it apart
        used = min(total - reserved, int(total * gpu.memory_used_percent.at(self.elapsed()) / 100))
        memory.total, memory.reserved, memory.used = total, reserved, used
        memory.free = total - reserved - used
        return _OK

    def _c_nvmlDeviceGetUtilizationRates(self, handle: Any, util_ref: Any) -> int:
        gpu = self._gpu(handle)
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


def install(lib: FakeNvmlLibrary) -> None:
    """Load `lib` as pynvml's NVML library (in place of libnvidia-ml.so.1)."""
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
