"""OME's own selection logic, re-implemented as a reference that only tests run.

The extender decides with the production modules (decide/class_policy.py, decide/runtime_selector.py,
model/ome/); these are the rest of OME's Go functions, written the same way, so that conformance
tests can check the production pieces against whole OME behaviours (selecting a runtime, resolving a
class request, classifying nodes) without the product carrying code it never runs. Each test says
which it exercises: the production module, or this reference.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuextender.extender.decide.class_policy import (
    ClassRanking,
    Constraints,
    dedupe,
    parse_constraints,
    rank_classes,
)
from gpuextender.extender.decide.runtime_selector import (
    DEFAULT_SCORING,
    NoRuntimeFoundError,
    RuntimeEvaluation,
    RuntimeMatch,
    RuntimeOutcome,
    ScoringConfig,
    _ranked,
    _require_model,
    _resolve_namespace,
    compatibility_report,
    format_entry_mismatches,
    has_auto_select,
    validate_model,
)
from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.model.ome.accelerator_class import AcceleratorClass
from gpuextender.extender.model.ome.model_version import runtime_version_accepts
from gpuextender.extender.model.ome.node_class import (
    MEMORY_TOLERANCE,
    ClassMatcher,
    ClassMembership,
    Mismatch,
    _check_tolerance,
    _prepare_node,
    compile_classes,
    membership_from,
)
from gpuextender.extender.model.ome.ome_objects import (
    KIND_BASE_MODEL,
    KIND_CLUSTER_BASE_MODEL,
    KIND_CLUSTER_SERVING_RUNTIME,
    KIND_INFERENCE_SERVICE,
    KIND_SERVING_RUNTIME,
    BaseModel,
    InferenceService,
    ModelFormat,
    ModelFramework,
    ServingRuntime,
    SupportedModelFormat,
    describe_object,
    parse_base_model,
    parse_inference_service,
    parse_serving_runtime,
)
from gpuextender.extender.model.untrusted import Fields

_FIELDS = Fields(code="invalid_selector")


# ---- from gpuextender.extender.decide.class_policy ----------------------------------------
class ClassOutcome(enum.StrEnum):
    NO_ACCELERATOR = "NoAccelerator"  # router; runtime lists no classes; neither name nor policy
    EXPLICIT = "Explicit"  # a named class from the override or the isvc selector
    POLICY = "Policy"  # the policy ranked the candidates (class_name may still be None)
    INCOMPATIBLE = "Incompatible"  # the named class is not in the runtime's list
    NOT_FOUND = "NotFound"  # the named class is listed but no such AcceleratorClass exists


ENGINE = "engine"


DECODER = "decoder"


ROUTER = "router"


COMPONENTS = (ENGINE, DECODER, ROUTER)


@dataclass(frozen=True, slots=True)
class ClassRequest:
    """What an InferenceService asks for one component, with where each part came from."""

    component: str
    uses_accelerator: bool  # False for the router
    explicit_class: str | None = None
    explicit_source: str | None = None  # field path, e.g. "spec.engine.acceleratorOverride.acceleratorClass"
    policy: str | None = None
    policy_source: str | None = None
    constraints: Constraints | None = None
    constraints_source: str | None = None
    ignored_constraints_source: str | None = None  # component-override constraints OME ignores


def resolve_class_request(isvc: Mapping[str, Any], component: str) -> ClassRequest:
    """Read the explicit class, policy and constraints for `component` from an InferenceService.

    Raises ValueError for an unknown component and InvalidInput for fields of
    the wrong type.
    """
    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r} (expected one of {', '.join(COMPONENTS)})")
    if component == ROUTER:
        return ClassRequest(component, uses_accelerator=False)
    obj = _FIELDS.mapping(isvc, "(InferenceService)") or {}
    spec = _FIELDS.mapping(obj.get("spec"), "spec") or {}
    comp = _FIELDS.mapping(spec.get(component), f"spec.{component}") or {}
    opath = f"spec.{component}.acceleratorOverride"
    override = _FIELDS.mapping(comp.get("acceleratorOverride"), opath) or {}
    spath = "spec.acceleratorSelector"
    selector = _FIELDS.mapping(spec.get("acceleratorSelector"), spath) or {}

    # Name: OME takes the first *non-nil* pointer, so an override with "" masks the isvc name.
    explicit: str | None = None
    explicit_source: str | None = None
    for path, holder in ((opath, override), (spath, selector)):
        name = _FIELDS.string(holder.get("acceleratorClass"), f"{path}.acceleratorClass")
        if name is not None:
            if name:
                explicit, explicit_source = name, f"{path}.acceleratorClass"
            break

    # Policy: the first *non-empty* one.
    policy: str | None = None
    policy_source: str | None = None
    for path, holder in ((opath, override), (spath, selector)):
        p = _FIELDS.string(holder.get("policy"), f"{path}.policy")
        if p:
            policy, policy_source = p, f"{path}.policy"
            break

    constraints = parse_constraints(selector.get("constraints"), f"{spath}.constraints")
    ignored = None
    if override.get("constraints") is not None:
        _FIELDS.mapping(override.get("constraints"), f"{opath}.constraints")
        ignored = f"{opath}.constraints"
    return ClassRequest(
        component=component,
        uses_accelerator=True,
        explicit_class=explicit,
        explicit_source=explicit_source,
        policy=policy,
        policy_source=policy_source,
        constraints=constraints,
        constraints_source=f"{spath}.constraints" if constraints is not None else None,
        ignored_constraints_source=ignored,
    )


@dataclass(frozen=True, slots=True)
class ClassSelection:
    outcome: ClassOutcome
    request: ClassRequest
    class_name: str | None  # the explicit class, or the policy ranking's first (availability-aware)
    ranking: ClassRanking | None  # set for POLICY
    reason: str  # one sentence for explanations


def select_class(
    request: ClassRequest,
    runtime_classes: Sequence[str] | None,
    classes: Mapping[str, AcceleratorClass],
    can_place: Callable[[str], bool] | None = None,
) -> ClassSelection:
    """§7.13 for one component: explicit class, else policy ranking, else none.

    `runtime_classes` is the runtime's `acceleratorRequirements.acceleratorClasses`
    (None when absent). `classes` and `can_place` are as for `rank_classes`.
    """
    if not request.uses_accelerator:
        return ClassSelection(
            ClassOutcome.NO_ACCELERATOR, request, None, None, f"the {request.component} gets no accelerator class"
        )
    listed = dedupe(runtime_classes or ())
    if not listed:
        # OME's GetAcceleratorClass returns before reading the name (selector.go step 1).
        named = f" (not even the named {request.explicit_class})" if request.explicit_class else ""
        return ClassSelection(
            ClassOutcome.NO_ACCELERATOR, request, None, None, f"the runtime lists no accelerator classes{named}"
        )
    if request.explicit_class is not None:
        name, src = request.explicit_class, request.explicit_source
        if name not in listed:
            allowed = f"[{', '.join(listed)}]"
            return ClassSelection(
                ClassOutcome.INCOMPATIBLE,
                request,
                name,
                None,
                f"accelerator class {name} (from {src}) is not among the runtime's acceleratorClasses: {allowed}",
            )
        if name not in classes:
            return ClassSelection(
                ClassOutcome.NOT_FOUND, request, name, None, f"accelerator class {name} not found at cluster scope"
            )
        return ClassSelection(ClassOutcome.EXPLICIT, request, name, None, f"accelerator class {name} named by {src}")
    if request.policy is None:
        return ClassSelection(
            ClassOutcome.NO_ACCELERATOR,
            request,
            None,
            None,
            "no accelerator class named and no policy: OME selects none (no default policy)",
        )
    ranking = rank_classes(request.policy, listed, classes, request.constraints, can_place)
    if ranking.chosen is not None:
        reason = f"policy {request.policy} (from {request.policy_source}) ranks {ranking.chosen} first"
    else:
        reason = f"policy {request.policy} (from {request.policy_source}) chose no class: {ranking.none_reason}"
    return ClassSelection(ClassOutcome.POLICY, request, ranking.chosen, ranking, reason)


# ---- from gpuextender.extender.decide.runtime_selector ------------------------------------


def format_entry_matches(model: BaseModel, entry: SupportedModelFormat) -> bool:
    """compareSupportedModelFormats (§7.5)."""
    return not format_entry_mismatches(model, entry)


def _side_matches(entry: ModelFormat | ModelFramework, model: ModelFormat | ModelFramework) -> bool | None:
    """Scorer's view of one side: None = score 0 now, else whether it matched."""
    if entry.name != model.name:
        return None
    if entry.version is not None and model.version is not None:
        return True if runtime_version_accepts(entry.version, model.version, entry.operator) else None
    return True  # one or both versions missing still counts as matched for scoring


def format_score(
    model: BaseModel, entry: SupportedModelFormat, priority: int, scoring: ScoringConfig = DEFAULT_SCORING
) -> int:
    """CalculateFormatScore: one entry's score at `priority`."""
    format_matched = False
    if entry.model_format is not None:
        matched = _side_matches(entry.model_format, model.model_format)
        if matched is None:
            return 0
        format_matched = matched
    framework_matched = False
    if entry.model_framework is not None and model.model_framework is not None:
        matched = _side_matches(entry.model_framework, model.model_framework)
        if matched is None:
            return 0
        framework_matched = matched
    format_ok = format_matched or entry.model_format is None
    framework_ok = framework_matched or (entry.model_framework is None and model.model_framework is None)
    if not (format_ok and framework_ok):
        return 0
    score = 0
    if format_matched and entry.model_format is not None:
        score += (entry.model_format.weight or scoring.model_format_weight) * priority
    if framework_matched and entry.model_framework is not None:
        score += (entry.model_framework.weight or scoring.model_framework_weight) * priority
    return score


def runtime_score(runtime: ServingRuntime, model: BaseModel, scoring: ScoringConfig = DEFAULT_SCORING) -> int:
    """CalculateScore: the best entry whose autoSelect is not false (null counts), at its priority."""
    best = 0
    for entry in runtime.supported_model_formats:
        if entry.auto_select is False:
            continue
        priority = scoring.default_priority if entry.priority is None else entry.priority
        best = max(best, format_score(model, entry, priority, scoring))
    return best


def _pre_ordered(runtimes: Iterable[ServingRuntime]) -> list[ServingRuntime]:
    """FetchRuntimes' order: creationTimestamp descending (missing = oldest), then name."""
    by_name = sorted(runtimes, key=lambda rt: rt.name)
    stamped = [rt for rt in by_name if rt.creation_timestamp is not None]
    unstamped = [rt for rt in by_name if rt.creation_timestamp is None]
    stamped.sort(key=lambda rt: rt.creation_timestamp, reverse=True)  # type: ignore[arg-type,return-value]
    return stamped + unstamped  # Python's sort is stable, reverse=True included


def runtimes_in_scope(
    runtimes: Iterable[ServingRuntime], namespace: str
) -> tuple[list[ServingRuntime], list[ServingRuntime]]:
    """(namespaced runtimes of `namespace`, all cluster runtimes), each pre-ordered (§7.2)."""
    everything = list(runtimes)
    namespaced = [rt for rt in everything if not rt.is_cluster and rt.namespace == namespace]
    cluster = [rt for rt in everything if rt.is_cluster]
    return _pre_ordered(namespaced), _pre_ordered(cluster)


def evaluate_runtime(
    runtime: ServingRuntime,
    model: BaseModel | None,
    isvc: InferenceService | None = None,
    *,
    accelerator_class: str | None = None,
    scoring: ScoringConfig = DEFAULT_SCORING,
) -> RuntimeEvaluation:
    """evaluateRuntime, keeping the reason when the runtime is not a candidate (§7.9)."""
    model = _require_model(model)
    report = compatibility_report(runtime, model, isvc, accelerator_class=accelerator_class, scoring=scoring)
    if not report.is_compatible:
        return RuntimeEvaluation(runtime, RuntimeOutcome.INCOMPATIBLE, 0, report)
    score = runtime_score(runtime, model, scoring)
    if not has_auto_select(runtime):
        return RuntimeEvaluation(runtime, RuntimeOutcome.NO_AUTO_SELECT, score, report)
    if score <= 0:
        return RuntimeEvaluation(runtime, RuntimeOutcome.ZERO_SCORE, score, report)
    return RuntimeEvaluation(runtime, RuntimeOutcome.CANDIDATE, score, report)


def explain_runtimes(
    model: BaseModel | None,
    runtimes: Iterable[ServingRuntime],
    isvc: InferenceService | None = None,
    *,
    namespace: str | None = None,
    accelerator_class: str | None = None,
    scoring: ScoringConfig = DEFAULT_SCORING,
) -> list[RuntimeEvaluation]:
    """Every runtime in scope with its outcome, namespaced then cluster, each pre-ordered (§7.2)."""
    model = validate_model(model)
    namespaced, cluster = runtimes_in_scope(runtimes, _resolve_namespace(isvc, namespace))
    return [
        evaluate_runtime(rt, model, isvc, accelerator_class=accelerator_class, scoring=scoring)
        for rt in namespaced + cluster
    ]


def _compatible_from(evaluations: list[RuntimeEvaluation], model: BaseModel) -> list[RuntimeMatch]:
    candidates = [ev for ev in evaluations if ev.outcome is RuntimeOutcome.CANDIDATE]
    # Sorted per scope, then concatenated: a namespaced runtime beats any cluster runtime.
    return _ranked([ev for ev in candidates if not ev.runtime.is_cluster], model) + _ranked(
        [ev for ev in candidates if ev.runtime.is_cluster], model
    )


def list_compatible_runtimes(
    model: BaseModel | None,
    runtimes: Iterable[ServingRuntime],
    isvc: InferenceService | None = None,
    *,
    namespace: str | None = None,
    accelerator_class: str | None = None,
    scoring: ScoringConfig = DEFAULT_SCORING,
) -> list[RuntimeMatch]:
    """GetCompatibleRuntimes: the auto-selectable runtimes, best first (§7.9, §7.10)."""
    model = validate_model(model)
    evaluations = explain_runtimes(
        model, runtimes, isvc, namespace=namespace, accelerator_class=accelerator_class, scoring=scoring
    )
    return _compatible_from(evaluations, model)


def select_runtime(
    model: BaseModel | None,
    runtimes: Iterable[ServingRuntime],
    isvc: InferenceService | None = None,
    *,
    namespace: str | None = None,
    accelerator_class: str | None = None,
    scoring: ScoringConfig = DEFAULT_SCORING,
) -> RuntimeMatch:
    """SelectRuntime: the best candidate; raises ModelValidationError or NoRuntimeFoundError."""
    model = validate_model(model)
    ns = _resolve_namespace(isvc, namespace)
    evaluations = explain_runtimes(
        model, runtimes, isvc, namespace=ns, accelerator_class=accelerator_class, scoring=scoring
    )
    matches = _compatible_from(evaluations, model)
    if matches:
        return matches[0]
    excluded: dict[str, str] = {}
    for ev in evaluations:  # keyed by name like OME's map: a cluster namesake overwrites
        if ev.outcome is RuntimeOutcome.INCOMPATIBLE and ev.report.reason is not None:
            excluded[ev.runtime.name] = ev.report.reason
    namespaced = sum(1 for ev in evaluations if not ev.runtime.is_cluster)
    # getModelName: OME reports the format name here, not the BaseModel's name.
    fmt = model.model_format.name
    raise NoRuntimeFoundError(fmt, fmt, ns, excluded, namespaced, len(evaluations) - namespaced)


def get_supported_model_format(
    runtime: ServingRuntime | None,
    model: BaseModel | None,
    user_specified: bool,
    scoring: ScoringConfig = DEFAULT_SCORING,
) -> SupportedModelFormat | None:
    """GetSupportedModelFormat (§7.11): the entry whose `acceleratorConfig` OME applies.

    Entries with `autoSelect: true` only, unless the runtime was named by the user (then
    all); scored at the default priority (not the entry's); the strictly highest score > 0
    wins, so the first entry wins a tie. Architecture and quantization play no part, so
    this may differ from `CompatibilityReport.matched_format`. None when nothing scores.
    """
    if runtime is None or model is None:
        return None
    best: SupportedModelFormat | None = None
    best_score = 0
    for entry in runtime.supported_model_formats:
        if not user_specified and entry.auto_select is not True:
            continue
        score = format_score(model, entry, scoring.default_priority, scoring)
        if score > best_score:
            best, best_score = entry, score
    return best


# ---- from gpuextender.extender.model.ome.node_class ---------------------------------------
def node_class_mismatch(
    node: Mapping[str, Any],
    cls: AcceleratorClass | ClassMatcher,
    gpus: Sequence[GpuFacts] | None = None,
    *,
    memory_tolerance: float = MEMORY_TOLERANCE,
) -> Mismatch | None:
    """None when the node is in the class, else the first check that failed (for explanations)."""
    _check_tolerance(memory_tolerance)
    matcher = cls if isinstance(cls, ClassMatcher) else ClassMatcher(cls)
    return matcher._mismatch(_prepare_node(node), gpus, memory_tolerance)


def node_in_class(
    node: Mapping[str, Any],
    cls: AcceleratorClass | ClassMatcher,
    gpus: Sequence[GpuFacts] | None = None,
    *,
    memory_tolerance: float = MEMORY_TOLERANCE,
) -> bool:
    return node_class_mismatch(node, cls, gpus, memory_tolerance=memory_tolerance) is None


def classify_nodes(
    nodes: Iterable[Mapping[str, Any]],
    classes: Iterable[AcceleratorClass | ClassMatcher],
    gpu_facts: Mapping[str, Sequence[GpuFacts]] | None = None,
    *,
    memory_tolerance: float = MEMORY_TOLERANCE,
) -> ClassMembership:
    """Membership of every node in every class. `gpu_facts` maps node name -> its GPUs;
    a node absent from it gets no capability check. Node names must be unique."""
    _check_tolerance(memory_tolerance)
    matchers = compile_classes(classes)
    by_node: dict[str, tuple[str, ...]] = {}
    for node in nodes:
        prepared = _prepare_node(node)
        if prepared.name in by_node:
            raise ValueError(f"Node {prepared.name!r} given twice")
        gpus = gpu_facts.get(prepared.name) if gpu_facts is not None else None
        by_node[prepared.name] = tuple(
            m.name for m in matchers if m._mismatch(prepared, gpus, memory_tolerance) is None
        )
    return membership_from(by_node, (m.name for m in matchers))


# ---- from gpuextender.extender.model.ome.ome_objects --------------------------------------


def parse_ome_object(obj: Any, *, crd_defaults: bool = True) -> ServingRuntime | BaseModel | InferenceService:
    """Dispatch on `kind`; raises InvalidInput for an unknown kind or a malformed object."""
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    if kind in (KIND_SERVING_RUNTIME, KIND_CLUSTER_SERVING_RUNTIME):
        return parse_serving_runtime(obj, crd_defaults=crd_defaults)
    if kind in (KIND_BASE_MODEL, KIND_CLUSTER_BASE_MODEL):
        return parse_base_model(obj, crd_defaults=crd_defaults)
    if kind == KIND_INFERENCE_SERVICE:
        return parse_inference_service(obj)
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    subject = describe_object(
        str(kind),
        namespace if isinstance(namespace, str) else None,
        name if isinstance(name, str) else None,
    )
    Fields(subject, code="invalid_object").fail("kind", f"not an OME kind this module reads: {kind!r}")
