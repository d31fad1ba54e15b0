"""AcceleratorClass choice and ranking (ome-api.md §7.13), availability-aware."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.decide.class_policy import (
    ClassPolicy,
    Constraints,
    NoClass,
    Stage,
    best_fit_score,
    meets_requirements,
    parse_constraints,
    rank_classes,
    score_from_tflops,
)
from gpuextender.extender.model.ome.accelerator_class import AcceleratorClass, parse_accelerator_class
from gpuextender.extender.model.untrusted import InvalidInput
from tests.extender.ome_reference import ClassOutcome, ClassRequest, resolve_class_request, select_class


def cls(
    name: str,
    *,
    vendor: str = "nvidia",
    family: str = "hopper",
    memory: Any = "80Gi",
    cc: str | None = "9.0",
    features: list[str] | None = None,
    perf: dict[str, int] | None = None,
    bw: Any = None,
    cost: dict[str, Any] | None = None,
) -> AcceleratorClass:
    caps: dict[str, Any] = {}
    if memory is not None:
        caps["memoryGB"] = memory
    if cc is not None:
        caps["computeCapability"] = cc
    if features is not None:
        caps["features"] = features
    if perf is not None:
        caps["performance"] = perf
    if bw is not None:
        caps["memoryBandwidthGBps"] = bw
    spec: dict[str, Any] = {"vendor": vendor, "family": family, "discovery": {}, "capabilities": caps}
    if cost is not None:
        spec["cost"] = cost
    return parse_accelerator_class({"metadata": {"name": name}, "spec": spec})


def catalog(*classes: AcceleratorClass) -> dict[str, AcceleratorClass]:
    return {c.name: c for c in classes}


def names(ranking: Any) -> list[str]:
    return [r.name for r in ranking.ranked]


# --- the constraint filter -------------------------------------------------------------------

H100 = cls("h100", features=["FP8", "nvlink"])
A100 = cls("a100", family="ampere", cc="8.0", features=["nvlink"])
B200 = cls("b200", family="blackwell", memory="192Gi", cc="10.0")
NO_MEM = cls("no-mem", memory=None)
NO_CC = cls("no-cc", cc=None)
DECIMAL_80G = cls("g80", memory="80G")  # 80e9 bytes = 74.5 GiB -> 74 GB in OME's integer division
AMD = cls("mi250x", vendor="amd", family="cdna2", cc="gfx90a")


@pytest.mark.parametrize(
    ("candidate", "constraints", "reason"),
    [
        (H100, None, None),
        (H100, Constraints(), None),
        (H100, Constraints(excluded_classes=("h100",)), "explicitly excluded"),
        (H100, Constraints(excluded_classes=("H100",)), None),  # names are exact
        (A100, Constraints(architecture_families=("hopper",)), "architecture family ampere not in allowed list"),
        (H100, Constraints(architecture_families=("HOPPER",)), None),
        (H100, Constraints(architecture_families=("nvidia-hopper",)), None),
        (H100, Constraints(architecture_families=("NVIDIA-Hopper",)), None),
        (H100, Constraints(architecture_families=("amd-hopper",)), "architecture family hopper not in allowed list"),
        (A100, Constraints(architecture_families=("hopper", "ampere")), None),
        (H100, Constraints(min_memory=80), None),  # inclusive
        (H100, Constraints(min_memory=81), "memory 80GB < required 81GB"),
        (H100, Constraints(max_memory=80), None),
        (B200, Constraints(max_memory=80), "memory 192GB > max allowed 80GB"),
        (DECIMAL_80G, Constraints(min_memory=75), "memory 74GB < required 75GB"),
        (DECIMAL_80G, Constraints(min_memory=74), None),
        (NO_MEM, Constraints(min_memory=1), "missing memory specification for memory check"),
        (NO_MEM, Constraints(max_memory=100), "missing memory specification for memory check"),
        (H100, Constraints(required_features=("fp8",)), None),  # case-insensitive
        (H100, Constraints(required_features=("nvlink", "mig")), "missing required feature: mig"),
        (H100, Constraints(min_architecture_version="9.0"), None),
        (A100, Constraints(min_architecture_version="9.0"), "compute capability 8.0 < required 9.0"),
        (B200, Constraints(min_architecture_version="9.0"), None),  # numeric: OME's string compare rejects "10.0"
        (cls("cc86", cc="8.6"), Constraints(min_architecture_version="8.10"), "compute capability 8.6 < required 8.10"),
        (cls("cc9", cc="9"), Constraints(min_architecture_version="9.0"), None),
        (
            NO_CC,
            Constraints(min_architecture_version="8.0"),
            "missing compute capability for architecture version check",
        ),
        (
            AMD,
            Constraints(min_architecture_version="gfx942"),
            "compute capability gfx90a < required gfx942",
        ),  # string fallback
        (AMD, Constraints(min_architecture_version="gfx90a"), None),
        (H100, Constraints(min_compute_tflops=10_000), None),  # a score, never a filter
        # OME's order: exclusion is reported before a failing memory check.
        (H100, Constraints(excluded_classes=("h100",), min_memory=200), "explicitly excluded"),
        (
            A100,
            Constraints(architecture_families=("hopper",), min_memory=200),
            "architecture family ampere not in allowed list",
        ),
        (
            NO_MEM,
            Constraints(min_memory=1, required_features=("mig",)),
            "missing memory specification for memory check",
        ),
        (
            A100,
            Constraints(required_features=("fp8",), min_architecture_version="9.0"),
            "missing required feature: fp8",
        ),
    ],
)
def test_meets_requirements(candidate: AcceleratorClass, constraints: Constraints | None, reason: str | None) -> None:
    assert meets_requirements(candidate, constraints) == reason


def test_parse_constraints() -> None:
    raw = {
        "minMemory": 40,
        "maxMemory": 100,
        "minComputePerformanceTFLOPS": 500,
        "minArchitectureVersion": "8.0",
        "requiredFeatures": ["fp8"],
        "excludedClasses": ["t4"],
        "architectureFamilies": ["nvidia-hopper"],
        "preferredPrecisions": ["fp8", "fp16"],
    }
    expected = Constraints(40, 100, 500, "8.0", ("fp8",), ("t4",), ("nvidia-hopper",), ("fp8", "fp16"))
    assert parse_constraints(raw) == expected
    assert parse_constraints(None) is None
    assert parse_constraints({}) == Constraints()


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"minMemory": "80Gi"}, "c.minMemory"),
        ({"minMemory": True}, "c.minMemory"),
        ({"maxMemory": 1.5}, "c.maxMemory"),
        ({"minArchitectureVersion": 9.0}, "c.minArchitectureVersion"),
        ({"requiredFeatures": "fp8"}, "c.requiredFeatures"),
        ({"excludedClasses": ["a", 1]}, "c.excludedClasses[1]"),
        ("x", "c"),
    ],
)
def test_parse_constraints_errors_name_the_path(raw: Any, path: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_constraints(raw, "c")
    assert info.value.path == path


# --- policies --------------------------------------------------------------------------------


def test_first_available_keeps_runtime_order_and_dedupes() -> None:
    r = rank_classes("FirstAvailable", ["a100", "h100", "a100", "b200"], catalog(H100, A100, B200))
    assert names(r) == ["a100", "h100", "b200"]
    assert r.chosen == r.ome_choice == "a100"
    assert all(x.score is None for x in r.ranked)
    assert r.position("b200") == 2 and r.position("zzz") is None


def test_first_available_after_filter() -> None:
    constraints = Constraints(min_architecture_version="9.0")
    r = rank_classes(ClassPolicy.FIRST_AVAILABLE, ["a100", "h100"], catalog(H100, A100), constraints)
    assert names(r) == ["h100"]
    assert [(e.name, e.stage, e.reason) for e in r.excluded] == [
        ("a100", Stage.CONSTRAINTS, "compute capability 8.0 < required 9.0")
    ]


@pytest.mark.parametrize(
    ("t", "req", "score"), [(0, 0, 0.0), (0, 100, 0.0), (50, 0, 1.0), (50, 100, 0.5), (200, 100, 1.0), (50, -5, 1.0)]
)
def test_score_from_tflops(t: int, req: int, score: float) -> None:
    assert score_from_tflops(t, req) == score


PERF = {"fp32Tflops": 60, "fp16Tflops": 1000, "int8Tops": 2000}


@pytest.mark.parametrize(
    ("candidate", "constraints", "mem", "compute"),
    [
        (cls("x", perf=PERF), None, 1.0, 1.0),  # no constraints: no requirement, no crash
        (cls("x"), None, 1.0, 0.0),  # no performance
        (cls("x", memory="80Gi", perf=PERF), Constraints(min_memory=40), 0.5, 1.0),  # 2x over-provisioned
        (cls("x", memory="40Gi", perf=PERF), Constraints(min_memory=40), 1.0, 1.0),
        (cls("x", memory="80Gi", perf=PERF), Constraints(min_memory=100), 0.0, 1.0),  # below (if unfiltered)
        (cls("x", memory=None, perf=PERF), Constraints(min_memory=40), 0.0, 1.0),
        (cls("x", memory="80Gi"), Constraints(min_memory=0), 1.0, 0.0),  # 0 = no requirement (OME divides by 0)
        (cls("x", memory="80G", perf=PERF), Constraints(min_memory=40), 40 / (80e9 / 2**30), 1.0),  # float GiB here
        (cls("x", perf=PERF), Constraints(min_compute_tflops=4000), 1.0, 0.5),  # max figure 2000 / 4000
        (cls("x", perf=PERF), Constraints(min_compute_tflops=2000, preferred_precisions=("fp16",)), 1.0, 0.5),
        (cls("x", perf=PERF), Constraints(preferred_precisions=("fp8",)), 1.0, 1.0),  # fp8 reads int8Tops
        (cls("x", perf=PERF), Constraints(preferred_precisions=("int4", "fp16")), 1.0, 0.5),  # second: x0.5
        (cls("x", perf=PERF), Constraints(preferred_precisions=("int4", "bf16", "fp32")), 1.0, 0.25),  # third: x0.25
        (cls("x", perf={"fp16Tflops": 1000}), Constraints(preferred_precisions=("int4",)), 1.0, 0.5),  # fp16 fallback
        (cls("x", perf={"fp16Tflops": 1000}), Constraints(preferred_precisions=("int4", "bf16")), 1.0, 0.25),
        (
            cls("x", perf={"fp32Tflops": 60}),
            Constraints(preferred_precisions=("int4", "fp16")),
            1.0,
            0.0,
        ),  # fp16 listed: no fallback
        (cls("x", perf={}), Constraints(preferred_precisions=("fp16",)), 1.0, 0.0),
    ],
)
def test_best_fit_score(
    candidate: AcceleratorClass, constraints: Constraints | None, mem: float, compute: float
) -> None:
    total, m, c = best_fit_score(candidate, constraints)
    assert m == pytest.approx(mem)
    assert c == pytest.approx(compute)
    assert total == pytest.approx(0.7 * mem + 0.3 * compute)


def test_best_fit_prefers_the_tightest_memory() -> None:
    a40 = cls("a40", memory="48Gi", perf=PERF)
    h100 = cls("h100", memory="80Gi", perf=PERF)
    b200 = cls("b200", memory="192Gi", perf=PERF)
    r = rank_classes("BestFit", ["b200", "h100", "a40"], catalog(a40, h100, b200), Constraints(min_memory=48))
    assert names(r) == ["a40", "h100", "b200"]
    assert r.ranked[0].score == pytest.approx(1.0)
    assert r.ranked[1].basis == "0.70*memory 0.600 + 0.30*compute 1.000"


def test_best_fit_without_constraints_does_not_crash_and_prefers_performance_data() -> None:
    r = rank_classes("BestFit", ["no-perf", "perf"], catalog(cls("no-perf"), cls("perf", perf=PERF)), None)
    assert names(r) == ["perf", "no-perf"]
    assert [x.score for x in r.ranked] == [pytest.approx(1.0), pytest.approx(0.7)]


def test_best_fit_ties_keep_runtime_order() -> None:
    classes = catalog(cls("x", perf=PERF), cls("y", perf=PERF), cls("z", perf=PERF))
    assert names(rank_classes("BestFit", ["z", "x", "y"], classes, None)) == ["z", "x", "y"]
    assert names(rank_classes("BestFit", ["y", "z", "x"], classes, None)) == ["y", "z", "x"]


def cost(**kw: Any) -> dict[str, Any]:
    keys = {"per_hour": "perHour", "spot": "spotPerHour", "tokens": "perMillionTokens", "tier": "tier"}
    return {keys[k]: v for k, v in kw.items()}


@pytest.mark.parametrize(
    ("costs", "expected", "no_cost"),
    [
        # hourly: spot if set, else on-demand
        ({"a": cost(per_hour="5.12"), "b": cost(per_hour="2.21")}, ["b", "a"], []),
        ({"a": cost(per_hour="5.12", spot="1.50"), "b": cost(per_hour="2.21")}, ["a", "b"], []),
        # the hourly group wins over a smaller per-token number, which wins over a tier
        ({"t": cost(tier="low"), "k": cost(tokens="0.10"), "h": cost(per_hour="9")}, ["h", "k", "t"], []),
        ({"t": cost(tier="low"), "k": cost(tokens="0.30"), "k2": cost(tokens="0.20")}, ["k2", "k", "t"], []),
        # tiers: low=1, medium=2, high=3, anything else=2; ties keep runtime order
        (
            {"h": cost(tier="high"), "u": cost(tier="premium"), "m": cost(tier="Medium"), "l": cost(tier="LOW")},
            ["l", "u", "m", "h"],
            [],
        ),
        ({"a": cost(per_hour="2"), "b": cost(per_hour="2.0"), "c": cost(spot="2")}, ["a", "b", "c"], []),
        # no cost data: skipped
        ({"none": None, "a": cost(per_hour="3")}, ["a"], ["none"]),
        ({"empty": {}, "a": cost(per_hour="3")}, ["a"], ["empty"]),
        ({"x": None, "y": None}, [], ["x", "y"]),
        # a single eligible class is returned even without cost data (OME does so before comparing)
        ({"only": None}, ["only"], []),
    ],
)
def test_cheapest(costs: dict[str, dict[str, Any] | None], expected: list[str], no_cost: list[str]) -> None:
    classes = catalog(*(cls(n, cost=c) for n, c in costs.items()))
    r = rank_classes("Cheapest", list(costs), classes)
    assert names(r) == expected
    assert [e.name for e in r.excluded if e.stage == Stage.NO_COST] == no_cost
    assert r.ome_choice == (expected[0] if expected else None)
    if not expected:
        assert r.none_reason == "no eligible accelerator class has cost data"


def test_cheapest_scores_and_basis() -> None:
    classes = catalog(cls("a", cost=cost(spot="1.5", per_hour="4")), cls("b", cost=cost(tier="high")))
    r = rank_classes("Cheapest", ["a", "b"], classes)
    assert [(x.score, x.basis) for x in r.ranked] == [(1.5, "spot-hourly 1.5"), (3.0, "tier high=3")]


def test_most_capable_normalises_over_the_ranked_classes() -> None:
    a100 = cls("a100", memory="80Gi", bw="2039", perf={"fp16Tflops": 312, "int8Tops": 624})
    h100 = cls("h100", memory="80Gi", bw="3350", perf={"fp16Tflops": 989, "int8Tops": 1979})
    h200 = cls("h200", memory="141Gi", bw="4800", perf={"fp16Tflops": 989, "int8Tops": 1979})
    r = rank_classes("MostCapable", ["a100", "h100", "h200"], catalog(a100, h100, h200))
    assert names(r) == ["h200", "h100", "a100"]
    scores = {x.name: x.score for x in r.ranked}
    assert scores["h200"] == pytest.approx(1.0)
    assert scores["h100"] == pytest.approx(0.5 * 80 / 141 + 0.3 * 3350 / 4800 + 0.2 * 1.0)
    assert scores["a100"] == pytest.approx(0.5 * 80 / 141 + 0.3 * 2039 / 4800 + 0.2 * 312 / 989)


@pytest.mark.parametrize(
    ("precisions", "expected"),
    [
        ((), ["fp16-strong", "int8-strong"]),  # default precision fp16
        (("fp8",), ["int8-strong", "fp16-strong"]),  # fp8 reads int8Tops
        (("int8",), ["int8-strong", "fp16-strong"]),
        (("bf16", "fp16"), ["fp16-strong", "int8-strong"]),  # bf16 reads nothing: falls back to the next
        (("int4", "fp8"), ["int8-strong", "fp16-strong"]),
    ],
)
def test_most_capable_precision(precisions: tuple[str, ...], expected: list[str]) -> None:
    f = cls("fp16-strong", perf={"fp16Tflops": 1000, "int8Tops": 100})
    i = cls("int8-strong", perf={"fp16Tflops": 100, "int8Tops": 1000})
    constraints = Constraints(preferred_precisions=precisions)
    r = rank_classes("MostCapable", ["int8-strong", "fp16-strong"], catalog(f, i), constraints)
    assert names(r) == expected


def test_most_capable_missing_data_counts_zero_and_ties_keep_order() -> None:
    bare = cls("bare", memory=None, cc=None)
    mem_only = cls("mem-only", memory="40Gi")
    r = rank_classes("MostCapable", ["bare", "mem-only"], catalog(bare, mem_only))
    assert [(x.name, x.score) for x in r.ranked] == [("mem-only", pytest.approx(0.5)), ("bare", 0.0)]
    r = rank_classes("MostCapable", ["y", "x"], catalog(cls("x"), cls("y")))
    assert names(r) == ["y", "x"]


# --- availability ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "ome", "chosen"),
    [
        ("FirstAvailable", "a100", "h100"),  # OME issue #622: FirstAvailable picks a class with no free node
        ("BestFit", "a100", "h100"),
        ("Cheapest", "a100", "h100"),
        ("MostCapable", "a100", "h100"),
    ],
)
def test_every_policy_skips_classes_without_a_free_node(policy: str, ome: str, chosen: str) -> None:
    # a100 is the best (or first) by every policy, but none of its nodes can take the pod now.
    a100 = cls("a100", memory="80Gi", bw="4000", perf={"fp16Tflops": 2000}, cost=cost(per_hour="1"))
    h100 = cls("h100", memory="80Gi", bw="3000", perf={"fp16Tflops": 1000}, cost=cost(per_hour="2"))
    b200 = cls("b200", memory="80Gi", bw="2000", perf={"fp16Tflops": 500}, cost=cost(per_hour="3"))
    constraints = Constraints(min_memory=80, min_compute_tflops=2000)
    r = rank_classes(policy, ["a100", "h100", "b200"], catalog(a100, h100, b200), constraints, lambda n: n != "a100")
    assert r.ome_choice == ome
    assert r.chosen == chosen
    assert names(r) == ["h100", "b200"]
    assert [(e.name, e.stage) for e in r.excluded] == [("a100", Stage.UNAVAILABLE)]


def test_availability_is_asked_only_for_classes_that_pass_the_filter() -> None:
    asked: list[str] = []

    def can_place(name: str) -> bool:
        asked.append(name)
        return True

    constraints = Constraints(excluded_classes=("b200",))
    rank_classes("FirstAvailable", ["a100", "h100", "b200"], catalog(H100, A100, B200), constraints, can_place)
    assert asked == ["a100", "h100"]


def test_nothing_placeable() -> None:
    r = rank_classes("BestFit", ["h100", "a100"], catalog(H100, A100), None, lambda n: False)
    assert r.chosen is None
    assert r.ome_choice == "h100"
    assert r.none_reason == "no node of any eligible accelerator class can take the pod now"


def test_single_placeable_class_under_cheapest_without_cost() -> None:
    # Two survivors without cost: OME finds no class; one of them placeable: it is the only one.
    r = rank_classes("Cheapest", ["x", "y"], catalog(cls("x"), cls("y")), None, lambda n: n == "y")
    assert r.chosen == "y"
    assert r.ome_choice is None


def test_excluded_are_listed_in_runtime_order_with_their_stage() -> None:
    classes = catalog(
        cls("a", cost=None), cls("b", memory="40Gi", cost=cost(tier="low")), cls("d", cost=cost(per_hour="1")), cls("e")
    )
    r = rank_classes("Cheapest", ["a", "b", "d", "e"], classes, Constraints(min_memory=80), lambda n: n != "e")
    assert [(e.name, e.stage) for e in r.excluded] == [
        ("a", Stage.NO_COST),
        ("b", Stage.CONSTRAINTS),
        ("e", Stage.UNAVAILABLE),
    ]
    assert names(r) == ["d"]


@pytest.mark.parametrize(
    ("policy", "candidates", "constraints", "reason", "code"),
    [
        (
            "",
            ["h100"],
            None,
            "no policy given (OME has no default): OME selects no accelerator class",
            NoClass.NO_POLICY,
        ),
        (
            "Fastest",
            ["h100"],
            None,
            "unknown policy 'Fastest': OME selects no accelerator class",
            NoClass.UNKNOWN_POLICY,
        ),
        (
            "bestfit",
            ["h100"],
            None,
            "unknown policy 'bestfit': OME selects no accelerator class",
            NoClass.UNKNOWN_POLICY,
        ),  # enum is exact
        ("BestFit", [], None, "the runtime lists no accelerator classes", NoClass.NO_CANDIDATES),
        (
            "BestFit",
            ["x", "y"],
            None,
            "the runtime lists accelerator classes that do not exist (x, y): OME aborts the policy step",
            NoClass.CLASS_NOT_FOUND,
        ),
        (
            "BestFit",
            ["h100"],
            Constraints(min_memory=500),
            "no accelerator class meets the constraints",
            NoClass.NO_ELIGIBLE_CLASS,
        ),
        ("Cheapest", ["h100", "a100"], None, "no eligible accelerator class has cost data", NoClass.NO_COST_DATA),
    ],
)
def test_no_choice_reasons(
    policy: str, candidates: list[str], constraints: Constraints | None, reason: str, code: NoClass
) -> None:
    r = rank_classes(policy, candidates, catalog(H100, A100), constraints)
    assert r.chosen is None and r.ome_choice is None
    assert r.none_reason == reason
    assert r.none_code is code


@pytest.mark.parametrize(
    ("policy", "candidates"),
    [
        # pkg/acceleratorclassselector/policy_helpers.go: candidatesFromNames returns the fetcher's
        # AcceleratorNotFoundError (fetcher.go: GetAcceleratorClass), and selector.go:
        # getAcceleratorClassByPolicy returns nil on it: no class, wherever the missing one is listed.
        ("FirstAvailable", ["gone", "h100"]),
        ("FirstAvailable", ["h100", "gone"]),
        ("BestFit", ["h100", "gone", "gone"]),
        ("Cheapest", ["gone", "h100"]),
    ],
)
def test_missing_class_aborts_the_policy_step_as_in_ome(policy: str, candidates: list[str]) -> None:
    r = rank_classes(policy, candidates, catalog(H100), None, lambda n: True)
    assert r.chosen is None and r.ome_choice is None and r.ranked == ()
    assert r.none_code is NoClass.CLASS_NOT_FOUND
    assert [(e.name, e.stage, e.reason) for e in r.excluded] == [
        ("gone", Stage.NOT_FOUND, "accelerator class gone not found at cluster scope")
    ]


# --- the request from an InferenceService -----------------------------------------------------


def isvc(
    selector: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
    decoder: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"name": "llama"}}
    if selector is not None:
        spec["acceleratorSelector"] = selector
    if engine is not None:
        spec["engine"] = {"acceleratorOverride": engine}
    if decoder is not None:
        spec["decoder"] = {"acceleratorOverride": decoder}
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "s"}, "spec": spec}


SEL = "spec.acceleratorSelector"
ENG = "spec.engine.acceleratorOverride"
DEC = "spec.decoder.acceleratorOverride"


@pytest.mark.parametrize(
    ("obj", "component", "explicit", "policy"),
    [
        (
            isvc({"acceleratorClass": "h100"}, {"acceleratorClass": "a100"}),
            "engine",
            ("a100", f"{ENG}.acceleratorClass"),
            (None, None),
        ),
        (
            isvc({"acceleratorClass": "h100"}, {"acceleratorClass": "a100"}),
            "decoder",
            ("h100", f"{SEL}.acceleratorClass"),
            (None, None),
        ),
        (
            isvc({"acceleratorClass": "h100"}, decoder={"acceleratorClass": "b200"}),
            "decoder",
            ("b200", f"{DEC}.acceleratorClass"),
            (None, None),
        ),
        (
            isvc({"acceleratorClass": "h100"}, {"policy": "Cheapest"}),
            "engine",
            ("h100", f"{SEL}.acceleratorClass"),
            ("Cheapest", f"{ENG}.policy"),
        ),
        # an override that sets acceleratorClass: "" masks the isvc-level name, as in OME
        (
            isvc({"acceleratorClass": "h100", "policy": "BestFit"}, {"acceleratorClass": ""}),
            "engine",
            (None, None),
            ("BestFit", f"{SEL}.policy"),
        ),
        (isvc({"acceleratorClass": "", "policy": "BestFit"}), "engine", (None, None), ("BestFit", f"{SEL}.policy")),
        (
            isvc({"policy": "BestFit"}, {"policy": "MostCapable"}),
            "engine",
            (None, None),
            ("MostCapable", f"{ENG}.policy"),
        ),
        (isvc({"policy": "BestFit"}, {"policy": ""}), "engine", (None, None), ("BestFit", f"{SEL}.policy")),
        (isvc({"policy": "BestFit"}, {"policy": "MostCapable"}), "decoder", (None, None), ("BestFit", f"{SEL}.policy")),
        (isvc(None, None, {"policy": "Cheapest"}), "decoder", (None, None), ("Cheapest", f"{DEC}.policy")),
        (isvc(), "engine", (None, None), (None, None)),
        ({"spec": {}}, "decoder", (None, None), (None, None)),
        ({}, "engine", (None, None), (None, None)),
    ],
)
def test_resolve_hierarchy(obj: dict[str, Any], component: str, explicit: tuple, policy: tuple) -> None:
    req = resolve_class_request(obj, component)
    assert req.uses_accelerator
    assert (req.explicit_class, req.explicit_source) == explicit
    assert (req.policy, req.policy_source) == policy


def test_constraints_come_from_the_isvc_selector_only() -> None:
    obj = isvc({"constraints": {"minMemory": 40}}, {"policy": "BestFit", "constraints": {"minMemory": 160}})
    req = resolve_class_request(obj, "engine")
    assert req.constraints == Constraints(min_memory=40)
    assert req.constraints_source == f"{SEL}.constraints"
    assert req.ignored_constraints_source == f"{ENG}.constraints"
    override_only = isvc(None, {"policy": "BestFit", "constraints": {"minMemory": 160}})
    only_override = resolve_class_request(override_only, "engine")
    assert only_override.constraints is None and only_override.constraints_source is None
    assert only_override.ignored_constraints_source == f"{ENG}.constraints"
    assert resolve_class_request(obj, "decoder").ignored_constraints_source is None


def test_router_gets_no_accelerator() -> None:
    req = resolve_class_request(isvc({"acceleratorClass": "h100", "policy": "BestFit"}), "router")
    assert req == ClassRequest("router", uses_accelerator=False)
    sel = select_class(req, ["h100"], catalog(H100))
    assert sel.outcome == ClassOutcome.NO_ACCELERATOR and sel.class_name is None
    assert sel.reason == "the router gets no accelerator class"


@pytest.mark.parametrize(
    ("obj", "component", "path"),
    [
        ({"spec": []}, "engine", "spec"),
        ("isvc", "engine", "(InferenceService)"),
        ({"spec": {"acceleratorSelector": "h100"}}, "engine", SEL),
        ({"spec": {"engine": {"acceleratorOverride": ["x"]}}}, "engine", ENG),
        ({"spec": {"engine": "x"}}, "engine", "spec.engine"),
        (isvc({"acceleratorClass": 5}), "engine", f"{SEL}.acceleratorClass"),
        (isvc(None, {"acceleratorClass": 5}), "engine", f"{ENG}.acceleratorClass"),
        (isvc({"policy": 1}), "decoder", f"{SEL}.policy"),
        (isvc({"constraints": {"minMemory": "x"}}), "engine", f"{SEL}.constraints.minMemory"),
        (isvc(None, {"constraints": "x"}), "engine", f"{ENG}.constraints"),
    ],
)
def test_resolve_rejects_wrong_types(obj: dict[str, Any], component: str, path: str) -> None:
    with pytest.raises(InvalidInput) as info:
        resolve_class_request(obj, component)
    assert info.value.path == path


def test_resolve_unknown_component() -> None:
    with pytest.raises(ValueError, match="unknown component 'predictor'"):
        resolve_class_request(isvc(), "predictor")


# --- the whole decision ----------------------------------------------------------------------

CLASSES = catalog(H100, A100, B200)


@pytest.mark.parametrize(
    ("obj", "runtime", "outcome", "name", "reason"),
    [
        (
            isvc({"acceleratorClass": "h100", "policy": "FirstAvailable"}),
            ["a100", "h100"],
            ClassOutcome.EXPLICIT,
            "h100",
            f"accelerator class h100 named by {SEL}.acceleratorClass",
        ),
        (
            isvc({"acceleratorClass": "h100"}, {"acceleratorClass": "a100"}),
            ["a100", "h100"],
            ClassOutcome.EXPLICIT,
            "a100",
            f"accelerator class a100 named by {ENG}.acceleratorClass",
        ),
        (
            isvc({"acceleratorClass": "b200"}),
            ["a100", "h100"],
            ClassOutcome.INCOMPATIBLE,
            "b200",
            f"accelerator class b200 (from {SEL}.acceleratorClass) "
            "is not among the runtime's acceleratorClasses: [a100, h100]",
        ),
        # selector.go: GetAcceleratorClass returns (nil, "", nil) before reading the name when the
        # runtime has no acceleratorRequirements or an empty acceleratorClasses list.
        (
            isvc({"acceleratorClass": "h100"}),
            None,
            ClassOutcome.NO_ACCELERATOR,
            None,
            "the runtime lists no accelerator classes (not even the named h100)",
        ),
        (
            isvc(None, {"acceleratorClass": "h100"}),
            [],
            ClassOutcome.NO_ACCELERATOR,
            None,
            "the runtime lists no accelerator classes (not even the named h100)",
        ),
        # selector.go: getAcceleratorClassByPolicy, a listed class that does not exist: no class.
        (
            isvc({"policy": "BestFit"}),
            ["h100", "gone"],
            ClassOutcome.POLICY,
            None,
            f"policy BestFit (from {SEL}.policy) chose no class: the runtime lists accelerator classes that do not "
            "exist (gone): OME aborts the policy step",
        ),
        # selector.go: getAcceleratorClassByName, an override acceleratorClass "" is a non-nil pointer: it
        # masks the selector's name and the policy decides.
        (
            isvc({"acceleratorClass": "h100", "policy": "FirstAvailable"}, {"acceleratorClass": ""}),
            ["a100", "h100"],
            ClassOutcome.POLICY,
            "a100",
            f"policy FirstAvailable (from {SEL}.policy) ranks a100 first",
        ),
        (
            isvc({"acceleratorClass": "H100"}),
            ["h100"],
            ClassOutcome.INCOMPATIBLE,
            "H100",  # exact, case-sensitive
            f"accelerator class H100 (from {SEL}.acceleratorClass) "
            "is not among the runtime's acceleratorClasses: [h100]",
        ),
        (
            isvc({"acceleratorClass": "gone"}),
            ["gone", "h100"],
            ClassOutcome.NOT_FOUND,
            "gone",
            "accelerator class gone not found at cluster scope",
        ),
        (
            isvc({"policy": "FirstAvailable"}),
            None,
            ClassOutcome.NO_ACCELERATOR,
            None,
            "the runtime lists no accelerator classes",
        ),
        (
            isvc({"policy": "FirstAvailable"}),
            [],
            ClassOutcome.NO_ACCELERATOR,
            None,
            "the runtime lists no accelerator classes",
        ),
        (
            isvc({"constraints": {"minMemory": 40}}),
            ["h100"],
            ClassOutcome.NO_ACCELERATOR,
            None,
            "no accelerator class named and no policy: OME selects none (no default policy)",
        ),
        (
            isvc({"policy": "FirstAvailable"}),
            ["a100", "h100"],
            ClassOutcome.POLICY,
            "a100",
            f"policy FirstAvailable (from {SEL}.policy) ranks a100 first",
        ),
        (
            isvc({"policy": "FirstAvailable", "constraints": {"minArchitectureVersion": "9.0"}}),
            ["a100", "h100", "b200"],
            ClassOutcome.POLICY,
            "h100",
            f"policy FirstAvailable (from {SEL}.policy) ranks h100 first",
        ),
        (
            isvc({"policy": "FirstAvailable", "constraints": {"minMemory": 500}}),
            ["a100", "h100"],
            ClassOutcome.POLICY,
            None,
            f"policy FirstAvailable (from {SEL}.policy) chose no class: no accelerator class meets the constraints",
        ),
    ],
)
def test_select_class(
    obj: dict[str, Any], runtime: list[str] | None, outcome: ClassOutcome, name: str | None, reason: str
) -> None:
    sel = select_class(resolve_class_request(obj, "engine"), runtime, CLASSES)
    assert sel.outcome == outcome
    assert sel.class_name == name
    assert sel.reason == reason
    assert (sel.ranking is not None) == (outcome == ClassOutcome.POLICY)


def test_select_class_engine_and_decoder_differ_and_use_availability() -> None:
    obj = isvc({"policy": "MostCapable"}, decoder={"policy": "Cheapest"})
    classes = catalog(
        cls("a100", memory="80Gi", bw="2039", cost=cost(per_hour="2")),
        cls("h200", memory="141Gi", bw="4800", cost=cost(per_hour="6")),
    )
    runtime = ["a100", "h200"]
    assert select_class(resolve_class_request(obj, "engine"), runtime, classes).class_name == "h200"
    assert select_class(resolve_class_request(obj, "decoder"), runtime, classes).class_name == "a100"
    busy_h200 = select_class(resolve_class_request(obj, "engine"), runtime, classes, lambda n: n != "h200")
    assert busy_h200.class_name == "a100"
    assert busy_h200.ranking is not None and busy_h200.ranking.ome_choice == "h200"


def test_select_class_explicit_wins_even_without_a_free_node() -> None:
    req = resolve_class_request(isvc({"acceleratorClass": "h100"}), "engine")
    sel = select_class(req, ["h100"], CLASSES, lambda n: False)
    assert sel.outcome == ClassOutcome.EXPLICIT and sel.class_name == "h100"
