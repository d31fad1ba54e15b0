"""Filter and prioritize as pure functions, table-driven."""

from __future__ import annotations

import itertools
import random

import pytest

from extender import reasons
from extender.decision import Candidate, DataState, Policy, assess, filter_nodes, prioritize
from tests.extender.builders import node

NOW = 100.0
FRESH = Policy()


def lookup(*summaries):
    table = {s.node: s for s in summaries}
    return table.get


@pytest.mark.parametrize(
    ("summary", "allocatable", "needed", "policy", "data", "reason"),
    [
        (node("n", idle=2), None, 2, FRESH, DataState.FRESH, None),
        (node("n", idle=1, busy=7), None, 2, FRESH, DataState.FRESH, reasons.INSUFFICIENT_IDLE_GPUS),
        (node("n", idle=1, lost=7), None, 2, FRESH, DataState.FRESH, reasons.INSUFFICIENT_HEALTHY_GPUS),
        (node("n", idle=8, node_error="DriverNotLoaded"), None, 1, FRESH, DataState.FRESH, reasons.NVML_UNAVAILABLE),
        (None, None, 4, FRESH, DataState.NONE, None),  # no data, allocatable unknown: assume it fits
        (None, 8, 4, FRESH, DataState.NONE, None),  # no data: all allocatable GPUs count as idle
        (None, 2, 4, FRESH, DataState.NONE, reasons.INSUFFICIENT_GPUS),  # capacity, not load
        (None, 0, 1, FRESH, DataState.NONE, reasons.INSUFFICIENT_GPUS),  # a CPU node
        (node("n", idle=4), None, 8, FRESH, DataState.FRESH, reasons.INSUFFICIENT_GPUS),
        (node("n", idle=0, busy=8, received_at=80.0), 8, 2, FRESH, DataState.STALE, None),  # fail-open
        (node("n", idle=0, busy=8, received_at=80.0), None, 2, FRESH, DataState.STALE, None),  # count from report
        (node("n", idle=8, received_at=80.0), 8, 2, Policy(stale_policy="fail-closed"), DataState.STALE,
         reasons.STALE_GPU_DATA),
        (node("n", idle=8, received_at=90.5), 8, 2, Policy(stale_after_s=10), DataState.FRESH, None),
    ],
)  # fmt: skip
def test_assess(summary, allocatable, needed, policy, data, reason) -> None:
    a = assess(Candidate("n", allocatable), summary, needed, NOW, policy)
    assert a.data is data
    assert a.reason is reason


def test_filter_passes_fitting_nodes_and_explains_the_rest() -> None:
    summaries = lookup(node("idle", idle=8), node("busy", idle=1, busy=7), node("broken", idle=0, lost=8))
    candidates = [Candidate("idle"), Candidate("busy"), Candidate("broken"), Candidate("unknown")]
    out = filter_nodes(2, candidates, summaries, NOW, FRESH)
    assert out.passed == ["idle", "unknown"]
    assert out.failed == {"busy": reasons.INSUFFICIENT_IDLE_GPUS, "broken": reasons.INSUFFICIENT_HEALTHY_GPUS}
    assert not out.fallback


def test_no_fit_passes_only_soft_failures_and_reject_keeps_them() -> None:
    summaries = lookup(node("busy1", idle=1, busy=7), node("busy2", idle=0, busy=8), node("broken", idle=1, lost=7))
    candidates = [Candidate(n) for n in ("busy1", "busy2", "broken")] + [Candidate("cpu-node", allocatable_gpus=0)]
    out = filter_nodes(2, candidates, summaries, NOW, Policy(no_fit_policy="pass-all"))
    assert out.fallback and out.passed == ["busy1", "busy2"]
    assert out.failed == {"broken": reasons.INSUFFICIENT_HEALTHY_GPUS, "cpu-node": reasons.INSUFFICIENT_GPUS}
    out = filter_nodes(2, candidates, summaries, NOW, Policy(no_fit_policy="reject"))
    assert not out.fallback and out.passed == [] and len(out.failed) == 4


def test_pods_without_gpus_are_neutral() -> None:
    summaries = lookup(node("busy", idle=0, busy=8))
    out = filter_nodes(0, [Candidate("busy"), Candidate("x")], summaries, NOW, FRESH)
    assert out.passed == ["busy", "x"] and out.failed == {}
    assert {s.score for s in prioritize(0, [Candidate("busy"), Candidate("x")], summaries, NOW, FRESH)} == {0}


def _key(a):
    """The documented ranking: fits, then more idle GPUs, then lower utilization."""
    return (a.fits, a.idle_gpus, -(a.mean_utilization or 0.0))


def test_scores_never_contradict_the_ranking_rule() -> None:
    rng = random.Random(1)
    summaries = []
    for i in range(300):
        idle = rng.randint(0, 8)
        summaries.append(node(f"n{i}", idle=idle, busy=8 - idle, busy_util=rng.randint(30, 100),
                              idle_util=rng.randint(0, 29)))  # fmt: skip
    for needed in (1, 2, 4, 8):
        scores = prioritize(needed, [Candidate(s.node) for s in summaries], lookup(*summaries), NOW, FRESH)
        assert all(type(s.score) is int and 0 <= s.score <= 10 for s in scores)
        for a, b in itertools.combinations(scores, 2):
            if _key(a.assessment) > _key(b.assessment):
                assert a.score >= b.score, (a, b)
        fits = [s for s in scores if s.assessment.fits]
        assert all(s.score >= 1 for s in fits) and all(s.score == 0 for s in scores if not s.assessment.fits)
        assert max(s.score for s in scores) >= 9


@pytest.mark.parametrize(
    ("idle", "busy_util", "expected"),
    [
        (8, 0, 10),  # v = 8 + 100/101 = 8.99
        (4, 90, 6),  # mean 45 %: v = 4 + 55/101 = 4.54 -> 1 + round(4.54)
        (4, 100, 5),  # mean 50 %: v = 4.495 -> 1 + round(4.495)
        (2, 30, 4),  # mean 22.5 %: v = 2.77
        (2, 100, 3),  # mean 75 %: v = 2.25
    ],
)
def test_score_formula_examples(idle: int, busy_util: int, expected: int) -> None:
    """1 + round(9 * v / (C + 1)), v = idle + (100 - mean util) / 101, C = 8; idle GPUs at 0 %."""
    summary = node("n", idle=idle, busy=8 - idle, busy_util=busy_util, idle_util=0)
    (score,) = prioritize(2, [Candidate("n")], lookup(summary), NOW, FRESH)
    assert score.score == expected


def test_more_idle_gpus_outrank_any_utilization_gap() -> None:
    summaries = lookup(node("a", idle=3, busy=5, busy_util=100, idle_util=29), node("b", idle=2, busy=6, busy_util=31))
    scores = {s.name: s.score for s in prioritize(2, [Candidate("a"), Candidate("b")], summaries, NOW, FRESH)}
    assert scores["a"] >= scores["b"]


def test_when_nothing_fits_nodes_are_still_ranked() -> None:
    summaries = lookup(node("one-idle", idle=1, busy=7, busy_util=50), node("none-idle", idle=0, busy=8, busy_util=95))
    scores = {s.name: s.score for s in prioritize(4, [Candidate("one-idle"), Candidate("none-idle")], summaries, NOW,
                                                   FRESH)}  # fmt: skip
    assert scores["one-idle"] > scores["none-idle"] >= 0
