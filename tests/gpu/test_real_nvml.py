"""The agent's NVML path on a real GPU (skipped with one line where real NVML does not load).

What the fake NVML stands in for everywhere else: the reader's struct versions (memory v2), its
NotSupported handling, the event thread, the topology calls and gpu-agent end to end, checked
against nvidia-smi and a gpu-extender on loopback."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import pytest

from gpuextender.agent.sources.nvml_events import EventStore, NvmlEventWatcher
from gpuextender.agent.sources.nvml_reader import NvmlReader
from tests.gpu import live, smi

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def reader(real_pynvml: Any):  # type: ignore[no-untyped-def]
    reader = NvmlReader()
    reader.start()
    reader.sample()  # identity cached, topology read
    yield reader
    reader.close()


def test_every_gpu_is_read_with_identity_and_memory(reader: NvmlReader, real_pynvml: Any) -> None:
    sample = reader.sample()
    assert sample.node_error == ""
    assert len(sample.gpus) == real_pynvml.nvmlDeviceGetCount()
    for gpu in sample.gpus:
        assert gpu.uuid.startswith("GPU-"), gpu
        assert gpu.healthy, gpu.unhealthy_reasons
        assert gpu.memory_total_bytes and gpu.memory_used_bytes is not None
        assert (
            gpu.memory_used_bytes + (gpu.memory_free_bytes or 0) + (gpu.memory_reserved_bytes or 0)
            == gpu.memory_total_bytes
        )


def test_readings_match_nvidia_smi_taken_at_the_same_moment(reader: NvmlReader) -> None:
    before = smi.query()
    sample = reader.sample()
    after = smi.query()
    rows = smi.compare(sample, before, after)
    assert {row.field for row in rows} >= {"uuid", "memory.used", "utilization.gpu", "temperature.gpu", "power.draw"}
    wrong = [row for row in rows if not row.ok]
    assert not wrong, "\n".join(str(row) for row in wrong)


def test_event_thread_registers_waits_and_stops(real_pynvml: Any) -> None:
    watcher = NvmlEventWatcher(EventStore(), wait_timeout_s=0.5)
    watcher.start()
    assert watcher.ready.wait(10)
    registered = dict(watcher.registered)  # stop() tears the registrations down with the event set
    time.sleep(1.2)  # two waits that time out: NVMLError_Timeout is the normal case
    assert watcher.stop(5)
    supported = real_pynvml.nvmlDeviceGetSupportedEventTypes(real_pynvml.nvmlDeviceGetHandleByIndex(0))
    if supported:
        assert registered.get(0), "a GPU with event types was not registered"
    assert watcher.registered == {}


def test_topology_is_read(reader: NvmlReader) -> None:
    topology = reader.topology()
    gpus = len(reader.sample().gpus)
    if gpus == 1:
        assert topology == []
    else:
        assert topology, "no GPU pair related"
        assert {(link.a, link.b) for link in topology} <= {(a, b) for a in range(gpus) for b in range(a + 1, gpus)}


def test_gpu_agent_streams_to_the_extender_which_passes_and_scores_the_node() -> None:
    seen = live.run_agent_and_extender(ROOT, loads=("idle",), load_seconds=2.0)
    idle = seen["idle"]
    assert idle["filter_status"] == 200
    assert idle["filter"]["NodeNames"] == [live.NODE], idle
    scores = {entry["Host"]: entry["Score"] for entry in idle["prioritize"]}
    assert scores.get(live.NODE, 0) > 0, idle
    assert "DCGM_FI_DEV_GPU_UTIL" in seen["agent_metric_names"]
    assert "DCGM_FI_DEV_FB_USED" in seen["agent_metric_names"]


def gpm_supported(real_pynvml: Any) -> bool:
    try:
        handle = real_pynvml.nvmlDeviceGetHandleByIndex(0)
        return bool(real_pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except real_pynvml.NVMLError:
        return False


def test_gpm_readings_come_with_the_second_sample_where_supported(reader: NvmlReader, real_pynvml: Any) -> None:
    """At idle every GPM reading is a percentage and SM activity stays under the idle bound (the
    matrix products' test below asserts it rises over the busy one: all zeros pass neither)."""
    time.sleep(0.5)
    (gpu, *_) = reader.sample().gpus  # the fixture took the first
    if not gpm_supported(real_pynvml):
        assert gpu.gpm is None  # absent, never zero
        pytest.skip("GPM is not supported on this GPU: checked that it reads as absent")
    assert gpu.gpm is not None
    for name in ("sm_active", "sm_occupancy", "tensor_active", "dram_active", "graphics_active"):
        value = getattr(gpu.gpm, name)
        assert value is not None and 0.0 <= value <= 100.0, (name, value)
    wrong = smi.bound_failures("idle", gpu.utilization_gpu_percent, None, _gpm(gpu), True)
    assert not wrong, wrong


def _gpm(gpu: Any) -> dict[str, Any] | None:
    return None if gpu.gpm is None else {"sm_active": gpu.gpm.sm_active, "tensor_active": gpu.gpm.tensor_active}


def _skip_without_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("real-GPU load: no PyTorch")


def _under(load_mode: str, reader: NvmlReader) -> Any:
    """The GPU's reading over 1 s of a CUDA load (skipped, at run time, without PyTorch: so where
    real NVML is missing every test here skips for that one reason)."""
    from tests.gpu.loads import Load

    _skip_without_torch()
    load = Load(ROOT, load_mode, 20)
    try:
        time.sleep(1.5)  # utilization is a moving average over up to 1 s
        reader.sample()  # the GPM interval starts here
        time.sleep(1.0)
        return reader.sample().gpus[0]
    finally:
        load.stop()


def test_a_spinning_thread_reads_busy_by_utilization_and_nearly_idle_by_sm_activity(
    reader: NvmlReader, real_pynvml: Any
) -> None:
    """The case the SM-activity rule exists for: one thread keeps utilization near 100 %."""
    gpu = _under("spin", reader)
    wrong = smi.bound_failures("spin", gpu.utilization_gpu_percent, None, _gpm(gpu), gpm_supported(real_pynvml))
    assert not wrong, wrong


def test_matrix_products_read_busy_by_both(reader: NvmlReader, real_pynvml: Any) -> None:
    gpu = _under("matmul", reader)
    wrong = smi.bound_failures("matmul", gpu.utilization_gpu_percent, None, _gpm(gpu), gpm_supported(real_pynvml))
    assert not wrong, wrong


@pytest.mark.parametrize("load_mode", ["hold", "spin", "matmul"])
def test_readings_match_nvidia_smi_under_a_load(load_mode: str, reader: NvmlReader) -> None:
    """Utilization, memory used, power, SM clock and temperature against nvidia-smi run just before
    and just after, twice, 1 s apart, while the load runs (tolerances: tests/gpu/smi.py)."""
    from tests.gpu.loads import Load

    _skip_without_torch()
    load = Load(ROOT, load_mode, 20)
    rows: list[smi.Row] = []
    try:
        time.sleep(1.5)  # utilization's window and the 1-s power average settle on the load
        for _ in range(2):
            before = smi.query(smi.LOADED_FIELDS)
            sample = reader.sample()
            after = smi.query(smi.LOADED_FIELDS)
            rows += smi.compare(sample, before, after)
            time.sleep(1.0)
    finally:
        load.stop()
    assert {row.field for row in rows} == set(smi.LOADED_FIELDS)
    wrong = [row for row in rows if not row.ok]
    assert not wrong, "\n".join(str(row) for row in wrong)
    if load_mode == "hold":  # the 8 GiB are seen (by both)
        held = [row for row in rows if row.field == "memory.used" and row.gpu == 0]
        assert held and all(float(row.ours) >= 8192 for row in held), held
