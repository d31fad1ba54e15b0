"""Rules of the filter outcome (decide/filter_outcome.py) that mutation testing found no test
holding: an outcome starts empty with no fallback and no preemptible node; assumed nodes fail
NoFreshGPUData beside fresh ones and pass alone; pass-all lets only the soft failures through and
only when nothing passed; MIG's failures, fallback and assumed marks join the whole-GPU outcome.
Each test fails on a one-line change to the module."""

from __future__ import annotations

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.filter_outcome import FilterOutcome, after_mig, finish

SOFT = reasons.INSUFFICIENT_IDLE_GPUS
HARD = reasons.INSUFFICIENT_GPUS


def test_a_new_outcome_is_empty_with_no_fallback_and_no_preemptible_node() -> None:
    outcome = FilterOutcome()
    assert outcome.passed == [] and outcome.failed == {} and outcome.assumed == []
    assert outcome.fallback is False and outcome.preemptible == 0


def test_assumed_nodes_fail_no_fresh_data_when_a_fresh_node_fits() -> None:
    outcome = finish(FilterOutcome(passed=["a"], assumed=["b"]), "pass-all")
    assert outcome.passed == ["a"] and outcome.assumed == []
    assert outcome.failed == {"b": reasons.NO_FRESH_GPU_DATA}
    assert outcome.failed["b"] is reasons.NO_FRESH_GPU_DATA and not outcome.fallback


def test_assumed_nodes_pass_when_no_fresh_node_fits() -> None:
    outcome = finish(FilterOutcome(failed={"c": SOFT}, assumed=["b"]), "pass-all")
    assert outcome.passed == ["b"] and outcome.assumed == ["b"]
    assert outcome.failed == {"c": SOFT} and not outcome.fallback


def test_without_assumed_nodes_the_passed_stay_as_they_are() -> None:
    outcome = finish(FilterOutcome(passed=["a"]), "pass-all")
    assert outcome.passed == ["a"] and outcome.failed == {} and outcome.assumed == []


def test_pass_all_lets_only_soft_failures_through_when_nothing_passed() -> None:
    outcome = finish(FilterOutcome(failed={"s": SOFT, "h": HARD}), "pass-all")
    assert outcome.fallback is True
    assert outcome.passed == ["s"] and outcome.failed == {"h": HARD}


def test_reject_policy_keeps_every_failure() -> None:
    outcome = finish(FilterOutcome(failed={"s": SOFT}), "reject")
    assert outcome.fallback is False and outcome.passed == [] and outcome.failed == {"s": SOFT}


def test_pass_all_is_not_used_when_a_node_passed() -> None:
    outcome = finish(FilterOutcome(passed=["a"], failed={"s": SOFT}), "pass-all")
    assert outcome.fallback is False and outcome.passed == ["a"] and outcome.failed == {"s": SOFT}


def test_pass_all_with_only_hard_failures_passes_nothing() -> None:
    outcome = finish(FilterOutcome(failed={"h": HARD}), "pass-all")
    assert outcome.fallback is False and outcome.passed == [] and outcome.failed == {"h": HARD}


def test_pass_all_with_no_node_at_all_stays_empty() -> None:
    outcome = finish(FilterOutcome(), "pass-all")
    assert outcome.fallback is False and outcome.passed == [] and outcome.failed == {}


def test_after_mig_adds_mig_failures_and_keeps_the_rests() -> None:
    rest = FilterOutcome(passed=["a"], failed={"r": HARD})
    out = after_mig(FilterOutcome(failed={"m": SOFT}), rest)
    assert out is rest and out.failed == {"r": HARD, "m": SOFT} and out.passed == ["a"]


def test_after_mig_keeps_a_fallback_from_either_side() -> None:
    assert after_mig(FilterOutcome(fallback=True), FilterOutcome()).fallback is True
    assert after_mig(FilterOutcome(), FilterOutcome(fallback=True)).fallback is True
    assert after_mig(FilterOutcome(), FilterOutcome()).fallback is False


def test_after_mig_marks_assumed_only_the_passing_nodes_not_yet_marked() -> None:
    rest = FilterOutcome(passed=["a", "b"], assumed=["b"])
    out = after_mig(FilterOutcome(assumed=["a", "b", "c"]), rest)
    assert out.assumed == ["b", "a"]
