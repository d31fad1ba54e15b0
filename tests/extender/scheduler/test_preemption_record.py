"""What a preempt call leaves behind (issue 51, item 7): the plans kept per pod for explain (at most
MAX_PODS, each for TTL_S, bounds exactly at and one past), explain's view of one, and the counters
and log line of record_preemption."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
from prometheus_client import generate_latest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide.preempt_victims import AS_PROPOSED, DROPPED, EXTENDED, KEPT, NodePlan, PreemptionPlan
from gpuextender.extender.model.pod_request import PodRequest, read_pod
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.preemption_record import (
    LOG_NODES,
    MAX_PODS,
    TTL_S,
    Preempted,
    RecentPreemptions,
    explained,
    record_preemption,
)
from gpuextender.extender.state.gpu_state import GpuState
from tests.harness import metric, parse_metrics

NODES = "gpu_extender_preemption_nodes_total"
ADDED = "gpu_extender_preemption_victims_added_total"


def plan_of(*nodes: NodePlan, note: str = "") -> PreemptionPlan:
    return PreemptionPlan(tuple(nodes), note)


def kept(node: str, *victims: str, violations: int = 0) -> NodePlan:
    return NodePlan(node, KEPT, victims, violations, "2 GPUs usable after", 2, (), victims)


def extended(node: str, proposed: tuple[str, ...], added: tuple[str, ...], violations: int = 0) -> NodePlan:
    return NodePlan(node, EXTENDED, proposed + added, violations, "more victims", 1, added, proposed)


def dropped(node: str, *proposed: str) -> NodePlan:
    return NodePlan(node, DROPPED, (), 0, "no eviction makes the node usable", None, (), proposed)


def as_proposed(node: str, *victims: str) -> NodePlan:
    return NodePlan(node, AS_PROPOSED, victims, 0, "no fresh GPU data", None, (), victims)


PLAN = plan_of(kept("n1", "u1"))


def preemptor() -> PodRequest:
    pod = {
        "metadata": {"name": "big", "namespace": "ml", "uid": "pre"},
        "spec": {
            "priority": 1000,
            "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "2"}}}],
        },
    }
    return read_pod(pod, ("nvidia.com/gpu",), "spread", "")


def samples(m: ExtenderMetrics) -> Any:
    return parse_metrics(generate_latest(m.registry).decode())


# -- RecentPreemptions -----------------------------------------------------------------------------


def test_the_latest_plan_of_a_pod_is_kept() -> None:
    recent = RecentPreemptions()
    recent.record("uid-a", "ml/a", PLAN, now=10.0)
    assert recent.latest("uid-a", now=10.0) == Preempted("ml/a", 10.0, PLAN)
    assert recent.latest("uid-b", now=10.0) is None
    other = plan_of(dropped("n2", "u2"))
    recent.record("uid-a", "ml/a", other, now=20.0)
    assert recent.latest("uid-a", now=20.0) == Preempted("ml/a", 20.0, other)
    assert len(recent) == 1


@pytest.mark.parametrize("ttl", [TTL_S, 5.0])
def test_a_plan_exactly_ttl_old_is_returned_one_past_is_not(ttl: float) -> None:
    recent = RecentPreemptions(ttl_s=ttl) if ttl != TTL_S else RecentPreemptions()
    recent.record("uid-a", "ml/a", PLAN, now=100.0)
    at = 100.0 + ttl
    found = recent.latest("uid-a", now=at)
    assert found is not None and found.plan == PLAN
    assert recent.latest("uid-a", now=math.nextafter(at, math.inf)) is None
    assert recent.latest("uid-a", now=at + 1.0) is None
    assert len(recent) == 1  # expired plans are not returned; they leave when pushed out


def test_the_default_ttl_is_ten_minutes() -> None:
    assert TTL_S == 600.0
    recent = RecentPreemptions()
    recent.record("uid-a", "ml/a", PLAN, now=0.0)
    assert recent.latest("uid-a", now=600.0) is not None
    assert recent.latest("uid-a", now=600.1) is None


@pytest.mark.parametrize("max_pods", [MAX_PODS, 3])
def test_max_pods_are_kept_one_more_drops_the_oldest(max_pods: int) -> None:
    recent = RecentPreemptions(max_pods=max_pods) if max_pods != MAX_PODS else RecentPreemptions()
    for i in range(max_pods):
        recent.record(f"uid-{i}", f"ml/p{i}", PLAN, now=float(i))
    assert len(recent) == max_pods
    assert recent.latest("uid-0", now=float(max_pods)) is not None
    recent.record("uid-new", "ml/new", PLAN, now=float(max_pods))
    assert len(recent) == max_pods
    assert recent.latest("uid-0", now=float(max_pods)) is None  # the oldest went
    assert recent.latest("uid-1", now=float(max_pods)) is not None
    assert recent.latest("uid-new", now=float(max_pods)) is not None


def test_recording_a_pod_again_makes_it_the_newest() -> None:
    recent = RecentPreemptions(max_pods=3)
    for name in ("a", "b", "c"):
        recent.record(f"uid-{name}", f"ml/{name}", PLAN, now=1.0)
    recent.record("uid-a", "ml/a", PLAN, now=2.0)  # a: newest now, b the oldest
    assert len(recent) == 3
    recent.record("uid-d", "ml/d", PLAN, now=3.0)
    assert len(recent) == 3
    assert recent.latest("uid-b", now=3.0) is None
    assert [recent.latest(f"uid-{n}", now=3.0) is not None for n in ("a", "c", "d")] == [True, True, True]
    recent.record("uid-e", "ml/e", PLAN, now=4.0)  # then c, the oldest left
    assert recent.latest("uid-c", now=4.0) is None
    assert recent.latest("uid-a", now=4.0) is not None


def test_a_single_slot_keeps_only_the_last() -> None:
    recent = RecentPreemptions(max_pods=1)
    recent.record("uid-a", "ml/a", PLAN, now=1.0)
    recent.record("uid-b", "ml/b", PLAN, now=2.0)
    assert len(recent) == 1
    assert recent.latest("uid-a", now=2.0) is None
    assert recent.latest("uid-b", now=2.0) == Preempted("ml/b", 2.0, PLAN)


# -- explained -------------------------------------------------------------------------------------


def test_explained_names_victims_the_ledger_knows_and_uids_otherwise() -> None:
    plan = plan_of(
        kept("n1", "u1", violations=1),
        extended("n2", ("u2",), ("u3", "u4"), violations=2),
        dropped("n3", "u5"),
        as_proposed("n4", "u6"),
    )
    names = {"u1": "ml/one", "u3": "ml/three", "u5": "ml/five"}
    view = explained(Preempted("ml/big", 100.0, plan), now=112.34, names=names)
    assert view == {
        "secondsAgo": 12.3,
        "note": None,
        "candidates": [
            {
                "node": "n1",
                "action": "kept",
                "why": "2 GPUs usable after",
                "gpusUsableAfter": 2,
                "proposed": ["ml/one"],
                "victims": ["ml/one"],
                "added": [],
                "pdbViolations": 1,
            },
            {
                "node": "n2",
                "action": "extended",
                "why": "more victims",
                "gpusUsableAfter": 1,
                "proposed": ["u2"],
                "victims": ["u2", "ml/three", "u4"],
                "added": ["ml/three", "u4"],
                "pdbViolations": 2,
            },
            {
                "node": "n3",
                "action": "dropped",
                "why": "no eviction makes the node usable",
                "gpusUsableAfter": None,
                "proposed": ["ml/five"],
                "victims": [],
                "added": [],
                "pdbViolations": 0,
            },
            {
                "node": "n4",
                "action": "as proposed",
                "why": "no fresh GPU data",
                "gpusUsableAfter": None,
                "proposed": ["u6"],
                "victims": ["u6"],
                "added": [],
                "pdbViolations": 0,
            },
        ],
    }


def test_explained_says_why_the_candidates_were_not_judged() -> None:
    plan = plan_of(as_proposed("n1", "u1"), note="no whole GPUs asked for: kube-scheduler's count decides")
    view = explained(Preempted("ml/big", 50.0, plan), now=50.0, names={})
    assert view["note"] == "no whole GPUs asked for: kube-scheduler's count decides"
    assert view["secondsAgo"] == 0.0
    assert [c["victims"] for c in view["candidates"]] == [["u1"]]


def test_explained_of_no_candidates() -> None:
    view = explained(Preempted("ml/big", 0.0, plan_of()), now=TTL_S, names={})
    assert view == {"secondsAgo": TTL_S, "note": None, "candidates": []}


# -- record_preemption -----------------------------------------------------------------------------


def test_no_call_counts_nothing() -> None:
    got = samples(ExtenderMetrics(GpuState(IdleRule())))
    assert all(metric(got, NODES, action=a) is None for a in (KEPT, EXTENDED, DROPPED, AS_PROPOSED))
    assert metric(got, ADDED) == 0.0


def test_record_counts_nodes_by_action_and_added_victims() -> None:
    m = ExtenderMetrics(GpuState(IdleRule()))
    plan = plan_of(
        kept("n1", "u1"),
        kept("n2", "u2"),
        extended("n3", ("u3",), ("u4", "u5")),
        extended("n4", (), ("u6",)),
        dropped("n5", "u7"),
    )
    record_preemption(m, preemptor(), plan)
    got = samples(m)
    assert metric(got, NODES, action="kept") == 2.0
    assert metric(got, NODES, action="extended") == 2.0
    assert metric(got, NODES, action="dropped") == 1.0
    assert metric(got, NODES, action="as proposed") is None  # never counted: no series
    assert metric(got, ADDED) == 3.0

    record_preemption(m, preemptor(), plan_of(as_proposed("n6", "u8"), dropped("n7")))
    got = samples(m)
    assert metric(got, NODES, action="kept") == 2.0
    assert metric(got, NODES, action="dropped") == 2.0
    assert metric(got, NODES, action="as proposed") == 1.0
    assert metric(got, ADDED) == 3.0  # none added this time


def test_record_of_an_empty_plan_counts_nothing() -> None:
    m = ExtenderMetrics(GpuState(IdleRule()))
    record_preemption(m, preemptor(), plan_of())
    got = samples(m)
    assert all(metric(got, NODES, action=a) is None for a in (KEPT, EXTENDED, DROPPED, AS_PROPOSED))
    assert metric(got, ADDED) == 0.0


def _line(caplog: pytest.LogCaptureFixture) -> str:
    (record,) = [r for r in caplog.records if r.name == "gpu_extender.http"]
    return record.getMessage()


def test_the_log_line_names_at_most_log_nodes_candidates(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpu_extender.http")
    at = plan_of(*(kept(f"n{i}", f"u{i}") for i in range(LOG_NODES)))
    record_preemption(ExtenderMetrics(GpuState(IdleRule())), preemptor(), at)
    line = _line(caplog)
    assert line.startswith(f"preempt ml/big (priority 1000, needs 2 GPU): {LOG_NODES} candidate(s), {LOG_NODES} kept")
    assert all(f"n{i}: kept" in line for i in range(LOG_NODES))
    assert "more" not in line

    caplog.clear()
    past = plan_of(*(kept(f"n{i}", f"u{i}") for i in range(LOG_NODES)), dropped("gone", "u9"))
    record_preemption(ExtenderMetrics(GpuState(IdleRule())), preemptor(), past)
    line = _line(caplog)
    assert f"{LOG_NODES + 1} candidate(s), {LOG_NODES} kept, 1 dropped" in line
    assert "gone: dropped (no eviction makes the node usable)" in line  # dropped ones are shown first
    assert line.endswith(" and 1 more")


def test_the_debug_log_line_names_every_candidate(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gpu_extender.http")
    plan = plan_of(*(kept(f"n{i}", f"u{i}") for i in range(LOG_NODES + 2)))
    record_preemption(ExtenderMetrics(GpuState(IdleRule())), preemptor(), plan)
    line = _line(caplog)
    assert all(f"n{i}: kept" in line for i in range(LOG_NODES + 2))
    assert "more" not in line


def test_no_candidates_logs_none(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpu_extender.http")
    record_preemption(ExtenderMetrics(GpuState(IdleRule())), preemptor(), plan_of())
    assert _line(caplog) == "preempt ml/big (priority 1000, needs 2 GPU): 0 candidate(s), none"


def test_the_candidates_kept_are_bounded_the_newest_plan_always_kept() -> None:
    """At exactly max_nodes candidates over all plans everything stays; one more drops the oldest."""
    from gpuextender.extender.decide.preempt_victims import KEPT, NodePlan, PreemptionPlan
    from gpuextender.extender.scheduler.preemption_record import RecentPreemptions

    def plan_of(n: int) -> PreemptionPlan:
        return PreemptionPlan(tuple(NodePlan(f"n{i}", KEPT, ("v",), 0, "") for i in range(n)))

    kept = RecentPreemptions(max_pods=10, max_nodes=5)
    kept.record("a", "ns/a", plan_of(2), 0.0)
    kept.record("b", "ns/b", plan_of(3), 0.0)
    assert kept.latest("a", 0.0) is not None and len(kept) == 2  # 5 candidates: at the bound
    kept.record("c", "ns/c", plan_of(1), 0.0)  # 6: the oldest goes
    assert kept.latest("a", 0.0) is None and kept.latest("b", 0.0) is not None and len(kept) == 2
    kept.record("b", "ns/b", plan_of(4), 0.0)  # b again, bigger: 5 with c
    assert kept.latest("c", 0.0) is not None and len(kept) == 2
    kept.record("huge", "ns/huge", plan_of(50), 0.0)  # alone past the bound: kept, the others go
    assert kept.latest("huge", 0.0) is not None and len(kept) == 1
