"""Filter and prioritize as pure functions, table-driven."""

from __future__ import annotations

import itertools
import random

import pytest

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.whole_gpus import DataState, assess, filter_nodes, prioritize, spread_value
from gpuextender.extender.settings import DecisionPolicy
from tests.extender.builders import node

NOW = 100.0
FRESH = DecisionPolicy()


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
        (None, 8, 4, FRESH, DataState.NONE, None),  # no data: fits on assumed data (just enough)
        (None, 4, 4, FRESH, DataState.NONE, None),  # allocatable == needed: fits
        (None, 3, 4, FRESH, DataState.NONE, reasons.INSUFFICIENT_GPUS),  # allocatable == needed - 1
        (None, 2, 4, FRESH, DataState.NONE, reasons.INSUFFICIENT_GPUS),  # capacity, not load
        (None, 0, 1, FRESH, DataState.NONE, reasons.INSUFFICIENT_GPUS),  # a CPU node
        (node("n", idle=4), None, 8, FRESH, DataState.FRESH, reasons.INSUFFICIENT_GPUS),
        (node("n", idle=0, busy=8, received_at=80.0), 8, 2, FRESH, DataState.STALE, None),  # fail-open
        (node("n", idle=0, busy=8, received_at=80.0), None, 2, FRESH, DataState.STALE, None),  # count from report
        # A GPU last seen unhealthy stays unhealthy while the data is stale: allocatable 8, 6 lost -> 2 usable.
        (node("n", idle=2, lost=6, received_at=80.0), 8, 2, FRESH, DataState.STALE, None),
        (node("n", idle=1, lost=7, received_at=80.0), 8, 2, FRESH, DataState.STALE, reasons.INSUFFICIENT_HEALTHY_GPUS),
        (
            node("n", idle=1, lost=7, received_at=80.0),
            None,
            2,
            FRESH,
            DataState.STALE,
            reasons.INSUFFICIENT_HEALTHY_GPUS,
        ),
        (node("n", idle=0, busy=7, received_at=80.0), 8, 8, FRESH, DataState.STALE, None),  # 7 reported, 8 allocatable
        (
            node("n", idle=8, node_error="DriverNotLoaded", received_at=80.0),
            8,
            1,
            FRESH,
            DataState.STALE,
            reasons.NVML_UNAVAILABLE,
        ),  # NVML last seen broken: nothing is assumed
        (
            node("n", idle=8, received_at=80.0),
            8,
            2,
            DecisionPolicy(stale_policy="fail-closed"),
            DataState.STALE,
            reasons.STALE_GPU_DATA,
        ),
        (node("n", idle=8, received_at=90.5), 8, 2, DecisionPolicy(stale_after_s=10), DataState.FRESH, None),
    ],
)
def test_assess(summary, allocatable, needed, policy, data, reason) -> None:
    a = assess("n", allocatable, summary, needed, NOW, policy)
    assert a.data is data
    assert a.reason is reason
    # A verdict that does not rest on fresh data is marked as assumed, and counts as just enough.
    assert a.assumed == (reason is None and data is not DataState.FRESH)
    if a.assumed:
        assert a.idle_gpus == needed and a.mean_utilization is None


def test_stale_boundary_is_exactly_stale_after() -> None:
    """Fresh while age <= stale_after_s; assumed one tick past it."""
    at_bound = assess(
        "n", 8, node("n", idle=0, busy=8, received_at=NOW - 10.0), 2, NOW, DecisionPolicy(stale_after_s=10)
    )
    past = assess("n", 8, node("n", idle=0, busy=8, received_at=NOW - 10.001), 2, NOW, DecisionPolicy(stale_after_s=10))
    assert (at_bound.data, at_bound.reason, at_bound.assumed) == (
        DataState.FRESH,
        reasons.INSUFFICIENT_IDLE_GPUS,
        False,
    )
    assert (past.data, past.reason, past.assumed) == (DataState.STALE, None, True)


def test_filter_passes_fitting_nodes_and_explains_the_rest() -> None:
    summaries = lookup(node("idle", idle=8), node("busy", idle=1, busy=7), node("broken", idle=0, lost=8))
    out = filter_nodes(2, ["idle", "busy", "broken", "unknown"], {}, summaries, NOW, FRESH)
    assert out.passed == ["idle"]
    assert failures(out) == {
        "busy": reasons.INSUFFICIENT_IDLE_GPUS,
        "broken": reasons.INSUFFICIENT_HEALTHY_GPUS,
        "unknown": reasons.NO_FRESH_GPU_DATA,
    }
    assert not out.fallback and out.assumed == []
    busy = assess("busy", None, summaries("busy"), 2, NOW, FRESH)  # the numbers behind the verdict
    assert (busy.idle_gpus, busy.healthy_gpus, busy.gpu_count, busy.data) == (1, 8, 8, DataState.FRESH)


def failures(outcome) -> dict:
    return dict(outcome.failed)


def test_filter_fast_path_agrees_with_assess() -> None:
    """filter_nodes decides fresh nodes, and nodes without data, without assess(); the verdicts must match."""
    rng = random.Random(3)
    summaries = []
    for i in range(400):
        idle = rng.randint(0, 8)
        summaries.append(
            node(
                f"n{i}",
                idle=idle,
                busy=rng.randint(0, 8 - idle),
                lost=rng.randint(0, 1),
                received_at=rng.choice([100.0, 95.0, 80.0]),
                node_error=rng.choice(["", "", "", "DriverNotLoaded"]),
            )
        )
    # No data, allocatable on both sides of each `needed` below (and unknown): filter_nodes inlines _assumed().
    no_data = {f"no-data-{count}": count for count in (0, 1, 2, 3, 7, 8, 9)}
    names = [s.node for s in summaries] + list(no_data) + ["no-data-unknown"]
    allocatable = {**no_data, "n0": 8}
    for needed in (1, 2, 3, 8, 9):
        for policy in (FRESH, DecisionPolicy(stale_policy="fail-closed"), DecisionPolicy(no_fit_policy="reject")):
            out = filter_nodes(needed, names, allocatable, lookup(*summaries), NOW, policy)
            assessed = {n: assess(n, allocatable.get(n), lookup(*summaries)(n), needed, NOW, policy) for n in names}
            fresh_fit = any(a.reason is None and not a.assumed for a in assessed.values())
            expected = {
                n: reasons.NO_FRESH_GPU_DATA if a.assumed and fresh_fit else a.reason for n, a in assessed.items()
            }
            if not out.fallback:
                assert out.passed == [n for n in names if expected[n] is None]
                assert out.assumed == ([] if fresh_fit else [n for n in names if assessed[n].assumed])
            assert failures(out) == {
                n: r for n, r in expected.items() if r is not None and (not out.fallback or r.unresolvable)
            }


def test_assumed_data_passes_only_when_no_fresh_node_fits() -> None:
    """A dead agent must not attract pods: its node passes only when no reporting node can take the pod."""
    summaries = lookup(
        node("fresh-5", idle=5, busy=3), node("fresh-1", idle=1, busy=7), node("stale", idle=8, received_at=80.0)
    )
    names, allocatable = ["silent", "stale", "fresh-5", "fresh-1"], {"silent": 8, "stale": 8}
    out = filter_nodes(5, names, allocatable, summaries, NOW, FRESH)
    assert out.passed == ["fresh-5"] and out.assumed == []
    assert failures(out) == {
        "silent": reasons.NO_FRESH_GPU_DATA,
        "stale": reasons.NO_FRESH_GPU_DATA,
        "fresh-1": reasons.INSUFFICIENT_IDLE_GPUS,
    }
    scores = dict(prioritize(5, names, allocatable, summaries, NOW, FRESH))
    assert scores["fresh-5"] >= 1 and scores["silent"] == scores["stale"] == scores["fresh-1"] == 0
    # 6 GPUs: no reporting node fits, so the assumed ones pass (fail-open) and rank as just enough.
    out = filter_nodes(6, names, allocatable, summaries, NOW, FRESH)
    assert out.passed == ["silent", "stale"] == out.assumed and not out.fallback
    scores = dict(prioritize(6, names, allocatable, summaries, NOW, FRESH))
    assert scores["silent"] == scores["stale"] == 1 + round(9 * (6 + 100 / 101) / 9) and scores["fresh-5"] == 0


def test_assumed_nodes_rank_below_every_fresh_fit_whatever_the_strategy() -> None:
    rng = random.Random(7)
    summaries = [node(f"f{i}", idle=rng.randint(0, 8)) for i in range(60)]
    names = [s.node for s in summaries] + [f"silent{i}" for i in range(20)]
    allocatable = {f"silent{i}": 8 for i in range(20)}
    for strategy in ("spread", "binpack", "cost", "random"):
        for needed in (1, 4, 8):
            scores = dict(
                prioritize(
                    needed,
                    names,
                    allocatable,
                    lookup(*summaries),
                    NOW,
                    FRESH,
                    strategy=strategy,
                    seed="s",
                    cost_of=lambda n: 0.1 if n.startswith("silent") else 9.0,
                )
            )
            fresh_fits = [scores[s.node] for s in summaries if s.idle_gpus >= needed]
            assert fresh_fits and min(fresh_fits) >= 1
            assert max(scores[f"silent{i}"] for i in range(20)) < min(fresh_fits)


def test_no_fit_passes_only_soft_failures_and_reject_keeps_them() -> None:
    summaries = lookup(node("busy1", idle=1, busy=7), node("busy2", idle=0, busy=8), node("broken", idle=1, lost=7))
    names, allocatable = ["busy1", "busy2", "broken", "cpu-node"], {"cpu-node": 0}
    out = filter_nodes(2, names, allocatable, summaries, NOW, DecisionPolicy(no_fit_policy="pass-all"))
    assert out.fallback and out.passed == ["busy1", "busy2"]
    assert failures(out) == {"broken": reasons.INSUFFICIENT_HEALTHY_GPUS, "cpu-node": reasons.INSUFFICIENT_GPUS}
    out = filter_nodes(2, names, allocatable, summaries, NOW, DecisionPolicy(no_fit_policy="reject"))
    assert not out.fallback and out.passed == [] and len(out.failed) == 4


def test_pods_without_gpus_are_neutral() -> None:
    summaries = lookup(node("busy", idle=0, busy=8))
    out = filter_nodes(0, ["busy", "x"], {}, summaries, NOW, FRESH)
    assert out.passed == ["busy", "x"] and out.failed == {}
    assert prioritize(0, ["busy", "x"], {}, summaries, NOW, FRESH) == [("busy", 0), ("x", 0)]


def _key(s, needed: int):
    """The documented ranking: fits, then more idle GPUs, then lower utilization."""
    return (s.idle_gpus >= needed, s.idle_gpus, -(s.mean_utilization or 0.0))


def test_scores_never_contradict_the_ranking_rule() -> None:
    rng = random.Random(1)
    summaries = []
    for i in range(300):
        idle = rng.randint(0, 8)
        summaries.append(
            node(f"n{i}", idle=idle, busy=8 - idle, busy_util=rng.randint(30, 100), idle_util=rng.randint(0, 29))
        )
    for needed in (1, 2, 4, 8):
        scores = dict(prioritize(needed, [s.node for s in summaries], {}, lookup(*summaries), NOW, FRESH))
        assert all(type(score) is int and 0 <= score <= 10 for score in scores.values())
        for a, b in itertools.combinations(summaries, 2):
            if _key(a, needed) > _key(b, needed):
                assert scores[a.node] >= scores[b.node], (a, b)
        assert all((scores[s.node] >= 1) == (s.idle_gpus >= needed) for s in summaries)
        assert max(scores.values()) >= 9


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
    assert prioritize(2, ["n"], {}, lookup(summary), NOW, FRESH) == [("n", expected)]
    assert 1 + round(9 * spread_value(summary.idle_gpus, summary.mean_utilization or 0.0) / 9) == expected


def test_more_idle_gpus_outrank_any_utilization_gap() -> None:
    summaries = lookup(node("a", idle=3, busy=5, busy_util=100, idle_util=29), node("b", idle=2, busy=6, busy_util=31))
    scores = dict(prioritize(2, ["a", "b"], {}, summaries, NOW, FRESH))
    assert scores["a"] >= scores["b"]


def test_when_nothing_fits_nodes_are_still_ranked() -> None:
    summaries = lookup(node("one-idle", idle=1, busy=7, busy_util=50), node("none-idle", idle=0, busy=8, busy_util=95))
    scores = dict(prioritize(4, ["one-idle", "none-idle"], {}, summaries, NOW, FRESH))
    assert scores["one-idle"] > scores["none-idle"] >= 0


def _fleet():
    return [
        node("idle8", idle=8),
        node("idle4", idle=4, busy=4, busy_util=50),
        node("idle2", idle=2, busy=6),
        node("busy", idle=1, busy=7),
    ]


def test_binpack_prefers_the_fullest_node_that_still_fits() -> None:
    summaries = _fleet()
    names = [s.node for s in summaries]
    scores = dict(prioritize(2, names, {}, lookup(*summaries), NOW, FRESH, strategy="binpack"))
    assert scores["idle2"] > scores["idle4"] > scores["idle8"] >= 1 and scores["busy"] == 0


def test_cost_prefers_the_cheapest_node_then_spread() -> None:
    summaries = _fleet()
    names = [s.node for s in summaries]
    prices = {"idle8": 5.12, "idle4": 1.10, "idle2": 1.10, "busy": 0.5}
    scores = dict(prioritize(2, names, {}, lookup(*summaries), NOW, FRESH, strategy="cost", cost_of=prices.get))
    assert scores["idle4"] > scores["idle2"] > scores["idle8"] >= 1 and scores["busy"] == 0
    # unknown cost ranks below every priced node; no prices at all is plain spread
    partial = dict(
        prioritize(2, names, {}, lookup(*summaries), NOW, FRESH, strategy="cost", cost_of={"idle2": 9.0}.get)
    )
    assert partial["idle2"] > partial["idle8"]
    assert dict(
        prioritize(2, names, {}, lookup(*summaries), NOW, FRESH, strategy="cost", cost_of=lambda n: None)
    ) == dict(prioritize(2, names, {}, lookup(*summaries), NOW, FRESH))


def test_random_is_repeatable_per_seed_and_never_scores_a_node_that_cannot_fit() -> None:
    summaries = [node(f"n{i}", idle=8) for i in range(40)] + [node("busy", idle=0, busy=8)]
    names = [s.node for s in summaries]
    first = prioritize(2, names, {}, lookup(*summaries), NOW, FRESH, strategy="random", seed="pod-a")
    assert first == prioritize(2, names, {}, lookup(*summaries), NOW, FRESH, strategy="random", seed="pod-a")
    other = prioritize(2, names, {}, lookup(*summaries), NOW, FRESH, strategy="random", seed="pod-b")
    assert first != other
    assert len({s for n, s in first if n != "busy"}) >= 5  # spread over the range, not constant
    assert all(1 <= s <= 10 for n, s in first if n != "busy") and dict(first)["busy"] == 0


@pytest.mark.parametrize("strategy", ["spread", "binpack", "cost", "random"])
def test_fallback_ranks_least_loaded_first_whatever_the_strategy(strategy: str) -> None:
    summaries = lookup(node("one-idle", idle=1, busy=7, busy_util=50), node("none-idle", idle=0, busy=8, busy_util=95))
    scores = dict(
        prioritize(
            4, ["one-idle", "none-idle"], {}, summaries, NOW, FRESH, strategy=strategy, cost_of={"none-idle": 0.1}.get
        )
    )
    assert scores["one-idle"] > scores["none-idle"]
