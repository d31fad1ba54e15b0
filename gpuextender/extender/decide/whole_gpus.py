"""Filter and prioritize on whole GPUs: pure functions of (pod's GPU need, candidates, GPU state, now).

The rules, reason codes and the score formula are in decide/README.md ("Whole GPUs"), their one
home; this module implements them. No I/O and no clock reads here: the caller passes `now`
(monotonic seconds) and a lookup of node summaries, so any decision can be replayed from its inputs.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.filter_outcome import FilterOutcome, finish
from gpuextender.extender.decide.reasons import Reason
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.freshness import data_age, is_fresh
from gpuextender.extender.state.gpu_summary import NodeSummary, quality_for

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority
NO_QUALITY = 1 << 30  # above every quality class

SummaryLookup = Callable[[str], NodeSummary | None]


class DataState(enum.Enum):
    FRESH = "fresh"
    STALE = "stale"
    NONE = "none"


# Built per node per call: a plain slotted class, not a frozen one (a frozen
# dataclass sets every field through object.__setattr__, ~5x slower to build).
@dataclass(slots=True)
class NodeAssessment:
    name: str
    data: DataState
    data_age_s: float | None
    idle_gpus: int | None  # what the decision used; None: unknown, assumed enough
    healthy_gpus: int | None
    gpu_count: int | None
    mean_utilization: float | None
    reason: Reason | None  # None: the node fits
    assumed: bool = False  # the verdict rests on assumed data (stale under fail-open, or none)


def assess(
    name: str, allocatable: int | None, summary: NodeSummary | None, needed: int, now: float, policy: DecisionPolicy
) -> NodeAssessment:
    """One node's full verdict with the numbers behind it."""
    if summary is None:
        return _assumed(name, allocatable, 0, DataState.NONE, None, needed)
    age = data_age(summary.received_at, now)
    if not is_fresh(summary.received_at, now, policy.stale_after_s):
        if policy.stale_policy == "fail-closed":
            return NodeAssessment(
                name, DataState.STALE, age, None, None, summary.gpu_count, None, reasons.STALE_GPU_DATA
            )
        if summary.node_error:  # NVML was last seen broken: nothing about its GPUs can be assumed
            return NodeAssessment(name, DataState.STALE, age, 0, 0, summary.gpu_count, None, reasons.NVML_UNAVAILABLE)
        count = allocatable if allocatable is not None else summary.gpu_count
        return _assumed(name, count, summary.gpu_count - summary.healthy_gpus, DataState.STALE, age, needed)
    return NodeAssessment(
        name,
        DataState.FRESH,
        age,
        summary.idle_gpus,
        summary.healthy_gpus,
        summary.gpu_count,
        summary.mean_utilization,
        fresh_reason(summary, needed),
    )


def fresh_reason(summary: NodeSummary, needed: int) -> Reason | None:
    """The verdict on fresh data, most fundamental shortfall first."""
    if summary.node_error:
        return reasons.NVML_UNAVAILABLE
    if summary.gpu_count < needed:
        return reasons.MIG_PARTITIONED if summary.mig_gpus else reasons.INSUFFICIENT_GPUS
    if summary.healthy_gpus < needed:
        return reasons.INSUFFICIENT_HEALTHY_GPUS
    bound = summary.bound_pod_units  # enough before the bound pods were taken off: say it is them
    if summary.free_gpus is not None and summary.free_gpus < needed:
        return (
            reasons.GPUS_TAKEN_BY_BOUND_PODS if summary.free_gpus + bound >= needed else reasons.INSUFFICIENT_FREE_GPUS
        )
    if summary.idle_gpus < needed:
        return (
            reasons.GPUS_TAKEN_BY_BOUND_PODS if summary.idle_gpus + bound >= needed else reasons.INSUFFICIENT_IDLE_GPUS
        )
    return None


def _assumed(
    name: str, count: int | None, lost: int, data: DataState, age: float | None, needed: int
) -> NodeAssessment:
    """No usable data: GPUs last seen unhealthy (`lost`) stay unhealthy, and a node that
    may fit counts as just enough (idle = needed), never as all-idle."""
    healthy = None if count is None else max(0, count - lost)
    if count is not None and count < needed:
        reason: Reason | None = reasons.INSUFFICIENT_GPUS
    elif healthy is not None and healthy < needed:
        reason = reasons.INSUFFICIENT_HEALTHY_GPUS
    else:
        return NodeAssessment(name, data, age, needed, healthy, count, None, None, assumed=True)
    return NodeAssessment(name, data, age, min(needed, healthy or 0), healthy, count, None, reason)


def filter_nodes(
    needed: int,
    names: Sequence[str],
    allocatable: Mapping[str, int],
    lookup: SummaryLookup,
    now: float,
    policy: DecisionPolicy,
) -> FilterOutcome:
    if needed <= 0:  # not a GPU pod: neutral
        return FilterOutcome(list(names))
    return finish(judge_nodes(needed, names, allocatable, lookup, now, policy), policy.no_fit_policy)


def judge_nodes(
    needed: int,
    names: Sequence[str],
    allocatable: Mapping[str, int],
    lookup: SummaryLookup,
    now: float,
    policy: DecisionPolicy,
) -> FilterOutcome:
    """Each node's verdict for a pod of `needed` >= 1 GPUs, in request order, before `finish`:
    fresh fits in `passed`, fits on assumed data in `assumed`."""
    outcome = FilterOutcome()
    stale_after = policy.stale_after_s
    passed, failed, assumed = outcome.passed, outcome.failed, outcome.assumed
    for name in names:
        summary = lookup(name)
        if summary is None:  # no agent data: assess() -> _assumed() with nothing lost, inlined
            count = allocatable.get(name)  # (tests/extender/decide/test_whole_gpus.py holds them equal)
            if count is None or count >= needed:
                assumed.append(name)
            else:
                failed[name] = reasons.INSUFFICIENT_GPUS
            continue
        # is_fresh, inlined on this per-node loop (tests/extender/state/test_freshness.py holds them equal).
        if now - summary.received_at <= stale_after:
            # Hot path: fresh data decides from the summary alone (assess() would
            # give the same verdict, with numbers nobody reads here).
            if summary.idle_gpus >= needed and not summary.node_error:
                passed.append(name)  # idle <= healthy <= count: nothing else can fail
            else:
                failed[name] = fresh_reason(summary, needed)  # type: ignore[assignment]
            continue
        reason = assess(name, allocatable.get(name), summary, needed, now, policy).reason
        if reason is None:
            assumed.append(name)
        else:
            failed[name] = reason
    return outcome


def prioritize(
    needed: int,
    names: Sequence[str],
    allocatable: Mapping[str, int],
    lookup: SummaryLookup,
    now: float,
    policy: DecisionPolicy,
    strategy: str = "spread",
    seed: str = "",
    cost_of: Callable[[str], float | None] | None = None,
) -> list[tuple[str, int]]:
    """(node, score 0-10) for every name, in input order."""
    ranked = rank_nodes(needed, names, allocatable, lookup, now, policy, strategy, seed, cost_of)
    return [(name, score) for name, score, _ in ranked]


def rank_nodes(
    needed: int,
    names: Sequence[str],
    allocatable: Mapping[str, int],
    lookup: SummaryLookup,
    now: float,
    policy: DecisionPolicy,
    strategy: str = "spread",
    seed: str = "",
    cost_of: Callable[[str], float | None] | None = None,
    eligible: Callable[[str], bool] | None = None,
) -> list[tuple[str, int, bool]]:
    """(node, score 0-10, fits) for every name, in input order: prioritize's
    scores plus the filter verdict it already computed, for callers that need both.
    `strategy` picks v (module docstring); `seed` makes `random` repeatable;
    `cost_of(node)` is the node's hourly cost for `cost`; `eligible(node)` says which
    nodes the caller's filter judged at all (the others' fresh fits demote no one)."""
    if needed <= 0:
        return [(name, 0, True) for name in names]
    stale_after = policy.stale_after_s
    rows: list[tuple[str, bool, int, float]] = []  # (node, fits, idle, utilization)
    assumed: list[int] = []  # rows that fit on assumed data
    quality: list[int] = []  # per row: the quality class q (module docstring) of a fresh fit, else -1
    q_low, q_high = NO_QUALITY, -1
    fresh_fits = False
    capacity = max(needed, 1)
    for name in names:
        summary = lookup(name)
        q = -1
        if (
            summary is not None and not summary.node_error and now - summary.received_at <= stale_after
        ):  # fresh, NVML ok
            idle, count = summary.idle_gpus, summary.gpu_count
            utilization = summary.mean_utilization  # from validated reports: within 0..100
            fits = idle >= needed
            if fits:
                qs = summary.quality  # precomputed per set size at ingest
                q = (
                    qs[needed]
                    if needed < len(qs)
                    else quality_for(needed, idle, summary.degraded_idle_gpus, summary.set_tiers)
                )
                if q < q_low:
                    q_low = q
                if q > q_high:
                    q_high = q
                if not fresh_fits:
                    fresh_fits = eligible is None or eligible(name)
        else:
            a = assess(name, allocatable.get(name), summary, needed, now, policy)
            idle = a.idle_gpus if a.idle_gpus is not None else needed  # unknown: assume just enough
            utilization, count, fits = a.mean_utilization, a.gpu_count or 0, a.reason is None
            if a.assumed:
                assumed.append(len(rows))
        if count > capacity:
            capacity = count
        rows.append((name, fits, idle, utilization or 0.0))
        quality.append(q)
    if fresh_fits:  # as in filter: an assumed verdict does not pass while a fresh node fits
        for i in assumed:
            name, _, idle, utilization = rows[i]
            rows[i] = (name, False, idle, utilization)
    scale = capacity + 1
    if not any(fits for _, fits, _, _ in rows):  # the pass-all fallback: least loaded first, whatever the strategy
        return [(name, min(MAX_SCORE, round(MAX_SCORE * spread_value(i, u) / scale)), False) for name, _, i, u in rows]
    values = _strategy_values(strategy, rows, capacity, seed, cost_of)
    classes = _quality_classes(quality, rows, eligible) if q_high > q_low else []
    if len(classes) > 1:  # quality before v (module docstring)
        m = len(classes)
        # Score per class rank r >= 1 (m - r); rank 0 is the band. An ineligible class, or an
        # assumed fit (q -1): last.
        below = {q: m - r for r, q in enumerate(classes) if r}
        best, band = classes[0], best_class_band(m, scale)
        return [
            (name, (best_class_score(v, m, band) if q == best else below.get(q, 1)) if fits else 0, fits)
            for (name, fits, _, _), v, q in zip(rows, values, quality, strict=True)
        ]
    return [
        (name, one_class_score(v, scale) if fits else 0, fits)
        for (name, fits, _, _), v in zip(rows, values, strict=True)
    ]


# The score formulas (decide/README.md, "Prioritize"), for a node that fits; scale = C + 1.


def one_class_score(v: float, scale: int) -> int:
    """Every fitting node in one quality class: 1 + round(9 v / (C + 1)), 1..10."""
    return min(MAX_SCORE, 1 + round(9 * v / scale))


def best_class_band(classes: int, scale: int) -> float:
    """The width per unit of v left to the best of `classes` > 1 quality classes."""
    return (MAX_SCORE - classes) / scale


def best_class_score(v: float, classes: int, band: float) -> int:
    """A node of the best of `classes` > 1 quality classes: m + round((10 - m) v / (C + 1)); the
    class of rank r = 1..m-1 scores m - r, so every node of a better class outranks a worse one."""
    return min(MAX_SCORE, classes + round(band * v))


def binpack_value(idle: int, utilization: float, capacity: int) -> float:
    """The binpack strategy's v = (C - idle) + utilization / 101: fewest idle GPUs that still fit,
    then the busiest."""
    return max(0, capacity - idle) + utilization / 101.0


def _quality_classes(
    quality: Sequence[int], rows: Sequence[tuple[str, bool, int, float]], eligible: Callable[[str], bool] | None
) -> list[int]:
    """The distinct quality classes of the fresh fits the caller's filter judges, best first."""
    present = set(quality)
    present.discard(-1)
    if len(present) > 1 and eligible is not None:
        present = {q for q, row in zip(quality, rows, strict=True) if q >= 0 and eligible(row[0])}
    return sorted(present)


def spread_value(idle: int, utilization: float) -> float:
    """The spread strategy's v = idle + (100 - utilization) / 101 (utilization within 0..100, as
    validated reports give it): the fraction stays below 1, so one more idle GPU always outranks
    any utilization difference."""
    return idle + (100.0 - utilization) / 101.0


def _strategy_values(
    strategy: str,
    rows: Sequence[tuple[str, bool, int, float]],
    capacity: int,
    seed: str,
    cost_of: Callable[[str], float | None] | None,
) -> list[float]:
    """v in [0, capacity + 1) for each row, higher is better."""
    if strategy == "binpack":
        return [binpack_value(idle, utilization, capacity) for _, _, idle, utilization in rows]
    if strategy == "random":
        return [(capacity + 1) * _unit_hash(seed, name) for name, _, _, _ in rows]
    spread = [spread_value(idle, u) for _, _, idle, u in rows]
    if strategy != "cost" or cost_of is None:
        return spread
    costs = [cost_of(name) for name, _, _, _ in rows]
    # The price range of the nodes that can take the pod: others score 0 anyway.
    known = [c for c, (_, fits, _, _) in zip(costs, rows, strict=True) if c is not None and fits]
    if not known:
        return spread
    low, high = min(known), max(known)
    span = high - low
    # Cheapest first (C per unit of cheapness), then least loaded within a price (< 1).
    return [
        capacity * min(1.0, max(0.0, (high - c) / span if span > 0 else 1.0)) + v / (capacity + 1)
        if c is not None
        else v / (capacity + 1)
        for c, v in zip(costs, spread, strict=True)
    ]


def _unit_hash(seed: str, name: str) -> float:
    """A repeatable pseudo-random number in [0, 1) per (seed, node)."""
    digest = hashlib.blake2b(f"{seed}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
