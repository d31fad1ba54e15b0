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

An agent before 0.6 sends its heartbeat as a full report. `shape_key` is such a report less its
readings (report_shape.proto): where it is the key of the node's last full report, the report is
that one with new readings, and `as_heartbeat` reads those as its light heartbeat would carry them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from google.protobuf.timestamp_pb2 import Timestamp

from gpuextender.common.heartbeat_readings import NO_READING as NO_READING
from gpuextender.common.heartbeat_readings import heartbeat_readings
from gpuextender.common.idle_rule import IdleRule, readings_busy
from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.state.gpu_summary import GPU_UNHEALTHY, GpuCell
from gpuextender.extender.state.report_shape_pb2 import ReportShape
from gpuextender.v1 import gpu_state_pb2 as pb

# The summary fields a heartbeat changes; every other field is the full report's.
READING_FIELDS = ("sequence", "sample_time", "received_at", "mean_utilization", "gpus", "sm_active")
# The fields of a full report that ReportShape (report_shape.proto) leaves out: those a heartbeat
# changes (its sequence, sample time and the readings a light heartbeat carries) and readings
# nothing here reads but report_checks, which checks every report before it is stored.
# tests/extender/state/test_report_shape.py holds these, the shape and the contract together.
READING_REPORT_FIELDS = ("sequence", "sample_time")
READING_GPU_FIELDS = (
    "memory_used_bytes",
    "utilization_gpu_percent",
    "gpm",
    "memory_free_bytes",
    "memory_reserved_bytes",
    "utilization_memory_percent",
    "temperature_celsius",
    "power_watts",
    "clock_event_reasons",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "energy_millijoules",
)


class Heartbeat(Protocol):
    """What refreshed_readings reads of a light heartbeat (a pb.NodeReport, or `as_heartbeat`)."""

    @property
    def sequence(self) -> int: ...
    @property
    def sample_time(self) -> Timestamp: ...
    @property
    def heartbeat_utilization_percent(self) -> Sequence[int]: ...
    @property
    def heartbeat_memory_used_bytes(self) -> Sequence[int]: ...
    @property
    def heartbeat_sm_active_percent(self) -> Sequence[float]: ...


class FullAsHeartbeat(NamedTuple):
    """A full report's readings, read as a light heartbeat's (`as_heartbeat`)."""

    sequence: int
    sample_time: Timestamp
    heartbeat_utilization_percent: Sequence[int]
    heartbeat_memory_used_bytes: Sequence[int]
    heartbeat_sm_active_percent: Sequence[float]


def shape_key(report: pb.NodeReport) -> int:
    """The full report less what READING_REPORT_FIELDS and READING_GPU_FIELDS name, as a number: two
    full reports of a node with the same key summarize alike, and have the same GPU facts, but for
    READING_FIELDS (18-36 us for an 8-GPU report, where summarizing it takes ~100). A hash: two
    different shapes collide by chance once in 2**64, and then one node's summary keeps its older
    shape until its next full report; an agent that wanted its node misjudged could simply lie."""
    shape = ReportShape.FromString(report.SerializeToString())
    shape.DiscardUnknownFields()  # the readings, parsed as fields this message does not have
    return hash(shape.SerializeToString(deterministic=True))


def as_heartbeat(report: pb.NodeReport) -> FullAsHeartbeat:
    """A full report's readings as the light heartbeat of the same sample would carry them."""
    return FullAsHeartbeat(report.sequence, report.sample_time, *heartbeat_readings(report.gpus))


class RefreshBase(NamedTuple):
    """What a heartbeat is checked against, worked out once per full report (`refresh_base`), not
    once per heartbeat: per GPU, its cell, memory total (from the facts) and whether the rule
    found it busy (None: unhealthy, judged by neither rule)."""

    cells: tuple[GpuCell, ...]
    totals: tuple[int | None, ...]
    busy: tuple[bool | None, ...]
    node_error: str


def refresh_base(
    cells: Sequence[GpuCell],
    sm_active: Sequence[float | None],
    node_error: str,
    facts: Sequence[GpuFacts],
    rule: IdleRule,
) -> RefreshBase:
    """The RefreshBase of the full report whose summary has these gpus, sm_active and node_error."""
    old_sm = sm_active or (None,) * len(cells)
    busy = tuple(
        None if state == GPU_UNHEALTHY else readings_busy(util, mem, old_sm[position], rule)
        for position, (_, state, util, mem) in enumerate(cells)
    )
    return RefreshBase(tuple(cells), tuple(f.memory_total_bytes for f in facts), busy, node_error)


def refreshed_fields(
    cells: Sequence[GpuCell],
    sm_active: Sequence[float | None],
    node_error: str,
    facts: Sequence[GpuFacts],
    heartbeat: Heartbeat,
    rule: IdleRule,
    received_at: float,
) -> dict[str, Any] | str:
    """The base summary's (that of the full report `heartbeat.heartbeat_of`, judged by `rule`; its
    gpus, sm_active and node_error given) fields that the heartbeat's readings change
    (READING_FIELDS); or why not (a sentence for the agent, which then sends a full report). The
    heartbeat's lists are checked (report_checks.heartbeat_problem) before this is called."""
    return refreshed_readings(refresh_base(cells, sm_active, node_error, facts, rule), heartbeat, rule, received_at)


def refreshed_readings(
    base: RefreshBase, heartbeat: Heartbeat, rule: IdleRule, received_at: float
) -> dict[str, Any] | str:
    """refreshed_fields on a base worked out before (the caller keeps it, with the summary
    encoded: summary_store.SummaryStore)."""
    cells, totals, was_busy = base.cells, base.totals, base.busy
    count = len(cells)
    # Indexed in place: copying the message's lists out first costs more than it saves.
    utils = heartbeat.heartbeat_utilization_percent
    used = heartbeat.heartbeat_memory_used_bytes
    sms = heartbeat.heartbeat_sm_active_percent
    if len(utils) != count or len(used) != count or len(sms) != count or len(totals) != count:
        return f"a heartbeat for {count} GPUs carries {len(utils)}/{len(used)}/{len(sms)} readings"
    time = heartbeat.sample_time.seconds + heartbeat.sample_time.nanos / 1e9
    if base.node_error:  # a broken node's cells carry no readings (summarize)
        return {"sequence": heartbeat.sequence, "sample_time": time, "received_at": received_at}
    judge_sm = rule.max_sm_active_percent is not None
    new_cells: list[GpuCell] = []
    new_sm: list[float | None] = []
    readings: list[int] = []
    for position, (index, state, _, _) in enumerate(cells):
        given = utils[position]
        util = None if given == NO_READING else given
        in_use, total = used[position], totals[position]
        if (in_use != NO_READING) != (total is not None) or (total is not None and in_use > total):
            return f"GPU {index}: memory used {in_use} does not fit the full report's total {total}"
        mem = 100.0 * in_use / total if total else None  # as summarize (validation keeps total > 0)
        if util is not None:
            readings.append(util)
        new_cells.append((index, state, util, mem))
        if was_busy[position] is None:  # unhealthy: judged by neither rule (summarize)
            new_sm.append(None)
            continue
        sm = sms[position] if judge_sm else NO_READING
        reading = None if sm == NO_READING else sm
        new_sm.append(reading)
        busy = readings_busy(util, mem, reading, rule)
        if busy != was_busy[position]:
            return f"GPU {index} turns {'busy' if busy else 'idle'}: send a full report"
    return {
        "sequence": heartbeat.sequence,
        "sample_time": time,
        "received_at": received_at,
        "mean_utilization": sum(readings) / len(readings) if readings else None,
        "gpus": tuple(new_cells),
        "sm_active": tuple(new_sm) if any(s is not None for s in new_sm) else (),
    }
