"""A light heartbeat (NodeReport.heartbeat_of, contract 0.6) applied to the summary of the full
report it repeats (pure).

A gated agent's heartbeat changes nothing a decision reads but the readings that rank a node
within its class (utilization, memory) and what the fleet page shows. A worker takes a full 8-GPU
report from bytes to a queued summary in 157-242 us (parse, validate, summarize, encode) and a
light heartbeat in 39-45 us (bench/bench_apply.py); the heartbeat is ~94 % of a gated fleet's reports
(bench/RESULTS.md, issue 36).

`refreshed_fields` gives the fields that, in the base summary, make exactly what
`gpu_summary.summarize` gives for the full report with these readings
(tests/extender/state/test_summary_refresh.py holds the two equal on generated reports), or the
reason it cannot: a reading that would turn a GPU busy or idle changes counts,
masks and quality, which only a full report may do. The GPU memory totals come from the node's
facts (model/gpu_facts.py), which the full report set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuextender.common.idle_rule import IdleRule, readings_busy
from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.state.gpu_summary import GPU_UNHEALTHY, GpuCell
from gpuextender.v1 import gpu_state_pb2 as pb

NO_READING = -1  # a heartbeat list's value where the GPU gave no reading
# The summary fields a heartbeat changes; every other field is the full report's.
READING_FIELDS = ("sequence", "sample_time", "received_at", "mean_utilization", "gpus", "sm_active")


def refreshed_fields(
    cells: Sequence[GpuCell],
    sm_active: Sequence[float | None],
    node_error: str,
    facts: Sequence[GpuFacts],
    heartbeat: pb.NodeReport,
    rule: IdleRule,
    received_at: float,
) -> dict[str, Any] | str:
    """The base summary's (that of the full report `heartbeat.heartbeat_of`, judged by `rule`; its
    gpus, sm_active and node_error given) fields that the heartbeat's readings change
    (READING_FIELDS); or why not (a sentence for the agent, which then sends a full report). The
    caller keeps the summary encoded (ingest_process.RelayStore). The heartbeat's lists are checked
    (report_checks.heartbeat_problem) before this is called."""
    utils = heartbeat.heartbeat_utilization_percent
    used = heartbeat.heartbeat_memory_used_bytes
    sms = heartbeat.heartbeat_sm_active_percent
    count = len(cells)
    if len(utils) != count or len(used) != count or len(sms) != count or len(facts) != count:
        return f"a heartbeat for {count} GPUs carries {len(utils)}/{len(used)}/{len(sms)} readings"
    time = heartbeat.sample_time.seconds + heartbeat.sample_time.nanos / 1e9
    if node_error:  # a broken node's cells carry no readings (summarize)
        return {"sequence": heartbeat.sequence, "sample_time": time, "received_at": received_at}
    max_sm = rule.max_sm_active_percent
    old_sm = sm_active or (None,) * count
    new_cells: list[GpuCell] = []
    new_sm: list[float | None] = []
    readings: list[int] = []
    for position, (index, state, old_util, old_mem) in enumerate(cells):
        util = utils[position] if utils[position] != NO_READING else None
        total, in_use = facts[position].memory_total_bytes, used[position]
        if (in_use != NO_READING) != (total is not None) or (total is not None and in_use > total):
            return f"GPU {index}: memory used {in_use} does not fit the full report's total {total}"
        mem = 100.0 * in_use / total if total else None  # as summarize (validation keeps total > 0)
        if util is not None:
            readings.append(util)
        new_cells.append((index, state, util, mem))
        if state == GPU_UNHEALTHY:  # judged by neither rule (summarize)
            new_sm.append(None)
            continue
        sm = sms[position] if max_sm is not None and sms[position] != NO_READING else None
        new_sm.append(sm)
        busy = readings_busy(util, mem, sm, rule)
        if busy != readings_busy(old_util, old_mem, old_sm[position], rule):
            return f"GPU {index} turns {'busy' if busy else 'idle'}: send a full report"
    return {
        "sequence": heartbeat.sequence,
        "sample_time": time,
        "received_at": received_at,
        "mean_utilization": sum(readings) / len(readings) if readings else None,
        "gpus": tuple(new_cells),
        "sm_active": tuple(new_sm) if any(s is not None for s in new_sm) else (),
    }
