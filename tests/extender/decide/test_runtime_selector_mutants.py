"""Rules of decide/runtime_selector.py that a one-line change would break unseen (mutation testing):
a lookup past objects of other names; the errors' fields and the namespace error's message; a class
the caller names at validation; what `is_compatible` reads; every field of a compatibility report
(incompatible, out of the size range, compatible) and the scoring it passes on; `match_details`' fields
and reasons for an entry against a model, weights included; size distances without a range and of a
NaN size; a candidate's match details."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gpuextender.extender.decide.runtime_selector import (
    REASON_ACCELERATOR,
    REASON_DISABLED,
    CompatibilityReport,
    MatchDetails,
    ModelValidationError,
    RuntimeCompatibilityError,
    RuntimeDisabledError,
    RuntimeNotFoundError,
    ScoringConfig,
    compatibility_report,
    find_base_model,
    find_runtime,
    is_compatible,
    match_details,
    size_distance,
    validate_runtime,
)
from gpuextender.extender.model.ome.ome_objects import SupportedModelFormat
from tests.extender.decide.test_runtime_selector import FW, NS, entry, isvc, model, runtime
from tests.extender.ome_reference import list_compatible_runtimes

FLUX = {"className": "FluxPipeline"}


def the_entry(**fields: Any) -> SupportedModelFormat:
    """One format entry, parsed with the CRD defaults (weights 1)."""
    return runtime("rt", entry(**fields)).supported_model_formats[0]


def details(**changed: Any) -> MatchDetails:
    """A full match of an entry of priority 1 with the CRD's weight 1 on its format, then `changed`."""
    fields: dict[str, Any] = {
        "format_match": True,
        "framework_match": True,
        "size_match": True,
        "architecture_match": True,
        "quantization_match": True,
        "diffusion_pipeline_match": True,
        "priority": 1,
        "weight": 1,
        "auto_select_enabled": True,
        "reasons": (),
    }
    return MatchDetails(**(fields | changed))


def test_a_lookup_skips_objects_of_other_names() -> None:
    mine = runtime("vllm", entry())
    assert find_runtime("vllm", NS, [runtime("other", entry()), mine]) is mine
    cluster_model = model(name="llama")
    assert find_base_model("llama", NS, [model(name="mistral", ns=NS), cluster_model]) is cluster_model


def test_the_errors_keep_their_fields() -> None:
    with pytest.raises(ModelValidationError) as invalid:
        validate_runtime("vllm", model(fmt=""), [], namespace=NS)
    assert (invalid.value.field, invalid.value.message) == ("modelFormat.name", "model format name is required")
    with pytest.raises(RuntimeNotFoundError) as missing:
        validate_runtime("vllm", model(), [], namespace=NS)
    assert (missing.value.runtime_name, missing.value.namespace) == ("vllm", NS)
    with pytest.raises(RuntimeDisabledError) as disabled:
        validate_runtime("vllm", model(), [runtime("vllm", entry(), disabled=True, cluster=True)], namespace=NS)
    assert (disabled.value.runtime_name, disabled.value.is_cluster) == ("vllm", True)


def test_selection_without_a_namespace_says_how_to_give_one() -> None:
    with pytest.raises(ValueError) as caught:
        validate_runtime("vllm", model(), [])
    assert str(caught.value) == "runtime selection needs a namespace: pass `namespace` or an InferenceService"


def test_validation_requires_the_class_the_caller_names() -> None:
    runtimes = [runtime("vllm", entry(), classes=["a100"])]
    with pytest.raises(RuntimeCompatibilityError) as caught:
        validate_runtime("vllm", model(), runtimes, namespace=NS, accelerator_class="h100")
    err = caught.value
    assert (err.runtime_name, err.model_name, err.model_format) == ("vllm", "", "safetensors")
    assert err.reason == REASON_ACCELERATOR
    assert validate_runtime("vllm", model(), runtimes, namespace=NS, accelerator_class="a100") is runtimes[0]


def test_is_compatible_reads_the_inference_service_and_the_class_named() -> None:
    rt = runtime("rt", entry(), classes=["a100"])
    assert is_compatible(rt, model())
    assert is_compatible(rt, model(), isvc(annotation="a100"), accelerator_class="a100")
    assert not is_compatible(rt, model(), isvc(annotation="h100"))
    assert not is_compatible(rt, model(), accelerator_class="h100")
    assert not is_compatible(runtime("rt", entry("pytorch")), model())


def test_every_field_of_a_compatibility_report() -> None:
    off = runtime("rt", entry(), disabled=True)
    assert compatibility_report(off, model()) == CompatibilityReport(off, False, (REASON_DISABLED,), (), None, None)
    ranged = runtime("rt", entry(), size=("1B", "70B"))
    too_large = "model size 100B is outside supported range [1B, 70B]"
    assert compatibility_report(ranged, model(size="100B")) == CompatibilityReport(
        ranged, False, (too_large,), (), ranged.supported_model_formats[0], details(size_match=False)
    )
    plain = runtime("rt", entry())
    assert compatibility_report(plain, model()) == CompatibilityReport(
        plain, True, (), (), plain.supported_model_formats[0], details()
    )


def test_a_compatibility_report_scores_with_the_scoring_config_given() -> None:
    rt = runtime("rt", entry(), crd_defaults=False)  # no priority, weight 0
    report = compatibility_report(rt, model(), scoring=ScoringConfig(default_priority=3))
    assert report.match_details == details(priority=3, weight=0)


@pytest.mark.parametrize(
    ("fields", "weight"),
    [
        ({"priority": 2, **FW}, 4),  # CRD weights 1 and 1, times 2
        ({"weight": 7, "fw_weight": 2, "priority": 2, **FW}, 18),
    ],
)
def test_the_matched_entry_s_weight_adds_its_format_s_and_framework_s(fields: dict[str, Any], weight: int) -> None:
    report = compatibility_report(runtime("rt", entry(**fields)), model(**FW))
    assert report.match_details == details(priority=fields["priority"], weight=weight)


@pytest.mark.parametrize(
    ("the_model", "fields", "expected"),
    [
        (  # every check fails that can: no weight counts
            model(version="1.0.0", fw="transformers", arch="Llama", pipeline={"className": "SDXL"}),
            {"version": "2.0.0", "arch": "Mistral", "quant": "int4", "pipeline": FLUX},
            details(
                format_match=False,
                framework_match=False,
                architecture_match=False,
                quantization_match=False,
                diffusion_pipeline_match=False,
                weight=0,
                reasons=(
                    "pipeline class mismatch (model=SDXL, runtime=FluxPipeline)",
                    "architecture mismatch: model=Llama, runtime=Mistral",
                    "quantization requirement mismatch",
                ),
            ),
        ),
        (  # another format name; a framework on the entry only; not auto-selected
            model(),
            {"fmt": "pytorch", "fw": "transformers", "auto": None},
            details(format_match=False, framework_match=False, weight=0, auto_select_enabled=False),
        ),
        (  # the format counts, the framework's version fails
            model(**FW),
            {"priority": 2, "fw": "transformers", "fw_version": "5.0.0"},
            details(framework_match=False, priority=2, weight=2),
        ),
        (  # no format on the entry: only the framework counts
            model(fw="transformers"),
            {"fmt": None, "fw": "transformers"},
            details(format_match=False, weight=1),
        ),
        (  # the model's architecture is not the entry's requirement
            model(arch="Llama"),
            {"quant": "int4"},
            details(
                architecture_match=False,
                quantization_match=False,
                reasons=("architecture requirement mismatch", "quantization requirement mismatch"),
            ),
        ),
    ],
    ids=["all-fail", "other-format", "framework-version", "framework-only", "one-sided"],
)
def test_match_details_of_an_entry_against_a_model(the_model: Any, fields: dict[str, Any], expected: Any) -> None:
    assert match_details(the_model, the_entry(**fields)) == expected


def test_size_distance_is_zero_without_a_range_and_infinite_for_a_nan_size() -> None:
    assert size_distance(runtime("rt", entry()), model(size="7B")) == 0.0
    assert size_distance(runtime("rt", entry(), size=("1B", "70B")), model()) == 0.0
    assert size_distance(runtime("rt", entry(), size=("1B", "70B")), model(size="NaN")) == math.inf


def test_a_candidate_carries_its_match_details() -> None:
    rt = runtime("rt", entry(**FW))
    [match] = list_compatible_runtimes(model(**FW), [rt], namespace=NS)
    assert match.match_details == details(weight=2)
