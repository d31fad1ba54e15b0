"""The real-GPU check: the agent's NVML path on every GPU of this machine, in under 5 minutes.

    python bench/gpu_check.py [--out DIR] [--loads SECONDS] [--expect-gpu]

Needs libnvidia-ml (a GPU and its driver); PyTorch for the CUDA loads (bench/gpu_load.py).
Without NVML it says so in one line and exits 0 (CI never has a GPU), unless a GPU is expected:
--expect-gpu or GPUEXT_EXPECT_GPU=1 (the device-machine command in docs/testing.md), which make
that an exit 1 and every skip of the real-GPU tests a failure.

What it does, each part on its own (one that fails is reported and the rest still run):
  1. the agent's reader (`NvmlReader`, the real pynvml) on every GPU, each reading compared with
     `nvidia-smi --query-gpu=...` taken just before and just after (tolerances in tests/gpu/smi.py);
  2. every NVML call the agent makes, and the ones it could make, tried once: what is NotSupported;
  3. the event thread started and stopped; the topology read;
  4. the cost of a sampling pass (median, p99) and the RSS that libnvidia-ml adds;
  5. GPM (SM activity, occupancy, tensor and DRAM activity) and utilization under four loads:
     idle, memory held, a one-thread spin kernel, bf16 matrix products; under each, utilization,
     memory used, power, SM clock and temperature compared with nvidia-smi every second, and the
     readings held to the bounds of tests/gpu/smi.py (LOAD_BOUNDS);
  6. `gpu-agent` started for real (no --fake), streaming to a local `gpu-extender` that must pass
     and score this node; the agent's /metrics parsed back; its RSS;
  7. the real-GPU tests (`pytest tests/gpu`).
Writes DIR/gpu_check.json (everything) and DIR/RESULTS-gpu.md (the figures). Exits 1 when any
check failed (a reading off nvidia-smi, a bound broken, a part that crashed, a real-GPU test that
failed: the list is printed and heads RESULTS-gpu.md; tests/gpu/report.py's `failures`), else 0.
To commit a run, copy its gpu_check.json over bench/gpu_check.json (H100) or
bench/gpu_check-h200.json (H200) and run `python -m tests.gpu.report`, which renders both
bench/RESULTS-gpu*.md from the JSON (tests/bench/test_gpu_report.py checks they match).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.gpu import report, smi  # noqa: E402
from tests.gpu.loads import Load  # noqa: E402

RESULTS: dict[str, Any] = {}


def section(name: str) -> Callable[[Callable[[], Any]], Callable[[], None]]:
    def wrap(fn: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            started = time.monotonic()
            print(f"== {name}", flush=True)
            try:
                RESULTS[name] = fn()
            except Exception:  # one broken part must not hide the others
                RESULTS[name] = {"error": traceback.format_exc()}
                print(RESULTS[name]["error"], flush=True)
            print(f"   ({time.monotonic() - started:.1f} s)", flush=True)

        return run

    return wrap


def rss_kib(pid: int | str = "self") -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# -- 0: the machine --------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import pynvml

    before = rss_kib()
    pynvml.nvmlInit()
    after = rss_kib()
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
    except pynvml.NVMLError:
        cuda = 0
    env = {
        "run": _run_info(),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
        "nvml_version": pynvml.nvmlSystemGetNVMLVersion(),
        "gpus": [
            pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())
        ],
        "nvidia_ml_py": _version("nvidia-ml-py"),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "rss_kib_before_nvml_init": before["VmRSS"],
        "rss_kib_after_nvml_init": after["VmRSS"],
        "boards": [_board(pynvml, index) for index in range(pynvml.nvmlDeviceGetCount())],
    }
    pynvml.nvmlShutdown()
    return env


def _run_info() -> dict[str, Any]:
    """When, and on which commit where this is a git checkout (else GPUEXT_COMMIT, else None)."""
    commit = os.environ.get("GPUEXT_COMMIT") or None
    if commit is None and (ROOT / ".git").exists() and shutil.which("git"):
        proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        commit = (proc.stdout.strip() or None) if proc.returncode == 0 else None
    return {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit}


def _board(pynvml: Any, index: int) -> dict[str, Any]:
    """Power limits (W, from NVML and nvidia-smi) and the form factor they and the name tell."""
    from gpuextender.agent.sources.nvml_errors import error_name

    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    board: dict[str, Any] = {"index": index, "name": pynvml.nvmlDeviceGetName(h)}

    def read(key: str, call: Callable[[], Any]) -> Any:
        try:
            board[key] = call()
        except pynvml.NVMLError as exc:
            board[key] = error_name(exc)
        return board[key]

    read("enforced_power_limit_w", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000)
    read("power_limit_w", lambda: pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000)
    read("default_power_limit_w", lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000)
    read("power_limit_range_w", lambda: [v / 1000 for v in pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)])
    read("module_id", lambda: pynvml.nvmlDeviceGetModuleId(h))
    read("board_part_number", lambda: smi.as_text(pynvml.nvmlDeviceGetBoardPartNumber(h)))
    try:
        board["smi"] = smi.query(smi.POWER_LIMIT_FIELDS)[index]
    except Exception as exc:  # recorded, not fatal: the limits above are NVML's own
        board["smi"] = f"{type(exc).__name__}: {exc}"
    limits = board.get("power_limit_range_w")
    candidates = [limits[1] if isinstance(limits, list) else None, board.get("enforced_power_limit_w")]
    if isinstance(board["smi"], dict):  # nvidia-smi's, where NVML's calls are not there
        candidates += [smi._number(board["smi"].get(f, "")) for f in ("power.max_limit", "enforced.power.limit")]
    most = next((v for v in candidates if isinstance(v, int | float) and not isinstance(v, bool)), None)
    board["form_factor"], board["form_factor_why"] = smi.form_factor(board["name"], most)
    return board


def _version(dist: str) -> str:
    from importlib.metadata import version

    try:
        return version(dist)
    except Exception:
        return "?"


# -- 1: reader vs nvidia-smi -----------------------------------------------------------------


def compare_with_smi() -> dict[str, Any]:
    from gpuextender.agent.sources.nvml_reader import NvmlReader

    reader = NvmlReader()
    reader.start()
    try:
        reader.sample()  # identity and topology read; the comparison below is of a steady pass
        before = smi.query()
        sample = reader.sample()
        after = smi.query()
    finally:
        reader.close()
    rows = smi.compare(sample, before, after)
    return {
        "fields": smi.available_fields(),
        "rows": [row._asdict() for row in rows],
        "mismatches": [row._asdict() for row in rows if not row.ok],
        "sample_duration_ms": sample.duration_s * 1000,
    }


# -- 2: what NVML does not support ------------------------------------------------------------


def not_supported() -> dict[str, Any]:
    import pynvml

    from gpuextender.agent.sources.nvml_errors import error_name

    pynvml.nvmlInit()
    out: dict[str, Any] = {}
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            results: dict[str, str] = {}
            for name, call in smi.nvml_probes(pynvml, h):
                try:
                    value = call()
                    results[name] = "ok: " + smi.short(value)
                except pynvml.NVMLError as exc:
                    results[name] = error_name(exc)
                except Exception as exc:  # a pynvml wrapper that breaks on this driver
                    results[name] = f"python {type(exc).__name__}: {exc}"
            fields: dict[str, str] = {}
            try:
                values = pynvml.nvmlDeviceGetFieldValues(h, [fid for _, fid in smi.FIELD_PROBES])
            except pynvml.NVMLError as exc:
                values = []
                fields["nvmlDeviceGetFieldValues"] = error_name(exc)
            for (label, fid), value in zip(smi.FIELD_PROBES, values, strict=False):
                if value.nvmlReturn == pynvml.NVML_SUCCESS:
                    fields[f"{label} ({fid})"] = "ok: " + smi.short(smi.field_value(value))
                else:
                    fields[f"{label} ({fid})"] = error_name(pynvml.NVMLError(value.nvmlReturn))
            out[str(index)] = {"calls": results, "field_values": fields}
    finally:
        pynvml.nvmlShutdown()
    return out


# -- 3: events, topology ---------------------------------------------------------------------


def events_and_topology() -> dict[str, Any]:
    import pynvml

    from gpuextender.agent.sources.nvml_events import EventStore, NvmlEventWatcher
    from gpuextender.agent.sources.nvml_reader import NvmlReader

    reader = NvmlReader()
    reader.start()
    try:
        topology = reader.topology()
        watcher = NvmlEventWatcher(EventStore(), wait_timeout_s=0.5)
        started = time.monotonic()
        watcher.start()
        ready = watcher.ready.wait(10)
        time.sleep(1.5)  # at least two waits that time out (NVMLError_Timeout, the normal case)
        stop_started = time.monotonic()
        stopped = watcher.stop(5)
        threads = [t.name for t in threading.enumerate() if t.name == "nvml-events"]
        supported = {
            i: hex(pynvml.nvmlDeviceGetSupportedEventTypes(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(pynvml.nvmlDeviceGetCount())
        }
    finally:
        reader.close()
    return {
        "topology": None if topology is None else [link.__repr__() for link in topology],
        "event_thread_ready": ready,
        "registered": {str(k): hex(v) for k, v in watcher.registered.items()},
        "supported_event_types": supported,
        "stopped": stopped,
        "stop_took_s": round(time.monotonic() - stop_started, 3),
        "ran_s": round(stop_started - started, 3),
        "threads_left": threads,
    }


# -- 4: cost of a sampling pass, RSS ---------------------------------------------------------


def sample_cost() -> dict[str, Any]:
    """A sampling pass with GPM and without, side by side (blocks of 10 passes, alternating),
    10 ms apart as in a fast agent; the first pass (identity, topology) apart."""
    from gpuextender.agent.sources.nvml_reader import NvmlReader

    before_init = rss_kib()["VmRSS"]
    readers = {"gpm": NvmlReader(gpm=True), "no_gpm": NvmlReader(gpm=False)}
    first: dict[str, float] = {}
    for name, reader in readers.items():
        reader.start()
        first[name] = reader.sample().duration_s * 1000
    durations: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(20):
        for name, reader in readers.items():
            for _ in range(10):
                durations[name].append(reader.sample().duration_s * 1000)
                time.sleep(0.01)
    gpus = len(readers["gpm"].sample().gpus)
    reads_gpm = any(g.gpm is not None for g in readers["gpm"].sample().gpus)
    result: dict[str, Any] = {
        "gpus": gpus,
        "reader_reads_gpm": reads_gpm,
        "rss_kib_before_init": before_init,
        "rss_kib_after_passes": rss_kib()["VmRSS"],
    }
    for name, values in durations.items():
        result[name] = {
            "first_pass_ms": round(first[name], 3),
            "passes": len(values),
            "median_ms": round(statistics.median(values), 3),
            "p99_ms": round(percentile(values, 99), 3),
            "max_ms": round(max(values), 3),
            "median_ms_per_gpu": round(statistics.median(values) / max(1, gpus), 3),
        }
    result["gpm_over_no_gpm_median"] = round(result["gpm"]["median_ms"] / result["no_gpm"]["median_ms"], 3)
    for reader in readers.values():
        reader.close()
    return result


def call_cost() -> dict[str, Any]:
    """Each NVML call of a pass, alone: 30 calls, the median (what makes up a pass's cost)."""
    import pynvml

    pynvml.nvmlInit()
    out: dict[str, Any] = {}
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        for name, call in smi.nvml_probes(pynvml, h):
            times = []
            for _ in range(30):
                started = time.perf_counter()
                try:
                    call()
                except pynvml.NVMLError:
                    pass
                times.append((time.perf_counter() - started) * 1000)
            out[name] = round(statistics.median(times), 4)
        ids = [fid for _, fid in smi.FIELD_PROBES[:2]]
        times = []
        for _ in range(30):
            started = time.perf_counter()
            pynvml.nvmlDeviceGetFieldValues(h, ids)
            times.append((time.perf_counter() - started) * 1000)
        out["nvmlDeviceGetFieldValues(MEMORY_TEMP, PCIE_REPLAY)"] = round(statistics.median(times), 4)
    finally:
        pynvml.nvmlShutdown()
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


# -- 5: GPM and utilization under loads -------------------------------------------------------


def gpm_under_loads(seconds: float) -> dict[str, Any]:
    import pynvml

    from gpuextender.agent.sources.nvml_errors import error_name
    from gpuextender.agent.sources.nvml_reader import NvmlReader

    reader = NvmlReader()
    reader.start()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    out: dict[str, Any] = {}
    try:
        try:
            out["gpm_supported"] = bool(pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
        except pynvml.NVMLError as exc:
            out["gpm_supported"] = error_name(exc)
        for mode in ("idle", "hold", "spin", "matmul"):
            load = Load(ROOT, mode, seconds + 15)  # outlasts the measuring, nvidia-smi runs included
            try:
                time.sleep(1.5)  # utilization is averaged over a window of up to 1 s
                out[mode] = _measure(pynvml, h, reader, seconds, out["gpm_supported"] is True)
            finally:
                load.stop()
            print(f"   {mode}: {json.dumps(out[mode])[:400]}", flush=True)
    finally:
        pynvml.nvmlShutdown()
        reader.close()
    return out


def _measure(pynvml: Any, h: Any, reader: Any, seconds: float, gpm: bool) -> dict[str, Any]:
    from gpuextender.agent.sources.nvml_errors import error_name

    result: dict[str, Any] = {}
    samples: list[Any] = []
    timings: dict[str, list[float]] = {"sample_get_ms": [], "metrics_get_ms": []}
    util: list[int] = []
    reads: list[dict[str, Any]] = []
    if gpm:
        samples = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
        t = time.perf_counter()
        pynvml.nvmlGpmSampleGet(h, samples[0])
        timings["sample_get_ms"].append((time.perf_counter() - t) * 1000)
    end = time.monotonic() + seconds
    gpm_values: list[dict[str, Any]] = []
    rows: list[smi.Row] = []
    after: list[dict[str, str]] = []
    while time.monotonic() < end:
        time.sleep(1.0)
        util.append(int(pynvml.nvmlDeviceGetUtilizationRates(h).gpu))
        before = smi.query(smi.LOADED_FIELDS)
        sample = reader.sample()
        after = smi.query(smi.LOADED_FIELDS)
        rows += smi.compare(sample, before, after)
        g = sample.gpus[0]
        reads.append(
            {
                "util": g.utilization_gpu_percent,
                "mem_used_mib": (g.memory_used_bytes or 0) // 2**20,
                "gpm": _asdict(getattr(g, "gpm", None)),
            }
        )
        if gpm:
            t = time.perf_counter()
            pynvml.nvmlGpmSampleGet(h, samples[1])
            timings["sample_get_ms"].append((time.perf_counter() - t) * 1000)
            get = pynvml.c_nvmlGpmMetricsGet_t()
            get.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            get.sample1, get.sample2 = samples[0], samples[1]
            ids = smi.GPM_METRICS
            get.numMetrics = len(ids)
            for i, (_, mid) in enumerate(ids):
                get.metrics[i].metricId = mid
            t = time.perf_counter()
            pynvml.nvmlGpmMetricsGet(get)
            timings["metrics_get_ms"].append((time.perf_counter() - t) * 1000)
            values: dict[str, Any] = {}
            for i, (label, _) in enumerate(ids):
                metric = get.metrics[i]
                if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                    values[label] = round(float(metric.value), 2)
                else:
                    values[label] = error_name(pynvml.NVMLError(metric.nvmlReturn))
            gpm_values.append(values)
            samples.reverse()  # the newer sample is the next interval's first
    if gpm:
        for s in samples:
            pynvml.nvmlGpmSampleFree(s)
    result["nvml_utilization_gpu"] = util
    result["reader"] = reads
    result["gpm_raw"] = gpm_values
    result["gpm_cost"] = {k: round(statistics.median(v), 4) for k, v in timings.items() if v}
    result["smi"] = after  # nvidia-smi just after the last reading
    result["vs_smi"] = [row._asdict() for row in rows]
    result["mismatches"] = [row._asdict() for row in rows if not row.ok]
    return result


def _asdict(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "__dataclass_fields__"):
        return {k: getattr(value, k) for k in value.__dataclass_fields__}
    return repr(value)


# -- 6: gpu-agent (real NVML) -> gpu-extender -------------------------------------------------


def agent_to_extender() -> dict[str, Any]:
    """With the SM-activity rule on (--idle-max-sm-active 10) and no pass-all fallback, under an
    idle GPU, a spinning thread (idle by SM activity) and matrix products (busy)."""
    from tests.gpu import live

    return live.run_agent_and_extender(
        ROOT,
        loads=("idle", "spin", "matmul"),
        extender_args=("--idle-max-sm-active", "10", "--no-fit-policy", "reject"),
        load_seconds=5.0,
    )


# -- 7: the real-GPU tests ---------------------------------------------------------------------


def gpu_tests(out_dir: Path, expect_gpu: bool) -> dict[str, Any]:
    """pytest tests/gpu in a child process (the real NVML only: no fake installed there); where a
    GPU is expected every skip there fails (tests/gpu/conftest.py)."""
    from tests.gpu.conftest import EXPECT_GPU_VARIABLE

    started = time.monotonic()
    env = dict(os.environ)
    if expect_gpu:
        env[EXPECT_GPU_VARIABLE] = "1"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/gpu",
            f"--junitxml={out_dir / 'gpu-tests.xml'}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-25:]
    return {
        "rc": proc.returncode,
        "summary": tail[-1] if tail else "",
        "tail": tail,
        "s": round(time.monotonic() - started, 1),
        "expect_gpu": expect_gpu,
    }


def expect_gpu_default() -> bool:
    from tests.gpu.conftest import gpu_expected

    return gpu_expected()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench/out")))
    parser.add_argument("--loads", type=float, default=4.0, help="seconds each load is measured (default: 4)")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        help="a part to leave out: smi, probes, events, cost, calls, loads, agent, tests",
    )
    parser.add_argument(
        "--expect-gpu",
        action="store_true",
        default=expect_gpu_default(),
        help="a GPU must be here (default: GPUEXT_EXPECT_GPU=1): no NVML is a failure, and so is a "
        "skipped real-GPU test",
    )
    options = parser.parse_args()
    reason = nvml_missing()
    if reason:
        print(f"gpu_check: {'FAILED, a GPU is expected' if options.expect_gpu else 'skipped'}: {reason}")
        return 1 if options.expect_gpu else 0
    options.out.mkdir(parents=True, exist_ok=True)
    RESULTS["skipped"] = sorted(options.skip)
    started = time.monotonic()
    parts: list[tuple[str, Callable[[], None]]] = [
        ("env", section(report.SECTIONS["env"])(environment)),
        ("smi", section(report.SECTIONS["smi"])(compare_with_smi)),
        ("probes", section(report.SECTIONS["probes"])(not_supported)),
        ("events", section(report.SECTIONS["events"])(events_and_topology)),
        ("cost", section(report.SECTIONS["cost"])(sample_cost)),
        ("calls", section(report.SECTIONS["calls"])(call_cost)),
        ("loads", section(report.SECTIONS["loads"])(lambda: gpm_under_loads(options.loads))),
        ("agent", section(report.SECTIONS["agent"])(agent_to_extender)),
        ("tests", section(report.SECTIONS["tests"])(lambda: gpu_tests(options.out, options.expect_gpu))),
    ]
    for key, run in parts:
        if key not in options.skip:
            run()
    RESULTS["total_s"] = round(time.monotonic() - started, 1)
    (options.out / "gpu_check.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    (options.out / "RESULTS-gpu.md").write_text(report.markdown(RESULTS))
    failures = report.failures(RESULTS)
    for failure in failures:
        print(f"gpu_check: FAILED: {failure}")
    verdict = f"{len(failures)} check(s) failed" if failures else "every check passed"
    print(f"gpu_check: done in {RESULTS['total_s']} s, {verdict}; {options.out}/RESULTS-gpu.md")
    return 1 if failures else 0


def nvml_missing() -> str:
    """'' where the driver is here and real NVML loads and sees a GPU; else why not."""
    if shutil.which("nvidia-smi") is None and not os.path.exists("/dev/nvidiactl"):
        return "no NVIDIA driver on this machine (no nvidia-smi, no /dev/nvidiactl)"
    return smi.real_nvml_missing()


if __name__ == "__main__":
    sys.exit(main())
