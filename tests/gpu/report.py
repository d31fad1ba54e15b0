"""bench/RESULTS-gpu*.md from what bench/gpu_check.py measured (its JSON, kept beside it), and the
verdict that sets its exit code (`failures`).

One source of truth: the committed RESULTS-gpu.md and RESULTS-gpu-h200.md are rendered from the
committed bench/gpu_check.json (H100) and bench/gpu_check-h200.json (H200) alone, each with a
summary of the other; `python -m tests.gpu.report` rewrites them (`--check`: only compare), and
tests/bench/test_gpu_report.py fails where they differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tests.gpu import smi

BENCH = Path(__file__).resolve().parents[2] / "bench"
# (the JSON, the Markdown rendered from it, what ran it), as committed under bench/.
COMMITTED: tuple[tuple[str, str, str], ...] = (
    ("gpu_check.json", "RESULTS-gpu.md", "H100"),
    ("gpu_check-h200.json", "RESULTS-gpu-h200.md", "H200"),
)
# bench/gpu_check.py's parts: its --skip name -> the key of its result in the JSON.
SECTIONS: dict[str, str] = {
    "env": "environment",
    "smi": "reader vs nvidia-smi",
    "probes": "NVML calls and field values",
    "events": "events and topology",
    "cost": "sampling cost",
    "calls": "cost per NVML call",
    "loads": "GPM and utilization under loads",
    "agent": "gpu-agent -> gpu-extender",
    "tests": "pytest tests/gpu",
}
LOAD_MODES = ("idle", "hold", "spin", "matmul")
# Probes of runs before issue 37, shown under what they really asked: sensor 1 of
# nvmlDeviceGetTemperatureV is NVML_TEMPERATURE_GPU_MAX (nvmlTemperatureSensors_t has no memory
# sensor), hence its InvalidArgument; the memory temperature is field value MEMORY_TEMP (82).
PROBE_LABELS = {
    "nvmlDeviceGetTemperatureV(MEMORY?)": "nvmlDeviceGetTemperatureV(1 = GPU_MAX; a wrong probe, not memory)",
}
# Where a committed run's JSON predates the "run" record (issue 37): its commit, from git history.
LEGACY_RUNS = {
    "gpu_check.json": "run on the code committed in a80d07c (2026-11-26)",
    "gpu_check-h200.json": "run on commit 852b2c4 (2026-11-26)",
}
# Below the generated figures of the committed RESULTS-gpu.md: runs whose JSON is not committed
# (their commits are named), and what the lent machines cannot show.
HISTORY = (
    "- **H100, the reader before issue 27** (no GPM, the energy counter read every pass, no memory "
    "temperature, encoder/decoder or field values): a pass took 3.91 ms median, 16.2 ms p99 (300 "
    "passes); `nvmlDeviceGetTotalEnergyConsumption` alone takes about 3.2 ms (the table of calls "
    "above), so the reader now reads the energy counter every 10 s.",
    "- **H200, before the energy counter was read every 10 s**: a pass took 4.61 ms median without GPM, 6.69 ms with.",
    "- Not measurable on the lent machines: NVLink (one GPU in a VM: every NVLink call and field "
    "answers NotSupported), MIG GPM (MIG is off and the card's settings must not be changed), more "
    "than one GPU (topology is `[]`).",
)

GPM_COLUMNS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active", "graphics_active")


def _fence(value: Any) -> list[str]:
    return ["```", json.dumps(value, indent=1, default=str)[:4000], "```", ""]


def _failed(part: Any) -> list[str] | None:
    if isinstance(part, dict) and "error" in part:
        return ["Failed:", *_fence(part["error"])]
    if part is None:
        return ["Not run.", ""]
    return None


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def markdown(
    results: dict[str, Any],
    *,
    data_file: str = "gpu_check.json",
    others: dict[str, tuple[str, dict[str, Any]]] | None = None,
    history: tuple[str, ...] = (),
) -> str:
    """The report of one run. `others`: other runs (their Markdown file -> their JSON file and
    results), one summary line each; `history`: lines put last (the committed RESULTS-gpu.md's)."""
    env = results.get("environment") or {}
    lines = [
        "# Real-GPU check (bench/gpu_check.py)",
        "",
        f"GPU: {', '.join(env.get('gpus', []) or ['?'])}; driver {env.get('driver', '?')}, "
        f"CUDA {env.get('cuda_driver', '?')}, NVML {env.get('nvml_version', '?')}, "
        f"nvidia-ml-py {env.get('nvidia_ml_py', '?')}, Python {env.get('python', '?')}, "
        f"kernel {env.get('kernel', '?')}, {env.get('cpus', '?')} CPUs. "
        f"The whole check took {results.get('total_s', '?')} s. Full data: {data_file} beside this file, "
        f"{_run_line(results, data_file)}.",
        "",
        *_boards(results),
    ]
    lines += _verdict(results)
    lines += _section("The agent's reader against nvidia-smi", _smi, results.get(SECTIONS["smi"]))
    lines += _section("What NVML answered, call by call", _probes, results.get(SECTIONS["probes"]), results)
    lines += _section("Event thread and topology", _events, results.get(SECTIONS["events"]))
    lines += _section(
        "Cost of a sampling pass, and RSS", _cost, results.get(SECTIONS["cost"]), results.get(SECTIONS["calls"]), env
    )
    lines += _section("Utilization and GPM under four loads", _loads, results.get(SECTIONS["loads"]))
    lines += _section("gpu-agent (real NVML) streaming to gpu-extender", _agent, results.get(SECTIONS["agent"]))
    lines += _section("pytest tests/gpu", _pytest, results.get(SECTIONS["tests"]))
    if others:
        lines += ["## The other committed run", ""]
        lines += [f"- [{md}]({md}): {summary(other, data)}" for md, (data, other) in others.items()]
        lines += [""]
    if history:
        lines += ["## Earlier runs, not committed as JSON", "", *history, ""]
    return "\n".join(lines) + "\n"


def _run_line(results: dict[str, Any], data_file: str) -> str:
    run = (results.get("environment") or {}).get("run")
    if isinstance(run, dict):
        commit = run.get("commit") or "an uncommitted tree"
        return f"run on {commit} ({run.get('date', '?')})"
    return LEGACY_RUNS.get(data_file, "run before runs were dated")


def _max_power_seen(results: dict[str, Any]) -> float | None:
    loads = results.get(SECTIONS["loads"])
    seen: list[float] = []
    if isinstance(loads, dict):
        for mode in LOAD_MODES:
            for row in (loads.get(mode) or {}).get("smi") or [] if isinstance(loads.get(mode), dict) else []:
                try:
                    seen.append(float(row.get("power.draw")))
                except (TypeError, ValueError):
                    pass
    return max(seen) if seen else None


def _boards(results: dict[str, Any]) -> list[str]:
    """Power limit and form factor per GPU: recorded (issue 37 on), else the form factor inferred
    from the name and the highest draw seen under the loads."""
    env = results.get("environment") or {}
    boards = env.get("boards")
    if isinstance(boards, list) and boards:
        lines = []
        for b in boards:
            limits = b.get("power_limit_range_w")
            span = f"{limits[0]:g}-{limits[1]:g} W" if isinstance(limits, list) and len(limits) == 2 else limits
            lines.append(
                f"GPU {b.get('index')}: form factor **{b.get('form_factor', '?')}** "
                f"({b.get('form_factor_why', '?')}); power limit {_watts(b.get('enforced_power_limit_w'))} "
                f"enforced, {_watts(b.get('power_limit_w'))} set, default {_watts(b.get('default_power_limit_w'))}, "
                f"settable {span}; module id {b.get('module_id')}, board part number "
                f"{b.get('board_part_number')}; nvidia-smi: {b.get('smi')}."
            )
        return [*lines, ""]
    names = env.get("gpus") or []
    if not names:
        return []
    seen = _max_power_seen(results)
    kind, why = smi.form_factor(names[0], None, seen)
    return [
        f"Form factor **{kind}** ({why}); the power limit was not recorded by this run (bench/gpu_check.py "
        "records it since issue 37).",
        "",
    ]


def _watts(value: Any) -> str:
    return f"{value:g} W" if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def _verdict(results: dict[str, Any]) -> list[str]:
    found = failures(results)
    if not found:
        return ["## Verdict", "", "Every check held: bench/gpu_check.py exited 0.", ""]
    return [
        "## Verdict",
        "",
        f"{len(found)} check(s) did not hold (bench/gpu_check.py exits 1 on any):",
        "",
        *(f"- {line}" for line in found),
        "",
    ]


def failures(results: dict[str, Any]) -> list[str]:
    """Every check of a bench/gpu_check.py run that did not hold; empty: all did (exit 0). A part
    that crashed, or did not run without being --skip'ped, is one; so is any reading off
    nvidia-smi (idle or under a load), a load's reading out of its bounds (tests/gpu/smi.py,
    LOAD_BOUNDS), an event thread that did not start or stop, the extender deciding against the
    loads, and a real-GPU test that failed (or, with a GPU expected, skipped)."""
    out: list[str] = []
    skipped = set(results.get("skipped") or [])
    for key, title in SECTIONS.items():
        part = results.get(title)
        if part is None:
            if key not in skipped:
                out.append(f"{title}: did not run")
            continue
        if isinstance(part, dict) and "error" in part:
            last = (str(part["error"]).strip().splitlines() or ["?"])[-1]
            out.append(f"{title}: crashed ({last})")
            continue
        check = _CHECKS.get(key)
        if check is not None:
            try:
                out += [f"{title}: {line}" for line in check(part, results)]
            except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
                out.append(f"{title}: not in the shape expected ({type(exc).__name__}: {exc})")
    return out


def _row_failure(row: dict[str, Any]) -> str:
    return (
        f"GPU {row['gpu']} {row['field']}: agent {row['ours']}, nvidia-smi {row['smi_before']} before and "
        f"{row['smi_after']} after (tolerance {row['tolerance']})"
    )


def _check_smi(part: Any, results: dict[str, Any]) -> list[str]:
    if not part.get("rows"):
        return ["no reading compared"]
    return [_row_failure(row) for row in part["rows"] if not row["ok"]]


def _check_events(part: Any, results: dict[str, Any]) -> list[str]:
    out = []
    if part.get("event_thread_ready") is not True:
        out.append("the event thread did not get ready")
    if part.get("stopped") is not True:
        out.append("the event thread did not stop")
    if part.get("threads_left"):
        out.append(f"threads left: {part['threads_left']}")
    return out


def _check_loads(part: Any, results: dict[str, Any]) -> list[str]:
    out: list[str] = []
    gpm_supported = part.get("gpm_supported") is True
    for mode in LOAD_MODES:
        m = part.get(mode)
        if not isinstance(m, dict):
            out.append(f"{mode}: not measured")
            continue
        if not m.get("vs_smi"):
            out.append(f"{mode}: not compared with nvidia-smi")
        out += [f"{mode}: {_row_failure(row)}" for row in m.get("vs_smi") or [] if not row["ok"]]
        reads = m.get("reader") or []
        if not reads:
            out.append(f"{mode}: no reading")
            continue
        last = reads[-1]
        out += smi.bound_failures(mode, last.get("util"), last.get("mem_used_mib"), last.get("gpm"), gpm_supported)
    return out


def _check_agent(part: Any, results: dict[str, Any]) -> list[str]:
    """idle passes the filter, the matrix products fail it (utilization 99 on a reject policy) and,
    where GPM is read, the spin kernel passes (idle by SM activity, --idle-max-sm-active 10)."""
    loads = results.get(SECTIONS["loads"])
    gpm = isinstance(loads, dict) and loads.get("gpm_supported") is True
    expected = {"idle": True, "matmul": False, **({"spin": True} if gpm else {})}
    out = []
    for mode, passes in expected.items():
        m = part.get(mode)
        if not isinstance(m, dict):
            out.append(f"{mode}: not decided")
            continue
        passed = bool((m.get("filter") or {}).get("NodeNames"))
        if passed != passes:
            verb, wanted = ("failed", "pass") if passes else ("passed", "fail")
            out.append(f"{mode}: the filter {verb} the node, expected it to {wanted}")
    return out


def _check_tests(part: Any, results: dict[str, Any]) -> list[str]:
    if part.get("rc") != 0:
        return [f"exit {part.get('rc')}: {part.get('summary', '?')}"]
    return []


_CHECKS = {
    "smi": _check_smi,
    "events": _check_events,
    "loads": _check_loads,
    "agent": _check_agent,
    "tests": _check_tests,
}


def summary(results: dict[str, Any], data_file: str = "") -> str:
    """One line of a run's figures, for the other committed run's report."""
    env = results.get("environment") or {}
    names = env.get("gpus") or ["?"]
    found = failures(results)
    parts = [f"{', '.join(names)}, driver {env.get('driver', '?')}, {_run_line(results, data_file)}"]
    parts.append("every check held" if not found else f"{len(found)} check(s) did not hold (its Verdict)")
    loads = results.get(SECTIONS["loads"])
    if isinstance(loads, dict):
        for mode, label in (("spin", "spin kernel"), ("matmul", "matrix products")):
            last = ((loads.get(mode) or {}).get("reader") or [{}])[-1]
            gpm = last.get("gpm") or {}
            figures = f"{label} {last.get('util')} % utilization, {_pct(gpm.get('sm_active'))} SM active"
            if mode == "matmul":
                figures += f", {_pct(gpm.get('tensor_active'))} tensor active"
            parts.append(figures)
    cost = results.get(SECTIONS["cost"])
    if isinstance(cost, dict) and "no_gpm" in cost:
        parts.append(
            f"a pass {cost['no_gpm']['median_ms']:.2f} ms median, {cost['no_gpm']['p99_ms']:.2f} ms p99 without "
            f"GPM, {cost['gpm']['median_ms']:.2f} / {cost['gpm']['p99_ms']:.2f} ms with"
        )
    tests = results.get(SECTIONS["tests"])
    if isinstance(tests, dict) and "summary" in tests:
        parts.append(f"pytest tests/gpu: `{tests['summary']}`")
    return "; ".join(parts) + "."


def _pct(value: Any) -> str:
    return f"{value:.2f} %" if isinstance(value, int | float) else "?"


def _section(title: str, render: Any, part: Any, *more: Any) -> list[str]:
    """A section: its title, then what `render` makes of `part`. A part that failed or did not run
    says so; one whose data is not what the renderer expects is shown raw, not lost."""
    failed = _failed(part)
    if failed:
        return [f"## {title}", "", *failed]
    try:
        return [f"## {title}", "", *render(part, *more)]
    except (KeyError, TypeError, AttributeError, IndexError):
        return [f"## {render.__name__.strip('_')} (raw)", "", *_fence(part)]


def _pytest(part: Any) -> list[str]:
    return [f"`{part.get('summary', '?')}` (exit {part.get('rc')}, {part.get('s')} s)", ""]


def _smi(part: Any) -> list[str]:
    lines: list[str] = []
    lines += [
        "nvidia-smi was run just before and just after one pass of the reader; a reading passes when it "
        "lies within the two, widened by the tolerance (tests/gpu/smi.py says why each).",
        "",
    ]
    rows = [
        [
            r["gpu"],
            r["field"],
            r["ours"],
            r["smi_before"],
            r["smi_after"],
            r["tolerance"],
            "yes" if r["ok"] else "**NO**",
        ]
        for r in part["rows"]
    ]
    return lines + _table(["GPU", "field", "agent", "nvidia-smi before", "after", "tolerance", "ok"], rows)


def _probes(part: Any, results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    smi_rows = (results.get(SECTIONS["smi"]) or {}).get("rows") or []
    for gpu, found in part.items():
        answers = {**found["calls"], **found["field_values"]}
        rows = [[PROBE_LABELS.get(name, name), answer] for name, answer in answers.items()]
        missing = [name for name, answer in answers.items() if not str(answer).startswith("ok")]
        missing = [name for name in missing if name not in PROBE_LABELS]  # wrong probes, not gaps
        lines += [f"GPU {gpu}: not supported or failing: {', '.join(f'`{m}`' for m in missing) or 'none'}.", ""]
        smi_memory = [r["smi_before"] for r in smi_rows if r["field"] == "temperature.memory" and str(r["gpu"]) == gpu]
        lines += [
            f"Memory temperature: field value MEMORY_TEMP (82) answered `{answers.get('MEMORY_TEMP (82)', '?')}`; "
            f"nvidia-smi's temperature.memory: {', '.join(smi_memory) or '?'}.",
            "",
        ]
        lines += _table(["call / field", "answer"], rows)
    return lines


def _events(part: Any) -> list[str]:
    return [
        f"Topology read: `{part['topology']}`. Event types the GPU supports: {part['supported_event_types']}; "
        f"the event thread started (ready: {part['event_thread_ready']}), ran {part['ran_s']} s of timed-out "
        f"waits and stopped in {part['stop_took_s']} s (stopped: {part['stopped']}, threads left: "
        f"{part['threads_left'] or 'none'}).",
        "",
    ]


def _cost(part: Any, calls: Any, env: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    rows = [
        [name, v["first_pass_ms"], v["median_ms"], v["p99_ms"], v["max_ms"], v["median_ms_per_gpu"], v["passes"]]
        for name, v in ((n, part[n]) for n in ("gpm", "no_gpm"))
    ]
    lines += _table(["reader", "first pass ms", "median ms", "p99 ms", "max ms", "median ms/GPU", "passes"], rows)
    lines += [
        f"GPM on / off, median: {part['gpm_over_no_gpm_median']}x ({part['gpus']} GPU(s); GPM read: "
        f"{part['reader_reads_gpm']}). RSS of a Python process: {env.get('rss_kib_before_nvml_init', '?')} KiB "
        f"before nvmlInit, {env.get('rss_kib_after_nvml_init', '?')} KiB after (libnvidia-ml loaded).",
        "",
    ]
    if isinstance(calls, dict) and "error" not in calls:
        lines += ["Each call alone (median of 30, ms), slowest first:", ""]
        lines += _table(["call", "ms"], [[PROBE_LABELS.get(k, k), v] for k, v in calls.items()])
    return lines


def _loads(part: Any) -> list[str]:
    lines: list[str] = []
    lines += [
        f"GPM supported: {part.get('gpm_supported')}. Loads (bench/gpu_load.py): none; 8 GiB held, no kernel; "
        "one thread of one block spinning (`torch.cuda._sleep`); bf16 8192^3 matrix products back to back. "
        "Each row: the last of 1-s intervals; GPM as the agent's reader reported it, and as read directly.",
        "",
    ]
    rows = []
    for mode in ("idle", "hold", "spin", "matmul"):
        m = part.get(mode)
        if not isinstance(m, dict):
            continue
        reader = (m.get("reader") or [{}])[-1]
        gpm = reader.get("gpm") or {}
        raw = (m.get("gpm_raw") or [{}])[-1]
        smi_row = (m.get("smi") or [{}])[0]
        rows.append(
            [
                mode,
                reader.get("util"),
                *(gpm.get(c) for c in GPM_COLUMNS),
                raw.get("sm_util"),
                reader.get("mem_used_mib"),
                smi_row.get("power.draw"),
                smi_row.get("clocks.sm"),
                m.get("gpm_cost", {}).get("metrics_get_ms"),
            ]
        )
    header = ["load", "utilization %", *(f"{c} %" for c in GPM_COLUMNS), "raw SM util %", "memory MiB", "power W"]
    lines += _table([*header, "SM MHz", "GPM metrics ms"], rows)
    lines += _loads_vs_smi(part)
    return lines


def _loads_vs_smi(part: Any) -> list[str]:
    """Under each load, the agent's readings against nvidia-smi run just before and after: the
    last interval's in full, any reading off in an earlier one too."""
    compared = {mode: part[mode].get("vs_smi") for mode in LOAD_MODES if isinstance(part.get(mode), dict)}
    if not any(compared.values()):
        return ["Not compared with nvidia-smi under the loads (a run from before issue 37).", ""]
    rows = []
    for mode, found in compared.items():
        found = found or []
        fields = {row["field"] for row in found}
        last = found[-len(fields) :] if fields else []
        for row in [*(r for r in found[: len(found) - len(last)] if not r["ok"]), *last]:
            rows.append(
                [
                    mode,
                    row["gpu"],
                    row["field"],
                    row["ours"],
                    row["smi_before"],
                    row["smi_after"],
                    row["tolerance"],
                    "yes" if row["ok"] else "**NO**",
                ]
            )
    counts = ", ".join(
        f"{mode} {sum(r['ok'] for r in found or [])}/{len(found or [])}" for mode, found in compared.items()
    )
    return [
        "Against nvidia-smi run just before and just after each 1-s reading (readings within tolerance, per "
        f"load: {counts}); the last reading of each load:",
        "",
        *_table(["load", "GPU", "field", "agent", "nvidia-smi before", "after", "tolerance", "ok"], rows),
    ]


def _agent(part: Any) -> list[str]:
    lines: list[str] = []
    lines += [
        f"One node, {part.get('gpus')} x {part.get('product')}; first report in the extender "
        f"{part.get('first_report_s')} s after the agent started. Extender flags: --idle-max-sm-active 10 "
        "--no-fit-policy reject (where the check passed them). A 1-GPU pod, filter then prioritize:",
        "",
    ]
    rows = []
    for mode in ("idle", "spin", "matmul"):
        m = part.get(mode)
        if not isinstance(m, dict):
            continue
        explain = m.get("explain") or {}
        scores = {e["Host"]: e["Score"] for e in m.get("prioritize") or []}
        rows.append(
            [
                mode,
                "pass" if m["filter"].get("NodeNames") else "fail",
                scores.get(part.get("node")),
                m.get("idle_gpus"),
                explain.get("meanUtilization"),
                explain.get("reason") or "",
            ]
        )
    lines += _table(["load", "filter", "score", "idle GPUs", "mean utilization", "reason"], rows)
    prof = sorted(n for n in part.get("agent_metric_names", []) if n.startswith("DCGM_"))
    lines += [
        f"Agent RSS: {part.get('agent_rss_kib')} KiB. DCGM names served: {len(prof)}: {', '.join(prof)}.",
        "",
    ]
    return lines


def committed(bench: Path = BENCH) -> dict[Path, str]:
    """The committed RESULTS-gpu*.md as rendered from the committed JSON beside them."""
    runs = {data: json.loads((bench / data).read_text()) for data, _, _ in COMMITTED}
    out: dict[Path, str] = {}
    for data, md, _ in COMMITTED:
        others = {o_md: (o_data, runs[o_data]) for o_data, o_md, _ in COMMITTED if o_data != data}
        history = HISTORY if data == COMMITTED[0][0] else ()
        out[bench / md] = markdown(runs[data], data_file=data, others=others, history=history)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render bench/RESULTS-gpu*.md from bench/gpu_check*.json.")
    parser.add_argument("--check", action="store_true", help="only say whether the committed files match")
    options = parser.parse_args(argv)
    stale = [path for path, text in committed().items() if not path.exists() or path.read_text() != text]
    if options.check:
        for path in stale:
            print(f"{path} differs from its rendering: python -m tests.gpu.report")
        return 1 if stale else 0
    for path, text in committed().items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
