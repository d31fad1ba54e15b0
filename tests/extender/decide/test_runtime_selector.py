"""OME's runtime selection (ome-api.md §7.2-§7.12), table-driven over parsed objects."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.decide.runtime_selector import (
    REASON_ACCELERATOR,
    REASON_DISABLED,
    WARNING_NO_AUTO_SELECT,
    WARNING_NO_MODEL_SIZE,
    ModelValidationError,
    NoRuntimeFoundError,
    RuntimeCompatibilityError,
    RuntimeDisabledError,
    RuntimeNotFoundError,
    RuntimeOutcome,
    compatibility_report,
    find_base_model,
    find_runtime,
    format_entry_mismatches,
    get_runtime,
    model_format_label,
    required_accelerator_classes,
    validate_runtime,
)
from gpuextender.extender.model.ome.ome_objects import (
    BaseModel,
    InferenceService,
    ServingRuntime,
    parse_base_model,
    parse_inference_service,
    parse_serving_runtime,
)
from tests.extender.ome_reference import (
    evaluate_runtime,
    explain_runtimes,
    format_entry_matches,
    get_supported_model_format,
    list_compatible_runtimes,
    runtime_score,
    select_runtime,
)

NS = "team-a"


# --- builders: plain Kubernetes objects, parsed like the extender parses them ----------------


def entry(
    fmt: str | None = "safetensors",
    version: str | None = None,
    *,
    op: str | None = None,
    weight: int | None = None,
    fw: str | None = None,
    fw_version: str | None = None,
    fw_op: str | None = None,
    fw_weight: int | None = None,
    arch: str | None = None,
    quant: str | None = None,
    auto: bool | None = True,
    priority: int | None = None,
    pipeline: dict[str, Any] | None = None,
) -> dict[str, Any]:
    def spec(name: str, v: str | None, o: str | None, w: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name}
        for key, value in (("version", v), ("operator", o), ("weight", w)):
            if value is not None:
                out[key] = value
        return out

    out: dict[str, Any] = {}
    if fmt is not None:
        out["modelFormat"] = spec(fmt, version, op, weight)
    if fw is not None:
        out["modelFramework"] = spec(fw, fw_version, fw_op, fw_weight)
    for key, value in (
        ("modelArchitecture", arch),
        ("quantization", quant),
        ("autoSelect", auto),
        ("priority", priority),
        ("diffusionPipeline", pipeline),
    ):
        if value is not None:
            out[key] = value
    return out


def runtime(
    name: str,
    *entries: dict[str, Any],
    ns: str = NS,
    cluster: bool = False,
    size: tuple[str | None, str | None] | None = None,
    disabled: bool | None = None,
    classes: list[str] | None = None,
    created: str | None = None,
    crd_defaults: bool = True,
) -> ServingRuntime:
    meta: dict[str, Any] = {"name": name} if cluster else {"name": name, "namespace": ns}
    if created is not None:
        meta["creationTimestamp"] = created
    spec: dict[str, Any] = {"supportedModelFormats": list(entries)}
    if size is not None:
        spec["modelSizeRange"] = {k: v for k, v in zip(("min", "max"), size, strict=False) if v is not None}
    if disabled is not None:
        spec["disabled"] = disabled
    if classes is not None:
        spec["acceleratorRequirements"] = {"acceleratorClasses": classes}
    kind = "ClusterServingRuntime" if cluster else "ServingRuntime"
    return parse_serving_runtime({"kind": kind, "metadata": meta, "spec": spec}, crd_defaults=crd_defaults)


def model(
    fmt: str = "safetensors",
    version: str | None = None,
    *,
    fw: str | None = None,
    fw_version: str | None = None,
    arch: str | None = None,
    quant: str | None = None,
    size: str | None = None,
    pipeline: dict[str, Any] | None = None,
    name: str = "llama",
    ns: str | None = None,
) -> BaseModel:
    spec: dict[str, Any] = {"modelFormat": {"name": fmt, **({"version": version} if version else {})}}
    if fw is not None:
        spec["modelFramework"] = {"name": fw, **({"version": fw_version} if fw_version else {})}
    for key, value in (
        ("modelArchitecture", arch),
        ("quantization", quant),
        ("modelParameterSize", size),
        ("diffusionPipeline", pipeline),
    ):
        if value is not None:
            spec[key] = value
    meta = {"name": name} if ns is None else {"name": name, "namespace": ns}
    return parse_base_model({"kind": "ClusterBaseModel" if ns is None else "BaseModel", "metadata": meta, "spec": spec})


def isvc(
    *,
    annotation: str | None = None,
    selector: str | None = None,
    engine: str | None = None,
    decoder: str | None = None,
    ns: str = NS,
) -> InferenceService:
    meta: dict[str, Any] = {"name": "chat", "namespace": ns}
    if annotation is not None:
        meta["annotations"] = {"ome.io/accelerator-class": annotation}
    spec: dict[str, Any] = {}
    if selector is not None:
        spec["acceleratorSelector"] = {"acceleratorClass": selector}
    for component, cls in (("engine", engine), ("decoder", decoder)):
        if cls is not None:
            spec[component] = {"acceleratorOverride": {"acceleratorClass": cls}}
    return parse_inference_service({"kind": "InferenceService", "metadata": meta, "spec": spec})


def names(matches: list[Any]) -> list[str]:
    return [m.runtime.name for m in matches]


# --- §7.5 format-entry rules, in OME's order -----------------------------------------------------

FLUX = {"className": "FluxPipeline"}


@pytest.mark.parametrize(
    ("the_model", "the_entry", "reasons"),
    [
        # 1. diffusion pipeline
        (model(pipeline=FLUX), entry(), ()),  # runtime asks for none: pass
        (model(), entry(pipeline=FLUX), ("diffusion pipeline required by runtime but not specified in model",)),
        (model(pipeline={}), entry(pipeline=FLUX), ("pipeline class mismatch (model=<nil>, runtime=FluxPipeline)",)),
        (
            model(pipeline={"className": "SDXL"}),
            entry(pipeline=FLUX),
            ("pipeline class mismatch (model=SDXL, runtime=FluxPipeline)",),
        ),
        (model(pipeline={"className": "X", "vae": {"library": "d"}}), entry(pipeline={"vae": {}}), ()),  # empty = any
        (
            model(pipeline={}),
            entry(pipeline={"vae": {"library": "diffusers"}}),
            ("component vae required by runtime but not specified in model",),
        ),
        (
            model(pipeline={"vae": {"library": "other"}}),
            entry(pipeline={"vae": {"library": "diffusers"}}),
            ("vae library mismatch (model=other, runtime=diffusers)",),
        ),
        (
            model(pipeline={"scheduler": {"type": "A"}, "vae": {"library": "x"}}),
            entry(pipeline={"scheduler": {"type": "B"}, "vae": {"library": "y"}}),
            ("scheduler type mismatch (model=A, runtime=B)",),  # scheduler is checked before vae
        ),
        (
            model(pipeline={"textEncoder": {"library": "t", "type": "T5"}}),
            entry(pipeline={"textEncoder": {"library": "t", "type": "T5"}}),
            (),
        ),
        (
            model(pipeline={"className": "F"}),
            entry(pipeline={"additionalComponents": {"a": {}}}),
            ("diffusion pipeline missing required additional components",),
        ),
        (
            model(pipeline={"additionalComponents": {"b": {}}}),
            entry(pipeline={"additionalComponents": {"a": {}}}),
            ("diffusion component a missing in model",),
        ),
        (
            model(pipeline={"additionalComponents": {"a": {"library": "x"}}}),
            entry(pipeline={"additionalComponents": {"a": {"library": "y"}}}),
            ("a library mismatch (model=x, runtime=y)",),
        ),
        # 2. architecture: presence-symmetric, exact
        (model(arch="LlamaForCausalLM"), entry(arch="LlamaForCausalLM"), ()),
        (
            model(arch="LlamaForCausalLM"),
            entry(arch="MistralForCausalLM"),
            ("architecture mismatch (model=LlamaForCausalLM, runtime=MistralForCausalLM)",),
        ),
        (
            model(arch="LlamaForCausalLM"),
            entry(),
            ("model has architecture LlamaForCausalLM but runtime has no architecture requirement",),
        ),
        (model(), entry(arch="LlamaForCausalLM"), ("model has no architecture but runtime requires LlamaForCausalLM",)),
        # 3. quantization: same rule
        (model(quant="fp8"), entry(quant="fp8"), ()),
        (model(quant="fp8"), entry(quant="int4"), ("quantization mismatch (model=fp8, runtime=int4)",)),
        (model(quant="fp8"), entry(), ("model has quantization fp8 but runtime has no quantization requirement",)),
        (model(), entry(quant="fp8"), ("model has no quantization but runtime requires fp8",)),
        # 4. format: required on the entry, name exact, versions presence-symmetric
        (model(fw="transformers"), entry(fmt=None, fw="transformers"), ("runtime format entry has no modelFormat",)),
        (model(), entry("pytorch"), ("format name mismatch (model=safetensors, runtime=pytorch)",)),
        (model(), entry("SafeTensors"), ("format name mismatch (model=safetensors, runtime=SafeTensors)",)),
        (model(version="1.0.0"), entry(version="1"), ()),
        (model(version="1.0.0"), entry(version="2.0.0"), ("format version mismatch (model=1.0.0, runtime=2.0.0)",)),
        (model(version="1.0.0"), entry(version="2.0.0", op="GreaterThan"), ()),
        (model(), entry(version="1.0.0"), ("model has no format version but runtime requires 1.0.0",)),
        (model(version="1.0.0"), entry(), ("model has format version but runtime has no version requirement",)),
        # 5. framework: both absent passes, one side only fails, then name and version
        (model(fw="transformers", fw_version="4.51.3"), entry(fw="transformers", fw_version="4.51.3"), ()),
        (model(), entry(fw="transformers"), ("model has no framework but runtime requires transformers",)),
        (
            model(fw="transformers"),
            entry(),
            ("model has framework transformers but runtime has no framework requirement",),
        ),
        (
            model(fw="transformers"),
            entry(fw="diffusers"),
            ("framework name mismatch (model=transformers, runtime=diffusers)",),
        ),
        (
            model(fw="transformers", fw_version="4.50.0"),
            entry(fw="transformers", fw_version="4.51.0"),
            ("framework version mismatch (model=4.50.0, runtime=4.51.0)",),
        ),
        (
            model(fw="transformers", fw_version="4.50.0"),
            entry(fw="transformers", fw_version="4.51.0", fw_op="GreaterThanOrEqual"),
            (),
        ),
        (
            model(fw="transformers"),
            entry(fw="transformers", fw_version="4.51.0"),
            ("model has no framework version but runtime requires 4.51.0",),
        ),
        (
            model(fw="transformers", fw_version="4.51.0"),
            entry(fw="transformers"),
            ("model has framework version but runtime has no version requirement",),
        ),
        # every rule failing: the reasons come in rule order
        (
            model(arch="A", quant="fp8", fw="transformers"),
            entry("pytorch", arch="B", quant="int4", fw="vllm", pipeline=FLUX),
            (
                "diffusion pipeline required by runtime but not specified in model",
                "architecture mismatch (model=A, runtime=B)",
                "quantization mismatch (model=fp8, runtime=int4)",
                "format name mismatch (model=safetensors, runtime=pytorch)",
                "framework name mismatch (model=transformers, runtime=vllm)",
            ),
        ),
    ],
)
def test_format_entry_rules(the_model: BaseModel, the_entry: dict[str, Any], reasons: tuple[str, ...]) -> None:
    parsed = runtime("rt", the_entry).supported_model_formats[0]
    assert format_entry_mismatches(the_model, parsed) == reasons
    assert format_entry_matches(the_model, parsed) is (reasons == ())


def test_first_matching_entry_wins_and_unmatched_reasons_are_joined() -> None:
    rt = runtime("rt", entry("pytorch"), entry(arch="A", quant="int4"), entry(priority=3), entry(priority=5))
    report = compatibility_report(rt, model(arch="A", quant="fp8"))
    assert report.is_compatible is False
    assert report.reason == (
        "model format 'mt:safetensors:A:fp8' not in supported formats: "
        "model has architecture A but runtime has no architecture requirement, "
        "model has quantization fp8 but runtime has no quantization requirement, "
        "format name mismatch (model=safetensors, runtime=pytorch); "
        "quantization mismatch (model=fp8, runtime=int4); "
        "model has architecture A but runtime has no architecture requirement, "
        "model has quantization fp8 but runtime has no quantization requirement; "
        "model has architecture A but runtime has no architecture requirement, "
        "model has quantization fp8 but runtime has no quantization requirement"
    )
    ok = compatibility_report(rt, model())
    assert ok.is_compatible and ok.matched_format is rt.supported_model_formats[2]
    assert ok.match_details is not None and ok.match_details.priority == 3


def test_no_supported_formats() -> None:
    report = compatibility_report(runtime("rt"), model())
    assert report.incompatibility_reasons == (
        "model format 'mt:safetensors' not in supported formats: no supported formats defined",
    )


@pytest.mark.parametrize(
    ("the_model", "label"),
    [
        (model(), "mt:safetensors"),
        (
            model("pytorch", "1.0.0", arch="transformer", quant="fp16", fw="transformers", fw_version="4.0.0"),
            "mt:pytorch:1.0.0:transformer:fp16:transformers:4.0.0",
        ),
        (model(fw="transformers"), "mt:safetensors:transformers"),
        (model(quant="fp8"), "mt:safetensors:fp8"),
    ],
)
def test_model_format_label(the_model: BaseModel, label: str) -> None:
    assert model_format_label(the_model) == label


# --- §7.4 accelerator classes ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("the_isvc", "explicit", "classes", "missing"),
    [
        (None, None, None, ()),
        (None, None, ["h100"], ()),  # no requirement: a runtime listing classes is fine
        (isvc(), None, None, ()),
        (isvc(annotation="h100"), None, ["h100", "a100"], ()),
        (isvc(annotation="h100"), None, None, ("h100",)),  # required, runtime lists none
        (isvc(annotation="h100"), None, [], ("h100",)),
        (isvc(annotation="h100", selector="a100"), None, ["h100"], ("a100",)),  # every one must be listed
        (isvc(annotation="h100", selector="a100"), None, ["a100", "h100"], ()),
        (isvc(engine="h200"), None, ["h100"], ("h200",)),
        (isvc(decoder="l40s"), None, ["l40s"], ()),
        (isvc(engine="h100", decoder="a100"), None, ["h100"], ("a100",)),
        (isvc(annotation="H100"), None, ["h100"], ("H100",)),  # case-sensitive
        (isvc(annotation=""), None, ["h100"], ("",)),  # an empty value still counts
        (None, "h100", ["h100"], ()),  # an explicit class, without an InferenceService
        (None, "h100", ["a100"], ("h100",)),
        (isvc(selector="a100"), "h100", ["a100"], ("h100",)),  # the union of both
    ],
)
def test_accelerator_containment(
    the_isvc: InferenceService | None, explicit: str | None, classes: list[str] | None, missing: tuple[str, ...]
) -> None:
    rt = runtime("rt", entry(), classes=classes)
    report = compatibility_report(rt, model(), the_isvc, accelerator_class=explicit)
    assert report.is_compatible is (missing == ())
    assert report.missing_accelerator_classes == missing
    if missing:
        assert report.incompatibility_reasons == (REASON_ACCELERATOR,)


def test_required_classes_are_the_sorted_union() -> None:
    the_isvc = isvc(annotation="h100", selector="a100", engine="h100", decoder="l40s")
    assert required_accelerator_classes(the_isvc, "b200") == ("a100", "b200", "h100", "l40s")
    assert required_accelerator_classes(None) == ()


# --- §7.3 disabled and size -------------------------------------------------------------------


def test_disabled_is_checked_first() -> None:
    rt = runtime("rt", entry("pytorch"), disabled=True, classes=[])
    report = compatibility_report(rt, model(), isvc(annotation="h100"))
    assert report.incompatibility_reasons == (REASON_DISABLED,)
    assert compatibility_report(runtime("rt", entry(), disabled=False), model()).is_compatible


@pytest.mark.parametrize(
    ("size_range", "size", "reason"),
    [
        (("1B", "70B"), "7B", None),
        (("1B", "70B"), "1B", None),  # bounds are inclusive
        (("1B", "70B"), "70B", None),
        (("1B", "70B"), "100B", "model size 100B is outside supported range [1B, 70B]"),
        (("8B", "70B"), "7B", "model size 7B is outside supported range [8B, 70B]"),
        (None, "700B", None),  # no range: any size
        (("1B", "70B"), None, None),  # no model size: no check (a warning)
        # one-sided ranges (OME panics): the missing bound is open
        (("10B", None), "7B", "model size 7B is outside supported range [10B, unbounded]"),
        (("10B", None), "100B", None),
        ((None, "10B"), "7B", None),
        ((None, "10B"), "70B", "model size 70B is outside supported range [unbounded, 10B]"),
        ((None, None), "7B", None),
        # unparseable sizes are 0
        (("1B", "70B"), "7b", "model size 7b is outside supported range [1B, 70B]"),
        (("1B", "70b"), "7B", "model size 7B is outside supported range [1B, 70b]"),
        (("0", "1T"), "500K", None),
        (("500M", "1T"), "1.5B", None),
    ],
)
def test_size_range(size_range: tuple[str | None, str | None] | None, size: str | None, reason: str | None) -> None:
    report = compatibility_report(runtime("rt", entry(), size=size_range), model(size=size))
    assert report.reason == reason
    assert report.is_compatible is (reason is None)
    assert report.match_details is not None
    assert report.match_details.size_match is (reason is None)


def test_compatible_warnings() -> None:
    report = compatibility_report(runtime("rt", entry(auto=None), size=("1B", "70B")), model())
    assert report.is_compatible
    assert report.warnings == (WARNING_NO_AUTO_SELECT, WARNING_NO_MODEL_SIZE)
    assert compatibility_report(runtime("rt", entry()), model()).warnings == ()


# --- §7.8 scoring -------------------------------------------------------------------------------

FW: dict[str, Any] = {"fw": "transformers", "fw_version": "4.51.0"}


@pytest.mark.parametrize(
    ("entries", "the_model", "crd_defaults", "score"),
    [
        ([entry()], model(), True, 1),  # CRD default weight 1, priority 1
        ([entry(**FW)], model(**FW), True, 2),
        ([entry(priority=3, **FW)], model(**FW), True, 6),
        ([entry(**FW)], model(**FW), False, 15),  # Go zero weights: config defaults 10 + 5
        ([entry(priority=2, **FW)], model(**FW), False, 30),
        ([entry(weight=0, fw_weight=0, **FW)], model(**FW), True, 15),  # explicit 0 also falls back
        ([entry(weight=7, fw_weight=2, priority=2, **FW)], model(**FW), True, 18),
        ([entry("pytorch")], model(), True, 0),
        ([entry(version="2.0.0")], model(version="1.0.0"), True, 0),
        ([entry(version="2.0.0", op="GreaterThan")], model(version="1.0.0"), True, 1),
        ([entry(version="2.0.0")], model(), True, 1),  # one version missing still scores
        ([entry(fw="vllm")], model(fw="transformers"), True, 0),
        ([entry(fw="transformers", fw_version="5.0.0")], model(**FW), True, 0),
        ([entry(fw="transformers")], model(), True, 0),  # framework on one side only
        ([entry()], model(fw="transformers"), True, 0),
        ([entry(fmt=None, fw="transformers")], model(fw="transformers"), True, 1),  # framework only
        ([entry(fmt=None, fw="transformers")], model(fw="transformers"), False, 5),
        ([entry(priority=1, **FW), entry(priority=5, **FW)], model(**FW), True, 10),  # the best entry
        ([entry(priority=5, auto=False), entry(priority=1)], model(), True, 1),  # autoSelect false skipped
        ([entry(priority=4, auto=None)], model(), True, 4),  # autoSelect null counts
        ([entry(arch="Mistral", quant="int4")], model(arch="Llama"), True, 1),  # ignores arch/quant
        ([entry(priority=0)], model(), True, 0),
    ],
)
def test_runtime_score(entries: list[dict[str, Any]], the_model: BaseModel, crd_defaults: bool, score: int) -> None:
    assert runtime_score(runtime("rt", *entries, crd_defaults=crd_defaults), the_model) == score


def test_match_details_weight_counts_explicit_weights_only() -> None:
    rt = runtime("rt", entry(priority=2, **FW), crd_defaults=False)
    details = compatibility_report(rt, model(**FW)).match_details
    assert details is not None
    assert (details.format_match, details.framework_match, details.weight, details.priority) == (True, True, 0, 2)
    assert details.auto_select_enabled and details.architecture_match and details.quantization_match
    assert evaluate_runtime(rt, model(**FW)).score == 30


# --- §7.9 candidates -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "outcome", "score"),
    [
        ([entry()], RuntimeOutcome.CANDIDATE, 1),
        ([entry(auto=None)], RuntimeOutcome.NO_AUTO_SELECT, 1),  # compatible and scores, but not auto-selectable
        ([entry(auto=False)], RuntimeOutcome.NO_AUTO_SELECT, 0),
        # the scorer counts the null entry, the filter needs a true one anywhere
        ([entry(auto=None, priority=3), entry("pytorch", auto=True)], RuntimeOutcome.CANDIDATE, 3),
        ([entry(auto=False), entry("pytorch", auto=True)], RuntimeOutcome.ZERO_SCORE, 0),
        ([entry("pytorch")], RuntimeOutcome.INCOMPATIBLE, 0),
    ],
)
def test_candidate_filter(entries: list[dict[str, Any]], outcome: RuntimeOutcome, score: int) -> None:
    evaluation = evaluate_runtime(runtime("rt", *entries), model())
    assert (evaluation.outcome, evaluation.score) == (outcome, score)
    listed = list_compatible_runtimes(model(), [runtime("rt", *entries)], namespace=NS)
    assert names(listed) == (["rt"] if outcome is RuntimeOutcome.CANDIDATE else [])


def test_explanations() -> None:
    rts = [
        runtime("a", entry()),
        runtime("b", entry(auto=None)),
        runtime("c", entry(auto=False), entry("pytorch")),
        runtime("d", entry("pytorch")),
    ]
    assert [e.explanation for e in explain_runtimes(model(), rts, namespace=NS)] == [
        "candidate with score 1",
        WARNING_NO_AUTO_SELECT,
        "no auto-selectable format entry scores above 0",
        "model format 'mt:safetensors' not in supported formats: "
        "format name mismatch (model=safetensors, runtime=pytorch)",
    ]


# --- §7.10 ordering, §7.2 pre-order and scope --------------------------------------------------------


def test_namespaced_always_before_cluster() -> None:
    # OME's TestGetSupportingRuntimes: namespaced scores 20 and 5 ahead of a cluster score 7.
    rts = [
        runtime("c7", entry(weight=7), cluster=True),
        runtime("n5", entry(weight=5)),
        runtime("n20", entry(weight=10, priority=2)),
    ]
    matches = list_compatible_runtimes(model(), rts, namespace=NS)
    assert [(m.name, m.score, m.is_cluster) for m in matches] == [("n20", 20, False), ("n5", 5, False), ("c7", 7, True)]
    assert select_runtime(model(), rts, namespace=NS).name == "n20"


@pytest.mark.parametrize(
    ("the_model", "order"),
    [
        (model(size="7B"), ["c-open", "b-narrow", "d-min", "e-max", "a-wide"]),
        (model(), ["a-wide", "b-narrow", "c-open", "d-min", "e-max"]),  # no model size: by name
    ],
)
def test_size_distance_then_name(the_model: BaseModel, order: list[str]) -> None:
    rts = [
        runtime("a-wide", entry(), size=("1B", "70B")),  # 6B + 63B
        runtime("b-narrow", entry(), size=("5B", "10B")),  # 2B + 3B
        runtime("c-open", entry()),  # no range: 0, beats every range
        runtime("d-min", entry(), size=("1B", None)),  # one-sided: only the set bound, 6B
        runtime("e-max", entry(), size=(None, "13B")),  # 6B, ties with d-min: name decides
    ]
    assert names(list_compatible_runtimes(the_model, rts, namespace=NS)) == order


def test_score_before_size_and_name_before_creation_time() -> None:
    rts = [
        runtime("a", entry(), size=("1B", "70B"), created="2025-01-01T00:00:00Z"),
        runtime("b", entry(priority=2), size=("1B", "700B"), created="2024-01-01T00:00:00Z"),
        runtime("c", entry(), created="2026-01-01T00:00:00Z"),
        runtime("d", entry()),
    ]
    matches = list_compatible_runtimes(model(size="7B"), rts, namespace=NS)
    assert names(matches) == ["b", "c", "d", "a"]  # score; then size; then name, never the age
    # ...but the age orders the explanations (and NoRuntimeFoundError's list): newest first, unset last.
    assert [e.runtime.name for e in explain_runtimes(model(size="7B"), rts, namespace=NS)] == ["c", "a", "b", "d"]


def test_scope_is_the_namespace_plus_cluster_runtimes() -> None:
    rts = [
        runtime("elsewhere", entry(priority=9), ns="team-b"),
        runtime("cluster", entry(), cluster=True),
        runtime("mine", entry()),
    ]
    assert names(list_compatible_runtimes(model(), rts, namespace=NS)) == ["mine", "cluster"]
    assert names(list_compatible_runtimes(model(), rts, isvc(ns="team-b"))) == ["elsewhere", "cluster"]
    # an explicit namespace wins over the InferenceService's
    assert names(list_compatible_runtimes(model(), rts, isvc(ns="team-b"), namespace=NS)) == ["mine", "cluster"]
    with pytest.raises(ValueError, match="needs a namespace"):
        list_compatible_runtimes(model(), rts)


def test_accelerator_class_narrows_selection() -> None:
    rts = [runtime("a100-rt", entry(priority=5), classes=["a100"]), runtime("h100-rt", entry(), classes=["h100"])]
    assert select_runtime(model(), rts, namespace=NS).name == "a100-rt"
    assert select_runtime(model(), rts, isvc(annotation="h100")).name == "h100-rt"
    assert select_runtime(model(), rts, namespace=NS, accelerator_class="h100").name == "h100-rt"


# --- §7.12 errors -----------------------------------------------------------------------------------

MODEL_NIL = "invalid model specification: model: model specification is nil"
NO_FORMAT_NAME = "invalid model specification: modelFormat.name: model format name is required"


@pytest.mark.parametrize(
    "call",
    [
        lambda m: select_runtime(m, [], namespace=NS),
        lambda m: list_compatible_runtimes(m, [], namespace=NS),
        lambda m: explain_runtimes(m, [], namespace=NS),
        lambda m: validate_runtime("rt", m, [runtime("rt", entry())], namespace=NS),
    ],
)
def test_model_validation_errors(call: Any) -> None:
    with pytest.raises(ModelValidationError) as caught:
        call(None)
    assert (str(caught.value), caught.value.field) == (MODEL_NIL, "model")
    with pytest.raises(ModelValidationError) as caught:
        call(model(fmt=""))
    assert (str(caught.value), caught.value.field) == (NO_FORMAT_NAME, "modelFormat.name")


def test_no_runtime_found_lists_incompatible_runtimes_in_pre_order() -> None:
    rts = [
        runtime("a-acc", entry(), classes=["a100"]),
        runtime("b-off", entry(), disabled=True, created="2025-01-01T00:00:00Z"),
        runtime("c-fmt", entry("pytorch"), cluster=True, classes=["h100"]),
        runtime("d-noauto", entry(auto=None), cluster=True, classes=["h100"]),  # compatible: not listed
        runtime("e-other-ns", entry("pytorch"), ns="team-b"),  # out of scope: not counted
    ]
    with pytest.raises(NoRuntimeFoundError) as caught:
        select_runtime(model(), rts, isvc(annotation="h100"))
    err = caught.value
    assert str(err) == (
        "no runtime found to support model safetensors with format safetensors in namespace team-a. "
        "Checked 4 runtimes (2 namespace-scoped, 2 cluster-scoped). "
        "Excluded runtimes: b-off (runtime is disabled); "
        "a-acc (runtime does not support the required accelerator class); "
        "c-fmt (model format 'mt:safetensors' not in supported formats: "
        "format name mismatch (model=safetensors, runtime=pytorch))"
    )
    assert list(err.excluded_runtimes) == ["b-off", "a-acc", "c-fmt"]
    assert (err.total_runtimes, err.namespaced_runtimes, err.cluster_runtimes) == (4, 2, 2)
    assert (err.model_name, err.model_format, err.namespace) == ("safetensors", "safetensors", NS)


def test_no_runtime_found_without_runtimes() -> None:
    with pytest.raises(NoRuntimeFoundError) as caught:
        select_runtime(model(), [], namespace=NS)
    assert (
        str(caught.value) == "no runtime found to support model safetensors with format safetensors in namespace team-a"
    )


def test_no_runtime_found_only_dropped_for_auto_select() -> None:
    with pytest.raises(NoRuntimeFoundError) as caught:
        select_runtime(model(), [runtime("rt", entry(auto=None))], namespace=NS)
    assert str(caught.value) == (
        "no runtime found to support model safetensors with format safetensors in namespace team-a. "
        "Checked 1 runtimes (1 namespace-scoped, 0 cluster-scoped)"
    )


def test_excluded_namesake_is_replaced_like_a_go_map() -> None:
    rts = [runtime("x", entry(), disabled=True), runtime("x", entry("pytorch"), cluster=True)]
    with pytest.raises(NoRuntimeFoundError) as caught:
        select_runtime(model(), rts, namespace=NS)
    assert caught.value.excluded_runtimes == {
        "x": "model format 'mt:safetensors' not in supported formats: "
        "format name mismatch (model=safetensors, runtime=pytorch)"
    }


@pytest.mark.parametrize(
    ("rts", "the_isvc", "error", "message"),
    [
        ([], isvc(), RuntimeNotFoundError, "runtime vllm not found in namespace team-a or at cluster scope"),
        (
            [runtime("vllm", entry(), ns="team-b")],
            isvc(),
            RuntimeNotFoundError,
            "runtime vllm not found in namespace team-a or at cluster scope",
        ),
        (
            [runtime("vllm", entry(), disabled=True)],
            isvc(),
            RuntimeDisabledError,
            "namespace-scoped runtime vllm is disabled",
        ),
        (
            [runtime("vllm", entry("pytorch"), disabled=True, cluster=True)],
            isvc(),
            RuntimeDisabledError,
            "cluster-scoped runtime vllm is disabled",
        ),
        (
            [runtime("vllm", entry(), classes=["a100"])],
            isvc(annotation="h100"),
            RuntimeCompatibilityError,
            # OME returns IsCompatible's error, whose model name was never filled in
            "runtime vllm does not support model : runtime does not support the required accelerator class",
        ),
        (
            [runtime("vllm", entry("pytorch"))],
            isvc(),
            RuntimeCompatibilityError,
            "runtime vllm does not support model safetensors: model format 'mt:safetensors' not in supported "
            "formats: format name mismatch (model=safetensors, runtime=pytorch)",
        ),
        (
            [runtime("vllm", entry(), size=("1B", "70B"))],
            isvc(),
            RuntimeCompatibilityError,
            "runtime vllm does not support model safetensors: model size 100B is outside supported range [1B, 70B]",
        ),
        (
            # the namespaced runtime is the one validated, even if the cluster namesake would fit
            [runtime("vllm", entry(), cluster=True), runtime("vllm", entry("pytorch"))],
            isvc(),
            RuntimeCompatibilityError,
            "runtime vllm does not support model safetensors: model format",
        ),
        (
            # disabled is reported before any compatibility problem
            [runtime("vllm", entry("pytorch"), disabled=True, classes=[])],
            isvc(annotation="h100"),
            RuntimeDisabledError,
            "namespace-scoped runtime vllm is disabled",
        ),
    ],
)
def test_validate_runtime_errors(
    rts: list[ServingRuntime], the_isvc: InferenceService, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        validate_runtime("vllm", model(size="100B"), rts, the_isvc)
    assert str(caught.value).startswith(message)


def test_validate_runtime_ignores_auto_select_and_score() -> None:
    rts = [runtime("vllm", entry(auto=False, priority=0), cluster=True)]
    chosen = validate_runtime("vllm", model(), rts, isvc())
    assert (chosen.name, chosen.is_cluster) == ("vllm", True)
    namesakes = [runtime("vllm", entry(), cluster=True), runtime("vllm", entry())]
    assert validate_runtime("vllm", model(), namesakes, namespace=NS).is_cluster is False


def test_compatibility_error_fields() -> None:
    with pytest.raises(RuntimeCompatibilityError) as caught:
        validate_runtime("vllm", model(), [runtime("vllm", entry("pytorch"))], namespace=NS)
    err = caught.value
    assert (err.runtime_name, err.model_name, err.model_format) == ("vllm", "safetensors", "safetensors")
    assert err.reason.startswith("model format 'mt:safetensors' not in supported formats")


# --- §7.11 GetSupportedModelFormat ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "the_model", "user_specified", "chosen"),
    [
        ([entry(auto=None, quant="a"), entry(quant="b")], model(), False, 1),  # only autoSelect: true
        ([entry(auto=None, quant="a"), entry(quant="b")], model(), True, 0),  # user-specified: all; first wins ties
        ([entry(priority=1), entry(priority=9)], model(), False, 0),  # priority ignored: a tie
        ([entry(), entry(**FW)], model(**FW), False, 1),  # strictly higher wins
        ([entry(), entry(**FW)], model(), False, 0),
        ([entry("pytorch")], model(), True, None),  # nothing scores
        ([entry(auto=False)], model(), False, None),
        ([], model(), True, None),
        # arch/quant ignored here: the chosen entry need not be the one §7.5 matched
        ([entry(arch="Mistral"), entry(arch="Llama")], model(arch="Llama"), False, 0),
    ],
)
def test_get_supported_model_format(
    entries: list[dict[str, Any]], the_model: BaseModel, user_specified: bool, chosen: int | None
) -> None:
    rt = runtime("rt", *entries)
    expected = None if chosen is None else rt.supported_model_formats[chosen]
    assert get_supported_model_format(rt, the_model, user_specified) is expected


def test_get_supported_model_format_nil_inputs() -> None:
    rt = runtime("rt", entry())
    assert get_supported_model_format(None, model(), True) is None
    assert get_supported_model_format(rt, None, True) is None


def test_supported_format_may_differ_from_the_matched_entry() -> None:
    rt = runtime("rt", entry(arch="Mistral"), entry(arch="Llama"))
    assert compatibility_report(rt, model(arch="Llama")).matched_format is rt.supported_model_formats[1]
    assert get_supported_model_format(rt, model(arch="Llama"), False) is rt.supported_model_formats[0]


# --- lookups (§7.2 GetRuntime, §4.1 base model order) ---------------------------------------------


def test_find_runtime_namespaced_first() -> None:
    ns_rt, cl_rt, other = (
        runtime("vllm", entry()),
        runtime("vllm", entry(), cluster=True),
        runtime("x", entry(), ns="b"),
    )
    assert find_runtime("vllm", NS, [cl_rt, ns_rt]) is ns_rt
    assert find_runtime("vllm", "team-b", [cl_rt, ns_rt]) is cl_rt
    assert find_runtime("x", NS, [other]) is None
    assert get_runtime("x", "b", [other]) is other
    with pytest.raises(RuntimeNotFoundError, match="runtime x not found in namespace team-a or at cluster scope"):
        get_runtime("x", NS, [other])


def test_find_base_model_namespaced_first() -> None:
    cluster_model, ns_model = model(name="llama"), model(name="llama", ns=NS)
    assert find_base_model("llama", NS, [cluster_model, ns_model]) is ns_model
    assert find_base_model("llama", "team-b", [cluster_model, ns_model]) is cluster_model
    assert find_base_model("mistral", NS, [cluster_model, ns_model]) is None
