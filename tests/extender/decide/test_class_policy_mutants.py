"""Rules of decide/class_policy.py that a one-line change would break unseen (mutation testing):
the paths named in constraint errors; whole floats read as integers; the mixed numeric/string
architecture version compare; a 1 GiB memory requirement; figures of exactly 1 (precision search,
fp16 fallback, MostCapable maxima); the fp16 fallback scored against the requirement; per-token
prices before tiers; the bases, reasons and codes a ranking reports; a ranking that stops early,
in full; OME's choice ranked under the constraints when availability removes a class."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.decide.class_policy import (
    ClassRanking,
    Constraints,
    ExcludedClass,
    NoClass,
    Stage,
    best_fit_score,
    meets_requirements,
    parse_constraints,
    rank_classes,
)
from gpuextender.extender.model.untrusted import InvalidInput
from tests.extender.decide.test_class_policy import catalog, cls, names


def test_constraint_errors_name_the_default_path() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_constraints({"minMemory": "80Gi"})
    assert info.value.path == "constraints.minMemory"


@pytest.mark.parametrize("key", ["minMemory", "maxMemory", "minComputePerformanceTFLOPS"])
def test_whole_float_figures_read_as_integers(key: str) -> None:
    parsed = parse_constraints({key: 80.0})
    assert parsed is not None
    value = {"minMemory": parsed.min_memory, "maxMemory": parsed.max_memory}.get(key, parsed.min_compute_tflops)
    assert value == 80 and isinstance(value, int)


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"architectureFamilies": "hopper"}, "c.architectureFamilies"),
        ({"preferredPrecisions": "fp16"}, "c.preferredPrecisions"),
        ({"requiredFeatures": [1]}, "c.requiredFeatures[0]"),
    ],
)
def test_list_field_errors_name_their_path(raw: Any, path: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_constraints(raw, "c")
    assert info.value.path == path


def test_numeric_capability_against_a_non_numeric_minimum_compares_as_strings() -> None:
    # "9.0" < "gfx90a" as strings (OME's comparison); one numeric side is not enough for (major, minor).
    h100 = cls("h100", cc="9.0")
    assert meets_requirements(h100, Constraints(min_architecture_version="gfx90a")) == (
        "compute capability 9.0 < required gfx90a"
    )
    amd = cls("mi250x", vendor="amd", family="cdna2", cc="gfx90a")
    assert meets_requirements(amd, Constraints(min_architecture_version="9.0")) is None


def test_a_one_gib_memory_requirement_still_penalises_over_provisioning() -> None:
    _, mem, _ = best_fit_score(cls("x", memory="80Gi"), Constraints(min_memory=1))
    assert mem == pytest.approx(1 / 80)


def test_a_preferred_precision_counts_a_figure_of_one() -> None:
    _, _, compute = best_fit_score(cls("x", perf={"fp16Tflops": 1}), Constraints(preferred_precisions=("fp16",)))
    assert compute == pytest.approx(1.0)


def test_fp16_fallback_scores_against_the_compute_requirement() -> None:
    c = Constraints(min_compute_tflops=2000, preferred_precisions=("int4",))
    _, _, compute = best_fit_score(cls("x", perf={"fp16Tflops": 1000}), c)
    assert compute == pytest.approx(0.25)  # 1000/2000, halved once for the unmatched int4


def test_fp16_fallback_counts_a_figure_of_one() -> None:
    _, _, compute = best_fit_score(cls("x", perf={"fp16Tflops": 1}), Constraints(preferred_precisions=("int4",)))
    assert compute == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("precisions", "perf"),
    [
        (("int4", "bf16", "fp32"), {"fp32Tflops": 60}),  # a zero figure does not stop the search
        (("int4", "fp32"), {"fp32Tflops": 1}),  # a figure of 1 counts
    ],
)
def test_most_capable_searches_the_later_precisions_for_a_non_zero_figure(
    precisions: tuple[str, ...], perf: dict[str, int]
) -> None:
    classes = catalog(cls("none", perf={}), cls("some", perf=perf))
    r = rank_classes("MostCapable", ["none", "some"], classes, Constraints(preferred_precisions=precisions))
    assert names(r) == ["some", "none"]
    assert [x.score for x in r.ranked] == pytest.approx([0.7, 0.5])


def test_cheapest_ranks_a_per_token_price_before_any_tier() -> None:
    classes = catalog(cls("tier", cost={"tier": "low"}), cls("tokens", cost={"perMillionTokens": "5"}))
    assert names(rank_classes("Cheapest", ["tier", "tokens"], classes)) == ["tokens", "tier"]


def test_first_available_says_each_class_position() -> None:
    r = rank_classes("FirstAvailable", ["b", "a"], catalog(cls("a"), cls("b")))
    assert [(x.name, x.basis) for x in r.ranked] == [("b", "runtime list position 0"), ("a", "runtime list position 1")]


def test_cheapest_says_why_a_class_has_no_cost_score() -> None:
    lone = rank_classes("Cheapest", ["only"], catalog(cls("only")))
    assert [(x.name, x.score, x.basis) for x in lone.ranked] == [("only", None, "only eligible class (no cost data)")]
    two = rank_classes("Cheapest", ["bare", "priced"], catalog(cls("bare"), cls("priced", cost={"perHour": "2"})))
    assert [(e.name, e.stage, e.reason) for e in two.excluded] == [("bare", Stage.NO_COST, "no cost data")]


def test_most_capable_scores_and_explains_figures_up_to_one() -> None:
    tiny = cls("tiny", memory="1Gi", bw="1", perf={"fp16Tflops": 1})
    r = rank_classes("MostCapable", ["tiny"], catalog(tiny))
    assert [x.score for x in r.ranked] == pytest.approx([1.0])
    assert [x.basis for x in r.ranked] == ["0.5*memory 1.000 + 0.3*bandwidth 1.000 + 0.2*tflops 1.000"]


def test_most_capable_without_any_memory_figure_counts_memory_zero() -> None:
    r = rank_classes("MostCapable", ["a", "b"], catalog(cls("a", memory=None), cls("b", memory=None)))
    assert [(x.name, x.score) for x in r.ranked] == [("a", 0.0), ("b", 0.0)]


@pytest.mark.parametrize(
    ("policy", "candidates", "excluded", "reason", "code"),
    [
        ("", ["a"], (), "no policy given (OME has no default): OME selects no accelerator class", NoClass.NO_POLICY),
        ("Fastest", ["a"], (), "unknown policy 'Fastest': OME selects no accelerator class", NoClass.UNKNOWN_POLICY),
        ("BestFit", [], (), "the runtime lists no accelerator classes", NoClass.NO_CANDIDATES),
        (
            "BestFit",
            ["a", "gone"],
            (ExcludedClass("gone", Stage.NOT_FOUND, "accelerator class gone not found at cluster scope"),),
            "the runtime lists accelerator classes that do not exist (gone): OME aborts the policy step",
            NoClass.CLASS_NOT_FOUND,
        ),
    ],
)
def test_a_ranking_that_stops_early_is_complete(
    policy: str, candidates: list[str], excluded: tuple[ExcludedClass, ...], reason: str, code: NoClass
) -> None:
    r = rank_classes(policy, candidates, catalog(cls("a")))
    assert r == ClassRanking(policy, (), excluded, None, reason, code)


def test_a_class_without_a_free_node_is_excluded_with_its_reason() -> None:
    r = rank_classes("FirstAvailable", ["a", "b"], catalog(cls("a"), cls("b")), None, lambda name: name == "b")
    assert r.policy == "FirstAvailable" and names(r) == ["b"]
    assert r.excluded == (ExcludedClass("a", Stage.UNAVAILABLE, "no node of this class can take the pod now"),)
    nothing = rank_classes("FirstAvailable", ["a"], catalog(cls("a")), None, lambda name: False)
    assert (nothing.none_code, nothing.ome_choice) == (NoClass.UNAVAILABLE, "a")


def test_ome_s_choice_ranks_under_the_constraints_too() -> None:
    classes = catalog(cls("a40", memory="48Gi"), cls("h100", memory="80Gi"), cls("b200", memory="192Gi"))
    free = ("h100", "b200").__contains__  # the tightest class is full
    r = rank_classes("BestFit", ["b200", "h100", "a40"], classes, Constraints(min_memory=48), free)
    assert (r.chosen, r.ome_choice) == ("h100", "a40")
