"""OME's runtime selection (`pkg/runtimeselector`) as pure functions: which
ServingRuntime / ClusterServingRuntime can serve a BaseModel, which one OME picks, and
why each other one was excluded. ome-api.md §7.2-§7.12; inputs are parsed by
`extender.model.ome.ome_objects`. No I/O, no clock, no logging; same inputs, same answer.

Scope (§7.2 FetchRuntimes): the namespaced runtimes of the InferenceService's namespace
plus every cluster runtime, each list pre-ordered by creationTimestamp (newest first, a
missing one oldest), then name. The pre-order fixes the order of explanations and of the
excluded runtimes in NoRuntimeFoundError; it cannot change the final ranking.

Compatibility (`compatibility_report`, §7.3), checks in order, the first failure wins:
1. `disabled: true` -> "runtime is disabled";
2. accelerator classes (§7.4): R = every class named by the isvc annotation
   `ome.io/accelerator-class`, `spec.acceleratorSelector`, `spec.engine.acceleratorOverride`
   and `spec.decoder.acceleratorOverride` (an empty string counts), plus an explicit
   `accelerator_class` argument. R empty -> compatible. Otherwise the runtime's
   `acceleratorRequirements.acceleratorClasses` must be non-empty and contain all of R
   (exact, case-sensitive) -> else "runtime does not support the required accelerator class";
3. format entries in order (§7.5); the first that matches wins. An entry matches when,
   in this order: its diffusion pipeline (if any) is matched by the model's; architecture
   and quantization are both absent or both equal; its `modelFormat` is set, has the
   model's name and its version accepts the model's; the frameworks are both absent or
   same name with an accepting version. Presence is symmetric everywhere: a field set on
   one side only is a mismatch, versions included. Version rules: `model_version` (§7.6);
4. size (only when the model has `modelParameterSize` and the runtime `modelSizeRange`):
   min <= size <= max, parsed by `model_size` (§7.7).

Score (§7.8): the maximum over entries with `autoSelect` not false (null counts) of
    (fmtWeight * p if the format matched) + (fwWeight * p if the framework matched),
p = the entry's priority (default 1), weight 0 -> config default (format 10, framework
5). With CRD defaults (weight 1) a format+framework match scores 2*p. A set modelFormat
with another name, or a failing version, scores 0; an entry without modelFormat counts
only through its framework. Architecture, quantization, diffusion and size do not score.

Candidates (§7.9): not disabled, compatible, >= 1 entry with `autoSelect: true`, score > 0.

Order (§7.10): namespaced candidates first, then cluster ones, whatever the scores; each
group by score (higher first), then, if the model has a size, |min-size| + |max-size|
(smaller first: the narrowest range; no range = 0 beats any range), then name. The
creation time never breaks a tie. `select_runtime` returns the first.

Errors (§7.12), messages as in OME: ModelValidationError, NoRuntimeFoundError (with each
incompatible runtime's first reason), RuntimeNotFoundError, RuntimeDisabledError,
RuntimeCompatibilityError.

Deliberate divergences from OME's Go code (each also commented where it happens):
- A `modelSizeRange` with only `min` or only `max` (or neither) panics OME's matcher
  (nil dereference, §7.3/§7.15 item 4). Here a missing bound is open: the compatibility
  check ignores it, the ranking distance counts only the bounds that are set (what later
  upstream code does), and the reason text shows it as "unbounded".
- A non-finite size distance (a "NaN" size) ranks as +inf, and distances compare as
  floats: Go truncates their difference to an int, so differences under one parameter
  tie there and fall to an unstable sort.
- The per-entry mismatch text for an entry without `modelFormat` says so; OME adds no
  text for it ("unknown mismatch" when nothing else differs).
- Go maps are unordered: the "Excluded runtimes" list follows the pre-order above (a
  cluster runtime that shares a namespaced runtime's name replaces its reason, as in the
  Go map), and additional diffusion components are checked in key order.
- Functions raise a Python exception where Go returns an error; nil inputs (no model,
  no runtime) give ModelValidationError or None instead of a panic. Selection needs a
  namespace (`namespace=` or the InferenceService's); without either it is a ValueError
  (OME would list every namespace, or dereference a nil InferenceService).
- ValidateRuntime resolves the name namespaced-first and ignores `spec.runtime.kind`, as
  the researched snapshot does (§4.1); later upstream code honours the kind.

Additions that OME does not have: `accelerator_class=` adds a class to R (for a pod whose
annotation names one without its InferenceService at hand), and `explain_runtimes` keeps
the outcome of every runtime, including those OME drops silently (no autoSelect, score 0).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from gpuextender.extender.model.ome.model_size import parse_model_size
from gpuextender.extender.model.ome.model_version import runtime_version_accepts
from gpuextender.extender.model.ome.ome_objects import (
    BaseModel,
    DiffusionComponent,
    DiffusionPipeline,
    InferenceService,
    ModelFormat,
    ModelFramework,
    ServingRuntime,
    SupportedModelFormat,
)

# Reasons and warnings, word for word as OME writes them.
REASON_DISABLED = "runtime is disabled"
REASON_ACCELERATOR = "runtime does not support the required accelerator class"
REASON_INCOMPATIBLE_FORMAT = "incompatible model format"  # ValidateRuntime's fallback
WARNING_NO_AUTO_SELECT = "runtime does not have auto-select enabled for any supported format"
WARNING_NO_MODEL_SIZE = "model does not specify size, but runtime has size constraints"
_UNBOUNDED = "unbounded"  # how a missing size bound is shown (OME would have panicked)


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """OME's runtimeselector.Config defaults (NewConfig)."""

    default_priority: int = 1
    model_format_weight: int = 10  # replaces a modelFormat weight of 0
    model_framework_weight: int = 5  # replaces a modelFramework weight of 0


DEFAULT_SCORING = ScoringConfig()


# --- errors (§7.12) ------------------------------------------------------------------


class RuntimeSelectionError(Exception):
    """Base of OME's runtime selector errors."""


class ModelValidationError(RuntimeSelectionError):
    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"invalid model specification: {field}: {message}")


class RuntimeCompatibilityError(RuntimeSelectionError):
    def __init__(self, runtime_name: str, model_name: str, model_format: str, reason: str) -> None:
        self.runtime_name = runtime_name
        self.model_name = model_name  # OME puts the format name (or "") here, not the model's
        self.model_format = model_format
        self.reason = reason
        super().__init__(f"runtime {runtime_name} does not support model {model_name}: {reason}")


class NoRuntimeFoundError(RuntimeSelectionError):
    def __init__(
        self,
        model_name: str,
        model_format: str,
        namespace: str,
        excluded_runtimes: dict[str, str],
        namespaced_runtimes: int,
        cluster_runtimes: int,
    ) -> None:
        self.model_name = model_name
        self.model_format = model_format
        self.namespace = namespace
        self.excluded_runtimes = excluded_runtimes  # name -> first incompatibility reason
        self.namespaced_runtimes = namespaced_runtimes
        self.cluster_runtimes = cluster_runtimes
        self.total_runtimes = namespaced_runtimes + cluster_runtimes
        text = f"no runtime found to support model {model_name} with format {model_format} in namespace {namespace}"
        if self.total_runtimes > 0:
            text += (
                f". Checked {self.total_runtimes} runtimes ({namespaced_runtimes} namespace-scoped, "
                f"{cluster_runtimes} cluster-scoped)"
            )
        if excluded_runtimes:
            text += ". Excluded runtimes: " + "; ".join(f"{n} ({r})" for n, r in excluded_runtimes.items())
        super().__init__(text)


class RuntimeNotFoundError(RuntimeSelectionError):
    def __init__(self, runtime_name: str, namespace: str) -> None:
        self.runtime_name = runtime_name
        self.namespace = namespace
        super().__init__(f"runtime {runtime_name} not found in namespace {namespace} or at cluster scope")


class RuntimeDisabledError(RuntimeSelectionError):
    def __init__(self, runtime_name: str, is_cluster: bool) -> None:
        self.runtime_name = runtime_name
        self.is_cluster = is_cluster
        scope = "cluster-scoped" if is_cluster else "namespace-scoped"
        super().__init__(f"{scope} runtime {runtime_name} is disabled")


# --- results ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MatchDetails:
    """OME's MatchDetails for the entry that passed §7.5 (evaluateFormatMatch)."""

    format_match: bool
    framework_match: bool
    size_match: bool
    architecture_match: bool
    quantization_match: bool
    diffusion_pipeline_match: bool
    priority: int
    weight: int  # only explicit weights > 0 count here, as in OME; the score uses the defaults
    auto_select_enabled: bool
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CompatibilityReport:
    """GetCompatibilityDetails for one runtime."""

    runtime: ServingRuntime
    is_compatible: bool
    incompatibility_reasons: tuple[str, ...]  # at most one, as in OME
    warnings: tuple[str, ...]
    matched_format: SupportedModelFormat | None  # the first entry that passed §7.5
    match_details: MatchDetails | None
    missing_accelerator_classes: tuple[str, ...] = ()  # sorted; set when check 2 failed

    @property
    def reason(self) -> str | None:
        return self.incompatibility_reasons[0] if self.incompatibility_reasons else None


class RuntimeOutcome(enum.Enum):
    """Why a runtime is, or is not, a candidate for auto-selection (§7.9)."""

    CANDIDATE = "candidate"
    INCOMPATIBLE = "incompatible"  # report.reason says why; listed in NoRuntimeFoundError
    NO_AUTO_SELECT = "no-auto-select"  # compatible, but no entry has autoSelect: true
    ZERO_SCORE = "zero-score"  # compatible, but no auto-selectable entry scores > 0


@dataclass(frozen=True, slots=True)
class RuntimeEvaluation:
    runtime: ServingRuntime
    outcome: RuntimeOutcome
    score: int  # CalculateScore; 0 when not computed (incompatible)
    report: CompatibilityReport

    @property
    def explanation(self) -> str:
        if self.outcome is RuntimeOutcome.INCOMPATIBLE:
            return self.report.reason or REASON_INCOMPATIBLE_FORMAT
        if self.outcome is RuntimeOutcome.NO_AUTO_SELECT:
            return WARNING_NO_AUTO_SELECT
        if self.outcome is RuntimeOutcome.ZERO_SCORE:
            return "no auto-selectable format entry scores above 0"
        return f"candidate with score {self.score}"


@dataclass(frozen=True, slots=True)
class RuntimeMatch:
    """OME's RuntimeMatch: a candidate with its score."""

    runtime: ServingRuntime
    score: int
    match_details: MatchDetails | None

    @property
    def name(self) -> str:
        return self.runtime.name

    @property
    def is_cluster(self) -> bool:
        return self.runtime.is_cluster


# --- accelerator classes (§7.4) -----------------------------------------------------------


def required_accelerator_classes(
    isvc: InferenceService | None, accelerator_class: str | None = None
) -> tuple[str, ...]:
    """R of §7.4, sorted. Every value that is present counts, the empty string too."""
    named = [accelerator_class]
    if isvc is not None:
        named += [
            isvc.accelerator_class_annotation,
            isvc.selector_accelerator_class,
            isvc.engine_accelerator_class,
            isvc.decoder_accelerator_class,
        ]
    return tuple(sorted({c for c in named if c is not None}))


def missing_accelerator_classes(runtime: ServingRuntime, required: Sequence[str]) -> tuple[str, ...]:
    """The required classes the runtime does not list; () when it is compatible."""
    supported = runtime.accelerator_classes or ()
    return tuple(c for c in required if c not in supported)


# --- one format entry against the model (§7.5, §7.6) ------------------------------------


def _version_reason(what: str, entry: ModelFormat | ModelFramework, model: ModelFormat | ModelFramework) -> str | None:
    """The version half of a format/framework check; None when it passes."""
    if entry.version is not None and model.version is not None:
        if not runtime_version_accepts(entry.version, model.version, entry.operator):
            return f"{what} version mismatch (model={model.version}, runtime={entry.version})"
        return None
    if entry.version is not None:
        return f"model has no {what} version but runtime requires {entry.version}"
    if model.version is not None:
        return f"model has {what} version but runtime has no version requirement"
    return None


def _component_reason(name: str, model: DiffusionComponent | None, runtime: DiffusionComponent | None) -> str | None:
    if runtime is None:
        return None
    if model is None:
        return f"component {name} required by runtime but not specified in model"
    if runtime.library and runtime.library != model.library:
        return f"{name} library mismatch (model={model.library}, runtime={runtime.library})"
    if runtime.type and runtime.type != model.type:
        return f"{name} type mismatch (model={model.type}, runtime={runtime.type})"
    return None


def diffusion_pipeline_reason(model: DiffusionPipeline | None, runtime: DiffusionPipeline | None) -> str | None:
    """§7.5 rule 1 (compareDiffusionPipeline); None when the model's pipeline satisfies the entry's."""
    if runtime is None:
        return None
    if model is None:
        return "diffusion pipeline required by runtime but not specified in model"
    if runtime.class_name is not None and runtime.class_name != model.class_name:
        shown = "<nil>" if model.class_name is None else model.class_name
        return f"pipeline class mismatch (model={shown}, runtime={runtime.class_name})"
    for (name, wanted), (_, has) in zip(runtime.named_components(), model.named_components(), strict=False):
        if reason := _component_reason(name, has, wanted):
            return reason
    if runtime.additional_components:
        if not model.additional_components:
            return "diffusion pipeline missing required additional components"
        present = dict(model.additional_components)
        for key, wanted_extra in runtime.additional_components:  # key order: Go iterates a map
            if key not in present:
                return f"diffusion component {key} missing in model"
            if reason := _component_reason(key, present[key], wanted_extra):
                return reason
    return None


def _presence_reason(what: str, model_value: str | None, entry_value: str | None) -> str | None:
    if model_value is not None and entry_value is not None:
        if model_value != entry_value:
            return f"{what} mismatch (model={model_value}, runtime={entry_value})"
        return None
    if model_value is None and entry_value is not None:
        return f"model has no {what} but runtime requires {entry_value}"
    if model_value is not None:
        return f"model has {what} {model_value} but runtime has no {what} requirement"
    return None


def format_entry_mismatches(model: BaseModel, entry: SupportedModelFormat) -> tuple[str, ...]:
    """Why `entry` does not match `model` (§7.5, getFormatMismatchReason); () when it matches.

    Every rule of compareSupportedModelFormats yields a reason here, so "matches" and
    "no reasons" are the same test.
    """
    reasons: list[str] = []
    if reason := diffusion_pipeline_reason(model.diffusion_pipeline, entry.diffusion_pipeline):
        reasons.append(reason)
    for what, model_value, entry_value in (
        ("architecture", model.model_architecture, entry.model_architecture),
        ("quantization", model.quantization, entry.quantization),
    ):
        if reason := _presence_reason(what, model_value, entry_value):
            reasons.append(reason)
    fmt = entry.model_format
    if fmt is None:
        # OME fails the entry silently here; say why (a divergence in wording only).
        reasons.append("runtime format entry has no modelFormat")
    elif fmt.name != model.model_format.name:
        reasons.append(f"format name mismatch (model={model.model_format.name}, runtime={fmt.name})")
    elif reason := _version_reason("format", fmt, model.model_format):
        reasons.append(reason)
    fw, model_fw = entry.model_framework, model.model_framework
    if fw is not None and model_fw is not None:
        if fw.name != model_fw.name:
            reasons.append(f"framework name mismatch (model={model_fw.name}, runtime={fw.name})")
        elif reason := _version_reason("framework", fw, model_fw):
            reasons.append(reason)
    elif fw is not None:
        reasons.append(f"model has no framework but runtime requires {fw.name}")
    elif model_fw is not None:
        reasons.append(f"model has framework {model_fw.name} but runtime has no framework requirement")
    return tuple(reasons)


def model_format_label(model: BaseModel) -> str:
    """`mt:<format>[:<fmtVersion>][:<arch>][:<quant>][:<framework>[:<fwVersion>]]` (getModelFormatLabel)."""
    parts = [f"mt:{model.model_format.name}"]
    parts += [p for p in (model.model_format.version, model.model_architecture, model.quantization) if p is not None]
    if model.model_framework is not None:
        parts.append(model.model_framework.name)
        if model.model_framework.version is not None:
            parts.append(model.model_framework.version)
    return ":".join(parts)


# --- scoring (§7.8) -----------------------------------------------------------------------------


def has_auto_select(runtime: ServingRuntime) -> bool:
    """At least one entry with `autoSelect: true` (null does not count here)."""
    return any(entry.auto_select is True for entry in runtime.supported_model_formats)


def match_details(
    model: BaseModel, entry: SupportedModelFormat, scoring: ScoringConfig = DEFAULT_SCORING
) -> MatchDetails:
    """evaluateFormatMatch, for the entry that passed §7.5 (size_match set by the caller)."""
    priority = scoring.default_priority if entry.priority is None else entry.priority
    reasons: list[str] = []
    pipeline_reason = diffusion_pipeline_reason(model.diffusion_pipeline, entry.diffusion_pipeline)
    if pipeline_reason:
        reasons.append(pipeline_reason)
    checks: dict[str, bool] = {}
    for what, model_value, entry_value in (
        ("architecture", model.model_architecture, entry.model_architecture),
        ("quantization", model.quantization, entry.quantization),
    ):
        checks[what] = model_value == entry_value  # both None, or both set and equal
        if not checks[what]:
            both = model_value is not None and entry_value is not None
            reasons.append(
                f"{what} mismatch: model={model_value}, runtime={entry_value}"
                if both
                else f"{what} requirement mismatch"
            )
    weight = 0
    format_match = framework_match = False
    if entry.model_format is not None and entry.model_format.name == model.model_format.name:
        format_match = _version_reason("format", entry.model_format, model.model_format) is None
        if format_match and entry.model_format.weight > 0:
            weight += entry.model_format.weight * priority
    if entry.model_framework is not None and model.model_framework is not None:
        if entry.model_framework.name == model.model_framework.name:
            framework_match = _version_reason("framework", entry.model_framework, model.model_framework) is None
            if framework_match and entry.model_framework.weight > 0:
                weight += entry.model_framework.weight * priority
    elif entry.model_framework is None and model.model_framework is None:
        framework_match = True
    return MatchDetails(
        format_match=format_match,
        framework_match=framework_match,
        size_match=True,
        architecture_match=checks["architecture"],
        quantization_match=checks["quantization"],
        diffusion_pipeline_match=pipeline_reason is None,
        priority=priority,
        weight=weight,
        auto_select_enabled=entry.auto_select is True,
        reasons=tuple(reasons),
    )


# --- size (§7.3 step 4, §7.10 step 2) ------------------------------------------------------------


def size_range_reason(runtime: ServingRuntime, model: BaseModel) -> str | None:
    """The size check; None when it passes or does not apply.

    Divergence: OME dereferences both bounds and panics on a one-sided range; a missing
    bound is open here.
    """
    size_range, size_text = runtime.model_size_range, model.model_parameter_size
    if size_range is None or size_text is None:
        return None
    size = parse_model_size(size_text)
    too_small = size_range.min is not None and size < parse_model_size(size_range.min)
    too_large = size_range.max is not None and size > parse_model_size(size_range.max)
    if too_small or too_large:
        low = _UNBOUNDED if size_range.min is None else size_range.min
        high = _UNBOUNDED if size_range.max is None else size_range.max
        return f"model size {size_text} is outside supported range [{low}, {high}]"
    return None


def size_distance(runtime: ServingRuntime, model: BaseModel) -> float:
    """calculateSizeScore: |min - size| + |max - size|; 0 without a range or a model size.

    Only the bounds that are set count (OME panics on a missing one; later upstream code
    does the same as here). NaN becomes +inf so that sorting stays total.
    """
    size_range, size_text = runtime.model_size_range, model.model_parameter_size
    if size_range is None or size_text is None:
        return 0.0
    size = parse_model_size(size_text)
    distance = sum(
        abs(parse_model_size(bound) - size) for bound in (size_range.min, size_range.max) if bound is not None
    )
    return math.inf if math.isnan(distance) else distance


# --- compatibility (§7.3) -----------------------------------------------------------------------


def _require_model(model: BaseModel | None) -> BaseModel:
    if model is None:
        raise ModelValidationError("model", "model specification is nil")
    return model


def validate_model(model: BaseModel | None) -> BaseModel:
    """validateModel: a model and a non-empty format name; raises ModelValidationError."""
    model = _require_model(model)
    if model.model_format.name == "":
        raise ModelValidationError("modelFormat.name", "model format name is required")
    return model


def compatibility_report(
    runtime: ServingRuntime,
    model: BaseModel | None,
    isvc: InferenceService | None = None,
    *,
    accelerator_class: str | None = None,
    scoring: ScoringConfig = DEFAULT_SCORING,
) -> CompatibilityReport:
    """GetCompatibilityDetails: is `runtime` able to serve `model`, and if not, why (§7.3)."""
    model = _require_model(model)

    def incompatible(reason: str, missing: tuple[str, ...] = ()) -> CompatibilityReport:
        return CompatibilityReport(runtime, False, (reason,), (), None, None, missing)

    if runtime.is_disabled:
        return incompatible(REASON_DISABLED)
    required = required_accelerator_classes(isvc, accelerator_class)
    if required and (missing := missing_accelerator_classes(runtime, required)):
        return incompatible(REASON_ACCELERATOR, missing)
    matched: SupportedModelFormat | None = None
    per_entry: list[str] = []
    for entry in runtime.supported_model_formats:
        mismatches = format_entry_mismatches(model, entry)
        if not mismatches:
            matched = entry
            break
        per_entry.append(", ".join(mismatches))
    if matched is None:
        label = model_format_label(model)
        detail = "; ".join(per_entry) if per_entry else "no supported formats defined"
        return incompatible(f"model format '{label}' not in supported formats: {detail}")
    details = match_details(model, matched, scoring)
    if reason := size_range_reason(runtime, model):
        return CompatibilityReport(runtime, False, (reason,), (), matched, replace(details, size_match=False))
    if runtime.model_size_range is not None and model.model_parameter_size is not None:
        details = replace(details, size_match=True)
    warnings = []
    if not has_auto_select(runtime):
        warnings.append(WARNING_NO_AUTO_SELECT)
    if model.model_parameter_size is None and runtime.model_size_range is not None:
        warnings.append(WARNING_NO_MODEL_SIZE)
    return CompatibilityReport(runtime, True, (), tuple(warnings), matched, details)


def is_compatible(
    runtime: ServingRuntime,
    model: BaseModel | None,
    isvc: InferenceService | None = None,
    *,
    accelerator_class: str | None = None,
) -> bool:
    """IsCompatible as a boolean (the size check does not depend on the entry, so this
    is `compatibility_report(...).is_compatible`)."""
    return compatibility_report(runtime, model, isvc, accelerator_class=accelerator_class).is_compatible


# --- scope and lookup (§7.2, §4.1) ---------------------------------------------------------------


def _resolve_namespace(isvc: InferenceService | None, namespace: str | None) -> str:
    if namespace is not None:
        return namespace
    if isvc is not None:
        return isvc.namespace
    raise ValueError("runtime selection needs a namespace: pass `namespace` or an InferenceService")


def find_runtime(name: str, namespace: str, runtimes: Iterable[ServingRuntime]) -> ServingRuntime | None:
    """GetRuntime without the error: the namespaced runtime first, then the cluster one.

    This is also how a pod's `serving-runtime` label resolves (§6).
    """
    return _namespaced_first(name, namespace, runtimes)


def get_runtime(name: str, namespace: str, runtimes: Iterable[ServingRuntime]) -> ServingRuntime:
    """GetRuntime: like `find_runtime`, raising RuntimeNotFoundError."""
    runtime = find_runtime(name, namespace, runtimes)
    if runtime is None:
        raise RuntimeNotFoundError(name, namespace)
    return runtime


def find_base_model(name: str, namespace: str, models: Iterable[BaseModel]) -> BaseModel | None:
    """utils.GetBaseModel's order: BaseModel in `namespace`, then ClusterBaseModel (§4.1)."""
    return _namespaced_first(name, namespace, models)


_Scoped = TypeVar("_Scoped", ServingRuntime, BaseModel)


def _namespaced_first(name: str, namespace: str, objects: Iterable[_Scoped]) -> _Scoped | None:
    """OME's lookup order: the object named `name` in `namespace`, else the cluster-scoped one."""
    cluster_match = None
    for obj in objects:
        if obj.name != name:
            continue
        if not obj.is_cluster and obj.namespace == namespace:
            return obj
        if obj.is_cluster and cluster_match is None:
            cluster_match = obj
    return cluster_match


# --- selection (§7.9-§7.11) ----------------------------------------------------------------------


def _ranked(candidates: list[RuntimeEvaluation], model: BaseModel) -> list[RuntimeMatch]:
    """CompareRuntimes within one scope: score, then (with a model size) the size distance, then name."""
    has_size = model.model_parameter_size is not None

    def key(ev: RuntimeEvaluation) -> tuple[int, float, bool, str]:
        distance = size_distance(ev.runtime, model) if has_size else 0.0
        return (-ev.score, distance, ev.runtime.is_cluster, ev.runtime.name)

    return [RuntimeMatch(ev.runtime, ev.score, ev.report.match_details) for ev in sorted(candidates, key=key)]


def validate_runtime(
    runtime_name: str,
    model: BaseModel | None,
    runtimes: Iterable[ServingRuntime],
    isvc: InferenceService | None = None,
    *,
    namespace: str | None = None,
    accelerator_class: str | None = None,
) -> ServingRuntime:
    """ValidateRuntime for a runtime named by the user (`spec.runtime.name`); returns it.

    Raises, in OME's order: ModelValidationError, RuntimeNotFoundError,
    RuntimeDisabledError, RuntimeCompatibilityError. autoSelect and score do not matter.
    """
    model = validate_model(model)
    runtime = get_runtime(runtime_name, _resolve_namespace(isvc, namespace), runtimes)
    if runtime.is_disabled:
        raise RuntimeDisabledError(runtime_name, runtime.is_cluster)
    report = compatibility_report(runtime, model, isvc, accelerator_class=accelerator_class)
    if report.is_compatible:
        return runtime
    if report.reason == REASON_ACCELERATOR:
        # IsCompatible returns this error itself, before the caller fills ModelName: OME's
        # message reads "does not support model : runtime does not support ...".
        raise RuntimeCompatibilityError(runtime_name, "", model.model_format.name, REASON_ACCELERATOR)
    reason = report.reason or REASON_INCOMPATIBLE_FORMAT
    raise RuntimeCompatibilityError(runtime_name, model.model_format.name, model.model_format.name, reason)
