"""GPM through the real pynvml on the fake NVML: two samples an interval apart make a reading;
unsupported GPUs, errors and MIG instances; the bounds of a reported percentage."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest

from gpuextender.agent.model.readings import GpmReading
from gpuextender.agent.sources.nvml_gpm import valid_percent
from gpuextender.agent.sources.nvml_reader import NvmlReader
from tests.agent.fake_gpus import A100_40, H100, Clock, restored_pynvml, start_reader

SPIN = {"sm_active": 0.75, "sm_occupancy": 0.01, "tensor_active": 0, "dram_active": 0, "graphics_active": 99.5}


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    with restored_pynvml():
        yield


@pytest.fixture
def clock() -> Clock:
    return Clock()


def gpm_of(reader: NvmlReader, clock: Clock, at: float) -> list[GpmReading | None]:
    clock.t = at
    return [g.gpm for g in reader.sample().gpus]


def test_two_samples_an_interval_apart_give_the_mean_over_it(clock: Clock) -> None:
    ramp = {"pattern": "ramp", "from": 0, "to": 100, "over_s": 10}
    reader, _ = start_reader(
        {"gpus": [{**H100, "utilization_percent": 100, "gpm": {**SPIN, "tensor_active": ramp}}]}, clock
    )
    assert gpm_of(reader, clock, 0.0) == [None]  # one sample: no interval yet, unknown (never zero)
    (first,) = gpm_of(reader, clock, 1.0)
    assert first == GpmReading(
        sm_active=0.75, sm_occupancy=0.01, tensor_active=5.0, dram_active=0.0, graphics_active=99.5
    )
    (second,) = gpm_of(reader, clock, 3.0)  # the next interval: 1 s .. 3 s of the ramp
    assert second is not None and math.isclose(second.tensor_active or 0, 20.0)


def test_no_gpm_where_the_gpu_does_not_support_it(clock: Clock) -> None:
    document = {"gpus": [H100, {**A100_40, "gpm": SPIN}]}  # no gpm: not supported; Ampere: never
    reader, lib = start_reader(document, clock)
    assert gpm_of(reader, clock, 0.0) == [None, None]
    before = lib.calls
    assert gpm_of(reader, clock, 1.0) == [None, None]
    assert lib.calls - before == 2 * 4  # memory, utilization, temperature, power: GPM not asked again


def test_an_error_breaks_the_interval_and_the_next_two_samples_start_a_new_one(clock: Clock) -> None:
    errors: list[tuple[str, str]] = []
    document = {
        "gpus": [{**H100, "gpm": SPIN}],
        "errors": [{"call": "nvmlGpmSampleGet", "error": "Unknown", "after_s": 1.5, "for_s": 1.0}],
    }
    reader, _ = start_reader(document, clock, errors)
    assert gpm_of(reader, clock, 0.0) == [None]
    assert gpm_of(reader, clock, 1.0)[0] is not None
    assert gpm_of(reader, clock, 2.0) == [None]  # the failed sample
    assert errors == [("nvmlGpmSampleGet", "Unknown")]
    assert gpm_of(reader, clock, 3.0) == [None]  # no metric across the gap: this sample starts a new interval
    assert gpm_of(reader, clock, 4.0)[0] is not None


def test_not_supported_at_sample_time_turns_gpm_off_for_that_gpu_without_an_error(clock: Clock) -> None:
    errors: list[tuple[str, str]] = []
    document = {"gpus": [{**H100, "gpm": SPIN}], "errors": [{"call": "nvmlGpmSampleGet", "error": "NotSupported"}]}
    reader, lib = start_reader(document, clock, errors)
    assert gpm_of(reader, clock, 0.0) == [None]
    before = lib.calls
    assert gpm_of(reader, clock, 1.0) == [None]
    assert lib.calls - before == 4 and errors == []


def test_mig_instances_get_gpm_per_gpu_instance(clock: Clock) -> None:
    document = {"gpus": [{**H100, "mig": [{"profile": "3g.40gb"}, {"profile": "1g.10gb", "count": 2}], "gpm": SPIN}]}
    reader, _ = start_reader(document, clock)
    gpm_of(reader, clock, 0.0)
    clock.t = 1.0
    (gpu,) = reader.sample().gpus
    assert [m.gpm.sm_active if m.gpm else None for m in gpu.mig_instances] == [0.75, 0.75, 0.75]
    assert gpu.gpm is not None  # and the whole GPU


def test_close_frees_every_sample_buffer_and_no_gpm_reads_nothing(clock: Clock) -> None:
    reader, lib = start_reader({"gpus": [{**H100, "mig": [{"profile": "1g.10gb"}], "gpm": SPIN}]}, clock)
    gpm_of(reader, clock, 0.0)
    assert len(lib._gpm_samples) == 4  # two per measured device: the GPU and its instance
    reader.close()
    assert lib._gpm_samples == {}
    quiet = NvmlReader(sysfs_root=None, gpm=False)
    quiet.start()
    assert [g.gpm for g in quiet.sample().gpus] == [None]
    assert lib._gpm_samples == {}
    quiet.close()


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (0.0, True),
        (100.0, True),
        (50.0, True),
        (-1e-9, False),
        (100.000001, False),
        (math.nan, False),
        (math.inf, False),
    ],
)
def test_a_percentage_outside_0_to_100_is_unknown(value: float, kept: bool) -> None:
    assert (valid_percent(value) == value) is kept and (valid_percent(value) is None) is not kept


def test_the_fake_answers_like_nvml_to_wrong_versions_and_bad_pairs(clock: Clock) -> None:
    reader, _ = start_reader({"gpus": [{**H100, "gpm": SPIN}, {**H100, "gpm": SPIN}]}, clock)
    h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    a, b = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()

    def metrics(version: int = pynvml.NVML_GPM_METRICS_GET_VERSION) -> Any:
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version, request.numMetrics, request.sample1, request.sample2 = version, 1, a, b
        request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
        return pynvml.nvmlGpmMetricsGet(request)

    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        metrics()  # neither sample taken
    pynvml.nvmlGpmSampleGet(h0, a)
    clock.t = 1.0
    pynvml.nvmlGpmSampleGet(h1, b)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        metrics()  # samples of two GPUs
    pynvml.nvmlGpmSampleGet(h0, b)
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        metrics(version=2)
    assert metrics().metrics[0].value == 0.75
    pynvml.nvmlGpmSampleFree(a)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmSampleFree(a)  # freed twice
    pynvml.nvmlGpmSampleFree(b)
    reader.close()


def test_dcgm_exporters_other_default_counters_come_from_nvml(clock: Clock) -> None:
    document = {
        "gpus": [
            {
                **H100,
                "memory_temperature_c": 47,
                "pcie_replays": 2,
                "encoder_utilization_percent": 3,
                "decoder_utilization_percent": 4,
                "nvlink_data_kib_per_s": 1000,
            },
            {**H100, "nvlink_data_kib_per_s": 500},
            H100,
        ],
        "topology": {"nvlinks": [{"gpus": [0, 1], "links": 4}]},
    }
    reader, _ = start_reader(document, clock)
    clock.t = 10.0
    a, b, c = reader.sample().gpus
    assert (a.memory_temperature_celsius, a.pcie_replays) == (47, 2)
    assert (a.encoder_utilization_percent, a.decoder_utilization_percent) == (3, 4)
    assert a.nvlink_data_kib == 10_000 and b.nvlink_data_kib == 5_000  # sum over its 4 links, sent + received
    assert (c.memory_temperature_celsius, c.pcie_replays, c.encoder_utilization_percent, c.nvlink_data_kib) == (
        None,
        None,
        None,
        None,
    )


def test_a_mig_gpu_that_samples_per_instance_only_keeps_its_instances_gpm(clock: Clock) -> None:
    """NotSupported for the whole GPU's sample (MIG mode) turns off that sample, not the instances'."""
    document = {
        "gpus": [{**H100, "mig": [{"profile": "1g.10gb", "count": 2}], "gpm": SPIN}],
        "errors": [{"call": "nvmlGpmSampleGet", "error": "NotSupported"}],
    }
    reader, _ = start_reader(document, clock)
    gpm_of(reader, clock, 0.0)
    clock.t = 1.0
    (gpu,) = reader.sample().gpus
    assert gpu.gpm is None
    assert [m.gpm.sm_active if m.gpm else None for m in gpu.mig_instances] == [0.75, 0.75]


@pytest.mark.parametrize(
    ("value_type", "member", "value", "expected"),
    [
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 7, 7.0),
        (pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 41.0, 41.0),
        (pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", math.nan, None),
        (pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", math.inf, None),
        (99, "ullVal", 7, None),  # a value type this nvidia-ml-py does not know
    ],
)
def test_a_field_value_is_a_finite_number_or_unknown(
    value_type: int, member: str, value: float, expected: float | None
) -> None:
    from gpuextender.agent.sources.nvml_reader import _field_number

    field = pynvml.c_nvmlFieldValue_t()
    field.nvmlReturn, field.valueType = pynvml.NVML_SUCCESS, value_type
    setattr(field.value, member, value)
    assert _field_number(field) == expected
    field.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    assert _field_number(field) is None


def test_pcie_bytes_are_a_rate_between_two_samples_from_nvmls_counters(clock: Clock) -> None:
    """dcgm-exporter's DCGM_FI_PROF_PCIE_TX_BYTES / _RX_BYTES (B/s), from NVML's byte counters
    (fields 197/198): nothing on the first sample, then bytes moved over the time between."""
    document = {"gpus": [{**H100, "pcie_tx_bytes_per_s": 2e9, "pcie_rx_bytes_per_s": 5e8}, H100]}
    reader, _ = start_reader(document, clock)
    clock.t = 10.0
    first, other = reader.sample().gpus
    assert (first.pcie_tx_bytes_per_s, first.pcie_rx_bytes_per_s) == (None, None)
    clock.t = 12.0
    second, other = reader.sample().gpus
    assert second.pcie_tx_bytes_per_s == pytest.approx(2e9, rel=1e-6)
    assert second.pcie_rx_bytes_per_s == pytest.approx(5e8, rel=1e-6)
    assert (other.pcie_tx_bytes_per_s, other.pcie_rx_bytes_per_s) == (None, None)  # not supported there
    clock.t = 12.0  # the timestamp did not move: no rate (never a division by zero)
    assert reader.sample().gpus[0].pcie_tx_bytes_per_s is None
    reader.close()


def test_a_pcie_counter_that_goes_back_gives_no_rate(clock: Clock) -> None:
    reader, _ = start_reader({"gpus": [{**H100, "pcie_tx_bytes_per_s": 1e9, "pcie_rx_bytes_per_s": 1e9}]}, clock)
    clock.t = 10.0
    reader.sample()
    reader._pcie[0] = (1e15, 1e15, reader._pcie[0][2])  # as if the driver reloaded: counters from 0
    clock.t = 11.0
    assert reader.sample().gpus[0].pcie_tx_bytes_per_s is None
    clock.t = 12.0
    assert reader.sample().gpus[0].pcie_tx_bytes_per_s == pytest.approx(1e9, rel=1e-6)
    reader.close()
