"""The shortlist's cut (decide/README.md, "The shortlist"): the `keep` best of the nodes that pass a
GPU pod's filter, by the score prioritize would give them among themselves; equal scores are taken
in request order rotated by a hash of the pod (its UID seed), so a run of equal nodes is not always
cut the same way.

`best_by_score` is the definition: every passing node scored with
`class_plan.prioritize_with_classes`. At 5,000 names that is most of a filter call, so the common
case takes a faster road to the same set: the snapshot's index where it has one (fit_index.py: the
ranking kept per node change), else `_best_fresh` (held equal to the definition on generated
fleets by tests/extender/decide/test_shortlist.py): the pod is class-neutral, the strategy spread
or binpack, and every passing node fits on fresh data (or none has agent data: then all score
alike). Then a node's score is a non-decreasing function of one sort key, so one sort in C orders
the nodes, and the score formula is evaluated only O(log n) times, to find where the `keep`-th
node's score begins and ends; that run of equal scores is cut in rotated order.
"""

from __future__ import annotations

import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter, itemgetter
from typing import cast

from gpuextender.extender.decide import class_plan, whole_gpus
from gpuextender.extender.decide.snapshot import Candidates, Snapshot
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.state.gpu_summary import NodeSummary

_RECEIVED_AT = attrgetter("received_at")
_NODE_ERROR = attrgetter("node_error")
_IDLE = attrgetter("idle_gpus")
_COUNT = attrgetter("gpu_count")
_QUALITY = attrgetter("quality")


def best(
    pod: PodRequest, passed: list[str], keep: int, candidates: Candidates, known: Snapshot, plan: class_plan.ClassPlan
) -> list[str]:
    """The `keep` best of `passed` (module docstring), the best first (equal scores in rotated order).

    Scored among `passed` only, as kube-scheduler's prioritize call then scores them (a third less
    work at 5,000 names than scoring every candidate). Explain scores every candidate on a scale
    (the largest GPU count among them) the same or coarser: the order agrees, up to nodes that tie
    here."""
    start = zlib.crc32(pod.seed.encode()) % len(passed)
    index = known.fit_index
    if index is not None and not plan.applies and not pod.mig_needed:
        ranked = index.best(pod.gpus_needed, passed, start, keep, pod.strategy, known.now, known.policy.stale_after_s)
        if ranked is not None:
            return ranked
    names = passed[start:] + passed[:start]  # rotated: equal scores are cut in this order
    if not plan.applies and pod.strategy in ("spread", "binpack"):
        fast = _best_fresh(pod.gpus_needed, names, candidates.allocatable, known, pod.strategy, keep)
        if fast is not None:
            return fast
    return best_by_score(pod.gpus_needed, names, candidates, known, plan, pod.strategy, pod.seed, keep)


def best_by_score(
    needed: int,
    names: list[str],
    candidates: Candidates,
    known: Snapshot,
    plan: class_plan.ClassPlan,
    strategy: str,
    seed: str,
    keep: int,
) -> list[str]:
    """The definition: every one of `names` scored, the `keep` best kept, equal scores in the order given."""
    ranked, _ = class_plan.prioritize_with_classes(
        needed, Candidates(names, candidates.allocatable), known, plan, strategy, seed
    )
    scores = list(map(itemgetter(1), ranked))
    # sorted() is stable with reverse=True too: equal scores keep the order given.
    return list(map(names.__getitem__, sorted(range(len(names)), key=scores.__getitem__, reverse=True)[:keep]))


def _best_fresh(
    needed: int, names: list[str], allocatable: Mapping[str, int], known: Snapshot, strategy: str, keep: int
) -> list[str] | None:
    """best_by_score's set for a class-neutral pod of `needed` >= 1 GPUs when every one of `names`
    fits on fresh data, or none of them has agent data (else None: take that road).

    What rank_nodes computes for such nodes: v per node from the strategy, C = the largest GPU
    count (at least `needed`, at least 1), q = the node's quality class for `needed` GPUs. With one
    class the score is one_class_score(v); with m > 1, the best class scores best_class_score(v)
    >= m and the class of rank r scores m - r. So the key v (best class) or -r (rank r) orders the
    scores: score = g(key) with g non-decreasing."""
    if needed <= 0:  # rank_nodes scores every node 0 then
        return None
    looked_up = list(map(known.summary, names))
    if not any(looked_up):  # no node has agent data: if each fits on assumed data (idle = needed, 0 %),
        # all score alike (the same v and C for all): the first in the order given.
        fits = all(count is None or count >= needed for count in map(allocatable.get, names))
        return names[:keep] if fits else None
    try:
        oldest = min(map(_RECEIVED_AT, looked_up))  # AttributeError: a node without data
        quality = list(map(itemgetter(needed), map(_QUALITY, looked_up)))  # IndexError: past the table
    except (AttributeError, IndexError):
        return None
    summaries = cast(list[NodeSummary], looked_up)  # none is None: each had a received_at
    # is_fresh for the oldest (state/freshness.py; subtraction is monotone, so it holds for all).
    if known.now - oldest > known.policy.stale_after_s or any(map(_NODE_ERROR, summaries)):
        return None
    idle = list(map(_IDLE, summaries))
    if min(idle) < needed:
        return None
    capacity = max(needed, 1, max(map(_COUNT, summaries)))
    scale = capacity + 1
    if strategy == "spread":  # whole_gpus.spread_value, inlined: one pass instead of three
        values = [s.idle_gpus + (100.0 - (s.mean_utilization or 0.0)) / 101.0 for s in summaries]
    else:
        values = [whole_gpus.binpack_value(s.idle_gpus, s.mean_utilization or 0.0, capacity) for s in summaries]
    classes = sorted(set(quality))
    m = len(classes)
    score: Callable[[float], int]
    if m == 1:
        keys = values

        def score(key: float) -> int:
            return whole_gpus.one_class_score(key, scale)

    else:
        rank = {q: float(-r) for r, q in enumerate(classes)}  # floats: one key type sorts fastest
        best_q, band = classes[0], whole_gpus.best_class_band(m, scale)
        keys = [v if q == best_q else rank[q] for v, q in zip(values, quality, strict=True)]

        def score(key: float) -> int:
            return whole_gpus.best_class_score(key, m, band) if key >= 0 else m + int(key)

    return list(map(names.__getitem__, cut(keys, score, keep)))


def cut(keys: Sequence[float], score: Callable[[float], int], keep: int) -> list[int]:
    """The indices of the `keep` best by score(key) (g non-decreasing in the key), equal scores
    by lower index first."""
    order = sorted(range(len(keys)), key=keys.__getitem__, reverse=True)
    if len(order) <= keep:
        return order
    if keep <= 0:
        return []

    def minus_score(i: int) -> int:  # non-decreasing along `order`, as bisect needs
        return -score(keys[i])

    last = minus_score(order[keep - 1])
    above = bisect_left(order, last, 0, keep, key=minus_score)  # scores above the keep-th's
    end = bisect_right(order, last, keep, len(order), key=minus_score)  # end of the run equal to it
    return order[:above] + sorted(order[above:end])[: keep - above]
