"""The NVML reader on the fake library installed underneath the real pynvml."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pynvml
import pytest

from gpuextender.agent.fakes.nvml import FakeNvmlLibrary, install
from gpuextender.agent.fakes.scenario import parse_scenario
from gpuextender.agent.sources.nvml_reader import ENERGY_REFRESH_S, NvmlReader, NvmlUnavailable

H100 = {"product": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "compute_capability": "9.0"}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(autouse=True)
def _restore_pynvml() -> Iterator[None]:
    saved = pynvml.nvmlLib
    yield
    with pynvml.libLoadLock:
        pynvml.nvmlLib = saved
        pynvml._nvmlGetFunctionPointer_cache.clear()


def start_reader(document: dict, clock: Clock, errors: list | None = None) -> tuple[NvmlReader, FakeNvmlLibrary]:
    lib = FakeNvmlLibrary(parse_scenario(document), uuid_seed="node-1", clock=clock)
    install(lib)
    reader = NvmlReader(
        on_error=lambda call, name: errors.append((call, name)) if errors is not None else None, clock=clock
    )
    reader.start()
    return reader, lib


def test_reads_identity_and_v2_memory_through_pynvml(clock: Clock) -> None:
    reader, _ = start_reader(
        {
            "gpus": [
                {
                    **H100,
                    "count": 2,
                    "utilization_percent": 40,
                    "memory_used_percent": 25,
                    "temperature_c": 51,
                    "power_watts": 312.5,
                }
            ]
        },
        clock,
    )
    sample = reader.sample()
    assert sample.node_error == "" and sample.driver_version == "550.127.05"
    assert [g.index for g in sample.gpus] == [0, 1]
    gpu = sample.gpus[0]
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.uuid.startswith("GPU-")
    assert gpu.uuid != sample.gpus[1].uuid
    assert gpu.pci_bus_id == "00000000:18:00.0" and sample.gpus[1].pci_bus_id == "00000000:28:00.0"
    assert gpu.compute_capability == (9, 0)
    assert gpu.memory_total_bytes == 80 * 1024**3
    assert gpu.memory_used_bytes == 20 * 1024**3
    assert gpu.memory_reserved_bytes == 512 * 1024**2  # the v2 call reports reserved apart from used
    assert gpu.memory_free_bytes == gpu.memory_total_bytes - gpu.memory_used_bytes - gpu.memory_reserved_bytes
    assert (gpu.utilization_gpu_percent, gpu.temperature_celsius, gpu.power_watts) == (40, 51, 312.5)
    assert gpu.healthy and gpu.unhealthy_reasons == []
    assert sample.duration_s > 0


def test_patterns_change_readings_over_time(clock: Clock) -> None:
    reader, _ = start_reader(
        {"gpus": [{**H100, "utilization_percent": {"pattern": "steps", "values": [10, 80], "every_s": 5}}]}, clock
    )
    assert reader.sample().gpus[0].utilization_gpu_percent == 10
    clock.t = 5.0
    assert reader.sample().gpus[0].utilization_gpu_percent == 80


def test_not_supported_leaves_the_field_absent_without_an_error(clock: Clock) -> None:
    errors: list = []
    reader, _ = start_reader(
        {
            "gpus": [H100],
            "errors": [
                {"call": "nvmlDeviceGetPowerUsage", "error": "NotSupported"},
                {"call": "nvmlDeviceGetUtilizationRates", "error": "NotSupported"},
            ],
        },
        clock,
        errors,
    )
    gpu = reader.sample().gpus[0]
    assert gpu.power_watts is None and gpu.utilization_gpu_percent is None
    assert gpu.temperature_celsius == 35 and gpu.healthy
    assert errors == []


def test_gpu_lost_marks_only_that_gpu_unhealthy_and_recovers(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    errors: list = []
    reader, _ = start_reader(
        {
            "gpus": [{**H100, "count": 3}],
            "errors": [
                {"call": "*", "error": "GpuIsLost", "gpus": [1], "after_s": 1, "for_s": 2},
            ],
        },
        clock,
        errors,
    )
    assert all(g.healthy for g in reader.sample().gpus)
    clock.t = 1.5
    with caplog.at_level(logging.WARNING, logger="gpu_agent.nvml"):
        sample = reader.sample()
        reader.sample()  # the same errors again are not logged again
    lost = sample.gpus[1]
    assert not lost.healthy and lost.unhealthy_reasons == ["GpuIsLost"]
    assert lost.utilization_gpu_percent is None and lost.memory_used_bytes is None
    assert lost.uuid  # identity was cached before the loss
    assert sample.gpus[0].healthy and sample.gpus[2].healthy and sample.node_error == ""
    assert ("nvmlDeviceGetUtilizationRates", "GpuIsLost") in errors
    assert (
        sum(
            "GPU 1: nvmlDeviceGetUtilizationRates failed with NVML error GpuIsLost" in r.message for r in caplog.records
        )
        == 1
    )
    clock.t = 3.5
    with caplog.at_level(logging.INFO, logger="gpu_agent.nvml"):
        assert reader.sample().gpus[1].healthy
    assert any("works again" in r.message for r in caplog.records)


def test_transient_errors_drop_the_reading_but_keep_the_gpu_healthy(clock: Clock) -> None:
    errors: list = []
    reader, _ = start_reader(
        {"gpus": [H100], "errors": [{"call": "nvmlDeviceGetTemperature", "error": "Timeout"}]}, clock, errors
    )
    gpu = reader.sample().gpus[0]
    assert gpu.temperature_celsius is None and gpu.healthy
    assert errors == [("nvmlDeviceGetTemperature", "Timeout")]


def test_driver_not_loaded_is_a_node_error_and_init_is_retried(clock: Clock) -> None:
    reader, _lib = start_reader(
        {
            "gpus": [{**H100, "count": 2}],
            "errors": [
                {"call": "nvmlInit", "error": "DriverNotLoaded", "for_s": 10},
            ],
        },
        clock,
    )
    sample = reader.sample()
    assert sample.node_error == "DriverNotLoaded" and sample.gpus == []
    clock.t = 11
    sample = reader.sample()
    assert sample.node_error == "" and len(sample.gpus) == 2


def test_driver_lost_mid_run_becomes_a_node_error_then_recovers(clock: Clock) -> None:
    reader, _ = start_reader(
        {
            "gpus": [H100],
            "errors": [
                {"call": "nvmlDeviceGetMemoryInfo", "error": "DriverNotLoaded", "after_s": 1, "for_s": 1},
            ],
        },
        clock,
    )
    assert reader.sample().node_error == ""
    clock.t = 1.2
    assert reader.sample().node_error == "DriverNotLoaded"
    clock.t = 2.5
    assert reader.sample().gpus[0].memory_total_bytes == 80 * 1024**3


def test_missing_library_is_a_clear_startup_error() -> None:
    with pynvml.libLoadLock:
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
    try:
        import ctypes

        ctypes.CDLL("libnvidia-ml.so.1")
        pytest.skip("this machine has libnvidia-ml.so.1")
    except OSError:
        pass
    with pytest.raises(NvmlUnavailable, match=r"libnvidia-ml.so.1 was not found"):
        NvmlReader().start()


def test_fake_behaves_like_nvml_for_calls_the_reader_does_not_make(clock: Clock) -> None:
    start_reader({"gpus": [H100]}, clock)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):  # a symbol the fake library does not export
        pynvml.nvmlDeviceGetBAR1MemoryInfo(handle)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(5)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetTemperature(handle, 1)  # only the GPU sensor exists
    pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_error_codes_pynvml_has_no_message_for_still_stringify(clock: Clock) -> None:
    start_reader({"gpus": [H100], "errors": [{"call": "nvmlDeviceGetPowerUsage", "error": "GpuNotFound"}]}, clock)
    with pytest.raises(pynvml.NVMLError_GpuNotFound) as info:
        pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert "fake" in str(info.value)  # through the library's nvmlErrorString, as on a real driver


def _write_scenario(path, utilization: int, count: int = 2) -> None:
    import yaml

    path.write_text(yaml.safe_dump({"gpus": [{**H100, "count": count, "utilization_percent": utilization}]}))


def test_an_edited_scenario_file_changes_the_next_samples(tmp_path, clock: Clock, caplog) -> None:
    """What the real-scheduler tests use to play a workload starting: the agent follows its file.
    Checked at most every check_every_s (exactly at it: checked); a broken or resized file keeps
    the last good scenario, with a warning."""
    import os

    from gpuextender.agent.fakes.scenario import ScenarioFile, load_scenario

    path = tmp_path / "node.yaml"
    _write_scenario(path, 5)
    follow = ScenarioFile(path, load_scenario(path), check_every_s=0.5, clock=clock)
    install(FakeNvmlLibrary(follow.current(), uuid_seed="node-1", clock=clock, follow=follow))
    reader = NvmlReader(on_error=lambda call, name: None)
    reader.start()

    def utilization() -> list[int]:
        return [g.utilization_gpu_percent for g in reader.sample().gpus]

    def edit(text: str | None = None, utilization: int = 0, count: int = 2) -> None:
        if text is None:
            _write_scenario(path, utilization, count)
        else:
            path.write_text(text)
        stamp = path.stat().st_mtime_ns + 1_000_000  # a new mtime even within the filesystem's granularity
        os.utime(path, ns=(stamp, stamp))

    assert utilization() == [5, 5]
    edit(utilization=90)
    clock.t += 0.49
    assert utilization() == [5, 5]  # not yet checked
    clock.t += 0.01
    assert utilization() == [90, 90]
    with caplog.at_level(logging.WARNING):
        edit("gpus: [{product: NVIDIA H1")  # half-written
        clock.t += 0.5
        assert utilization() == [90, 90]
        edit(utilization=10, count=3)
        clock.t += 0.5
        assert utilization() == [90, 90]
    assert "keeping the last good scenario" in caplog.text and "now 3 GPUs, was 2" in caplog.text
    path.unlink()  # a deleted file: nothing to follow, the last good scenario stays
    clock.t += 0.5
    assert utilization() == [90, 90]
    edit(utilization=20)
    clock.t += 0.5
    assert utilization() == [20, 20]


# -- 0.2 per-sample reads ----------------------------------------------------------------------------

FULL = {
    "ecc": {"uncorrected": 1, "corrected": {"pattern": "ramp", "from": 0, "to": 100, "over_s": 10}},
    "remapped_rows": {"correctable": 3, "uncorrectable": 1, "pending": True, "failure": False},
    "retired_pages_pending": False,
    "clock_event_reasons": ["sw_power_cap", "hw_thermal"],
    "sm_clock_mhz": {"pattern": "steps", "values": [1980, 1410], "every_s": 5},
    "memory_clock_mhz": 2619,
    "energy_start_mj": 1000,
    "power_watts": 500,
    "numa_node": 1,
}
NEW_FIELDS = ("errors", "clock_event_reasons", "sm_clock_mhz", "memory_clock_mhz", "energy_millijoules", "numa_node")


def test_health_counters_clocks_energy_and_numa_are_read(clock: Clock) -> None:
    errors: list = []
    reader, _ = start_reader({"gpus": [{**H100, **FULL}]}, clock, errors)
    gpu = reader.sample().gpus[0]
    assert gpu.errors is not None
    assert (gpu.errors.ecc_uncorrected_volatile, gpu.errors.ecc_corrected_volatile) == (1, 0)
    assert (gpu.errors.remapped_rows_correctable, gpu.errors.remapped_rows_uncorrectable) == (3, 1)
    assert (gpu.errors.remap_pending, gpu.errors.remap_failure, gpu.errors.retired_pages_pending) == (
        True,
        False,
        False,
    )
    assert (
        gpu.clock_event_reasons
        == pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    )
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz, gpu.energy_millijoules, gpu.numa_node) == (1980, 2619, 1000, 1)
    clock.t = 5.0
    gpu = reader.sample().gpus[0]
    assert gpu.errors is not None and gpu.errors.ecc_corrected_volatile == 50
    assert gpu.sm_clock_mhz == 1410
    assert gpu.energy_millijoules == 1000  # read at most every ENERGY_REFRESH_S (10 s)
    clock.t = 10.0
    gpu = reader.sample().gpus[0]
    assert gpu.energy_millijoules == 1000 + 500 * 10 * 1000  # grows with power: 500 W for 10 s
    assert errors == [] and gpu.healthy


def test_the_energy_counter_is_read_again_exactly_every_ten_seconds(clock: Clock) -> None:
    lib = FakeNvmlLibrary(parse_scenario({"gpus": [{**H100, "energy_start_mj": 0, "power_watts": 100}]}), clock=clock)
    install(lib)
    reader = NvmlReader(clock=clock, sysfs_root=None)
    reader.start()
    assert reader.sample().gpus[0].energy_millijoules == 0
    clock.t = ENERGY_REFRESH_S - 0.001
    assert reader.sample().gpus[0].energy_millijoules == 0  # the last read, not a new call
    clock.t = ENERGY_REFRESH_S
    assert reader.sample().gpus[0].energy_millijoules == 100 * 1000 * ENERGY_REFRESH_S


def test_unsupported_health_readings_are_none_not_zero_and_not_errors(clock: Clock) -> None:
    errors: list = []
    reader, _ = start_reader({"gpus": [H100]}, clock, errors)  # a 0.1 scenario: none of it supported
    gpu = reader.sample().gpus[0]
    assert all(getattr(gpu, name) is None for name in NEW_FIELDS)
    assert gpu.mig_instances == [] and gpu.healthy and errors == []


def test_partly_supported_error_counters_keep_the_rest_unknown(clock: Clock) -> None:
    reader, _ = start_reader({"gpus": [{**H100, "retired_pages_pending": True}]}, clock)  # a V100-like GPU
    errors = reader.sample().gpus[0].errors
    assert errors is not None and errors.retired_pages_pending is True
    assert errors.ecc_uncorrected_volatile is None and errors.remapped_rows_correctable is None


def test_an_unsupported_reading_is_not_asked_again_for_a_minute(clock: Clock) -> None:
    lib = FakeNvmlLibrary(parse_scenario({"gpus": [H100]}), clock=clock)
    install(lib)
    reader = NvmlReader(clock=clock)
    reader.start()
    reader.sample()
    before = lib.calls
    reader.sample()
    assert lib.calls - before == 4  # memory, utilization, temperature, power: the unsupported ones are skipped
    clock.t = 59.9
    before = lib.calls
    reader.sample()
    assert lib.calls - before == 4
    clock.t = 60.0  # ABSENT_RECHECK_S: asked again (some answers change at run time: MIG)
    before = lib.calls
    reader.sample()
    # the 9 health and clock reads, field values (memory temperature, PCIe replays), encoder, decoder
    assert lib.calls - before == 4 + 12


def test_a_failing_health_read_is_an_error_but_not_a_verdict(clock: Clock) -> None:
    errors: list = []
    reader, _ = start_reader(
        {
            "gpus": [{**H100, **FULL}],
            "errors": [
                {"call": "nvmlDeviceGetRemappedRows", "error": "Timeout"},
                {"call": "nvmlDeviceGetClockInfo", "error": "GpuIsLost", "after_s": 1},
            ],
        },
        clock,
        errors,
    )
    gpu = reader.sample().gpus[0]
    assert gpu.errors is not None and gpu.errors.remap_pending is None and gpu.errors.ecc_uncorrected_volatile == 1
    assert gpu.healthy and ("nvmlDeviceGetRemappedRows", "Timeout") in errors
    reader.sample()  # a transient error is asked again next sample (not cached like NotSupported)
    assert errors.count(("nvmlDeviceGetRemappedRows", "Timeout")) == 2
    clock.t = 1.0
    gpu = reader.sample().gpus[0]
    assert not gpu.healthy and gpu.unhealthy_reasons == ["GpuIsLost"]


def test_clock_reasons_fall_back_to_the_pre_535_name(
    clock: Clock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delattr(FakeNvmlLibrary, "_c_nvmlDeviceGetCurrentClocksEventReasons")  # an older driver
    reader, _ = start_reader({"gpus": [{**H100, "count": 2, "clock_event_reasons": ["hw_slowdown"]}]}, clock)
    with caplog.at_level(logging.INFO, logger="gpu_agent.nvml"):
        assert [g.clock_event_reasons for g in reader.sample().gpus] == [0x08, 0x08]
        assert [g.clock_event_reasons for g in reader.sample().gpus] == [0x08, 0x08]
    assert caplog.text.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 1


def test_numa_node_falls_back_to_sysfs(clock: Clock, tmp_path) -> None:
    device = tmp_path / "bus" / "pci" / "devices" / "0000:18:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    other = tmp_path / "bus" / "pci" / "devices" / "0000:28:00.0"
    other.mkdir(parents=True)
    (other / "numa_node").write_text("-1\n")  # a machine without NUMA
    install(FakeNvmlLibrary(parse_scenario({"gpus": [{**H100, "count": 3}]}), clock=clock))
    reader = NvmlReader(sysfs_root=tmp_path)
    reader.start()
    assert [g.numa_node for g in reader.sample().gpus] == [1, None, None]  # GPU 2: no such device


def test_numa_node_from_memory_affinity_wins_over_sysfs(clock: Clock, tmp_path) -> None:
    device = tmp_path / "bus" / "pci" / "devices" / "0000:18:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("0\n")
    install(FakeNvmlLibrary(parse_scenario({"gpus": [{**H100, "numa_node": 3}]}), clock=clock))
    reader = NvmlReader(sysfs_root=tmp_path)
    reader.start()
    assert reader.sample().gpus[0].numa_node == 3
