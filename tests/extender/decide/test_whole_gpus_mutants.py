"""Rules of decide/whole_gpus.py that mutation testing found no test holding: every number of a
node's assessment (name, data age, idle, healthy and GPU counts, utilization) for each kind of data
it has. Each test fails on a one-line change."""

from __future__ import annotations

from dataclasses import replace

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.whole_gpus import (
    DataState,
    NodeAssessment,
    assess,
    binpack_value,
    fresh_reason,
    prioritize,
    rank_nodes,
    spread_value,
)
from gpuextender.extender.settings import DecisionPolicy
from tests.extender.builders import node

NOW = 100.0
STALE_AT = 80.0  # received_at 20 s before NOW: stale past the default 10 s
CLOSED = DecisionPolicy(stale_policy="fail-closed")


def test_a_node_without_data_is_assumed_just_enough_of_its_allocatable() -> None:
    assert assess("n", 8, None, 2, NOW, DecisionPolicy()) == NodeAssessment(
        "n", DataState.NONE, None, 2, 8, 8, None, None, assumed=True
    )


def test_stale_data_under_fail_closed_says_its_age_and_gpu_count() -> None:
    s = node("n", idle=2, busy=5, lost=1, received_at=STALE_AT)
    assert assess("n", 8, s, 2, NOW, CLOSED) == NodeAssessment(
        "n", DataState.STALE, 20.0, None, None, 8, None, reasons.STALE_GPU_DATA
    )


def test_stale_data_of_a_broken_nvml_assumes_nothing() -> None:
    s = node("n", idle=8, node_error="DriverNotLoaded", received_at=STALE_AT)
    assert assess("n", 8, s, 1, NOW, DecisionPolicy()) == NodeAssessment(
        "n", DataState.STALE, 20.0, 0, 0, s.gpu_count, None, reasons.NVML_UNAVAILABLE
    )


def test_stale_data_under_fail_open_keeps_the_gpus_last_seen_unhealthy() -> None:
    """Allocatable 8 (or the report's 7), 2 lost: 6 (5) healthy, assumed just enough idle."""
    s = node("n", idle=1, busy=4, lost=2, received_at=STALE_AT)
    assert assess("n", 8, s, 3, NOW, DecisionPolicy()) == NodeAssessment(
        "n", DataState.STALE, 20.0, 3, 6, 8, None, None, assumed=True
    )
    assert assess("n", None, s, 3, NOW, DecisionPolicy()) == NodeAssessment(
        "n", DataState.STALE, 20.0, 3, 5, 7, None, None, assumed=True
    )


def test_assumed_data_too_few_gpus_or_healthy_ones_says_which_with_what_is_left() -> None:
    s = node("n", idle=1, busy=4, lost=2, received_at=STALE_AT)
    assert assess("n", 4, s, 6, NOW, DecisionPolicy()) == NodeAssessment(
        "n", DataState.STALE, 20.0, 2, 2, 4, None, reasons.INSUFFICIENT_GPUS
    )
    assert assess("n", 8, s, 7, NOW, DecisionPolicy()) == NodeAssessment(
        "n", DataState.STALE, 20.0, 6, 6, 8, None, reasons.INSUFFICIENT_HEALTHY_GPUS
    )
    assert assess("n", 1, None, 2, NOW, DecisionPolicy()) == NodeAssessment(
        "n", DataState.NONE, None, 1, 1, 1, None, reasons.INSUFFICIENT_GPUS
    )


def test_fresh_data_is_assessed_with_its_own_numbers() -> None:
    s = node("n", idle=2, busy=5, lost=1, received_at=95.0)
    assert assess("n", 8, s, 3, NOW, DecisionPolicy()) == NodeAssessment(
        "n", DataState.FRESH, 5.0, 2, 7, 8, s.mean_utilization, reasons.INSUFFICIENT_IDLE_GPUS
    )


def test_free_gpus_short_by_what_bound_pods_not_attributed_yet_took_says_so() -> None:
    """1 free GPU once 2 are taken off for bound pods: a pod of 2 or 3 finds them taken, of 4 too few."""
    s = replace(node("n", idle=1, busy=7), free_gpus=1, bound_pod_units=2)
    assert [fresh_reason(s, k) for k in (2, 3, 4)] == [
        reasons.GPUS_TAKEN_BY_BOUND_PODS,
        reasons.GPUS_TAKEN_BY_BOUND_PODS,
        reasons.INSUFFICIENT_FREE_GPUS,
    ]


def test_idle_gpus_short_by_what_bound_pods_not_attributed_yet_took_says_so() -> None:
    """Allocation unknown: 1 idle GPU once 1 is taken off for a bound pod: 2 are taken, 3 too few."""
    s = replace(node("n", idle=1, busy=7), bound_pod_units=1)
    assert s.free_gpus is None
    assert [fresh_reason(s, k) for k in (2, 3)] == [reasons.GPUS_TAKEN_BY_BOUND_PODS, reasons.INSUFFICIENT_IDLE_GPUS]


def test_assumed_data_with_every_gpu_lost_has_none_healthy() -> None:
    s = node("n", idle=0, busy=1, lost=2, received_at=STALE_AT)
    assert assess("n", 2, s, 1, NOW, DecisionPolicy()) == NodeAssessment(
        "n", DataState.STALE, 20.0, 0, 0, 2, None, reasons.INSUFFICIENT_HEALTHY_GPUS
    )


def test_a_pod_without_gpus_fits_every_node_with_score_zero() -> None:
    assert rank_nodes(0, ["a", "b"], {}, lambda _n: None, NOW, DecisionPolicy()) == [("a", 0, True), ("b", 0, True)]


def test_random_without_a_seed_ranks_as_the_empty_seed() -> None:
    table = {f"n{i}": node(f"n{i}", idle=4) for i in range(8)}
    names = list(table)
    policy = DecisionPolicy()
    seeded = prioritize(1, names, {}, table.get, NOW, policy, "random", "")
    assert prioritize(1, names, {}, table.get, NOW, policy, "random") == seeded
    assert rank_nodes(1, names, {}, table.get, NOW, policy, "random") == rank_nodes(
        1, names, {}, table.get, NOW, policy, "random", ""
    )


def test_nodes_of_one_gpu_score_on_a_scale_of_two() -> None:
    """C = 1 (every node has 1 GPU, 1 asked): an idle GPU at 0 % scores 1 + round(9 x 1.99 / 2) = 10."""
    table = {"a": node("a", idle=1), "b": node("b", idle=0, busy=1)}
    assert rank_nodes(1, ["a", "b"], {}, table.get, NOW, DecisionPolicy()) == [("a", 10, True), ("b", 0, False)]


def test_a_node_that_does_not_fit_is_no_quality_class() -> None:
    """Fits of classes 0 and 2 and one node that does not fit: two classes, m = 2."""
    a = replace(node("a", idle=4, busy=4), quality=(0, 0, 0, 0, 0))
    b = replace(node("b", idle=3, busy=5), quality=(0, 0, 2, 2))
    c = node("c", idle=1, busy=7)
    table = {n.node: n for n in (a, b, c)}
    got = rank_nodes(2, list(table), {}, table.get, NOW, DecisionPolicy())
    assert got == [("a", 6, True), ("b", 1, True), ("c", 0, False)]


def test_an_assumed_fit_is_demoted_only_by_a_fresh_fit_the_callers_filter_judged() -> None:
    table = {"a": node("a", idle=2, busy=6)}
    eligible = {"a"}.__contains__
    assert rank_nodes(1, ["a", "b"], {}, table.get, NOW, DecisionPolicy(), eligible=eligible) == [
        ("a", 3, True),
        ("b", 0, False),
    ]


def test_a_node_without_data_is_ranked_on_its_allocatable() -> None:
    """b has 1 GPU allocatable, too few for 2; c 8."""
    got = rank_nodes(2, ["b", "c"], {"b": 1, "c": 8}, lambda _n: None, NOW, DecisionPolicy())
    assert got == [("b", 0, False), ("c", 4, True)]


def test_a_stale_node_is_ranked_on_what_it_last_reported() -> None:
    """x: 7 of 8 GPUs last seen lost; e: NVML last seen broken; z: no data, 8 allocatable."""
    table = {
        "x": node("x", idle=1, lost=7, received_at=STALE_AT),
        "e": node("e", idle=0, busy=2, received_at=STALE_AT, node_error="DriverNotLoaded"),
    }
    got = rank_nodes(2, ["x", "e", "z"], dict.fromkeys("xez", 8), table.get, NOW, DecisionPolicy())
    assert got == [("x", 0, False), ("e", 0, False), ("z", 4, True)]


def test_when_nothing_fits_nodes_score_on_the_gpus_assessed_left() -> None:
    """y: 1 healthy GPU left of 8, z: 1 allocatable (C = 8): round(10 x 1.99 / 9) = 2 each."""
    table = {"y": node("y", idle=1, lost=7, received_at=STALE_AT)}
    got = rank_nodes(2, ["y", "z"], {"y": 8, "z": 1}, table.get, NOW, DecisionPolicy())
    assert got == [("y", 2, False), ("z", 2, False)]


def test_when_nothing_fits_a_stale_node_under_fail_closed_counts_as_just_enough() -> None:
    """s stale (unknown idle: the 2 asked), f fresh with 1 idle: round(10 x 2.99 / 9) = 3, then 1."""
    table = {"s": node("s", idle=4, busy=4, received_at=STALE_AT), "f": node("f", idle=1, busy=3)}
    got = rank_nodes(2, ["s", "f"], {}, table.get, NOW, DecisionPolicy(stale_policy="fail-closed"))
    assert got == [("s", 3, False), ("f", 1, False)]


def test_a_stale_nodes_gpu_count_sets_the_scale() -> None:
    """C = 8 from stale s (demoted, a fresh node fits): f's 2 idle at 45 % score 1 + round(9 x 2.54 / 9) = 4."""
    table = {"s": node("s", idle=8, received_at=STALE_AT), "f": node("f", idle=2, busy=2)}
    assert rank_nodes(1, ["s", "f"], {}, table.get, NOW, DecisionPolicy()) == [("s", 0, False), ("f", 4, True)]


def test_quality_classes_are_those_of_the_fits_the_callers_filter_judged() -> None:
    """Classes 0 (a, not judged), 2 (b) and 4 (c): b is the best class, a and c below it."""
    a = replace(node("a", idle=4, busy=4), quality=(0, 0, 0, 0, 0))
    b = replace(node("b", idle=3, busy=5), quality=(0, 0, 2, 2))
    c = replace(node("c", idle=3, busy=5), quality=(0, 0, 4, 4))
    table = {n.node: n for n in (a, b, c)}
    got = rank_nodes(2, list(table), {}, table.get, NOW, DecisionPolicy(), eligible={"b", "c"}.__contains__)
    assert got == [("a", 1, True), ("b", 5, True), ("c", 1, True)]


def test_one_quality_class_among_the_judged_fits_keeps_the_plain_formula_for_every_fit() -> None:
    """a (class 0) is not judged by the caller's filter, b (class 2) is: one class, so a scores by
    the plain formula too (1 + round(9 x 4.54 / 9) = 6), not as a class below."""
    a = replace(node("a", idle=4, busy=4), quality=(0, 0, 0, 0, 0))
    b = replace(node("b", idle=3, busy=5), quality=(0, 0, 2, 2))
    table = {n.node: n for n in (a, b)}
    got = rank_nodes(2, list(table), {}, table.get, NOW, DecisionPolicy(), eligible={"b"}.__contains__)
    assert got == [("a", 6, True), ("b", 4, True)]


def test_binpack_values_fewest_idle_then_busiest() -> None:
    """v = (C - idle) + utilization / 101: a node all idle at C has 0 for the first part."""
    assert binpack_value(8, 0.0, 8) == 0.0
    assert binpack_value(6, 100.0, 8) == 2 + 100 / 101


def test_spread_values_most_idle_then_least_busy() -> None:
    assert spread_value(2, 0.0) == 2 + 100 / 101


def test_a_quality_class_of_zero_among_the_judged_fits_is_a_class() -> None:
    """a (class 0) and b (class 2), both judged: a the best class, b below it."""
    a = replace(node("a", idle=4, busy=4), quality=(0, 0, 0, 0, 0))
    b = replace(node("b", idle=3, busy=5), quality=(0, 0, 2, 2))
    table = {n.node: n for n in (a, b)}
    got = rank_nodes(2, list(table), {}, table.get, NOW, DecisionPolicy(), eligible={"a", "b"}.__contains__)
    assert got == [("a", 6, True), ("b", 1, True)]


def test_random_values_span_the_scale() -> None:
    """1-GPU nodes, 1 asked (C = 1): v = (C + 1) x the node's hash in [0, 1), so scores 1 + round(9 x
    hash), from 1 to 10 (the hash is blake2b of seed and node: these are the same in every run)."""
    names = [f"n{i}" for i in range(12)]
    table = {n: node(n, idle=1) for n in names}
    got = prioritize(1, names, {}, table.get, NOW, DecisionPolicy(), "random", "s")
    assert [score for _, score in got] == [5, 6, 2, 5, 7, 10, 9, 10, 8, 10, 2, 6]


def test_prices_are_read_only_for_the_cost_strategy() -> None:
    table = {n: node(n, idle=4, busy=4) for n in "abc"}
    price = {"a": 1.0, "b": 2.0, "c": 3.0}
    spread = prioritize(1, list(table), {}, table.get, NOW, DecisionPolicy(), "spread", cost_of=price.get)
    assert spread == [("a", 6), ("b", 6), ("c", 6)]


def test_cost_scores_each_node_by_where_its_price_lies_between_the_cheapest_and_dearest() -> None:
    """Prices 1, 2, 3 (C = 8): cheapness 1, 1/2, 0 of C, then the spread value within a price."""
    table = {n: node(n, idle=4, busy=4) for n in "abc"}
    price = {"a": 1.0, "b": 2.0, "c": 3.0}
    got = prioritize(1, list(table), {}, table.get, NOW, DecisionPolicy(), "cost", cost_of=price.get)
    assert got == [("a", 10), ("b", 6), ("c", 2)]


def test_cost_spreads_prices_less_than_one_apart_over_the_scale() -> None:
    """1-GPU nodes (C = 1) priced 1, 1.25 and 1.5: v = cheapness + 1.99 / 2: scores 10, 8, 5; d has no
    price: v = 1.99 / 2 as the dearest's."""
    table = {n: node(n, idle=1) for n in "abcd"}
    price = {"a": 1.0, "b": 1.25, "c": 1.5}
    got = prioritize(1, list(table), {}, table.get, NOW, DecisionPolicy(), "cost", cost_of=price.get)
    assert got == [("a", 10), ("b", 8), ("c", 5), ("d", 5)]
