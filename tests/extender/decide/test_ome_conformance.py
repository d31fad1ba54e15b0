"""Where OME's own AcceleratorClass selection picks no class, the extender's class plan is
class-neutral too; where an override masks a name, both paths agree (issue 12 item 6).

Each row cites the OME source it follows (sgl-project/ome, `pkg/acceleratorclassselector`).
The whole path runs in-process: inventory -> SchedulerApi.filter / explain -> metrics.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide import class_plan, reasons
from gpuextender.extender.model.kube_objects import (
    ACCELERATOR_CLASS,
    CLUSTER_SERVING_RUNTIME,
    INFERENCE_SERVICE,
    KINDS,
    NODE,
)
from gpuextender.extender.model.ome.pod_intent import PodIdentity, pod_identity
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import InventoryView, ViewBuilder
from gpuextender.extender.ui.explain_cli import render

PRODUCTS = {"h100-node": "NVIDIA-H100-80GB-HBM3", "a100-node": "NVIDIA-A100-SXM4-80GB"}
NODES = list(PRODUCTS)
SELECTOR_GO = "pkg/acceleratorclassselector/selector.go"


def _class(name: str, product: str, family: str, cc: str) -> dict[str, Any]:
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "AcceleratorClass",
        "metadata": {"name": name},
        "spec": {
            "vendor": "nvidia",
            "family": family,
            "discovery": {"nodeSelector": {"nvidia.com/gpu.product": product}},
            "capabilities": {"memoryGB": "80Gi", "computeCapability": cc},
        },
    }


def _runtime(name: str, requirements: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"supportedModelFormats": [{"name": "safetensors"}]}
    if requirements is not None:
        spec["acceleratorRequirements"] = requirements
    return {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime", "metadata": {"name": name}, "spec": spec}


def _isvc(name: str, selector: dict[str, Any] | None = None, engine: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"name": "llama"}, "engine": {}}
    if selector is not None:
        spec["acceleratorSelector"] = selector
    if engine is not None:
        spec["engine"]["acceleratorOverride"] = engine
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "llm"},
        "spec": spec,
    }


OBJECTS = {
    NODE.kind: [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n, "labels": {"nvidia.com/gpu.product": p}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
        for n, p in PRODUCTS.items()
    ],
    ACCELERATOR_CLASS.kind: [
        _class("h100", PRODUCTS["h100-node"], "hopper", "9.0"),
        _class("a100", PRODUCTS["a100-node"], "ampere", "8.0"),
    ],  # no cost data on either
    CLUSTER_SERVING_RUNTIME.kind: [
        _runtime("rt-none", None),  # no acceleratorRequirements
        _runtime("rt-nil-list", {}),  # acceleratorRequirements without acceleratorClasses
        _runtime("rt-empty", {"acceleratorClasses": []}),
        _runtime("rt-both", {"acceleratorClasses": ["h100", "a100"]}),
        _runtime("rt-gone", {"acceleratorClasses": ["h100", "gone"]}),
    ],
    INFERENCE_SERVICE.kind: [
        _isvc("named", {"acceleratorClass": "h100"}),
        _isvc("override-named", None, {"acceleratorClass": "h100"}),
        _isvc("first-available", {"policy": "FirstAvailable"}),
        _isvc("too-strict", {"policy": "BestFit", "constraints": {"minMemory": 500}}),
        _isvc("all-excluded", {"policy": "FirstAvailable", "constraints": {"excludedClasses": ["h100", "a100"]}}),
        _isvc("cheapest", {"policy": "Cheapest"}),
        _isvc("unknown-policy", {"policy": "Fastest"}),
        _isvc("masked", {"acceleratorClass": "a100", "policy": "FirstAvailable"}, {"acceleratorClass": ""}),
        _isvc("masked-at-selector", {"acceleratorClass": "", "policy": "FirstAvailable"}),
    ],
}


@pytest.fixture(scope="module")
def view() -> InventoryView:
    store = InventoryStore()
    views = ViewBuilder(store, ("nvidia.com/gpu",))
    for kind in KINDS:
        store.replace_all(kind.kind, OBJECTS.get(kind.kind, []))
    current = views.current
    assert set(current.classes) == {"h100", "a100"}
    return current


def _pod(isvc: str, runtime: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {"ome.io/inferenceservice": isvc, "component": "engine", "serving-runtime": runtime}
    gpus = {"nvidia.com/gpu": "1"}
    return {
        "metadata": {
            "name": f"{isvc}-engine-0",
            "namespace": "llm",
            "uid": "u",
            "labels": labels,
            "annotations": annotations or {},
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": gpus, "limits": gpus}}]},
    }


def _ident(isvc: str, runtime: str, annotations: dict[str, str] | None = None) -> PodIdentity:
    return pod_identity(_pod(isvc, runtime, annotations))


def _api(view: InventoryView) -> SchedulerApi:
    state = GpuState(IdleRule())
    return SchedulerApi(state, ExtenderMetrics(state), ApiSettings(DecisionPolicy()), inventory=lambda: view)


def _args(isvc: str, runtime: str) -> Any:
    return parse_extender_args(json.dumps({"Pod": _pod(isvc, runtime), "NodeNames": NODES}).encode())


# --- item 1: a runtime that lists no classes -------------------------------------------------


@pytest.mark.parametrize(
    ("isvc", "runtime"),
    [
        # selector.go: GetAcceleratorClass returns (nil, "", nil) when AcceleratorRequirements is nil ...
        pytest.param("named", "rt-none", id=f"{SELECTOR_GO}: GetAcceleratorClass, no acceleratorRequirements"),
        # ... or AcceleratorClasses is nil ...
        pytest.param("named", "rt-nil-list", id=f"{SELECTOR_GO}: GetAcceleratorClass, nil acceleratorClasses"),
        # ... and, with an empty list, skips the name lookup (`len(...) > 0`), leaving acName "".
        pytest.param("override-named", "rt-empty", id=f"{SELECTOR_GO}: GetAcceleratorClass, empty list"),
    ],
)
def test_runtime_without_classes_is_class_neutral_even_for_a_named_class(
    view: InventoryView, isvc: str, runtime: str
) -> None:
    plan = class_plan.plan_classes(_ident(isvc, runtime), view, "FirstAvailable")
    assert not plan.applies and not plan.incompatible and plan.allowed == ()
    assert plan.why["classes"] == (
        f"none apply (runtime {runtime} lists no accelerator classes; OME selects none, not even the named h100)"
    )
    answer = _api(view).filter(_args(isvc, runtime))
    assert answer["NodeNames"] == NODES  # both GPU models: not pinned to h100
    assert answer["FailedAndUnresolvableNodes"] == {}


# --- items 2 and 4: a policy that chooses no class -------------------------------------------


@pytest.mark.parametrize(
    ("isvc", "runtime", "code", "why"),
    [
        # selector.go: getAcceleratorClassByPolicy, filterCandidates leaves none -> "No candidates passed
        # filtering", nil.
        pytest.param(
            "too-strict",
            "rt-both",
            "no_eligible_class",
            "no accelerator class meets the constraints",
            id=f"{SELECTOR_GO}: getAcceleratorClassByPolicy, every class filtered (minMemory)",
        ),
        pytest.param(
            "all-excluded",
            "rt-both",
            "no_eligible_class",
            "no accelerator class meets the constraints",
            id=f"{SELECTOR_GO}: getAcceleratorClassByPolicy, every class filtered (excludedClasses)",
        ),
        # selector.go: selectCheapest, >= 2 candidates and none with cost -> "No usable cost fields", nil.
        pytest.param(
            "cheapest",
            "rt-both",
            "no_cost_data",
            "no eligible accelerator class has cost data",
            id=f"{SELECTOR_GO}: selectCheapest, no cost data",
        ),
        # selector.go: getAcceleratorClassByPolicy, a policy outside the switch falls through to nil.
        pytest.param(
            "unknown-policy",
            "rt-both",
            "unknown_policy",
            "unknown policy 'Fastest': OME selects no accelerator class",
            id=f"{SELECTOR_GO}: getAcceleratorClassByPolicy, unknown policy",
        ),
        # policy_helpers.go: candidatesFromNames returns fetcher.go's AcceleratorNotFoundError for a listed
        # class that does not exist; getAcceleratorClassByPolicy logs it and returns nil (no skipping).
        pytest.param(
            "first-available",
            "rt-gone",
            "class_not_found",
            "the runtime lists accelerator classes that do not exist (gone): OME aborts the policy step",
            id="policy_helpers.go: candidatesFromNames, listed class missing",
        ),
    ],
)
def test_a_policy_without_a_class_leaves_the_pod_class_neutral(
    view: InventoryView, caplog: pytest.LogCaptureFixture, isvc: str, runtime: str, code: str, why: str
) -> None:
    with caplog.at_level(logging.WARNING, "gpu_extender.placement"):
        plan = class_plan.plan_classes(_ident(isvc, runtime), view, "FirstAvailable")
    policy = plan.policy
    sentence = (
        f"none apply: class-neutral because policy {policy} chose no class ({why}), "
        "so OME puts no class constraint on the pod"
    )
    assert not plan.applies and not plan.incompatible and plan.no_class == code
    assert plan.why["classes"] == sentence
    assert [r.getMessage() for r in caplog.records] == [f"InferenceService llm/{isvc} engine: {sentence}"]

    api = _api(view)
    answer = api.filter(_args(isvc, runtime))
    assert answer["NodeNames"] == NODES  # before: every node failed, the pod could never schedule
    assert answer["FailedAndUnresolvableNodes"] == {}
    counted = api.metrics.registry.get_sample_value("gpu_extender_class_policy_no_class_total", {"reason": code})
    assert counted == 1.0

    explained = api.explain(_args(isvc, runtime))
    assert explained["resolved"]["classRulesApply"] is False
    assert explained["resolved"]["classes"] == sentence
    assert explained["resolved"]["classPolicyNoClass"] == code
    assert f"  classes: {sentence}" in render(explained).splitlines()


def test_the_policy_choosing_a_class_still_pins(view: InventoryView) -> None:
    """The control row: with an eligible class the plan applies and the filter pins to it."""
    plan = class_plan.plan_classes(_ident("first-available", "rt-both"), view, "FirstAvailable")
    assert plan.applies and plan.allowed == ("h100", "a100") and plan.no_class == ""
    strict = class_plan.plan_classes(_ident("named", "rt-both"), view, "FirstAvailable")
    assert strict.allowed == ("h100",) and strict.explicit
    answer = _api(view).filter(_args("named", "rt-both"))
    assert answer["NodeNames"] == ["h100-node"]
    assert answer["FailedAndUnresolvableNodes"] == {"a100-node": reasons.CLASS_NOT_ALLOWED.message}


# --- item 3: a present-but-empty acceleratorClass masks the lower levels ---------------------


@pytest.mark.parametrize(
    ("isvc", "annotations", "source"),
    [
        # selector.go: getAcceleratorClassByName returns the override's non-nil pointer to "", so
        # acName stays "" and the policy decides: the selector's a100 is never read.
        pytest.param(
            "masked",
            None,
            "engine.acceleratorOverride",
            id=f'{SELECTOR_GO}: getAcceleratorClassByName, override "" masks the selector',
        ),
        # The same for the selector's own "": OME's class selector never reads the annotation.
        pytest.param(
            "masked-at-selector",
            {"ome.io/accelerator-class": "a100"},
            "InferenceService acceleratorSelector",
            id=f'{SELECTOR_GO}: getAcceleratorClassByName, selector "" masks the annotation',
        ),
        pytest.param(
            "masked",
            {"ome.io/accelerator-class": "a100"},
            "engine.acceleratorOverride",
            id=f'{SELECTOR_GO}: getAcceleratorClassByName, override "" masks the annotation',
        ),
    ],
)
def test_an_empty_class_masks_the_lower_levels(
    view: InventoryView, isvc: str, annotations: dict[str, str] | None, source: str
) -> None:
    plan = class_plan.plan_classes(_ident(isvc, "rt-both", annotations), view, "FirstAvailable")
    assert plan.applies and not plan.explicit and not plan.incompatible
    assert plan.allowed == ("h100", "a100")  # FirstAvailable over the runtime's list, not a pin to a100
    assert plan.why["class"] == f'none named ({source} sets acceleratorClass: "")'
    assert plan.why["policy"] == "FirstAvailable (from InferenceService acceleratorSelector)"
