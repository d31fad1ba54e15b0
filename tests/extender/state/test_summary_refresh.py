"""A light heartbeat applied to the summary of the full report it repeats is exactly the summary of
the full report with its readings, or a reason when the readings would change a decision
(gpuextender/extender/state/summary_refresh.py)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import pytest

from gpuextender.agent.report.light import light_heartbeat
from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.gpu_facts import GpuFacts, facts_from_report
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.extender.state.summary_refresh import READING_FIELDS, refreshed_fields
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import GIB, gpu, report

RULES = (IdleRule(30.0, 50.0, None), IdleRule(30.0, 50.0, 10.0), IdleRule(5.0, 20.0, 40.0))


def refreshed(
    base: NodeSummary, facts: Sequence[GpuFacts], heartbeat: pb.NodeReport, rule: IdleRule, received_at: float
) -> NodeSummary | str:
    """`base` with the fields refreshed_fields gives, or its reason."""
    changes = refreshed_fields(base.gpus, base.sm_active, base.node_error, facts, heartbeat, rule, received_at)
    return changes if isinstance(changes, str) else dataclasses.replace(base, **changes)


def heartbeat_of(full: pb.NodeReport, now: pb.NodeReport, sequence: int) -> pb.NodeReport:
    """What an agent sends for `now` on a stream whose extender holds `full` (the agent's own encoder)."""
    now = pb.NodeReport(node_name=now.node_name, sequence=sequence, sample_time=now.sample_time, gpus=now.gpus)
    return light_heartbeat(now, full.sequence)


def random_readings(g: pb.GpuSample, rng: random.Random) -> None:
    """New readings for one GPU, each sometimes absent (memory used only where a total is)."""
    if rng.random() < 0.1:
        g.ClearField("utilization_gpu_percent")
    else:
        g.utilization_gpu_percent = rng.choice((0, 4, 5, 29, 30, 31, 60, 100))
    if g.HasField("memory_total_bytes"):
        g.memory_used_bytes = int(g.memory_total_bytes * rng.choice((0.0, 0.19, 0.2, 0.21, 0.5, 0.51, 1.0)))
    if rng.random() < 0.3:
        g.ClearField("gpm")
    else:
        g.gpm.sm_active_percent = rng.choice((0.0, 9.9, 10.0, 39.5, 40.0, 100.0))


def random_full(rng: random.Random, seq: int) -> pb.NodeReport:
    gpus = []
    for i in range(rng.randint(0, 8)):
        g = gpu(i, 0, 0 if rng.random() < 0.9 else None, healthy=rng.random() < 0.85)
        g.compute_capability.major = 9
        if rng.random() < 0.15:
            g.health = pb.HEALTH_DEGRADED
        random_readings(g, rng)
        gpus.append(g)
    full = report("node-a", gpus, seq=seq, node_error="NVML_ERROR_UNKNOWN" if rng.random() < 0.05 else "")
    if rng.random() < 0.5:
        full.allocation_source = pb.ALLOCATION_KUBELET
        for g in full.gpus:
            if rng.random() < 0.3:
                g.holders.add(namespace="team", pod=f"p{g.index}", container="c", device_id=g.uuid)
    return full


def decisions(summary: NodeSummary) -> tuple[object, ...]:
    """A summary less its readings: what decisions read (the cells' states stay, their readings go)."""
    fields = tuple(getattr(summary, f.name) for f in dataclasses.fields(summary) if f.name not in READING_FIELDS)
    return (*fields, tuple(cell[:2] for cell in summary.gpus))


def test_refreshed_equals_the_full_reports_summary_or_refuses_a_changed_decision() -> None:
    rng = random.Random(36)
    equal = refused = 0
    for round_ in range(3000):
        rule = RULES[round_ % len(RULES)]
        full = random_full(rng, seq=5)
        now = pb.NodeReport()
        now.CopyFrom(full)
        now.sequence = 9
        now.sample_time.seconds, now.sample_time.nanos = 2000, 500
        for g in now.gpus:
            random_readings(g, rng)
        base = summarize(full, rule, 1.0)
        got = refreshed(base, facts_from_report(full), heartbeat_of(full, now, 9), rule, 7.0)
        want = summarize(now, rule, 7.0)
        if isinstance(got, str):
            refused += 1
            assert decisions(want) != decisions(base), got
        else:
            equal += 1
            assert got == want
    # Both sides of the rule met often: the test sees refusals and refreshes alike.
    assert equal > 500 and refused > 500, (equal, refused)


def test_a_reading_exactly_at_the_rule_turns_the_gpu_busy() -> None:
    rule = IdleRule(30.0, 50.0, None)
    full = report("node-a", [gpu(0, 29, 0)], seq=1)
    base = summarize(full, rule, 1.0)
    facts = facts_from_report(full)
    for util, fits in ((29, True), (30, False)):
        now = report("node-a", [gpu(0, util, 0)], seq=2)
        got = refreshed(base, facts, heartbeat_of(full, now, 2), rule, 2.0)
        assert isinstance(got, NodeSummary) is fits, (util, got)
    assert refreshed(base, facts, heartbeat_of(full, report("node-a", [gpu(0, 30, 0)], seq=2), 2), rule, 2.0) == (
        "GPU 0 turns busy: send a full report"
    )


@pytest.mark.parametrize(
    ("utils", "used", "sms", "reason"),
    [
        ([0], [0], [], "a heartbeat for 1 GPUs carries 1/1/0 readings"),
        ([0, 0], [0, 0], [-1, -1], "a heartbeat for 1 GPUs carries 2/2/2 readings"),
        (
            [0],
            [80 * GIB + 1],
            [-1],
            f"GPU 0: memory used {80 * GIB + 1} does not fit the full report's total {80 * GIB}",
        ),
        ([0], [-1], [-1], f"GPU 0: memory used -1 does not fit the full report's total {80 * GIB}"),
    ],
)
def test_readings_that_do_not_fit_the_full_report_are_refused(
    utils: list[int], used: list[int], sms: list[float], reason: str
) -> None:
    rule = IdleRule()
    full = report("node-a", [gpu(0, 0, 0)], seq=1)
    hb = pb.NodeReport(
        node_name="node-a",
        sequence=2,
        heartbeat_of=1,
        heartbeat_utilization_percent=utils,
        heartbeat_memory_used_bytes=used,
        heartbeat_sm_active_percent=sms,
    )
    assert refreshed(summarize(full, rule, 1.0), facts_from_report(full), hb, rule, 2.0) == reason


def test_memory_used_at_exactly_the_total_fits() -> None:
    rule = IdleRule(30.0, 100.1, None)  # 100 % used is idle under this rule: only the bound is tested
    full = report("node-a", [gpu(0, 0, 0)], seq=1)
    hb = heartbeat_of(full, report("node-a", [gpu(0, 0, 100)], seq=2), 2)
    assert list(hb.heartbeat_memory_used_bytes) == [80 * GIB]
    got = refreshed(summarize(full, rule, 1.0), facts_from_report(full), hb, rule, 2.0)
    assert isinstance(got, NodeSummary) and got.gpus[0][3] == 100.0


def test_a_gpu_without_memory_readings_takes_none() -> None:
    rule = IdleRule()
    full = report("node-a", [gpu(0, 0, None)], seq=1)
    hb = heartbeat_of(full, report("node-a", [gpu(0, 3, None)], seq=2), 2)
    got = refreshed(summarize(full, rule, 1.0), facts_from_report(full), hb, rule, 2.0)
    assert isinstance(got, NodeSummary) and got.gpus[0][2:] == (3, None)
    hb.heartbeat_memory_used_bytes[0] = 0
    assert refreshed(summarize(full, rule, 1.0), facts_from_report(full), hb, rule, 2.0) == (
        "GPU 0: memory used 0 does not fit the full report's total None"
    )
