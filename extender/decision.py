"""Filter and prioritize: pure functions of (pod's GPU need, candidates, GPU state, now).

No I/O and no clock reads here: the caller passes `now` (monotonic seconds) and a
lookup of node summaries, so any decision can be replayed from its inputs.

Per node (`assess`):
- no data from its agent: all allocatable GPUs count as idle (fail-open, as the
  autotuner does); fewer allocatable GPUs than needed -> InsufficientGPUs; unknown
  allocatable means "assume it fits" (kube-scheduler's own NodeResourcesFit
  already checked the count);
- data older than `stale_after_s`: `fail-open` treats it like no data,
  `fail-closed` fails the node with StaleGPUData;
- fresh data: NVML broken -> NvmlUnavailable; fewer GPUs than needed ->
  InsufficientGPUs; fewer healthy GPUs than needed -> InsufficientHealthyGPUs; fewer idle healthy GPUs than needed -> InsufficientIdleGPUs.

Filter: the nodes that fit pass. If none fits, `no_fit_policy="pass-all"` lets
kube-scheduler decide among the nodes that failed only softly (busy or stale);
nodes with broken GPUs stay rejected. `"reject"` keeps every failure.

Prioritize (integer 0-10, the formula):
    v     = idle_gpus + (100 - mean_utilization%) / 101    # more idle first, then lower utilization
    C     = the largest GPU count among the candidates (at least 1)
    score = 1 + round(9 * v / (C + 1))   for a node that fits          (1..10)
          = 0                            for a node that does not
When no candidate fits (the pass-all fallback), every node is ranked on the same
v instead: score = round(10 * v / (C + 1)). Because the fraction added to
idle_gpus is below 1, one more idle GPU always outranks any utilization gap,
and the mapping never orders two nodes against (fits, idle, -utilization).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from extender import reasons
from extender.gpu_summary import NodeSummary
from extender.reasons import Reason

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority

SummaryLookup = Callable[[str], NodeSummary | None]


class DataState(enum.Enum):
    FRESH = "fresh"
    STALE = "stale"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    allocatable_gpus: int | None = None  # from the Node object or inventory; None when unknown


@dataclass(frozen=True, slots=True)
class Policy:
    stale_after_s: float = 10.0
    stale_policy: str = "fail-open"  # or "fail-closed"
    no_fit_policy: str = "pass-all"  # or "reject"


@dataclass(frozen=True, slots=True)
class NodeAssessment:
    name: str
    data: DataState
    data_age_s: float | None
    idle_gpus: int | None  # what the decision used; None: unknown, assumed enough
    healthy_gpus: int | None
    gpu_count: int | None
    mean_utilization: float | None
    reason: Reason | None  # None: the node fits

    @property
    def fits(self) -> bool:
        return self.reason is None


@dataclass(slots=True)
class FilterOutcome:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, Reason] = field(default_factory=dict)
    assessments: list[NodeAssessment] = field(default_factory=list)
    fallback: bool = False  # no node fit and pass-all let the soft failures through


@dataclass(frozen=True, slots=True)
class NodeScore:
    name: str
    score: int
    assessment: NodeAssessment | None  # None for a pod that needs no GPU


def assess(candidate: Candidate, summary: NodeSummary | None, needed: int, now: float, policy: Policy) -> NodeAssessment:
    if summary is None:
        return _assumed_idle(candidate, DataState.NONE, None, needed, fallback_count=None)
    age = max(0.0, now - summary.received_at)
    if age > policy.stale_after_s:
        if policy.stale_policy == "fail-closed":
            return NodeAssessment(
                candidate.name, DataState.STALE, age, None, None, summary.gpu_count, None, reasons.STALE_GPU_DATA
            )
        return _assumed_idle(candidate, DataState.STALE, age, needed, fallback_count=summary.gpu_count)
    if summary.node_error:
        reason: Reason | None = reasons.NVML_UNAVAILABLE
    elif summary.gpu_count < needed:
        reason = reasons.INSUFFICIENT_GPUS
    elif summary.healthy_gpus < needed:
        reason = reasons.INSUFFICIENT_HEALTHY_GPUS
    elif summary.idle_gpus < needed:
        reason = reasons.INSUFFICIENT_IDLE_GPUS
    else:
        reason = None
    return NodeAssessment(
        candidate.name, DataState.FRESH, age, summary.idle_gpus, summary.healthy_gpus,
        summary.gpu_count, summary.mean_utilization, reason,
    )  # fmt: skip


def _assumed_idle(
    candidate: Candidate, data: DataState, age: float | None, needed: int, fallback_count: int | None
) -> NodeAssessment:
    """No usable data: every allocatable GPU counts as idle and healthy."""
    count = candidate.allocatable_gpus if candidate.allocatable_gpus is not None else fallback_count
    reason = reasons.INSUFFICIENT_GPUS if count is not None and count < needed else None
    return NodeAssessment(candidate.name, data, age, count, count, count, None, reason)


def filter_nodes(
    needed: int, candidates: Sequence[Candidate], lookup: SummaryLookup, now: float, policy: Policy
) -> FilterOutcome:
    outcome = FilterOutcome()
    if needed <= 0:  # not a GPU pod: neutral
        outcome.passed = [c.name for c in candidates]
        return outcome
    outcome.assessments = [assess(c, lookup(c.name), needed, now, policy) for c in candidates]
    for a in outcome.assessments:
        if a.fits:
            outcome.passed.append(a.name)
        else:
            outcome.failed[a.name] = a.reason  # type: ignore[assignment]
    if not outcome.passed and outcome.failed and policy.no_fit_policy == "pass-all":
        soft = [name for name, reason in outcome.failed.items() if not reason.unresolvable]
        if soft:
            outcome.fallback = True
            outcome.passed = soft
            outcome.failed = {n: r for n, r in outcome.failed.items() if r.unresolvable}
    return outcome


def prioritize(
    needed: int, candidates: Sequence[Candidate], lookup: SummaryLookup, now: float, policy: Policy
) -> list[NodeScore]:
    if needed <= 0:
        return [NodeScore(c.name, 0, None) for c in candidates]
    assessments = [assess(c, lookup(c.name), needed, now, policy) for c in candidates]
    capacity = max([a.gpu_count or 0 for a in assessments] + [needed, 1])
    any_fits = any(a.fits for a in assessments)
    scores = []
    for a in assessments:
        v = _rank_value(a, needed)
        if any_fits:
            score = 1 + round(9 * v / (capacity + 1)) if a.fits else 0
        else:
            score = round(MAX_SCORE * v / (capacity + 1))
        scores.append(NodeScore(a.name, min(MAX_SCORE, max(0, score)), a))
    return scores


def _rank_value(a: NodeAssessment, needed: int) -> float:
    idle = a.idle_gpus if a.idle_gpus is not None else needed  # unknown: assume just enough
    utilization = a.mean_utilization if a.mean_utilization is not None else 0.0
    return idle + (100.0 - min(100.0, max(0.0, utilization))) / 101.0
