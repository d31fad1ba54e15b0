"""MIG devices through the real pynvml: enumerated per sample on a GPU in MIG mode, with UUID,
profile, instance ids and memory; utilization of a MIG-enabled GPU stays unknown, never 0."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest
import yaml

from gpuextender.agent.fakes.nvml import FakeNvmlLibrary, install
from gpuextender.agent.fakes.scenario import ScenarioFile, load_scenario
from gpuextender.agent.report.encode import sample_to_report
from gpuextender.agent.sources.nvml_reader import NvmlReader, mig_profile_from_attributes
from tests.agent.fake_gpus import A100_40, H100, Clock, restored_pynvml, start_reader


@pytest.fixture(autouse=True)
def _restore_pynvml() -> Iterator[None]:
    with restored_pynvml():
        yield


MIXED = {
    "gpus": [
        {
            **A100_40,
            "utilization_percent": 60,
            "mig": [{"profile": "1g.5gb", "count": 2, "memory_used_percent": 50}, {"profile": "3g.20gb"}],
        },
        {**H100, "utilization_percent": 60},
    ]
}


def test_mig_instances_are_read_and_reach_the_wire() -> None:
    errors: list[tuple[str, str]] = []
    reader, _ = start_reader(MIXED, errors=errors)
    sample = reader.sample()
    mig_gpu, plain = sample.gpus
    assert [(m.profile, m.gpu_instance_id, m.compute_instance_id) for m in mig_gpu.mig_instances] == [
        ("1g.5gb", 1, 0),
        ("1g.5gb", 2, 0),
        ("3g.20gb", 3, 0),
    ]
    assert all(m.uuid.startswith("MIG-") for m in mig_gpu.mig_instances)
    assert len({m.uuid for m in mig_gpu.mig_instances}) == 3
    first = mig_gpu.mig_instances[0]
    assert (first.memory_total_bytes, first.memory_used_bytes) == (5 * 1024**3, int(2.5 * 1024**3))
    assert plain.mig_instances == []
    # Utilization is NotSupported on a MIG-enabled GPU: unknown, not 0, and no error counted.
    assert mig_gpu.utilization_gpu_percent is None and mig_gpu.utilization_memory_percent is None
    assert plain.utilization_gpu_percent == 60
    assert errors == [] and mig_gpu.healthy
    wire = sample_to_report(sample, node_name="n1", sequence=1, agent_version="t").gpus[0]
    assert [m.profile for m in wire.mig_instances] == ["1g.5gb", "1g.5gb", "3g.20gb"]
    assert not wire.HasField("utilization_gpu_percent")


def test_mig_gpu_remapped_rows_are_unknown_while_instances_exist() -> None:
    reader, _ = start_reader(
        {
            "gpus": [
                {**A100_40, "remapped_rows": {"correctable": 1}, "mig": [{"profile": "7g.40gb"}]},
                {**A100_40, "remapped_rows": {"correctable": 1}, "mig": []},
            ]
        }
    )
    with_instances, without = reader.sample().gpus
    assert with_instances.errors is None  # NVML: not supported on MIG-enabled GPUs with active instances
    assert without.errors is not None and without.errors.remapped_rows_correctable == 1
    assert without.mig_instances == []  # MIG mode on, no device created


def test_a_reconfigured_gpu_shows_its_new_instances(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "mig.yaml"
    path.write_text(yaml.safe_dump({"gpus": [{**A100_40, "mig": [{"profile": "1g.5gb", "count": 7}]}]}))
    follow = ScenarioFile(path, load_scenario(path), check_every_s=0, clock=clock)
    install(FakeNvmlLibrary(follow.current(), clock=clock, follow=follow))
    reader = NvmlReader(sysfs_root=None)
    reader.start()
    before = reader.sample().gpus[0].mig_instances
    assert len(before) == 7
    path.write_text(yaml.safe_dump({"gpus": [{**A100_40, "mig": [{"profile": "4g.20gb"}, {"profile": "3g.20gb"}]}]}))
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)
    after = reader.sample().gpus[0].mig_instances
    assert [m.profile for m in after] == ["4g.20gb", "3g.20gb"]
    assert not {m.uuid for m in after} & {m.uuid for m in before}


def test_profile_comes_from_attributes_when_the_name_lacks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def plain_name(self: FakeNvmlLibrary, handle: Any, buffer: Any, size: Any) -> int:
        return self._write_string(buffer, size, "NVIDIA A100-SXM4-40GB")

    monkeypatch.setattr(FakeNvmlLibrary, "_c_nvmlDeviceGetName", plain_name)
    reader, _ = start_reader({"gpus": [{**A100_40, "mig": [{"profile": "2g.10gb"}, {"profile": "1c.3g.20gb"}]}]})
    assert [m.profile for m in reader.sample().gpus[0].mig_instances] == ["2g.10gb", "1c.3g.20gb"]


@pytest.mark.parametrize(
    ("g", "c", "memory_mb", "gpu_bytes", "profile"),
    [
        (1, 1, 4864, 40 * 1024**3, "1g.5gb"),  # A100 40GB: what the driver reports for 1g.5gb
        (3, 3, 20096, 40 * 1024**3, "3g.20gb"),
        (1, 1, 9856, 80 * 1024**3, "1g.10gb"),  # H100 80GB
        (7, 7, 80 * 1024, 80 * 1024**3, "7g.80gb"),
        (3, 1, 20096, 40 * 1024**3, "1c.3g.20gb"),
        (0, 0, 0, 0, ""),
    ],
)
def test_mig_profile_from_attributes(g: int, c: int, memory_mb: int, gpu_bytes: int, profile: str) -> None:
    assert mig_profile_from_attributes(g, c, memory_mb, gpu_bytes) == profile


def test_fake_mig_handles_behave_like_nvml() -> None:
    start_reader(MIXED)
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMigMode(parent) == [1, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    back = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert ctypes.addressof(back.contents) == ctypes.addressof(parent.contents)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 3)  # an empty slot
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetTemperature(mig, pynvml.NVML_TEMPERATURE_GPU)  # not a call for MIG handles
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(1))  # not MIG-capable
