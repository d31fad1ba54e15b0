"""Choosing and ranking AcceleratorClasses the way OME does (ome-api.md §7.13), plus availability.

Where the request comes from (§4.1, §7.13 steps 2-3; `resolve_class_request`):
- Only `engine` and `decoder` get a class; the `router` never does (§3, §7.1 step 5).
- Explicit name: the component's `spec.<component>.acceleratorOverride.acceleratorClass`,
  else `spec.acceleratorSelector.acceleratorClass`. As in OME, an override that *sets*
  `acceleratorClass: ""` masks the isvc-level name and means "no name" (policy decides).
  The annotation `ome.io/accelerator-class` is not consulted (§4.1: runtime choice only).
- Policy: the override's non-empty `policy`, else `spec.acceleratorSelector.policy`.
  No default: no name and no policy means no class.
- Constraints: always `spec.acceleratorSelector.constraints`. The component override's
  `constraints` are IGNORED, exactly like OME (§7.13, §7.15 item 11), even when the
  policy came from the override; `ClassRequest.ignored_constraints_source` says when
  that happened, for explanations.

Selection (`select_class`, §7.13 steps 1-4; OME `pkg/acceleratorclassselector/selector.go:
GetAcceleratorClass`):
1. The runtime's `acceleratorRequirements.acceleratorClasses` missing or empty means no
   class (NO_ACCELERATOR), even when a class is named: OME returns before it reads the
   name. (OME's runtime matcher, §7.4, refuses that runtime for a named class; that is
   the runtime check's business, `runtime_selector`, not this one's.)
2. An explicit name wins over any policy. A name outside the runtime's (non-empty) list is
   an incompatibility: the runtime matcher requires every named class in the list and
   would have refused the runtime. ClassOutcome INCOMPATIBLE, which the extender turns into
   "every node fails". A listed name with no (valid) AcceleratorClass object is OME's
   AcceleratorNotFoundError: outcome NOT_FOUND.
3. Without a name, no policy means no class (NO_ACCELERATOR).
4. Otherwise the policy ranks the candidates (`rank_classes`): outcome POLICY, whose
   class may still be None (`ClassRanking.none_code` says why). OME then builds the pod
   with no class constraint, so the extender treats it as class-neutral.

Ranking (`rank_classes`):
- Candidates: the runtime list in order, de-duplicated (first occurrence wins). A listed
  class that does not exist (or failed to parse) aborts the ranking: no class, none_code
  CLASS_NOT_FOUND, as OME's `candidatesFromNames` returns the fetcher's
  AcceleratorNotFoundError and `getAcceleratorClassByPolicy` gives up (no class).
- `meets_requirements` filters them in OME's order with OME's messages: excludedClasses
  ("explicitly excluded"); architectureFamilies (an entry with "-" is compared with
  "vendor-family", otherwise with "family", case-insensitively); min/maxMemory against
  OME's integer GB (`memoryGB` bytes // 1024^3, inclusive); requiredFeatures
  (case-insensitive); minArchitectureVersion. `minComputePerformanceTFLOPS` only scores.
- Availability: `can_place(class_name)` is asked for each survivor; a class with no node
  that can take the pod right now is skipped by every policy (OME ignores availability,
  §7.15 item 14, which is how FirstAvailable ends up on a class with no free node: issue
  #622). `ClassRanking.ome_choice` still reports what OME itself would pick.
- One survivor is returned as is, for every policy (OME does this before scoring, even for
  Cheapest without cost data).
- FirstAvailable: runtime-list order.
- BestFit: 0.70*mem + 0.30*compute, highest first. mem = 1 with no minMemory; 0 without
  memoryGB or below it; 1 when equal; else required/candidate GiB (over-provisioning
  penalty). compute = 0 without performance; with no preferredPrecisions,
  scoreFromTFLOPS(max of the four figures); else the first preferred precision with a
  non-zero figure, times 1, 0.5, 0.25, ... by its position; if none and fp16 is not
  listed, fp16 with the penalty already halved once more per listed precision; else 0.
  scoreFromTFLOPS(t, req) = 0 if t == 0; 1 if req == 0; min(1, t/req).
- Cheapest: classes without usable cost data are skipped (NO_COST). Groups, first
  non-empty wins and the ranking lists them group after group: (1) hourly, the spot price
  if set, else on-demand; (2) perMillionTokens; (3) tier low=1, medium=2, high=3, other=2.
  Cheapest first inside a group; ties keep runtime-list order.
- MostCapable: 0.5*mem/maxMem + 0.3*bw/maxBw + 0.2*tflops/maxTflops, the maxima taken
  over the classes being ranked (a zero maximum contributes 0), highest first. tflops is
  the first preferred precision (fp16 by default), falling back to later ones only when
  it is 0; fp32, fp16, int8/fp8 -> int8Tops, int4; anything else (bf16) is 0.
- Ties in every policy keep runtime-list order (Python's sort is stable; OME's
  `sort.Slice` leaves ties unspecified).

Deliberate divergences from OME, all on inputs where OME crashes, is unstable or is wrong:
- minArchitectureVersion is compared NUMERICALLY as (major, minor) when both sides look
  like "9.0": OME compares strings, so "10.0" < "9.0" and a Blackwell class would be
  rejected by "minArchitectureVersion: 9.0". Non-numeric values fall back to OME's string
  comparison. Same message format.
- BestFit with no constraints does not crash (OME's nil dereference at the snapshot, fixed
  in later OME): no memory and no compute requirement.
- BestFit with `minMemory: 0` (or a non-positive minComputePerformanceTFLOPS) counts as no
  requirement instead of dividing by zero (OME: an +Inf ratio, so memory score 0 for
  every class with memory; the ranking is the same unless a class has memoryGB 0).
- Ties are resolved by runtime-list order (see above).
- A listed class that exists in the cluster but failed to parse here counts as missing
  (it aborts the ranking): OME would read it, the extender cannot judge it.
- Availability, as described: `chosen` is availability-aware; `ome_choice` is not.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuextender.extender.model.ome.accelerator_class import AcceleratorClass, parse_compute_capability
from gpuextender.extender.model.untrusted import Fields


class ClassPolicy(enum.StrEnum):
    BEST_FIT = "BestFit"
    CHEAPEST = "Cheapest"
    MOST_CAPABLE = "MostCapable"
    FIRST_AVAILABLE = "FirstAvailable"


POLICIES = frozenset(p.value for p in ClassPolicy)


_MEM_WEIGHT, _COMPUTE_WEIGHT = 0.70, 0.30  # BestFit
_CAP_MEM, _CAP_BW, _CAP_TFLOPS = 0.5, 0.3, 0.2  # MostCapable
_TIERS = {"low": 1, "medium": 2, "high": 3}
_TIER_DEFAULT = 2


@dataclass(frozen=True, slots=True)
class Constraints:
    """`AcceleratorConstraints` (§4.1). Memory figures are GB as OME means them (GiB)."""

    min_memory: int | None = None
    max_memory: int | None = None
    min_compute_tflops: int | None = None  # minComputePerformanceTFLOPS: a score, not a filter
    min_architecture_version: str | None = None
    required_features: tuple[str, ...] = ()
    excluded_classes: tuple[str, ...] = ()
    architecture_families: tuple[str, ...] = ()
    preferred_precisions: tuple[str, ...] = ()


# InferenceService accelerator fields: refused as InvalidInput with their path (no subject: the
# caller says which InferenceService).
_FIELDS = Fields(code="invalid_selector")


def parse_constraints(raw: Any, path: str = "constraints") -> Constraints | None:
    """`AcceleratorConstraints` from its JSON form; None when absent."""
    m = _FIELDS.mapping(raw, path)
    if m is None:
        return None

    def whole(key: str) -> int | None:
        return _FIELDS.integer(m.get(key), f"{path}.{key}", whole_floats=True)

    return Constraints(
        min_memory=whole("minMemory"),
        max_memory=whole("maxMemory"),
        min_compute_tflops=whole("minComputePerformanceTFLOPS"),
        min_architecture_version=_FIELDS.string(m.get("minArchitectureVersion"), f"{path}.minArchitectureVersion"),
        required_features=_FIELDS.strings(m.get("requiredFeatures"), f"{path}.requiredFeatures") or (),
        excluded_classes=_FIELDS.strings(m.get("excludedClasses"), f"{path}.excludedClasses") or (),
        architecture_families=_FIELDS.strings(m.get("architectureFamilies"), f"{path}.architectureFamilies") or (),
        preferred_precisions=_FIELDS.strings(m.get("preferredPrecisions"), f"{path}.preferredPrecisions") or (),
    )


# --- the request: explicit class, policy, constraints (§7.13 steps 2-3) ---------------------


# --- the constraint filter (§7.13 meetsRequirements) ----------------------------------------


def _version_less(have: str, need: str) -> bool:
    h, n = parse_compute_capability(have), parse_compute_capability(need)
    if h is not None and n is not None:
        return h < n  # numeric: (10, 0) > (9, 0), unlike OME's string compare
    return have < need  # OME's lexicographic comparison for anything else


def meets_requirements(cls: AcceleratorClass, constraints: Constraints | None) -> str | None:
    """None when the class is eligible, else OME's rejection message (first failing check)."""
    if constraints is None:
        return None
    if cls.name in constraints.excluded_classes:
        return "explicitly excluded"
    if constraints.architecture_families:
        family = cls.family.lower()
        vendor_family = f"{cls.vendor.lower()}-{family}"
        if not any(f.lower() == (vendor_family if "-" in f else family) for f in constraints.architecture_families):
            return f"architecture family {family} not in allowed list"
    if constraints.min_memory is not None or constraints.max_memory is not None:
        if cls.memory_gb is None:
            return "missing memory specification for memory check"
        gb = cls.memory_gb
        if constraints.min_memory is not None and gb < constraints.min_memory:
            return f"memory {gb}GB < required {constraints.min_memory}GB"
        if constraints.max_memory is not None and gb > constraints.max_memory:
            return f"memory {gb}GB > max allowed {constraints.max_memory}GB"
    if constraints.required_features:
        have = {f.lower() for f in cls.features}
        for required in constraints.required_features:
            if required.lower() not in have:
                return f"missing required feature: {required}"
    if constraints.min_architecture_version is not None:
        cc = cls.compute_capability
        if cc == "":
            return "missing compute capability for architecture version check"
        if _version_less(cc, constraints.min_architecture_version):
            return f"compute capability {cc} < required {constraints.min_architecture_version}"
    return None


# --- scores ---------------------------------------------------------------------------------


def score_from_tflops(tflops: int, required: int) -> float:
    """OME's scoreFromTFLOPS; a non-positive requirement counts as none (no division by 0)."""
    if tflops == 0:
        return 0.0
    if required <= 0:
        return 1.0
    return min(1.0, tflops / required)


def _memory_fit(cls: AcceleratorClass, c: Constraints) -> float:
    if c.min_memory is None or c.min_memory <= 0:
        return 1.0
    if cls.memory_gib is None or cls.memory_gib < c.min_memory:
        return 0.0
    if cls.memory_gib == c.min_memory:
        return 1.0
    return c.min_memory / cls.memory_gib  # 2x over-provisioned -> 0.5


def _compute_fit(cls: AcceleratorClass, c: Constraints) -> float:
    perf = cls.performance
    if perf is None:
        return 0.0
    required = c.min_compute_tflops or 0
    if not c.preferred_precisions:
        return score_from_tflops(perf.max_tflops(), required)
    penalty = 1.0
    for precision in c.preferred_precisions:
        t = perf.for_precision(precision)
        if t > 0:
            return score_from_tflops(t, required) * penalty
        penalty *= 0.5
    if "fp16" not in (p.lower() for p in c.preferred_precisions):
        t = perf.for_precision("fp16")
        if t > 0:
            return score_from_tflops(t, required) * penalty
    return 0.0


def best_fit_score(cls: AcceleratorClass, constraints: Constraints | None) -> tuple[float, float, float]:
    """(total, memory fit, compute fit) for BestFit; no constraints = no requirements."""
    c = constraints or Constraints()
    mem, compute = _memory_fit(cls, c), _compute_fit(cls, c)
    return _MEM_WEIGHT * mem + _COMPUTE_WEIGHT * compute, mem, compute


def _capability_raw(cls: AcceleratorClass, precisions: Sequence[str]) -> tuple[float, float, float]:
    perf = cls.performance
    tflops = 0.0
    if perf is not None:
        tflops = float(perf.for_precision(precisions[0] if precisions else "fp16"))
        if tflops == 0.0:
            for p in precisions[1:]:
                if (t := perf.for_precision(p)) > 0:
                    tflops = float(t)
                    break
    return cls.memory_gib or 0.0, float(cls.memory_bandwidth_gbps or 0), tflops


def _cost_key(cls: AcceleratorClass) -> tuple[int, float, str] | None:
    """(group, cost, basis) for Cheapest; None without usable cost data."""
    cost = cls.cost
    if cost is None:
        return None
    if cost.spot_per_hour is not None:
        return 0, cost.spot_per_hour, f"spot-hourly {cost.spot_per_hour:g}"
    if cost.per_hour is not None:
        return 0, cost.per_hour, f"hourly {cost.per_hour:g}"
    if cost.per_million_tokens is not None:
        return 1, cost.per_million_tokens, f"per-million-tokens {cost.per_million_tokens:g}"
    if cost.tier:
        value = _TIERS.get(cost.tier.lower(), _TIER_DEFAULT)
        return 2, float(value), f"tier {cost.tier}={value}"
    return None


# --- ranking ---------------------------------------------------------------------------------


class NoClass(enum.StrEnum):
    """Why a ranking chose no class: a small fixed set (metric label values)."""

    NO_POLICY = "no_policy"  # OME has no default policy
    UNKNOWN_POLICY = "unknown_policy"
    NO_CANDIDATES = "no_candidates"  # the runtime lists no classes
    CLASS_NOT_FOUND = "class_not_found"  # a listed class does not exist: OME aborts
    NO_ELIGIBLE_CLASS = "no_eligible_class"  # the constraints reject every class
    UNAVAILABLE = "unavailable"  # availability only (not OME): no node of any eligible class fits now
    NO_COST_DATA = "no_cost_data"  # Cheapest over >= 2 classes, none with cost data


class Stage(enum.StrEnum):
    """Why a candidate is out of the ranking."""

    NOT_FOUND = "NotFound"  # no (valid) AcceleratorClass of that name
    CONSTRAINTS = "Constraints"  # meets_requirements rejected it (OME's message)
    UNAVAILABLE = "Unavailable"  # can_place said no node can take the pod now
    NO_COST = "NoCostData"  # Cheapest: nothing to compare


@dataclass(frozen=True, slots=True)
class RankedClass:
    name: str
    # BestFit/MostCapable: the score, higher is better. Cheapest: the cost in its group,
    # lower is better. FirstAvailable (and a lone Cheapest class without cost): None.
    score: float | None
    basis: str  # how the score was obtained, for explanations


@dataclass(frozen=True, slots=True)
class ExcludedClass:
    name: str
    stage: Stage
    reason: str


@dataclass(frozen=True, slots=True)
class ClassRanking:
    policy: str
    ranked: tuple[RankedClass, ...]  # best first; only classes that can take the pod now
    excluded: tuple[ExcludedClass, ...]  # in runtime-list order
    ome_choice: str | None  # what OME itself picks: the same policy, availability ignored
    none_reason: str | None  # why `ranked` is empty (None when it is not)
    none_code: NoClass | None = None  # the same, as a fixed code

    @property
    def chosen(self) -> str | None:
        """The availability-aware single choice: the first of the ranking."""
        return self.ranked[0].name if self.ranked else None

    def position(self, name: str) -> int | None:
        """0 for the best class; None when the class is not ranked."""
        for i, r in enumerate(self.ranked):
            if r.name == name:
                return i
        return None


def _order(
    policy: str, cands: Sequence[AcceleratorClass], constraints: Constraints | None
) -> tuple[list[RankedClass], list[ExcludedClass]]:
    """Rank classes that passed the filters; ties keep the input (runtime-list) order."""
    if not cands:
        return [], []
    if policy == ClassPolicy.FIRST_AVAILABLE:
        return [RankedClass(c.name, None, f"runtime list position {i}") for i, c in enumerate(cands)], []
    if policy == ClassPolicy.BEST_FIT:
        scored = []
        for c in cands:
            total, mem, compute = best_fit_score(c, constraints)
            scored.append(RankedClass(c.name, total, f"0.70*memory {mem:.3f} + 0.30*compute {compute:.3f}"))
        return sorted(scored, key=lambda r: -(r.score or 0.0)), []
    if policy == ClassPolicy.CHEAPEST:
        keyed: list[tuple[tuple[int, float], RankedClass]] = []
        no_cost: list[ExcludedClass] = []
        for c in cands:
            key = _cost_key(c)
            if key is None:
                if len(cands) == 1:  # OME returns a lone survivor before looking at cost
                    return [RankedClass(c.name, None, "only eligible class (no cost data)")], []
                no_cost.append(ExcludedClass(c.name, Stage.NO_COST, "no cost data"))
            else:
                keyed.append(((key[0], key[1]), RankedClass(c.name, key[1], key[2])))
        return [r for _, r in sorted(keyed, key=lambda kr: kr[0])], no_cost
    # MostCapable
    precisions = constraints.preferred_precisions if constraints is not None else ()
    raws = [_capability_raw(c, precisions) for c in cands]
    max_mem = max(r[0] for r in raws)
    max_bw = max(r[1] for r in raws)
    max_tf = max(r[2] for r in raws)
    scored = []
    for c, (mem, bw, tf) in zip(cands, raws, strict=True):
        nm = mem / max_mem if max_mem > 0 else 0.0
        nb = bw / max_bw if max_bw > 0 else 0.0
        nt = tf / max_tf if max_tf > 0 else 0.0
        total = _CAP_MEM * nm + _CAP_BW * nb + _CAP_TFLOPS * nt
        basis = f"0.5*memory {nm:.3f} + 0.3*bandwidth {nb:.3f} + 0.2*tflops {nt:.3f}"
        scored.append(RankedClass(c.name, total, basis))
    return sorted(scored, key=lambda r: -(r.score or 0.0)), []


def dedupe(names: Sequence[str]) -> tuple[str, ...]:
    """The runtime's class list in order, first occurrence of each name kept."""
    return tuple(dict.fromkeys(names))


def rank_classes(
    policy: str,
    candidates: Sequence[str],
    classes: Mapping[str, AcceleratorClass],
    constraints: Constraints | None = None,
    can_place: Callable[[str], bool] | None = None,
) -> ClassRanking:
    """Rank the runtime's candidate classes under `policy` (see the module docstring).

    `classes` holds the known, valid AcceleratorClasses by name. `can_place(name)` is true
    when at least one node of that class can take the pod now; None = do not check.
    """
    if policy not in POLICIES:
        why = "no policy given (OME has no default)" if not policy else f"unknown policy {policy!r}"
        code = NoClass.NO_POLICY if not policy else NoClass.UNKNOWN_POLICY
        return ClassRanking(policy, (), (), None, f"{why}: OME selects no accelerator class", code)
    pool = dedupe(candidates)
    if not pool:
        return ClassRanking(policy, (), (), None, "the runtime lists no accelerator classes", NoClass.NO_CANDIDATES)
    missing = _missing(pool, classes)
    if missing:
        return ClassRanking(policy, (), missing, None, _missing_reason(missing), NoClass.CLASS_NOT_FOUND)
    excluded: list[ExcludedClass] = []
    survivors: list[AcceleratorClass] = []
    for name in pool:
        cls = classes[name]
        unmet = meets_requirements(cls, constraints)
        if unmet is not None:
            excluded.append(ExcludedClass(name, Stage.CONSTRAINTS, unmet))
        else:
            survivors.append(cls)
    placeable = survivors
    if can_place is not None:
        placeable = []
        for cls in survivors:
            if can_place(cls.name):
                placeable.append(cls)
            else:
                reason = "no node of this class can take the pod now"
                excluded.append(ExcludedClass(cls.name, Stage.UNAVAILABLE, reason))
    ranked, policy_excluded = _order(policy, placeable, constraints)
    excluded.extend(policy_excluded)
    if len(placeable) == len(survivors):
        ome_choice = ranked[0].name if ranked else None
    else:
        ome_ranked, _ = _order(policy, survivors, constraints)
        ome_choice = ome_ranked[0].name if ome_ranked else None

    none_reason, none_code = None, None
    if not ranked:
        if not survivors:
            none_reason, none_code = "no accelerator class meets the constraints", NoClass.NO_ELIGIBLE_CLASS
        elif not placeable:
            none_reason = "no node of any eligible accelerator class can take the pod now"
            none_code = NoClass.UNAVAILABLE
        else:
            none_reason, none_code = "no eligible accelerator class has cost data", NoClass.NO_COST_DATA
    order = {n: i for i, n in enumerate(pool)}
    excluded.sort(key=lambda e: order[e.name])
    return ClassRanking(policy, tuple(ranked), tuple(excluded), ome_choice, none_reason, none_code)


def _missing(pool: Sequence[str], classes: Mapping[str, AcceleratorClass]) -> tuple[ExcludedClass, ...]:
    """The listed classes with no (valid) AcceleratorClass: OME's AcceleratorNotFoundError."""
    return tuple(
        ExcludedClass(name, Stage.NOT_FOUND, f"accelerator class {name} not found at cluster scope")
        for name in pool
        if name not in classes
    )


def _missing_reason(missing: Sequence[ExcludedClass]) -> str:
    # OME's candidatesFromNames returns the fetch error and the policy step selects nothing; it
    # does not skip the missing class. Following it is safe: OME then builds the pod with no
    # class nodeSelector or overrides, so pinning it to the remaining classes would constrain a
    # pod OME configured for none of them.
    listed = ", ".join(m.name for m in missing)
    return f"the runtime lists accelerator classes that do not exist ({listed}): OME aborts the policy step"


# --- the whole decision for one component ----------------------------------------------------
