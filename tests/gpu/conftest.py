"""Real-GPU checks: they run only where libnvidia-ml loads and sees a GPU, else skip with one line.

Run them alone (`pytest tests/gpu`, or bench/gpu_check.py which also writes bench/RESULTS-gpu.md):
the rest of the suite installs the fake NVML underneath pynvml in this same process."""

from __future__ import annotations

import pytest

from tests.gpu import smi

_MISSING: str | None = None


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


@pytest.fixture
def real_pynvml():  # type: ignore[no-untyped-def]
    """pynvml on the real library, initialised for the test and shut down after it."""
    import pynvml

    if type(getattr(pynvml, "nvmlLib", None)).__name__ == "FakeNvmlLibrary":
        pytest.skip("real-GPU checks: a fake NVML is installed in this process (run tests/gpu alone)")
    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()
