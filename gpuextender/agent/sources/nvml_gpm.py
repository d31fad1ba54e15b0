"""GPU Performance Monitoring through NVML (GPM: Hopper and later), read with each sample.

A GPM metric is computed from two samples of the GPU's counters taken an interval apart
(`nvmlGpmSampleGet`, `nvmlGpmMetricsGet(sample1, sample2)`), so this keeps two sample buffers per
GPU (and per MIG GPU instance, `nvmlGpmMigSampleGet`), refills the older one every pass and
reads the metrics over the interval since the previous pass. The first pass of a GPU, and the
first after an error, gives no reading: None, never zero.

Measured on an H100 and an H200 (bench/RESULTS-gpu.md): one nvmlGpmSampleGet ~0.2 ms, one
nvmlGpmMetricsGet of these five metrics 1 to 1.8 ms; a sampling pass with GPM ~2 ms longer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from gpuextender.agent.model.readings import GpmReading
from gpuextender.agent.sources.nvml_errors import ErrorGroup, classify, error_name
from gpuextender.common.log_once import EVER, OncePer

log = logging.getLogger("gpu_agent.gpm")

# nvml.h's NVML_GPM_METRIC_* ids (pynvml names them too, but not every release we allow does).
SM_ACTIVE = 2  # NVML_GPM_METRIC_SM_UTIL
SM_OCCUPANCY = 3  # NVML_GPM_METRIC_SM_OCCUPANCY
TENSOR_ACTIVE = 5  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
DRAM_ACTIVE = 10  # NVML_GPM_METRIC_DRAM_BW_UTIL
GRAPHICS_ACTIVE = 1  # NVML_GPM_METRIC_GRAPHICS_UTIL
METRICS: tuple[tuple[str, int], ...] = (
    ("sm_active", SM_ACTIVE),
    ("sm_occupancy", SM_OCCUPANCY),
    ("tensor_active", TENSOR_ACTIVE),
    ("dram_active", DRAM_ACTIVE),
    ("graphics_active", GRAPHICS_ACTIVE),
)
_METRICS_GET_VERSION = getattr(pynvml, "NVML_GPM_METRICS_GET_VERSION", 1)

ErrorHook = Callable[[str, str], None]
Key = tuple[int, int | None]  # (GPU index, GPU instance id or None for the whole GPU)


def valid_percent(value: float) -> float | None:
    """A GPM percentage as the agent reports it: 0..100 inclusive; anything else (NaN, negative,
    over 100: a counter wrapped or a driver bug) is unknown, not a number to decide with."""
    if math.isfinite(value) and 0.0 <= value <= 100.0:
        return value
    return None


@dataclass(slots=True)
class _Pair:
    samples: tuple[Any, Any]
    newest: int = -1  # which of `samples` holds the last pass's counters; -1: none yet


class GpmSampler:
    """GPM readings for the reader, one GPU (or MIG instance) at a time. Not thread-safe."""

    def __init__(self, on_error: ErrorHook | None = None) -> None:
        self._on_error = on_error or (lambda call, name: None)
        self._supported: dict[int, bool] = {}  # GPU index -> nvmlGpmQueryDeviceSupport
        # What answered NotSupported itself: a GPU in MIG mode may sample per instance only.
        self._absent: set[Key] = set()
        self._pairs: dict[Key, _Pair] = {}
        self._request: Any | None = None  # one nvmlGpmMetricsGet_t, reused
        self._say = OncePer(EVER)  # each key once (bounded)

    def supported(self, index: int, handle: Any) -> bool:
        known = self._supported.get(index)
        if known is None:
            try:
                known = bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
            except pynvml.NVMLError as exc:
                if classify(exc) is not ErrorGroup.ABSENT:
                    self._on_error("nvmlGpmQueryDeviceSupport", error_name(exc))
                    return False  # asked again next pass
                known = False
            self._supported[index] = known
            log.info("GPU %d: GPM %s", index, "supported: SM activity is read" if known else "not supported")
        return known

    def read(self, index: int, handle: Any, gpu_instance_id: int | None = None) -> GpmReading | None:
        """The metrics since the previous call for this GPU (instance); None on the first call,
        where GPM is not supported, or after an error."""
        key = (index, gpu_instance_id)
        if key in self._absent or not self.supported(index, handle):
            return None
        pair = self._pairs.get(key)
        call = "nvmlGpmSampleAlloc"
        try:
            if pair is None:
                pair = self._pairs[key] = _Pair((pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()))
            target = 0 if pair.newest != 0 else 1
            if gpu_instance_id is None:
                call = "nvmlGpmSampleGet"
                pynvml.nvmlGpmSampleGet(handle, pair.samples[target])
            else:
                call = "nvmlGpmMigSampleGet"
                pynvml.nvmlGpmMigSampleGet(handle, gpu_instance_id, pair.samples[target])
            previous, pair.newest = pair.newest, target
            if previous < 0:
                return None
            call = "nvmlGpmMetricsGet"
            return self._metrics(pair.samples[previous], pair.samples[target])
        except pynvml.NVMLError as exc:
            if pair is not None:
                pair.newest = -1  # never a metric across the gap
            name = error_name(exc)
            if classify(exc) is ErrorGroup.ABSENT:
                self._absent.add(key)  # this GPU (or instance) only: not asked again until re-init
                self._say_once(f"{call}:{name}", "GPU %d: %s answered %s: no GPM readings", index, call, name)
            else:
                self._on_error(call, name)
            return None

    def _metrics(self, older: Any, newer: Any) -> GpmReading:
        request = self._request
        if request is None:
            request = self._request = pynvml.c_nvmlGpmMetricsGet_t()
            request.version = _METRICS_GET_VERSION
            request.numMetrics = len(METRICS)
            for i, (_, metric_id) in enumerate(METRICS):
                request.metrics[i].metricId = metric_id
        request.sample1, request.sample2 = older, newer
        pynvml.nvmlGpmMetricsGet(request)
        values: dict[str, float | None] = {}
        for i, (name, _) in enumerate(METRICS):
            metric = request.metrics[i]
            values[name] = valid_percent(float(metric.value)) if metric.nvmlReturn == pynvml.NVML_SUCCESS else None
        return GpmReading(**values)

    def forget_instances(self, index: int, live: set[int]) -> None:
        """Free the pairs of GPU `index`'s MIG instances that are gone (reconfigured)."""
        for key in [k for k in self._pairs if k[0] == index and k[1] is not None and k[1] not in live]:
            self._free(self._pairs.pop(key))

    def close(self) -> None:
        """Free every sample buffer (before nvmlShutdown, and when NVML is re-initialised)."""
        for pair in self._pairs.values():
            self._free(pair)
        self._pairs = {}
        self._supported = {}
        self._absent = set()

    @staticmethod
    def _free(pair: _Pair) -> None:
        for sample in pair.samples:
            try:
                pynvml.nvmlGpmSampleFree(sample)
            except pynvml.NVMLError as exc:
                log.debug("nvmlGpmSampleFree failed: %s", error_name(exc))

    def _say_once(self, key: str, message: str, *args: Any) -> None:
        if self._say(key):
            log.info(message, *args)
