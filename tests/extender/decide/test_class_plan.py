"""Class plans and class-aware decisions, in-process on the examples/ome inventory."""

from __future__ import annotations

import json

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide import class_plan, reasons
from gpuextender.extender.decide.snapshot import Candidates, Snapshot
from gpuextender.extender.inventory.files import FileInventorySource
from gpuextender.extender.model.ome.pod_intent import PodIdentity, pod_identity
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import InventoryView, ViewBuilder
from tests.e2e.test_accelerator_classes import NODES, ome_request, write_inventory
from tests.extender.builders import gpu, report


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> InventoryView:
    directory = tmp_path_factory.mktemp("inventory")
    write_inventory(directory)
    store = InventoryStore()
    views = ViewBuilder(store, ("nvidia.com/gpu",))
    FileInventorySource(directory, store).load()
    return views.current


def known(view: InventoryView, state: GpuState) -> Snapshot:
    """What the extender would know at t=0: the nodes' labels decide their classes."""
    return Snapshot(state.summary, view, view.membership.classes_by_node, 0.0, DecisionPolicy())


def candidates(view: InventoryView) -> Candidates:
    return Candidates(NODES, view.allocatable_gpus)


def pod(isvc: str, runtime: str, component: str = "engine") -> PodIdentity:
    """The OME identity of the pod OME would create for this InferenceService component."""
    return pod_identity(json.loads(ome_request(isvc, runtime, NODES, component=component))["Pod"])


@pytest.mark.parametrize(
    ("isvc", "runtime", "allowed", "explicit", "why_key", "why"),
    [
        (
            "llama-8b-pinned-a100",
            "vllm-llama-small",
            ("nvidia-a100-40gb",),
            True,
            "class",
            "nvidia-a100-40gb (from InferenceService acceleratorSelector)",
        ),
        (
            "llama-70b-disaggregated",
            "vllm-llama-large",
            ("nvidia-h100-80gb",),
            True,
            "class",
            "nvidia-h100-80gb (from engine.acceleratorOverride)",
        ),
        (
            "llama-8b-annotated",
            "vllm-llama-small",
            ("nvidia-l40s",),
            True,
            "class",
            "nvidia-l40s (from InferenceService annotation ome.io/accelerator-class)",
        ),
        (
            "llama-70b-first-available",
            "vllm-llama-large",
            ("nvidia-h100-80gb", "nvidia-a100-80gb"),
            False,
            "policy",
            "FirstAvailable (from InferenceService acceleratorSelector)",
        ),
        (
            "llama-8b-best-fit",
            "vllm-llama-small",
            ("nvidia-a100-40gb", "nvidia-l40s", "nvidia-a100-80gb", "nvidia-h100-80gb"),
            False,
            "runtime",
            "ClusterServingRuntime vllm-llama-small",
        ),
    ],
)
def test_plans(
    view: InventoryView, isvc: str, runtime: str, allowed: tuple, explicit: bool, why_key: str, why: str
) -> None:
    plan = class_plan.plan_classes(pod(isvc, runtime), view, "FirstAvailable")
    assert plan.applies and not plan.incompatible
    assert plan.explicit is explicit
    assert set(plan.allowed) == set(allowed) and (explicit or plan.allowed[0] == allowed[0])
    assert plan.why[why_key] == why


def test_decoder_override_and_router(view: InventoryView) -> None:
    decoder = class_plan.plan_classes(
        pod("llama-70b-disaggregated", "vllm-llama-large", "decoder"), view, "FirstAvailable"
    )
    assert decoder.allowed == ("nvidia-a100-80gb",)
    router = class_plan.plan_classes(
        pod("llama-70b-disaggregated", "vllm-llama-large", "router"), view, "FirstAvailable"
    )
    assert not router.applies and "router" in router.why["classes"]
    unknown = class_plan.plan_classes(pod("no-such-isvc", "vllm-llama-large"), view, "FirstAvailable")
    assert not unknown.applies and "not in the inventory" in unknown.why["classes"]


def test_runtime_check_modes(view: InventoryView) -> None:
    p = pod("llama-70b-on-small-runtime", "vllm-llama-small")
    warned = class_plan.plan_classes(p, view, "FirstAvailable", runtime_check="warn")
    assert warned.applies and not warned.incompatible and warned.allowed
    assert "vllm-llama-small" in warned.runtime_warning and "70" in warned.runtime_warning
    enforced = class_plan.plan_classes(p, view, "FirstAvailable", runtime_check="enforce")
    assert enforced.incompatible == warned.runtime_warning
    assert enforced.incompatible_reason is reasons.RUNTIME_INCOMPATIBLE
    assert class_plan.plan_classes(p, view, "FirstAvailable", runtime_check="off").runtime_warning == ""
    compatible = class_plan.plan_classes(
        pod("llama-8b-cheapest", "vllm-llama-small"), view, "FirstAvailable", runtime_check="enforce"
    )
    assert not compatible.incompatible and compatible.runtime_warning == ""
    state = GpuState(IdleRule())
    out = class_plan.filter_with_classes(1, candidates(view), known(view, state), enforced)
    assert out.passed == [] and set(out.failed.values()) == {reasons.RUNTIME_INCOMPATIBLE}


def test_class_rank_outranks_node_rank_and_skips_full_classes(view: InventoryView) -> None:
    plan = class_plan.plan_classes(pod("llama-70b-first-available", "vllm-llama-large"), view, "FirstAvailable")
    state = GpuState(IdleRule())
    # The H100 node (first class) is half busy; the A100-80GB node is idle: class order still wins.
    state.ingest(report("h100-node", [gpu(i, 0 if i < 4 else 90, 1 if i < 4 else 90) for i in range(8)]), 0.0)
    state.ingest(report("a100-80-node", [gpu(i) for i in range(8)]), 0.0)
    args = (candidates(view), known(view, state), plan)
    scores, ranking = class_plan.prioritize_with_classes(2, *args)
    s = dict(scores)
    assert ranking is not None and ranking.chosen == "nvidia-h100-80gb"
    assert s["h100-node"] > s["a100-80-node"] > 0 and s["l40s-node"] == s["a100-40-node"] == 0
    # A 6-GPU pod does not fit the H100 node (4 idle): FirstAvailable moves on to the A100s.
    scores, ranking = class_plan.prioritize_with_classes(6, *args)
    s = dict(scores)
    assert ranking.chosen == "nvidia-a100-80gb" and s["a100-80-node"] == 10 and s["h100-node"] == 0
    assert [e.name for e in ranking.excluded] == ["nvidia-h100-80gb"]


def test_a_fresh_node_outside_the_allowed_classes_does_not_demote_assumed_ones(view: InventoryView) -> None:
    """Assumed data yields only to a fresh fit the pod may use: filter and prioritize agree on it."""
    plan = class_plan.plan_classes(pod("llama-70b-first-available", "vllm-llama-large"), view, "FirstAvailable")
    assert "nvidia-l40s" not in plan.allowed
    state = GpuState(IdleRule())
    state.ingest(report("l40s-node", [gpu(i) for i in range(8)]), 0.0)  # fresh and idle, but not allowed
    args = (candidates(view), known(view, state), plan)
    out = class_plan.filter_with_classes(2, *args)
    assert set(out.passed) == set(out.assumed) == {"h100-node", "a100-80-node"}
    scores = dict(class_plan.prioritize_with_classes(2, *args)[0])
    assert scores["h100-node"] >= 1 and scores["a100-80-node"] >= 1 and scores["l40s-node"] == 0
    # Once an allowed node reports and fits, the silent ones step back in both verbs.
    state.ingest(report("a100-80-node", [gpu(i) for i in range(8)]), 0.0)
    out = class_plan.filter_with_classes(2, *args)
    assert out.passed == ["a100-80-node"] and out.failed["h100-node"] is reasons.NO_FRESH_GPU_DATA
    scores = dict(class_plan.prioritize_with_classes(2, *args)[0])
    assert scores["a100-80-node"] >= 1 and scores["h100-node"] == 0
