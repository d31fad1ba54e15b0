"""Helpers for tests that run the agent's NVML code on the fake library under the real pynvml."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pynvml

from gpuextender.agent.fakes.nvml import FakeNvmlLibrary, install
from gpuextender.agent.fakes.scenario import parse_scenario
from gpuextender.agent.sources.nvml_reader import NvmlReader

H100: dict[str, Any] = {"product": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "compute_capability": "9.0"}
A100_40: dict[str, Any] = {"product": "NVIDIA A100-SXM4-40GB", "memory_gib": 40, "compute_capability": "8.0"}


class Clock:
    """A manual clock for the fake (seconds since it started)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@contextmanager
def restored_pynvml() -> Iterator[None]:
    """Put pynvml's library handle back as it was (tests install fakes into it)."""
    saved = pynvml.nvmlLib
    try:
        yield
    finally:
        with pynvml.libLoadLock:
            pynvml.nvmlLib = saved
            pynvml._nvmlGetFunctionPointer_cache.clear()


def install_fake(document: dict[str, Any], clock: Any = None) -> FakeNvmlLibrary:
    kwargs = {"clock": clock} if clock is not None else {}
    lib = FakeNvmlLibrary(parse_scenario(document), uuid_seed="node-1", **kwargs)
    install(lib)
    return lib


def start_reader(
    document: dict[str, Any], clock: Any = None, errors: list[tuple[str, str]] | None = None, **reader_kwargs: Any
) -> tuple[NvmlReader, FakeNvmlLibrary]:
    lib = install_fake(document, clock)
    sink = errors if errors is not None else []
    reader = NvmlReader(on_error=lambda call, name: sink.append((call, name)), **{"sysfs_root": None, **reader_kwargs})
    reader.start()
    return reader, lib
