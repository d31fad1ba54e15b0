"""Benchmark: the cost of one `NvmlReader.sample()` over 8 GPUs, in microseconds.

What it measures: the wall time of one full NVML pass (what the sample loop pays every interval)
on the fake NVML installed under the real pynvml, so pynvml's ctypes wrappers and error mapping
run as in production; only the driver is simulated (a Python function per C call). Real NVML
calls that reach the kernel driver cost more per call than the fake; the number of calls is
printed too, so the two can be told apart.

Scenarios:
- `basic`: only what a 0.1 scenario defines (memory, utilization, temperature, power): every
  0.2 per-sample read (ECC, row remaps, retired pages, clock event reasons, clocks, energy,
  NUMA, MIG mode) answers NotSupported, as on a consumer GPU;
- `full`: every 0.2 reading supported, as on an H100 (ECC, remaps, clocks, energy, NUMA);
- `mig`: `full` with MIG enabled and 7 instances on every GPU (the worst case per sample).

Run: `.venv/bin/python bench/bench_nvml_sample.py [--samples N] [--repeats R] [--scenario NAME]`.
Prints, per scenario: median (and p10/p90) of R repeats of the mean over N samples, in µs per
sample, and the C calls per sample.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pynvml

from gpuextender.agent.fakes.nvml import FakeNvmlLibrary, install
from gpuextender.agent.fakes.scenario import parse_scenario
from gpuextender.agent.sources.nvml_reader import NvmlReader

H100: dict[str, Any] = {
    "product": "NVIDIA H100 80GB HBM3",
    "memory_gib": 80,
    "compute_capability": "9.0",
    "utilization_percent": {"pattern": "sine", "min": 10, "max": 90, "period_s": 60},
    "memory_used_percent": 40,
    "temperature_c": 55,
    "power_watts": 400,
}
FULL: dict[str, Any] = {
    "ecc": {"uncorrected": 0, "corrected": 3},
    "remapped_rows": {"correctable": 1, "uncorrectable": 0, "pending": False, "failure": False},
    "clock_event_reasons": ["sw_power_cap"],
    "sm_clock_mhz": 1980,
    "memory_clock_mhz": 2619,
    "energy_start_mj": 0,
    "numa_node": 0,
}
MIG7 = {"mig": [{"profile": "1g.10gb", "count": 7, "memory_used_percent": 30}]}

SCENARIOS: dict[str, dict[str, Any]] = {
    "basic": {"gpus": [{**H100, "count": 8}]},
    "full": {"gpus": [{**H100, **FULL, "count": 8}]},
    "mig": {"gpus": [{**H100, **FULL, **MIG7, "count": 8}]},
}


def bench(name: str, samples: int, repeats: int) -> None:
    try:
        scenario = parse_scenario(SCENARIOS[name], source=name)
    except ValueError as exc:  # an older fake that does not know the 0.2 keys
        print(f"{name:>6}: skipped ({exc})")
        return
    lib = FakeNvmlLibrary(scenario, uuid_seed="bench")
    install(lib)
    reader = NvmlReader()
    reader.start()
    for _ in range(20):  # warm: identity cache, pynvml's function-pointer cache
        reader.sample()
    calls_before = lib.calls
    reader.sample()
    calls = lib.calls - calls_before
    means: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(samples):
            reader.sample()
        means.append((time.perf_counter() - started) / samples * 1e6)
    reader.close()
    deciles = statistics.quantiles(means, n=10) if len(means) > 1 else [means[0]] * 9
    print(
        f"{name:>6}: {statistics.median(means):8.1f} µs/sample (p10 {deciles[0]:.1f}, p90 {deciles[-1]:.1f}; "
        f"{repeats} x {samples} samples), {calls} C calls/sample for 8 GPUs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200, help="samples per repeat")
    parser.add_argument("--repeats", type=int, default=15, help="repeats; the median of their means is printed")
    parser.add_argument(
        "--scenario", choices=sorted(SCENARIOS), action="append", help="scenario to run (repeatable; default: all)"
    )
    args = parser.parse_args()
    saved = pynvml.nvmlLib
    try:
        for name in args.scenario or list(SCENARIOS):
            bench(name, args.samples, args.repeats)
    finally:
        pynvml.nvmlLib = saved


if __name__ == "__main__":
    main()
