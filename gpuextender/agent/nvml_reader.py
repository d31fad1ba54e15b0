"""Reads every GPU of the node through NVML (`nvidia-ml-py`, imported as `pynvml`).

The reader always calls the real `pynvml` functions. Without a GPU, the fake
backend (`agent.fake_nvml`) is installed *underneath* pynvml in place of
libnvidia-ml.so.1, so this exact code, pynvml's ctypes wrappers and its error
classes are what tests and the demo run.

Identity (UUID, name, PCI bus id, compute capability) is read once per GPU and
cached; live readings (memory via the v2 call, utilization, temperature, power)
are read every sample. How each NVML error is handled is decided in
`agent.nvml_errors`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pynvml

from gpuextender.agent.nvml_errors import ErrorGroup, classify, error_name
from gpuextender.agent.readings import GpuReading, NodeSample

log = logging.getLogger("gpu_agent.nvml")

ErrorHook = Callable[[str, str], None]  # (nvml call, error name)


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

    def __init__(self, on_error: ErrorHook | None = None) -> None:
        self._on_error = on_error or (lambda call, name: None)
        self._initialized = False
        self._driver_version = ""
        self._handles: list[Any | None] = []
        self._identity: dict[int, GpuReading] = {}
        self._failing: set[tuple[int, str, str]] = set()  # (gpu, call, error) seen last sample

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
        log.info("NVML initialised: driver %s, %d GPU(s)", self._driver_version or "?", count)

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
        )

    def _mark_uninitialized(self, node_error: str) -> None:
        if self._initialized:
            log.error("NVML unusable on this node (%s): reporting node error, will re-init", node_error)
        self._initialized = False
        self._handles = []

    def _read_gpu(self, index: int, failing: set[tuple[int, str, str]]) -> GpuReading:
        reading = GpuReading(index=index)

        def call(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any | None:
            try:
                return fn(*args, **kwargs)
            except pynvml.NVMLError as exc:
                err = error_name(exc)
                group = classify(exc)
                if group is ErrorGroup.NODE_FATAL:
                    raise _NodeFatal(err) from None
                if group is ErrorGroup.ABSENT:
                    return None
                failing.add((index, name, err))
                self._on_error(name, err)
                if group is ErrorGroup.GPU_UNHEALTHY:
                    reading.healthy = False
                    if err not in reading.unhealthy_reasons:
                        reading.unhealthy_reasons.append(err)
                return None

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

        memory = call(
            "nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2
        )
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
        return reading

    def _read_identity(self, index: int, handle: Any, call: Callable[..., Any]) -> GpuReading:
        """Static facts; cached only once every one of them was read."""
        identity = GpuReading(index=index)
        uuid = call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle)
        name = call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle)
        pci = call("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, handle)
        capability = call(
            "nvmlDeviceGetCudaComputeCapability", pynvml.nvmlDeviceGetCudaComputeCapability, handle
        )
        identity.uuid = _text(uuid)
        identity.name = _text(name)
        identity.pci_bus_id = _text(pci.busId) if pci is not None else ""
        identity.compute_capability = (int(capability[0]), int(capability[1])) if capability else None
        if None not in (uuid, name, pci, capability):
            self._identity[index] = identity
        return identity

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
