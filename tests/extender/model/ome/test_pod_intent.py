"""Mapping a pod back to OME's objects, and the accelerator-class hierarchy."""

from __future__ import annotations

import pytest

from gpuextender.extender.model.ome.pod_intent import class_intent, pod_identity
from tests.extender.ome_reference import resolve_class_request


def pod(labels: dict | None = None, annotations: dict | None = None, namespace: str = "llm") -> dict:
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels or {}, "annotations": annotations or {}}}


OME_ENGINE = {
    "ome.io/inferenceservice": "llama",
    "component": "engine",
    "serving-runtime": "vllm-h100",
    "base-model-name": "llama-3-70b",
}


def test_identity_from_ome_labels() -> None:
    ident = pod_identity(pod(OME_ENGINE, {"ome.io/accelerator-class": "h100"}))
    assert (ident.namespace, ident.inference_service, ident.component) == ("llm", "llama", "engine")
    assert (ident.runtime, ident.base_model, ident.class_annotation) == ("vllm-h100", "llama-3-70b", "h100")
    assert ident.is_ome and not ident.neutral


@pytest.mark.parametrize(
    "labels",
    [
        {},  # not an OME pod
        {**OME_ENGINE, "component": "router"},  # CPU-only router
        {"ome.io/inferenceservice": "llama"},  # no component label
    ],
)
def test_neutral_pods(labels: dict) -> None:
    assert pod_identity(pod(labels)).neutral


def test_garbage_metadata_does_not_crash() -> None:
    ident = pod_identity({"metadata": {"labels": ["x"], "annotations": None, "namespace": 7}})
    assert ident.namespace == "default" and ident.neutral


def isvc(selector: dict | None = None, engine_override: dict | None = None, annotation: str = "") -> dict:
    spec: dict = {"engine": {}}
    if selector is not None:
        spec["acceleratorSelector"] = selector
    if engine_override is not None:
        spec["engine"]["acceleratorOverride"] = engine_override
    meta = {"name": "llama", "annotations": {"ome.io/accelerator-class": annotation} if annotation else {}}
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    ("service", "pod_annotation", "expected"),
    [
        (
            isvc({"acceleratorClass": "a100", "policy": "Cheapest"}, {"acceleratorClass": "h100", "policy": "BestFit"}),
            "l40s",
            ("h100", "engine.acceleratorOverride", "BestFit", "engine.acceleratorOverride"),
        ),
        (
            isvc({"acceleratorClass": "a100", "policy": "Cheapest"}, {}),
            "l40s",
            ("a100", "InferenceService acceleratorSelector", "Cheapest", "InferenceService acceleratorSelector"),
        ),
        (
            isvc({"policy": "MostCapable"}, {"policy": "Cheapest"}),
            "l40s",
            ("l40s", "pod annotation ome.io/accelerator-class", "Cheapest", "engine.acceleratorOverride"),
        ),
        (
            isvc({}, None, annotation="a100"),
            "",
            ("a100", "InferenceService annotation ome.io/accelerator-class", "FirstAvailable", "default"),
        ),
        (None, "", ("", "", "FirstAvailable", "default")),
    ],
)
def test_class_intent_hierarchy(service: dict | None, pod_annotation: str, expected: tuple) -> None:
    ident = pod_identity(pod(OME_ENGINE, {"ome.io/accelerator-class": pod_annotation} if pod_annotation else {}))
    intent = class_intent(ident, service, "FirstAvailable")
    assert (intent.accelerator_class, intent.class_source, intent.policy, intent.policy_source) == expected


def test_decoder_uses_its_own_override() -> None:
    service = isvc({"acceleratorClass": "a100"}, {"acceleratorClass": "h100"})
    service["spec"]["decoder"] = {"acceleratorOverride": {"acceleratorClass": "l40s"}}
    ident = pod_identity(pod({**OME_ENGINE, "component": "decoder"}))
    assert class_intent(ident, service, "FirstAvailable").accelerator_class == "l40s"


@pytest.mark.parametrize(
    ("service", "pod_annotation", "expected"),
    [
        # pkg/acceleratorclassselector/selector.go: getAcceleratorClassByName takes the first non-nil
        # pointer: an override acceleratorClass "" hides the selector's name; the policy decides.
        (
            isvc({"acceleratorClass": "a100", "policy": "Cheapest"}, {"acceleratorClass": ""}),
            "",
            ("", "engine.acceleratorOverride", "Cheapest", "InferenceService acceleratorSelector"),
        ),
        # ... and every level below it, the annotations (which OME's class selector never reads) included.
        (
            isvc({"acceleratorClass": "a100"}, {"acceleratorClass": ""}, annotation="l40s"),
            "h100",
            ("", "engine.acceleratorOverride", "FirstAvailable", "default"),
        ),
        (
            isvc({"acceleratorClass": ""}, annotation="l40s"),
            "h100",
            ("", "InferenceService acceleratorSelector", "FirstAvailable", "default"),
        ),
        # selector.go: getComponentAcceleratorPolicy, by contrast, skips an empty policy.
        (
            isvc({"policy": "BestFit"}, {"acceleratorClass": "h100", "policy": ""}),
            "",
            ("h100", "engine.acceleratorOverride", "BestFit", "InferenceService acceleratorSelector"),
        ),
        # An absent (not empty) override still falls through to the lower levels.
        (
            isvc({}, {"policy": "BestFit"}, annotation="l40s"),
            "",
            ("l40s", "InferenceService annotation ome.io/accelerator-class", "BestFit", "engine.acceleratorOverride"),
        ),
    ],
)
def test_an_empty_class_masks_the_lower_levels(service: dict, pod_annotation: str, expected: tuple) -> None:
    ident = pod_identity(pod(OME_ENGINE, {"ome.io/accelerator-class": pod_annotation} if pod_annotation else {}))
    intent = class_intent(ident, service, "FirstAvailable")
    assert (intent.accelerator_class, intent.class_source, intent.policy, intent.policy_source) == expected
    assert intent.masked is (expected[0] == "" and expected[1] != "")


@pytest.mark.parametrize(
    "service",
    [
        isvc({"acceleratorClass": "a100", "policy": "Cheapest"}, {"acceleratorClass": ""}),
        isvc({"acceleratorClass": "", "policy": "Cheapest"}),
        isvc({"acceleratorClass": "a100"}, {"acceleratorClass": "h100", "policy": "BestFit"}),
        isvc({"acceleratorClass": "a100", "policy": ""}, {"policy": ""}),
        isvc({}, {}),
    ],
)
def test_class_intent_agrees_with_resolve_class_request(service: dict) -> None:
    """pod_intent (placement's path) and class_policy.resolve_class_request name the same class and policy."""
    intent = class_intent(pod_identity(pod(OME_ENGINE)), service, "")
    request = resolve_class_request(service, "engine")
    assert (intent.accelerator_class or None, intent.policy or None) == (request.explicit_class, request.policy)
