"""Which AcceleratorClasses a GPU pod may land on, decided from the inventory view.

For an OME engine/decoder pod: the InferenceService and runtime come from the
pod's labels (`extender.model.ome.pod_intent`); the runtime's
`acceleratorRequirements.acceleratorClasses` is the allow-list and preference
order; an explicit class (override -> InferenceService -> annotation; an
`acceleratorClass: ""` masks the levels below it) narrows it to one, and must be
on that list; otherwise the policy (override -> InferenceService ->
--default-class-policy) with the InferenceService's constraints decides which
listed classes are eligible and in which order (`extender.decide.class_policy`).
Availability is applied at prioritize time: a class with no node that can take
the pod now is skipped.

Class-neutral (only the idle GPU rules apply), as OME then puts no class
constraint on the pod (`pkg/acceleratorclassselector/selector.go`):
- pods that are not accelerated OME components, or whose objects are not in the
  inventory;
- a runtime that lists no classes (absent or empty list), even when the pod names
  a class: OME's GetAcceleratorClass returns before reading the name (whether the
  runtime may serve a named class at all is the runtime check's question);
- a policy that chooses no class: every class rejected by the constraints,
  Cheapest without cost data, an unknown policy, or a listed class that does not
  exist (OME aborts the policy step). `ClassPlan.no_class` gives the reason code
  (`gpu_extender_class_policy_no_class_total{reason}`); a warning is logged once
  per plan, i.e. per pod identity and inventory version (the extender caches plans).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuextender.extender.decide import reasons, whole_gpus
from gpuextender.extender.decide.class_policy import (
    ClassRanking,
    Constraints,
    NoClass,
    parse_constraints,
    rank_classes,
)
from gpuextender.extender.decide.filter_outcome import FilterOutcome
from gpuextender.extender.decide.runtime_selector import RuntimeSelectionError, find_base_model, validate_runtime
from gpuextender.extender.decide.snapshot import Candidates, Snapshot
from gpuextender.extender.model.kube_objects import CLUSTER_SERVING_RUNTIME, INFERENCE_SERVICE, SERVING_RUNTIME
from gpuextender.extender.model.ome.accelerator_class import AcceleratorClass
from gpuextender.extender.model.ome.pod_intent import PodIdentity, class_intent
from gpuextender.extender.model.untrusted import InvalidInput, object_at
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.live_classes import ClassesByNode

log = logging.getLogger("gpu_extender.placement")


@dataclass(frozen=True, slots=True)
class ClassPlan:
    applies: bool  # False: class-neutral
    allowed: tuple[str, ...] = ()  # classes whose nodes may take the pod, in preference order
    incompatible: str = ""  # non-empty: no node can take the pod; the sentence says why
    incompatible_reason: reasons.Reason = reasons.CLASS_INCOMPATIBLE
    runtime_warning: str = ""  # runtime/model incompatibility under --runtime-check warn
    policy: str = ""
    constraints: Constraints | None = None
    explicit: bool = False  # one class was named: no policy ranking
    no_class: str = ""  # class_policy.NoClass value: class-neutral because the policy chose no class
    why: dict[str, str] = field(default_factory=dict)  # what was resolved, and from where


def runtime_problem(ident: PodIdentity, view: InventoryView, runtime_name: str) -> str:
    """OME's ValidateRuntime for the pod's runtime and model (§7.3-7.12): "" when it can
    serve the model, else OME's error message. Unknown model: nothing to judge."""
    isvc = view.inference_services.get(f"{ident.namespace}/{ident.inference_service}")
    model_name = ident.base_model or (isvc.model_name if isvc is not None else None)
    if not model_name:
        return ""
    model = find_base_model(model_name, ident.namespace, view.models)
    if model is None:
        return ""
    try:
        validate_runtime(
            runtime_name,
            model,
            view.runtimes,
            isvc,
            namespace=ident.namespace,
            accelerator_class=ident.class_annotation or None,
        )
    except RuntimeSelectionError as exc:
        return str(exc)
    return ""


def plan_classes(
    ident: PodIdentity, view: InventoryView, default_policy: str, runtime_check: str = "warn"
) -> ClassPlan:
    """The classes a pod of this OME identity may land on. `runtime_check`: "enforce" fails
    every node when the runtime cannot serve the pod's model, "warn" only reports it
    (ClassPlan.runtime_warning), "off" skips it."""
    if ident.neutral:
        reason = "not an OME pod" if not ident.is_ome else f"OME {ident.component or 'unlabelled'} component"
        return ClassPlan(False, why={"classes": f"none apply ({reason})"})
    isvc_key = f"{ident.namespace}/{ident.inference_service}"
    isvc = view.get(INFERENCE_SERVICE.kind, isvc_key)
    if isvc is None:
        return ClassPlan(False, why={"classes": f"none apply (InferenceService {isvc_key} not in the inventory)"})
    spec = object_at(isvc, "spec")
    runtime_ref = object_at(spec, "runtime")
    runtime_name = ident.runtime or str(runtime_ref.get("name") or "")
    runtime_kind, runtime = view.namespaced_first(
        SERVING_RUNTIME.kind, CLUSTER_SERVING_RUNTIME.kind, ident.namespace, runtime_name
    )
    why = {"inferenceService": isvc_key, "component": ident.component}
    if runtime is None:
        why["classes"] = f"none apply (runtime {runtime_name or '?'} not in the inventory)"
        return ClassPlan(False, why=why)
    why["runtime"] = f"{runtime_kind} {runtime_name}"
    problem = runtime_problem(ident, view, runtime_name) if runtime_check != "off" else ""
    if problem and runtime_check == "enforce":
        return ClassPlan(True, incompatible=problem, incompatible_reason=reasons.RUNTIME_INCOMPATIBLE, why=why)
    plan = _class_plan(ident, isvc, runtime, runtime_name, view, default_policy, why)
    return replace(plan, runtime_warning=problem) if problem else plan


def _class_plan(
    ident: PodIdentity,
    isvc: dict[str, Any],
    runtime: dict[str, Any],
    runtime_name: str,
    view: InventoryView,
    default_policy: str,
    why: dict[str, str],
) -> ClassPlan:
    isvc_key = f"{ident.namespace}/{ident.inference_service}"
    spec = object_at(isvc, "spec")
    requirements = (runtime.get("spec") or {}).get("acceleratorRequirements") or {}
    listed = requirements.get("acceleratorClasses") if isinstance(requirements, dict) else None
    runtime_classes = tuple(dict.fromkeys(c for c in listed if isinstance(c, str))) if isinstance(listed, list) else ()

    intent = class_intent(ident, isvc, default_policy)
    if not runtime_classes:
        named = f"; OME selects none, not even the named {intent.accelerator_class}" if intent.accelerator_class else ""
        why["classes"] = f"none apply (runtime {runtime_name} lists no accelerator classes{named})"
        return ClassPlan(False, why=why)
    selector = object_at(spec, "acceleratorSelector")
    try:
        constraints = parse_constraints(selector.get("constraints"), "spec.acceleratorSelector.constraints")
    except InvalidInput as exc:
        log.warning("InferenceService %s: constraints ignored: %s", isvc_key, exc)
        constraints = None

    if intent.accelerator_class:
        name = intent.accelerator_class
        why["class"] = f"{name} (from {intent.class_source})"
        if name not in runtime_classes:
            sentence = (
                f"accelerator class {name} (from {intent.class_source}) is not supported by runtime "
                f"{runtime_name} (supports {', '.join(runtime_classes)})"
            )
            return ClassPlan(True, incompatible=sentence, why=why)
        if name not in view.classes:
            return ClassPlan(True, incompatible=f"accelerator class {name} does not exist", why=why)
        return ClassPlan(True, allowed=(name,), policy=intent.policy, explicit=True, why=why)
    if intent.masked:
        why["class"] = f'none named ({intent.class_source} sets acceleratorClass: "")'
    why["policy"] = f"{intent.policy} (from {intent.policy_source})"
    ranking = rank_classes(intent.policy, runtime_classes, view.classes, constraints)
    allowed = tuple(r.name for r in ranking.ranked)
    if not allowed:
        return _policy_chose_none(isvc_key, ident.component, ranking, why)
    return ClassPlan(True, allowed=allowed, policy=intent.policy, constraints=constraints, why=why)


def _policy_chose_none(isvc_key: str, component: str, ranking: ClassRanking, why: dict[str, str]) -> ClassPlan:
    """OME builds the pod with no class constraint when the policy yields none: class-neutral."""
    code = ranking.none_code or NoClass.NO_ELIGIBLE_CLASS
    sentence = (
        f"none apply: class-neutral because policy {ranking.policy} chose no class "
        f"({ranking.none_reason}), so OME puts no class constraint on the pod"
    )
    why["classes"] = sentence
    log.warning("InferenceService %s %s: %s", isvc_key, component, sentence)
    return ClassPlan(False, policy=ranking.policy, no_class=str(code), why=why)


def node_cost(classes_by_node: ClassesByNode, classes: Mapping[str, AcceleratorClass]) -> Callable[[str], float | None]:
    """A node's hourly cost for the `cost` strategy: the cheapest of its classes,
    spot price where given (as OME's Cheapest policy reads it)."""

    def cost(node: str) -> float | None:
        prices = []
        for name in classes_by_node.get(node, ()):
            c = classes.get(name)
            price = None if c is None or c.cost is None else (c.cost.spot_per_hour or c.cost.per_hour)
            if price is not None:
                prices.append(price)
        return min(prices) if prices else None

    return cost


def filter_with_classes(needed: int, candidates: Candidates, known: Snapshot, plan: ClassPlan) -> FilterOutcome:
    """The GPU filter, preceded by the class rules: a node outside the allowed
    classes fails AcceleratorClassNotAllowed; an impossible class request fails
    every node. Both are unresolvable: preemption cannot change a node's GPU model."""
    names, allocatable, lookup, now, policy = (
        candidates.names,
        candidates.allocatable,
        known.summary,
        known.now,
        known.policy,
    )
    if needed <= 0 or not plan.applies:
        index = known.fit_index
        indexed = index.filter(needed, names, allocatable, now, policy) if index is not None else None
        if indexed is not None:
            return indexed
        return whole_gpus.filter_nodes(needed, names, allocatable, lookup, now, policy)
    if plan.incompatible:
        return FilterOutcome(failed=dict.fromkeys(names, plan.incompatible_reason))
    allowed_nodes = known.nodes_of(plan.allowed)
    inside = [n for n in names if n in allowed_nodes]
    outcome = whole_gpus.filter_nodes(needed, inside, allocatable, lookup, now, policy)
    if len(inside) != len(names):
        outcome.failed.update(dict.fromkeys([n for n in names if n not in allowed_nodes], reasons.CLASS_NOT_ALLOWED))
    return outcome


def prioritize_with_classes(
    needed: int, candidates: Candidates, known: Snapshot, plan: ClassPlan, strategy: str = "spread", seed: str = ""
) -> tuple[list[tuple[str, int]], ClassRanking | None]:
    """Scores 0-10: the policy's class ranking first, the node ranking within a class second
    (decide/README.md, "Classes in the score", is the formula)."""
    names, classes_by_node, classes = candidates.names, known.classes_by_node, known.view.classes
    index = known.fit_index
    if index is not None and not plan.applies:  # every node a fresh fit: the index scores them
        scored = index.scores(needed, names, strategy, known.now, known.policy.stale_after_s)
        if scored is not None:
            return scored, None
    allowed = set(plan.allowed)
    # Only a fresh fit inside the allowed classes demotes assumed verdicts, as in filter_with_classes.
    in_allowed = (lambda node: not allowed.isdisjoint(classes_by_node.get(node, ()))) if plan.applies else None
    ranked = whole_gpus.rank_nodes(
        needed,
        names,
        candidates.allocatable,
        known.summary,
        known.now,
        known.policy,
        strategy,
        seed,
        node_cost(classes_by_node, classes) if strategy == "cost" else None,
        in_allowed,
    )
    if needed <= 0 or not plan.applies:
        return [(name, score) for name, score, _ in ranked], None
    if plan.incompatible:
        return [(name, 0) for name in names], None
    get = classes_by_node.get
    placeable: set[str] = set()
    for name, _, fits in ranked:
        if fits:
            placeable.update(allowed.intersection(get(name, ())))
            if len(placeable) == len(allowed):
                break
    if plan.explicit:
        ranking = None
        position = {plan.allowed[0]: 0}
    else:
        ranking = rank_classes(plan.policy, plan.allowed, classes, plan.constraints, placeable.__contains__)
        position = {r.name: i for i, r in enumerate(ranking.ranked)}
    k = max(1, len(position))
    # The formula as a table over (p, s): node scores are integers 0-10, so the loop
    # below is lookups only. Nodes share few distinct class tuples: their best p is memoised.
    table = [
        [min(whole_gpus.MAX_SCORE, round(1 + 9 * ((k - 1 - p) + s / 10) / k)) for s in range(whole_gpus.MAX_SCORE + 1)]
        for p in range(k)
    ]
    best: dict[tuple[str, ...], int] = {}  # class tuple -> p, or -1 when none of them is ranked
    scores = []
    for name, node_score, fits in ranked:
        if not fits:
            scores.append((name, 0))
            continue
        node_classes = get(name, ())
        p = best.get(node_classes)
        if p is None:
            p = best[node_classes] = min((position[c] for c in node_classes if c in position), default=-1)
        scores.append((name, table[p][node_score] if p >= 0 else 0))
    return scores, ranking
