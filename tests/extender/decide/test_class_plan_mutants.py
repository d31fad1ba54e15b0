"""Rules of decide/class_plan.py that a one-line change would break unseen (mutation testing):
why a pod outside the class rules is class-neutral; the runtime taken from the InferenceService
and the pod's namespace first; what the runtime check reads (the pod's model, a namespaced
BaseModel, the InferenceService and the class annotation) and when it has nothing to judge;
whole plans (policy, explicit, unsupported class, enforced runtime problem); a policy that
chooses no class, with its warning; invalid constraints ignored with a warning; a node's cost; a node of no class."""

from __future__ import annotations

import json
import logging

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide import class_plan, reasons
from gpuextender.extender.decide.class_policy import Constraints
from gpuextender.extender.decide.snapshot import Candidates
from gpuextender.extender.inventory.files import FileInventorySource
from gpuextender.extender.model.ome.pod_intent import PodIdentity, pod_identity
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import InventoryView, ViewBuilder
from tests.e2e.test_accelerator_classes import NODES, write_inventory
from tests.extender.builders import gpu, report
from tests.extender.decide.test_class_plan import known, pod, view
from tests.extender.decide.test_class_policy import catalog, cls

__all__ = ["view"]  # the module-scoped inventory fixture


def test_no_model_to_judge_is_no_runtime_problem(view: InventoryView) -> None:
    ident = pod("no-such-isvc", "vllm-llama-large")
    assert not ident.base_model
    assert class_plan.runtime_problem(ident, view, "vllm-llama-large") == ""


def neutral(why: str) -> class_plan.ClassPlan:
    return class_plan.ClassPlan(False, why={"classes": why})


def ome_pod(isvc: str, component: str) -> PodIdentity:
    return PodIdentity("default", isvc, component, "", "", "")


def test_pods_outside_the_class_rules_are_class_neutral_and_told_why(view: InventoryView) -> None:
    not_ome = pod_identity({"metadata": {"name": "p", "namespace": "default"}})
    assert class_plan.plan_classes(not_ome, view, "") == neutral("none apply (not an OME pod)")
    unlabelled = ome_pod("llama-8b-best-fit", "")
    assert class_plan.plan_classes(unlabelled, view, "") == neutral("none apply (OME unlabelled component)")
    unknown = ome_pod("no-such-isvc", "engine")
    assert class_plan.plan_classes(unknown, view, "") == neutral(
        "none apply (InferenceService default/no-such-isvc not in the inventory)"
    )


def test_a_pod_without_a_runtime_label_uses_the_inference_service_runtime(view: InventoryView) -> None:
    plan = class_plan.plan_classes(PodIdentity("llm", "llama-8b-best-fit", "engine", "", "", ""), view, "")
    assert plan.applies and plan.allowed[0] == "nvidia-a100-40gb"
    assert plan.why["runtime"] == "ClusterServingRuntime vllm-llama-small"


def isvc(name: str, spec: dict[str, object]) -> dict[str, object]:
    meta = {"name": name, "namespace": "llm"}
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": meta, "spec": spec}


def cluster_runtime(name: str, classes: list[str] | None) -> dict[str, object]:
    spec = {} if classes is None else {"acceleratorRequirements": {"acceleratorClasses": classes}}
    return {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime", "metadata": {"name": name}, "spec": spec}


MODEL = {"name": "llama-3-1-70b-instruct"}
EXTRA = [
    cluster_runtime("no-classes", None),
    cluster_runtime("ghost-classes", ["nvidia-ghost"]),
    isvc("no-runtime", {"model": MODEL}),
    isvc("unnamed-on-no-classes", {"model": MODEL, "runtime": {"name": "no-classes"}}),
    isvc(
        "named-on-no-classes",
        {"model": MODEL, "runtime": {"name": "no-classes"}, "acceleratorSelector": {"acceleratorClass": "nvidia-l40s"}},
    ),
    isvc(
        "ghost",
        {
            "model": MODEL,
            "runtime": {"name": "ghost-classes"},
            "acceleratorSelector": {"acceleratorClass": "nvidia-ghost"},
        },
    ),
    isvc(
        "bad-constraints",
        {
            "model": MODEL,
            "runtime": {"name": "vllm-llama-large"},
            "acceleratorSelector": {"policy": "FirstAvailable", "constraints": {"minMemory": "x"}},
        },
    ),
    isvc(
        "masked",
        {
            "model": MODEL,
            "runtime": {"name": "vllm-llama-large"},
            "acceleratorSelector": {"acceleratorClass": "nvidia-h100-80gb", "policy": "FirstAvailable"},
            "engine": {"acceleratorOverride": {"acceleratorClass": ""}},
        },
    ),
]


@pytest.fixture(scope="module")
def shadowed(tmp_path_factory: pytest.TempPathFactory) -> InventoryView:
    """The example inventory plus, in namespace llm, a ServingRuntime that shadows the cluster-scoped
    vllm-llama-small and lists only the L40S class, a 70B BaseModel, and an InferenceService
    "plain" that names neither a class nor a policy."""
    directory = tmp_path_factory.mktemp("inventory")
    write_inventory(directory)
    runtime = {
        "apiVersion": "ome.io/v1beta1",
        "kind": "ServingRuntime",
        "metadata": {"name": "vllm-llama-small", "namespace": "llm"},
        "spec": {"acceleratorRequirements": {"acceleratorClasses": ["nvidia-l40s"]}},
    }
    model = {
        "apiVersion": "ome.io/v1beta1",
        "kind": "BaseModel",
        "metadata": {"name": "team-llama-70b", "namespace": "llm"},
        "spec": {
            "modelFormat": {"name": "safetensors", "version": "1.0.0"},
            "modelFramework": {"name": "transformers", "version": "4.45.0"},
            "modelArchitecture": "LlamaForCausalLM",
            "modelParameterSize": "70B",
        },
    }
    plain = {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "plain", "namespace": "llm"},
        "spec": {"model": {"name": "llama-3-1-70b-instruct"}, "runtime": {"name": "vllm-llama-large"}},
    }
    extra = [runtime, model, plain, *EXTRA]
    (directory / "namespaced.yaml").write_text("\n---\n".join(json.dumps(d) for d in extra))
    store = InventoryStore()
    views = ViewBuilder(store, ("nvidia.com/gpu",))
    FileInventorySource(directory, store).load()
    return views.current


def test_the_pod_namespace_s_serving_runtime_comes_before_the_cluster_one(shadowed: InventoryView) -> None:
    plan = class_plan.plan_classes(PodIdentity("llm", "llama-8b-best-fit", "engine", "", "", ""), shadowed, "")
    assert plan.why["runtime"] == "ServingRuntime vllm-llama-small"
    assert plan.allowed == ("nvidia-l40s",)


SIZE = "model size 70B is outside supported range [1B, 13B]"


def test_the_runtime_check_finds_a_base_model_of_the_pod_s_namespace(shadowed: InventoryView) -> None:
    ident = PodIdentity("llm", "llama-8b-best-fit", "engine", "sglang-deepseek-fp8", "team-llama-70b", "")
    assert "architecture mismatch" in class_plan.runtime_problem(ident, shadowed, "sglang-deepseek-fp8")


def test_a_model_not_in_the_inventory_is_no_runtime_problem(view: InventoryView) -> None:
    ident = PodIdentity("llm", "llama-8b-best-fit", "engine", "vllm-llama-small", "no-such-model", "")
    assert class_plan.runtime_problem(ident, view, "vllm-llama-small") == ""


def test_the_runtime_check_reads_the_pod_s_model_without_an_inference_service(view: InventoryView) -> None:
    ident = PodIdentity("llm", "no-such-isvc", "engine", "vllm-llama-small", "llama-3-1-70b-instruct", "")
    assert SIZE in class_plan.runtime_problem(ident, view, "vllm-llama-small")


CLASS = "runtime does not support the required accelerator class"


def test_the_runtime_check_asks_for_the_inference_service_class(view: InventoryView) -> None:
    # llama-8b-pinned-a100 names nvidia-a100-40gb, which vllm-llama-large does not list; its
    # model size would be the problem otherwise.
    ident = PodIdentity("llm", "llama-8b-pinned-a100", "engine", "vllm-llama-large", "", "")
    assert CLASS in class_plan.runtime_problem(ident, view, "vllm-llama-large")


def test_the_runtime_check_asks_for_the_class_annotation(view: InventoryView) -> None:
    named = PodIdentity("llm", "llama-8b-best-fit", "engine", "vllm-llama-small", "", "nvidia-mi300x")
    assert CLASS in class_plan.runtime_problem(named, view, "vllm-llama-small")
    listed = PodIdentity("llm", "llama-8b-best-fit", "engine", "vllm-llama-small", "", "nvidia-l40s")
    assert class_plan.runtime_problem(listed, view, "vllm-llama-small") == ""


def engine(isvc: str, runtime: str) -> PodIdentity:
    return PodIdentity("llm", isvc, "engine", runtime, "", "")


def why(isvc: str, runtime: str, **more: str) -> dict[str, str]:
    return {
        "inferenceService": f"llm/{isvc}",
        "component": "engine",
        "runtime": f"ClusterServingRuntime {runtime}",
    } | more


def test_a_policy_plan_in_full(view: InventoryView) -> None:
    plan = class_plan.plan_classes(engine("llama-8b-best-fit", "vllm-llama-small"), view, "FirstAvailable")
    assert plan == class_plan.ClassPlan(
        True,
        allowed=("nvidia-a100-40gb", "nvidia-l40s", "nvidia-a100-80gb", "nvidia-h100-80gb"),
        policy="BestFit",
        constraints=Constraints(min_memory=40, min_compute_tflops=300),
        why=why("llama-8b-best-fit", "vllm-llama-small", policy="BestFit (from InferenceService acceleratorSelector)"),
    )


def test_an_explicit_class_plan_in_full(view: InventoryView) -> None:
    plan = class_plan.plan_classes(engine("llama-8b-pinned-a100", "vllm-llama-small"), view, "FirstAvailable")
    assert plan == class_plan.ClassPlan(
        True,
        allowed=("nvidia-a100-40gb",),
        policy="Cheapest",
        explicit=True,
        why=why(
            "llama-8b-pinned-a100",
            "vllm-llama-small",
            **{"class": "nvidia-a100-40gb (from InferenceService acceleratorSelector)"},
        ),
    )


def test_an_unsupported_class_plan_in_full(view: InventoryView) -> None:
    plan = class_plan.plan_classes(engine("llama-8b-pinned-a100", "vllm-llama-large"), view, "", "off")
    named = "nvidia-a100-40gb (from InferenceService acceleratorSelector)"
    assert plan == class_plan.ClassPlan(
        True,
        incompatible=f"accelerator class {named} is not supported by runtime vllm-llama-large "
        "(supports nvidia-h100-80gb, nvidia-a100-80gb)",
        why=why("llama-8b-pinned-a100", "vllm-llama-large", **{"class": named}),
    )


def test_an_enforced_runtime_problem_plan_in_full(view: InventoryView) -> None:
    plan = class_plan.plan_classes(engine("llama-8b-best-fit", "vllm-llama-large"), view, "", "enforce")
    assert plan == class_plan.ClassPlan(
        True,
        incompatible="runtime vllm-llama-large does not support model safetensors: "
        "model size 8B is outside supported range [30B, 80B]",
        incompatible_reason=reasons.RUNTIME_INCOMPATIBLE,
        why=why("llama-8b-best-fit", "vllm-llama-large"),
    )


def test_a_policy_that_chooses_no_class_leaves_the_pod_class_neutral_and_says_so(
    shadowed: InventoryView, caplog: pytest.LogCaptureFixture
) -> None:
    sentence = (
        "none apply: class-neutral because policy Fastest chose no class (unknown policy 'Fastest': OME selects"
        " no accelerator class), so OME puts no class constraint on the pod"
    )
    with caplog.at_level(logging.WARNING, logger="gpu_extender.placement"):
        plan = class_plan.plan_classes(engine("plain", "vllm-llama-large"), shadowed, "Fastest")
    assert plan == class_plan.ClassPlan(
        False,
        policy="Fastest",
        no_class="unknown_policy",
        why=why("plain", "vllm-llama-large", policy="Fastest (from default)", classes=sentence),
    )
    assert [r.getMessage() for r in caplog.records] == [f"InferenceService llm/plain engine: {sentence}"]


def unlabelled(isvc: str) -> PodIdentity:
    """An engine pod with no runtime label: the InferenceService names the runtime, if any."""
    return PodIdentity("llm", isvc, "engine", "", "", "")


def plan_of(isvc: str, shadowed: InventoryView) -> class_plan.ClassPlan:
    return class_plan.plan_classes(unlabelled(isvc), shadowed, "", "off")


def isvc_why(isvc: str, runtime: str = "", **more: str) -> dict[str, str]:
    base = {"inferenceService": f"llm/{isvc}", "component": "engine"}
    return base | ({"runtime": f"ClusterServingRuntime {runtime}"} if runtime else {}) | more


def test_a_runtime_named_nowhere_is_shown_as_a_question_mark(shadowed: InventoryView) -> None:
    assert plan_of("no-runtime", shadowed) == class_plan.ClassPlan(
        False, why=isvc_why("no-runtime", classes="none apply (runtime ? not in the inventory)")
    )


def test_a_runtime_without_classes_is_class_neutral_even_for_a_named_class(shadowed: InventoryView) -> None:
    none = "none apply (runtime no-classes lists no accelerator classes"
    assert plan_of("unnamed-on-no-classes", shadowed) == class_plan.ClassPlan(
        False, why=isvc_why("unnamed-on-no-classes", "no-classes", classes=f"{none})")
    )
    named = f"{none}; OME selects none, not even the named nvidia-l40s)"
    assert plan_of("named-on-no-classes", shadowed) == class_plan.ClassPlan(
        False, why=isvc_why("named-on-no-classes", "no-classes", classes=named)
    )


def test_a_listed_class_that_does_not_exist_fails_every_node(shadowed: InventoryView) -> None:
    assert plan_of("ghost", shadowed) == class_plan.ClassPlan(
        True,
        incompatible="accelerator class nvidia-ghost does not exist",
        why=isvc_why("ghost", "ghost-classes", **{"class": "nvidia-ghost (from InferenceService acceleratorSelector)"}),
    )


def test_invalid_constraints_are_ignored_with_a_warning(
    shadowed: InventoryView, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gpu_extender.placement"):
        plan = plan_of("bad-constraints", shadowed)
    assert plan == class_plan.ClassPlan(
        True,
        allowed=("nvidia-h100-80gb", "nvidia-a100-80gb"),
        policy="FirstAvailable",
        why=isvc_why(
            "bad-constraints", "vllm-llama-large", policy="FirstAvailable (from InferenceService acceleratorSelector)"
        ),
    )
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith("InferenceService llm/bad-constraints: constraints ignored: ")
    assert "spec.acceleratorSelector.constraints.minMemory" in message


def test_a_masked_class_is_explained(shadowed: InventoryView) -> None:
    plan = plan_of("masked", shadowed)
    assert plan.allowed == ("nvidia-h100-80gb", "nvidia-a100-80gb") and not plan.explicit
    assert plan.why["class"] == 'none named (engine.acceleratorOverride sets acceleratorClass: "")'


def test_a_node_costs_its_cheapest_class_spot_price_first() -> None:
    classes = catalog(
        cls("spot", cost={"spotPerHour": "1.5", "perHour": "4"}),
        cls("hourly", cost={"perHour": "2"}),
        cls("tiered", cost={"tier": "low"}),
        cls("free"),
    )
    by_node = {"both": ("hourly", "spot"), "hourly": ("hourly",), "unpriced": ("tiered", "free", "gone"), "none": ()}
    cost = class_plan.node_cost(by_node, classes)
    assert [cost(n) for n in ("both", "hourly", "unpriced", "none", "unknown")] == [1.5, 2.0, None, None, None]


def test_a_node_of_no_class_scores_zero_and_fails_the_class_filter(view: InventoryView) -> None:
    plan = class_plan.plan_classes(pod("llama-70b-first-available", "vllm-llama-large"), view, "FirstAvailable")
    state = GpuState(IdleRule())
    for node in ("h100-node", "cpu-node"):
        state.ingest(report(node, [gpu(i) for i in range(8)]), 0.0)
    names = [*NODES, "cpu-node"]
    args = (Candidates(names, view.allocatable_gpus | {"cpu-node": 8}), known(view, state), plan)
    scores = dict(class_plan.prioritize_with_classes(2, *args)[0])
    assert scores["cpu-node"] == 0 and scores["h100-node"] == 10
    assert class_plan.filter_with_classes(2, *args).failed["cpu-node"] is reasons.CLASS_NOT_ALLOWED
