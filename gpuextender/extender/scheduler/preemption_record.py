"""What a preempt call leaves behind (issue 51, item 7): its metrics, one log line, and the plan kept
per pod for explain ("which candidates kube-scheduler proposed, which the extender kept, extended or
dropped, and why").

At most `MAX_PODS` plans and `MAX_NODES` candidates in all are kept, the oldest dropped first, each
for `TTL_S` (kube-scheduler retries a pod that could not preempt within minutes): a flood of
preemptors costs bounded memory (a candidate of 10 victims holds ~1.2 KB: 500 candidates 0.58 MiB,
bench/RESULTS.md; the newest plan is always kept)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import islice
from typing import Any

from gpuextender.extender.decide.preempt_victims import ACTIONS, DROPPED, EXTENDED, PreemptionPlan
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.observe.metrics import ExtenderMetrics

log = logging.getLogger("gpu_extender.http")

MAX_PODS = 500
MAX_NODES = 10_000  # candidates over all plans kept: ~12 MiB
TTL_S = 600.0
LOG_NODES = 5  # candidates an INFO line names (DEBUG: all)


@dataclass(frozen=True, slots=True)
class Preempted:
    pod: str  # namespace/name
    at: float  # the clock's time of the call
    plan: PreemptionPlan


class RecentPreemptions:
    def __init__(self, max_pods: int = MAX_PODS, ttl_s: float = TTL_S, max_nodes: int = MAX_NODES) -> None:
        self._max = max_pods
        self._ttl = ttl_s
        self._max_nodes = max_nodes
        self._plans: dict[str, Preempted] = {}  # pod uid -> its latest plan, oldest first
        self._nodes = 0  # candidates over the plans kept

    def record(self, uid: str, pod: str, plan: PreemptionPlan, now: float) -> None:
        before = self._plans.pop(uid, None)
        if before is not None:
            self._nodes -= len(before.plan.nodes)
        self._plans[uid] = Preempted(pod, now, plan)
        self._nodes += len(plan.nodes)
        while len(self._plans) > 1 and (len(self._plans) > self._max or self._nodes > self._max_nodes):
            oldest = next(iter(self._plans))
            self._nodes -= len(self._plans.pop(oldest).plan.nodes)

    def latest(self, uid: str, now: float) -> Preempted | None:
        found = self._plans.get(uid)
        if found is None or now - found.at > self._ttl:
            return None
        return found

    def __len__(self) -> int:
        return len(self._plans)


def record_preemption(metrics: ExtenderMetrics, pod: PodRequest, plan: PreemptionPlan) -> None:
    """The counters and the decision's log line."""
    counts = dict.fromkeys(ACTIONS, 0)
    added = 0
    for n in plan.nodes:
        counts[n.action] += 1
        added += len(n.added)
    for action, count in counts.items():
        if count:
            metrics.preemption_nodes.labels(action=action).inc(count)
    if added:
        metrics.preemption_victims_added.inc(added)
    if not log.isEnabledFor(logging.INFO):
        return
    limit = len(plan.nodes) if log.isEnabledFor(logging.DEBUG) else LOG_NODES
    shown = [
        f"{n.node}: {n.action} ({n.why})"
        for n in islice(sorted(plan.nodes, key=lambda n: n.action not in (DROPPED, EXTENDED)), limit)
    ]
    more = f" and {len(plan.nodes) - len(shown)} more" if len(plan.nodes) > len(shown) else ""
    log.info(
        "preempt %s (priority %d, needs %d GPU): %d candidate(s), %s%s%s",
        pod.ref,
        pod.priority,
        pod.gpus_needed,
        len(plan.nodes),
        ", ".join(f"{c} {a}" for a, c in counts.items() if c) or "none",
        (": " + "; ".join(shown)) if shown else "",
        more,
        extra={"pod": pod.ref, "verb": "preempt"},
    )


def explained(found: Preempted, now: float, names: dict[str, str]) -> dict[str, Any]:
    """explain's `preemption.lastCall`: the candidates of the pod's latest preempt call and what became
    of each; victims by namespace/name where the ledger knows them (`names`: uid -> name), else by UID."""
    plan = found.plan
    return {
        "secondsAgo": round(now - found.at, 1),
        "note": plan.note or None,
        "candidates": [
            {
                "node": n.node,
                "action": n.action,
                "why": n.why,
                "gpusUsableAfter": n.usable,
                "proposed": [names.get(uid, uid) for uid in n.proposed],
                "victims": [names.get(uid, uid) for uid in n.victims],
                "added": [names.get(uid, uid) for uid in n.added],
                "pdbViolations": n.pdb_violations,
            }
            for n in plan.nodes
        ],
    }
