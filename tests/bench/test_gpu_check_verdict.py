"""bench/gpu_check.py's pass/fail logic, run here without a GPU: the verdict that sets its exit
code (tests/gpu/report.py `failures`), the tolerances against nvidia-smi and the load bounds
(tests/gpu/smi.py), the form factor, the committed RESULTS-gpu*.md as renderings of the committed
JSON, and the GPU-expected switch (GPUEXT_EXPECT_GPU=1 turns tests/gpu's skips into failures)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.gpu import report, smi

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def committed_h100() -> dict[str, Any]:
    return json.loads((BENCH / "gpu_check.json").read_text())


def _row(field: str, ours: Any, before: str, after: str) -> dict[str, Any]:
    ok = smi._same(field, ours, before, after)
    return smi.Row(0, field, smi.short(ours), before, after, str(smi.TOLERANCE.get(field, "exact")), ok)._asdict()


def passing_run() -> dict[str, Any]:
    """The committed H100 run, with the comparisons under load a run since issue 37 records
    (the agent's last readings against nvidia-smi's, as measured), so every check holds."""
    results = committed_h100()
    loads = results[report.SECTIONS["loads"]]
    for mode in report.LOAD_MODES:
        smi_row = loads[mode]["smi"][0]
        reader = loads[mode]["reader"][-1]
        loads[mode]["vs_smi"] = [
            _row("utilization.gpu", reader["util"], smi_row["utilization.gpu"], smi_row["utilization.gpu"]),
            _row("memory.used", reader["mem_used_mib"], smi_row["memory.used"], smi_row["memory.used"]),
            _row("power.draw", float(smi_row["power.draw"]), smi_row["power.draw"], smi_row["power.draw"]),
            _row("clocks.sm", int(smi_row["clocks.sm"]), smi_row["clocks.sm"], smi_row["clocks.sm"]),
        ]
    return results


# -- the committed reports are their JSON, rendered ------------------------------------------------


def test_the_committed_reports_are_the_rendering_of_the_committed_json() -> None:
    for path, text in report.committed(BENCH).items():
        assert path.read_text() == text, f"{path.name} is not its JSON rendered: run python -m tests.gpu.report"


def test_the_committed_report_quotes_the_committed_h200_run_not_an_older_one() -> None:
    h200 = json.loads((BENCH / "gpu_check-h200.json").read_text())
    text = (BENCH / "RESULTS-gpu.md").read_text()
    median = h200[report.SECTIONS["cost"]]["no_gpm"]["median_ms"]
    assert f"a pass {median:.2f} ms median" in text
    assert "1.01 ms median" not in text  # the f70bc3e run the hand-written note quoted


def older_run() -> dict[str, Any]:
    """A committed run as bench/gpu_check.py wrote it before issue 37: no boards, no comparison
    under load (its JSON had neither part)."""
    results = committed_h100()
    del results["environment"]["boards"]
    for mode in report.LOAD_MODES:
        results[report.SECTIONS["loads"]][mode].pop("vs_smi", None)
    return results


def test_the_report_names_form_factor_and_says_the_power_limit_was_not_recorded_by_old_runs() -> None:
    old = report.markdown(older_run())
    assert "Form factor **SXM**" in old and "power limit was not recorded" in old
    for name in ("RESULTS-gpu.md", "RESULTS-gpu-h200.md"):  # both committed runs of 2026-11-27 record it
        new = (BENCH / name).read_text()
        assert "form factor **SXM**" in new and "power limit 700 W enforced" in new, name
        assert "nvmlDeviceGetTemperatureV(MEMORY?)" not in new


def test_a_run_that_records_its_boards_shows_their_power_limit() -> None:
    results = passing_run()
    results["environment"]["boards"] = [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "enforced_power_limit_w": 700.0,
            "power_limit_w": 700.0,
            "default_power_limit_w": 700.0,
            "power_limit_range_w": [200.0, 700.0],
            "module_id": 1,
            "board_part_number": "692-2G520-0200-000",
            "smi": {"power.limit": "700.00"},
            "form_factor": "SXM",
            "form_factor_why": "x",
        }
    ]
    text = report.markdown(results)
    assert "form factor **SXM**" in text and "power limit 700 W enforced" in text and "settable 200-700 W" in text


# -- the verdict: exit 0 only when every check held -------------------------------------------------


def test_a_run_where_every_check_held_has_no_failures_and_says_so() -> None:
    results = passing_run()
    assert report.failures(results) == []
    assert "Every check held" in report.markdown(results)


def test_a_run_before_the_comparison_under_load_says_so_and_fails() -> None:
    assert report.failures(older_run()) == [
        f"GPM and utilization under loads: {mode}: not compared with nvidia-smi" for mode in report.LOAD_MODES
    ]


@pytest.mark.parametrize("name", ["gpu_check.json", "gpu_check-h200.json"])
def test_the_committed_runs_compared_every_load_and_held(name: str) -> None:
    results = json.loads((BENCH / name).read_text())
    assert report.failures(results) == []
    loads = results[report.SECTIONS["loads"]]
    for mode in report.LOAD_MODES:  # every load compared, reading by reading
        assert loads[mode]["vs_smi"] and all(row["ok"] for row in loads[mode]["vs_smi"]), mode


def test_a_reading_off_nvidia_smi_at_idle_fails_the_run() -> None:
    results = passing_run()
    rows = results[report.SECTIONS["smi"]]["rows"]
    row = next(r for r in rows if r["field"] == "power.draw")
    row.update(ours="70220.00", ok=False)  # mW read as W
    (found,) = report.failures(results)
    assert "power.draw" in found and "70220.00" in found
    assert "**NO**" in report.markdown(results)


def test_a_reading_off_nvidia_smi_under_a_load_fails_the_run() -> None:
    results = passing_run()
    loads = results[report.SECTIONS["loads"]]
    loads["matmul"]["vs_smi"][0] = _row("utilization.gpu", 0, "99", "99")
    (found,) = report.failures(results)
    assert found.startswith("GPM and utilization under loads: matmul: GPU 0 utilization.gpu: agent 0")


def test_a_part_that_crashed_or_did_not_run_fails_the_run_unless_skipped() -> None:
    results = passing_run()
    results[report.SECTIONS["events"]] = {"error": "Traceback...\nRuntimeError: boom"}
    del results[report.SECTIONS["agent"]]
    assert report.failures(results) == [
        "events and topology: crashed (RuntimeError: boom)",
        "gpu-agent -> gpu-extender: did not run",
    ]
    results["skipped"] = ["agent"]
    assert report.failures(results) == ["events and topology: crashed (RuntimeError: boom)"]


def test_failed_or_skipped_real_gpu_tests_fail_the_run() -> None:
    results = passing_run()
    results[report.SECTIONS["tests"]].update(rc=1, summary="1 failed, 7 passed")
    assert report.failures(results) == ["pytest tests/gpu: exit 1: 1 failed, 7 passed"]


def test_the_event_thread_must_start_and_stop() -> None:
    results = passing_run()
    results[report.SECTIONS["events"]].update(stopped=False, threads_left=["nvml-events"])
    assert report.failures(results) == [
        "events and topology: the event thread did not stop",
        "events and topology: threads left: ['nvml-events']",
    ]


def test_the_extender_must_pass_the_idle_and_spinning_gpu_and_fail_the_busy_one() -> None:
    results = passing_run()
    agent = results[report.SECTIONS["agent"]]
    agent["matmul"]["filter"]["NodeNames"] = ["gpu-real"]
    agent["spin"]["filter"]["NodeNames"] = []
    assert report.failures(results) == [
        "gpu-agent -> gpu-extender: matmul: the filter passed the node, expected it to fail",
        "gpu-agent -> gpu-extender: spin: the filter failed the node, expected it to pass",
    ]
    results[report.SECTIONS["loads"]]["gpm_supported"] = "NotSupported"  # without GPM the spin is busy
    assert len(report.failures(results)) == 1


@pytest.mark.parametrize(
    ("mode", "key", "value", "expected"),
    [
        # matmul: SM active over 80 % (measured 95.5 / 95.3), tensor over 80 (92.5 / 92.4)
        ("matmul", "sm_active", 80.0, None),
        ("matmul", "sm_active", 79.9, "matmul: SM active % 79.9 under 80"),
        ("matmul", "sm_active", 0.0, "matmul: SM active % 0.0 under 80"),
        ("matmul", "sm_active", 14.25, "matmul: SM active % 14.25 under 80"),  # the occupancy
        ("matmul", "tensor_active", 0.92, "matmul: tensor active % 0.92 under 80"),  # a fraction
        # idle: under 1 % (measured 0.0 / 0.0)
        ("idle", "sm_active", 0.99, None),
        ("idle", "sm_active", 1.0, "idle: SM active % 1.0 not under 1"),
        ("idle", "sm_active", 100.0, "idle: SM active % 100.0 not under 1"),
        # spin: under 10 % (measured 0.75): graphics activity (99.5) read as SM activity
        ("spin", "sm_active", 9.9, None),
        ("spin", "sm_active", 99.5, "spin: SM active % 99.5 not under 10"),
        ("matmul", "sm_active", None, "matmul: SM active % not read (None)"),
    ],
)
def test_gpm_bounds_of_each_load(mode: str, key: str, value: Any, expected: str | None) -> None:
    results = passing_run()
    results[report.SECTIONS["loads"]][mode]["reader"][-1]["gpm"][key] = value
    found = report.failures(results)
    assert found == ([] if expected is None else [f"GPM and utilization under loads: {expected}"])


@pytest.mark.parametrize(
    ("mode", "util", "mem", "gpm", "expected"),
    [
        ("matmul", 90, 1230, {"sm_active": 95, "tensor_active": 92}, []),
        ("matmul", 89, 1230, {"sm_active": 95, "tensor_active": 92}, ["matmul: utilization % 89 under 90"]),
        ("spin", 0, 528, {"sm_active": 0.75}, ["spin: utilization % 0 under 90"]),
        ("idle", 9, 0, {"sm_active": 0}, []),
        ("idle", 10, 0, {"sm_active": 0}, ["idle: utilization % 10 not under 10"]),
        ("hold", 0, 8192, {"sm_active": 0}, []),
        ("hold", 0, 8, {"sm_active": 0}, ["hold: memory used MiB 8 under 8192"]),  # GiB for MiB
        ("hold", 0, 8810, None, ["hold: SM active % not read (None)"]),  # GPM expected, not read
    ],
)
def test_bounds_of_utilization_and_memory(mode: str, util: Any, mem: Any, gpm: Any, expected: list[str]) -> None:
    assert smi.bound_failures(mode, util, mem, gpm, True) == expected


def test_gpm_bounds_are_not_applied_where_gpm_is_not_supported() -> None:
    assert smi.bound_failures("matmul", 99, 1230, None, False) == []


# -- tolerances against nvidia-smi: what each one catches --------------------------------------------


@pytest.mark.parametrize(
    ("field", "ours", "before", "after", "ok"),
    [
        ("memory.used", 8810.4, "8811", "8811", True),  # MiB rounding
        ("memory.used", 8810.4 * 2**20, "8811", "8811", False),  # bytes for MiB
        ("memory.used", 8810.4 + 480, "8811", "8811", False),  # v1 "used" counts the reserved 480 MiB
        ("utilization.gpu", 99, "99", "100", True),
        ("utilization.gpu", 89, "99", "100", True),  # within 10 points of the bracket
        ("utilization.gpu", 88, "99", "100", False),
        ("utilization.gpu", 0, "99", "99", False),  # a busy GPU read as idle
        ("utilization.gpu", 0.99, "99", "99", False),  # a fraction
        ("power.draw", 695.0, "689.32", "699.49", True),  # in the bracket
        ("power.draw", 699.49 + 34.9, "689.32", "699.49", True),  # 5 % of 699.49 over it
        ("power.draw", 699.49 + 35.1, "689.32", "699.49", False),
        ("power.draw", 699490.0, "699.49", "699.49", False),  # mW for W
        ("power.draw", 85.0, "70.11", "70.11", True),  # 15 W at idle
        ("power.draw", 700.0, "70.11", "70.11", False),  # the limit for the draw
        ("power.draw", 78.0, "689.32", "699.49", False),  # an idle reading under load
        ("clocks.sm", 1425, "1410", "1455", True),
        ("clocks.sm", 1455 + 145, "1410", "1455", True),  # 10 % of 1455
        ("clocks.sm", 1980, "1410", "1455", False),  # the maximum SM clock, not the current one
        ("clocks.sm", 2619, "1980", "1980", False),  # the memory clock
        ("clocks.sm", 345 + 60, "345", "345", True),  # 60 MHz at least
        ("clocks.sm", 345 + 61, "345", "345", False),
        ("temperature.gpu", 36, "34", "34", True),
        ("temperature.gpu", 37, "34", "34", False),
        ("temperature.gpu", 93, "34", "34", False),  # Fahrenheit
        ("temperature.gpu", 38, "34", "35", False),  # the memory sensor (H100 idle: 38)
        ("temperature.gpu", None, "[N/A]", "[N/A]", True),  # unknown on both sides
        ("temperature.gpu", None, "34", "34", False),  # not read where nvidia-smi reads it
        ("temperature.gpu", 34, "[N/A]", "[N/A]", False),  # read where nvidia-smi cannot
    ],
)
def test_tolerance(field: str, ours: Any, before: str, after: str, ok: bool) -> None:
    assert smi._same(field, ours, before, after) is ok


def test_compare_refuses_a_gpu_count_that_differs_from_nvidia_smis() -> None:
    sample = SimpleNamespace(gpus=[SimpleNamespace(index=0)])
    with pytest.raises(ValueError, match="nvidia-smi lists 2/2 GPUs"):
        smi.compare(sample, [{}, {}], [{}, {}])


def test_the_fields_compared_under_load_each_have_a_tolerance() -> None:
    assert set(smi.LOADED_FIELDS) == {"utilization.gpu", "memory.used", "power.draw", "clocks.sm", "temperature.gpu"}
    assert set(smi.LOADED_FIELDS) <= set(smi.TOLERANCE)
    assert str(smi.TOLERANCE["power.draw"]) == "max(15, 5%)" and str(smi.TOLERANCE["memory.used"]) == "1"


@pytest.mark.parametrize(
    ("name", "limit", "seen", "kind"),
    [
        ("NVIDIA H100 80GB HBM3", 700.0, None, "SXM"),
        ("NVIDIA H100 80GB HBM3", None, 699.49, "SXM"),
        ("NVIDIA H200", 700.0, None, "SXM"),
        ("NVIDIA H100 PCIe", 350.0, None, "PCIe"),
        ("NVIDIA H200 NVL", 600.0, None, "PCIe"),
        ("NVIDIA A100-SXM4-80GB", 400.0, None, "SXM"),
        ("NVIDIA A100-PCIE-40GB", 250.0, None, "PCIe"),
        ("NVIDIA H100 80GB HBM3", 600.0, None, "unknown"),  # not over 600 W: cannot tell
        ("NVIDIA H200", None, None, "unknown"),
        ("NVIDIA GH200 480GB", 900.0, None, "superchip module"),
    ],
)
def test_form_factor(name: str, limit: float | None, seen: float | None, kind: str) -> None:
    assert smi.form_factor(name, limit, seen)[0] == kind


def test_the_memory_temperature_probe_is_the_field_value_not_sensor_1() -> None:
    calls: list[Any] = []

    class Pynvml:
        NVML_TEMPERATURE_GPU = 0
        NVML_FI_DEV_MEMORY_TEMP = 82
        NVML_SUCCESS = 0

        def __getattr__(self, name: str) -> Any:
            def call(*args: Any, **kwargs: Any) -> int:
                calls.append((name, args))
                return 0

            return call

    fake = Pynvml()
    probes = dict(smi.nvml_probes(fake, "h"))
    probes["nvmlDeviceGetTemperatureV(GPU)"]()
    assert calls[-1] == ("nvmlDeviceGetTemperatureV", ("h", 0))
    assert not any("MEMORY?" in name for name in probes)
    assert "nvmlDeviceGetFieldValues(MEMORY_TEMP)" in probes and ("MEMORY_TEMP", 82) in smi.FIELD_PROBES


# -- the GPU-expected switch --------------------------------------------------------------------------


def _pytest_gpu(env_value: str | None, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUEXT_EXPECT_GPU"}
    if env_value is not None:
        env["GPUEXT_EXPECT_GPU"] = env_value
    test = "tests/gpu/test_real_nvml.py::test_topology_is_read"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test, *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _no_real_nvml() -> None:
    if not smi.real_nvml_missing():
        pytest.skip("this machine has a real GPU: the switch is exercised by bench/gpu_check.py there")


def test_without_a_gpu_expected_the_real_gpu_tests_skip_cleanly() -> None:
    _no_real_nvml()
    for value in (None, "", "0"):
        proc = _pytest_gpu(value)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 skipped" in proc.stdout and "failed" not in proc.stdout and "error" not in proc.stdout


def test_with_a_gpu_expected_a_skip_is_a_failure() -> None:
    _no_real_nvml()
    proc = _pytest_gpu("1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "skipped where a GPU is expected (GPUEXT_EXPECT_GPU=1)" in proc.stdout
    assert "1 error" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1]


def test_with_a_gpu_expected_a_skip_in_the_test_body_is_a_failure_too(tmp_path: Path) -> None:
    """A skip raised by the test itself (no PyTorch, no GPM, a fake NVML), not only the collection's."""
    _no_real_nvml()
    probe = tmp_path / "tests" / "gpu" / "test_probe.py"  # a node id under tests/gpu/, as ours
    probe.parent.mkdir(parents=True)
    probe.write_text("import pytest\n\n\ndef test_skips_in_its_body():\n    pytest.skip('no PyTorch')\n")
    env = {**os.environ, "GPUEXT_EXPECT_GPU": "1"}
    # tests/gpu/conftest.py as a plugin, its "NVML missing" answer replaced by nothing missing:
    # the skip that fails is the test body's own, not the collection's
    code = (
        "import sys, pytest; import tests.gpu.conftest as c; c._MISSING = ''; "
        f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '--rootdir', {str(tmp_path)!r}, "
        f"{str(probe)!r}], plugins=[c]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed" in proc.stdout and "no PyTorch" in proc.stdout


def _gpu_check(env_value: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUEXT_EXPECT_GPU"}
    if env_value is not None:
        env["GPUEXT_EXPECT_GPU"] = env_value
    cmd = [sys.executable, str(BENCH / "gpu_check.py"), "--out", str(ROOT / "bench" / "out" / "never"), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_gpu_check_without_a_gpu_exits_0_unless_one_is_expected() -> None:
    _no_real_nvml()
    quiet = _gpu_check(None)
    assert quiet.returncode == 0 and "gpu_check: skipped" in quiet.stdout, quiet.stdout + quiet.stderr
    for proc in (_gpu_check("1"), _gpu_check(None, "--expect-gpu")):
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "gpu_check: FAILED, a GPU is expected" in proc.stdout


def test_a_copy_of_results_is_not_changed_by_rendering() -> None:
    results = passing_run()
    before = copy.deepcopy(results)
    report.markdown(results)
    report.failures(results)
    assert results == before
