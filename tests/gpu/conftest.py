"""Real-GPU checks: they run only where libnvidia-ml loads and sees a GPU, else skip with one line.

Run them alone (`pytest tests/gpu`, or bench/gpu_check.py which also writes bench/RESULTS-gpu.md):
the rest of the suite installs the fake NVML underneath pynvml in this same process.

Where a GPU is expected (GPUEXT_EXPECT_GPU=1, which `bench/gpu_check.py --expect-gpu` sets for
its pytest run, and the device-machine command in docs/testing.md), a skip here is a failure:
NVML or nvidia-smi present but broken, no PyTorch for the loads, no GPM, a fake NVML in the way.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from tests.gpu import smi

EXPECT_GPU_VARIABLE = "GPUEXT_EXPECT_GPU"

_MISSING: str | None = None


def gpu_expected() -> bool:
    return os.environ.get(EXPECT_GPU_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")


def missing() -> str:
    global _MISSING
    if _MISSING is None:
        _MISSING = smi.real_nvml_missing()
    return _MISSING


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if "tests/gpu/" in item.nodeid.replace("\\", "/")]
    if ours and missing():
        skip = pytest.mark.skip(reason=f"real-GPU checks: {missing()}")
        for item in ours:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    """With a GPU expected, a test here that skipped (in setup, in its body) is reported failed."""
    outcome: Any = yield  # pluggy's Result (hookwrapper: every pytest this runs under has it)
    report: pytest.TestReport = outcome.get_result()
    if not report.skipped or not gpu_expected():
        return
    if "tests/gpu/" not in item.nodeid.replace("\\", "/"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped where a GPU is expected ({EXPECT_GPU_VARIABLE}=1): {reason}"


@pytest.fixture
def real_pynvml():  # type: ignore[no-untyped-def]
    """pynvml on the real library, initialised for the test and shut down after it."""
    import pynvml

    if type(getattr(pynvml, "nvmlLib", None)).__name__ == "FakeNvmlLibrary":
        pytest.skip("real-GPU checks: a fake NVML is installed in this process (run tests/gpu alone)")
    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()
