"""kube-scheduler's preemption for pods whose GPUs come through DRA ResourceClaims, checked so that
the extender never makes it worse (issue 51, item 5; decide/README.md, "Preemption", DRA).

What kube-scheduler does (v1.35.4 and v1.36.2, the suite's binaries): its DynamicResources plugin
has no PreFilterExtensions (no AddPod/RemovePod: `PreFilterExtensions()` returns nil in
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go; neither binary holds a
`(*DynamicResources).RemovePod`), so DefaultPreemption's dry run removes a victim from the node's
pods but never frees the devices its claims hold. A node is a candidate for a claim pod only where
its allocator already finds the pod's devices free with every victim's claim still allocated: the
victims it names free something else (CPU, memory, pod slots, host ports, affinity), and the pod is
then given devices that are free in DRA now, first fit. DRA-aware preemption is KEP-5690
(kubernetes/enhancements PR #6113, open; kubernetes/kubernetes PR #139266, closed unmerged).

So, per candidate of a claim pod (`judge`; the plan's common rules ran first: a node the pod's
filter fails unresolvably, failing or too few healthy devices, wrong class, is dropped whatever is
evicted; stale data under fail-closed is dropped; no fresh data is kept as proposed only while no
node with fresh data is):

- a victim of equal or higher priority than the pod (by the ledger): dropped;
- fresh GPU data: the pod's GPUs there are the ones the filter offers it now (free in DRA, no
  NoSchedule taint, healthy, idle, less bound pods not attributed yet). Enough: kept with
  kube-scheduler's victims as they are; too few (the devices free in DRA are busy outside
  Kubernetes, failing before any taint says so, or claimed): dropped, since its victims free no device
  kube-scheduler counts and its allocator would hand out those same devices;
- never a victim added: kube-scheduler cannot count a freed claim, so an added victim would be
  evicted for devices its own dry run does not see (and the pod would not be placed by it);
- no victim named (kubernetes PR #135486): dropped, as every answered node must name one.

`freed_only` is the other half: for a pod that asks `nvidia.com/gpu`, a victim's GPUs held through a
claim count as freed only when no other pod on the node uses one of its claims (a claim made from a
ResourceClaimTemplate is its pod's alone: the resourceclaim controller deletes it once the pod is
done; a claim several pods reserve stays allocated until the last one is gone). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.pod_ledger import BoundPod


@dataclass(frozen=True, slots=True)
class ClaimJudgement:
    """One claim-pod candidate: kept with kube-scheduler's victims, or dropped, and why."""

    kept: bool
    why: str
    usable: int | None = None  # GPUs the pod would be given there (fresh data); None: not known


def judge(
    pod: PodRequest,
    node: str,
    victims: Sequence[str],
    summary: NodeSummary,
    bound: Callable[[str], BoundPod | None],
) -> ClaimJudgement:
    """A candidate of a claim pod on a node with fresh GPU data (`summary`: what the pod's filter
    reads there); `victims`: kube-scheduler's, by UID; `bound(uid)`: the ledger's pod."""
    for uid in victims:
        b = bound(uid)
        if b is not None and b.node == node and b.priority >= pod.priority:
            return ClaimJudgement(False, "a victim's priority is not below the pod's")
    needed, usable = pod.gpus_needed, min(summary.idle_gpus, summary.healthy_gpus)
    if usable < needed:
        return ClaimJudgement(
            False,
            f"{usable} of {needed} GPUs usable (the others claimed, tainted, busy or failing), and "
            "kube-scheduler frees no claim for a claim pod",
            usable,
        )
    if not victims:
        return ClaimJudgement(False, f"fits without evictions ({usable} GPUs usable): no victim to name", usable)
    return ClaimJudgement(True, f"{usable} GPUs usable free in DRA: kube-scheduler's victims, none added", usable)


def freed_only(summary: NodeSummary, pods: Collection[BoundPod]) -> NodeSummary:
    """`summary` less the GPUs of the node's pods that hold them through a claim another pod on the
    node also uses (evicting one of them frees nothing while the other holds the claim), for the
    count of what victims give back (preempt_victims.Room reads `pod_units`). The node's pods
    without claims: `summary` itself."""
    users: dict[str, int] = {}
    for b in pods:
        for claim in b.claims:
            users[claim] = users.get(claim, 0) + 1
    if not users:
        return summary
    shared = {b.key for b in pods if any(users[c] > 1 for c in b.claims)}
    if not shared:
        return summary
    return replace(summary, pod_units=tuple(u for u in summary.pod_units if u[0] not in shared))
