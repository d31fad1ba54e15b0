"""bench/RESULTS-gpu.md from what bench/gpu_check.py measured (its JSON, kept beside it)."""

from __future__ import annotations

import json
from typing import Any

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


def markdown(results: dict[str, Any]) -> str:
    env = results.get("environment") or {}
    lines = [
        "# Real-GPU check (bench/gpu_check.py)",
        "",
        f"GPU: {', '.join(env.get('gpus', []) or ['?'])}; driver {env.get('driver', '?')}, "
        f"CUDA {env.get('cuda_driver', '?')}, NVML {env.get('nvml_version', '?')}, "
        f"nvidia-ml-py {env.get('nvidia_ml_py', '?')}, Python {env.get('python', '?')}, "
        f"kernel {env.get('kernel', '?')}, {env.get('cpus', '?')} CPUs. "
        f"The whole check took {results.get('total_s', '?')} s. Full data: gpu_check.json beside this file.",
        "",
    ]
    lines += _section("The agent's reader against nvidia-smi", _smi, results.get("reader vs nvidia-smi"))
    lines += _section("What NVML answered, call by call", _probes, results.get("NVML calls and field values"))
    lines += _section("Event thread and topology", _events, results.get("events and topology"))
    lines += _section(
        "Cost of a sampling pass, and RSS", _cost, results.get("sampling cost"), results.get("cost per NVML call"), env
    )
    lines += _section("Utilization and GPM under four loads", _loads, results.get("GPM and utilization under loads"))
    lines += _section(
        "gpu-agent (real NVML) streaming to gpu-extender", _agent, results.get("gpu-agent -> gpu-extender")
    )
    lines += _section("pytest tests/gpu", _pytest, results.get("pytest tests/gpu"))
    return "\n".join(lines) + "\n"


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


def _probes(part: Any) -> list[str]:
    lines: list[str] = []
    for gpu, found in part.items():
        rows = [[name, answer] for name, answer in {**found["calls"], **found["field_values"]}.items()]
        missing = [name for name, answer in rows if not str(answer).startswith("ok")]
        lines += [f"GPU {gpu}: not supported or failing: {', '.join(f'`{m}`' for m in missing) or 'none'}.", ""]
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
        lines += _table(["call", "ms"], [[k, v] for k, v in calls.items()])
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
    return lines + _table([*header, "SM MHz", "GPM metrics ms"], rows)


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
