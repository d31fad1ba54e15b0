"""Rules of decide/class_plan.py that a one-line change would break unseen (mutation testing):
why a pod outside the class rules is class-neutral; the runtime taken from the InferenceService
and the pod's namespace first; what the runtime check reads (the pod's model, a namespaced
BaseModel, the InferenceService and the class annotation) and when it has nothing to judge;
whole plans (policy, explicit, unsupported class, enforced runtime problem); a policy that
chooses no class, with its warning; invalid constraints ignored with a warning; a node's cost; a node of no class;
a runtime whose acceleratorRequirements is no object never reaching a plan; the filter and the scores of
a class-neutral pod (with and without the fit index, a silent node yielding to a fresh fit) and of a pod of
no GPUs; an explicit class's exact scores; the index never scoring a class plan; the cost and random
strategies' wiring; the constraints read again at prioritize time; an incompatible plan scoring 0."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide import class_plan, reasons, whole_gpus
from gpuextender.extender.decide.class_policy import Constraints
from gpuextender.extender.decide.fit_index import FitIndex
from gpuextender.extender.decide.snapshot import Candidates, Snapshot
from gpuextender.extender.inventory.files import FileInventorySource
from gpuextender.extender.model.ome.accelerator_class import AcceleratorClass
from gpuextender.extender.model.ome.pod_intent import PodIdentity, pod_identity
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import NodeSummary
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
LISTED_REQUIREMENTS = cluster_runtime("listed-requirements", None) | {
    "spec": {"acceleratorRequirements": ["nvidia-l40s"]}
}
EXTRA = [
    LISTED_REQUIREMENTS,
    isvc("on-listed-requirements", {"model": MODEL, "runtime": {"name": "listed-requirements"}}),
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


def test_a_runtime_whose_accelerator_requirements_is_no_object_never_reaches_a_plan(shadowed: InventoryView) -> None:
    """The inventory skips it (`_class_plan` reads only runtimes whose requirements are absent or an object)."""
    assert shadowed.get("ClusterServingRuntime", "listed-requirements") is None
    assert plan_of("on-listed-requirements", shadowed) == class_plan.ClassPlan(
        False,
        why=isvc_why("on-listed-requirements", classes="none apply (runtime listed-requirements not in the inventory)"),
    )


# --- filter and prioritize on hand-made fleets --------------------------------------------------

NOW = 1000.0
NEUTRAL = class_plan.ClassPlan(False)
EXPLICIT_A = class_plan.ClassPlan(True, allowed=("a",), explicit=True)


def fresh(name: str, idle: int, utilization: float = 10.0) -> NodeSummary:
    """A node of 8 healthy GPUs, `idle` of them idle, reported at NOW."""
    return NodeSummary(
        node=name,
        gpu_count=8,
        healthy_gpus=8,
        idle_gpus=idle,
        mean_utilization=utilization,
        node_error="",
        sequence=1,
        sample_time=0.0,
        received_at=NOW,
        quality=(0,) * (idle + 1),
    )


FLEET = {
    "big": fresh("big", 8),
    "half": fresh("half", 4),
    "small": fresh("small", 1),
    "nowhere": fresh("nowhere", 8),
    "out": fresh("out", 8),
}
BY_NODE: dict[str, tuple[str, ...]] = {"big": ("a",), "half": ("a",), "small": ("b",), "out": ("b",)}


def snapshot(
    indexed: bool, by_node: Mapping[str, tuple[str, ...]] = BY_NODE, classes: dict[str, AcceleratorClass] | None = None
) -> Snapshot:
    """FLEET at NOW, with the fit index over it or none ("nowhere" is in no class)."""
    index = FitIndex(FLEET) if indexed else None
    view = InventoryView(classes=classes or {})
    return Snapshot(FLEET.get, view, by_node, NOW, DecisionPolicy(), fit_index=index)


@pytest.mark.parametrize("indexed", [False, True], ids=["no index", "index"])
def test_a_class_neutral_pod_is_filtered_by_its_gpus_alone(indexed: bool) -> None:
    """ "silent" (no data) could take the pod, but fails while a fresh node fits."""
    names = Candidates(["silent", "big", "small", "out"], {"silent": 8})
    outcome = class_plan.filter_with_classes(2, names, snapshot(indexed), NEUTRAL)
    assert outcome.passed == ["big", "out"] and not outcome.assumed
    assert outcome.failed == {"small": reasons.INSUFFICIENT_IDLE_GPUS, "silent": reasons.NO_FRESH_GPU_DATA}


@pytest.mark.parametrize("indexed", [False, True], ids=["no index", "index"])
def test_a_class_neutral_pod_is_ranked_by_its_gpus_alone(indexed: bool) -> None:
    """Where every node fits on fresh data the index scores them; else each node is judged."""
    known = snapshot(indexed)
    every_fresh_fit = class_plan.prioritize_with_classes(2, Candidates(["big", "half"], {}), known, NEUTRAL)
    assert every_fresh_fit == ([("big", 10), ("half", 6)], None)
    one_does_not_fit = class_plan.prioritize_with_classes(2, Candidates(["big", "small"], {}), known, NEUTRAL)
    assert one_does_not_fit == ([("big", 10), ("small", 0)], None)
    with_a_silent_node = Candidates(["silent", "big", "out"], {"silent": 8})
    assert class_plan.prioritize_with_classes(2, with_a_silent_node, known, NEUTRAL) == (
        [("silent", 0), ("big", 10), ("out", 10)],
        None,
    )


def test_a_pod_of_no_gpus_passes_every_node_whatever_its_classes() -> None:
    names = Candidates(["big", "small"], {})
    outcome = class_plan.filter_with_classes(0, names, snapshot(False), EXPLICIT_A)
    assert outcome.passed == ["big", "small"] and not outcome.failed
    assert class_plan.prioritize_with_classes(0, names, snapshot(False), EXPLICIT_A) == (
        [("big", 0), ("small", 0)],
        None,
    )


@pytest.mark.parametrize("needed", [1, 2])
@pytest.mark.parametrize("indexed", [False, True], ids=["no index", "index"])
def test_an_explicit_class_scores_its_nodes_by_the_formula_and_no_other_node(needed: int, indexed: bool) -> None:
    """Every node fits on fresh data, so the index could score them all: it must not, for a class plan.
    One class (k = 1): round(1 + 9 * s / 10) for a node score s ("half": 6); a node in no class
    (listed first: its fit is judged before any of the class's) or in another class scores 0."""
    names = Candidates(["nowhere", "big", "half", "out"], {})
    scores, ranking = class_plan.prioritize_with_classes(needed, names, snapshot(indexed), EXPLICIT_A)
    assert scores == [("nowhere", 0), ("big", 10), ("half", 6), ("out", 0)] and ranking is None


def test_an_incompatible_plan_scores_every_node_zero() -> None:
    plan = class_plan.ClassPlan(True, allowed=("a",), incompatible="no node can take it")
    assert class_plan.prioritize_with_classes(2, Candidates(["big", "out"], {}), snapshot(False), plan) == (
        [("big", 0), ("out", 0)],
        None,
    )


PRICED = catalog(cls("low", cost={"perHour": "1"}), cls("high", cost={"perHour": "4"}))


@pytest.mark.parametrize("plan", [NEUTRAL, EXPLICIT_A], ids=["class-neutral", "explicit"])
def test_the_cost_strategy_puts_the_cheaper_node_first(plan: class_plan.ClassPlan) -> None:
    """ "half" (in class low) has fewer idle GPUs than "big" (in high): spread would put "big" first."""
    by_node = {"big": ("a", "high"), "half": ("a", "low")}
    known = snapshot(False, by_node, PRICED)
    names = Candidates(["big", "half"], {})
    assert class_plan.prioritize_with_classes(2, names, known, plan)[0] == [("big", 10), ("half", 6)]
    cost = dict(class_plan.prioritize_with_classes(2, names, known, plan, "cost")[0])
    assert cost["half"] > cost["big"] > 0
    binpack = dict(class_plan.prioritize_with_classes(2, names, known, plan, "binpack")[0])
    assert binpack["half"] > binpack["big"] > 0


def test_the_random_strategy_is_seeded_by_the_pod_and_by_default_by_nothing() -> None:
    names = ["big", "out", "nowhere"]
    known = snapshot(False)
    policy = DecisionPolicy()

    def definition(seed: str) -> list[tuple[str, int]]:
        return whole_gpus.prioritize(2, names, {}, FLEET.get, NOW, policy, "random", seed)

    assert definition("") != definition("pod-a")
    random_order = class_plan.prioritize_with_classes(2, Candidates(names, {}), known, NEUTRAL, "random", "pod-a")
    assert random_order == (definition("pod-a"), None)
    unseeded = class_plan.prioritize_with_classes(2, Candidates(names, {}), known, NEUTRAL, "random")
    assert unseeded == (definition(""), None)


def test_the_class_ranking_at_prioritize_time_reads_the_plan_s_constraints() -> None:
    """BestFit with minMemory 40: the 48 GiB class fits closer than the 80 GiB one listed before it
    (without the constraint the two tie and the runtime's order would win)."""
    classes = catalog(cls("a80", memory="80Gi"), cls("a40", memory="48Gi"))
    plan = class_plan.ClassPlan(True, allowed=("a80", "a40"), policy="BestFit", constraints=Constraints(min_memory=40))
    known = snapshot(False, {"big": ("a80",), "out": ("a40",)}, classes)
    scores, ranking = class_plan.prioritize_with_classes(2, Candidates(["big", "out"], {}), known, plan)
    assert ranking is not None and [r.name for r in ranking.ranked] == ["a40", "a80"]
    assert scores == [("big", 6), ("out", 10)]
