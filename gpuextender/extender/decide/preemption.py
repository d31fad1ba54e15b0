"""When no node fits a pod, whether kube-scheduler's preemption could still place it (issue 51,
item 1; decide/README.md, "Filter").

The no-fit fallback (`--no-fit-policy pass-all`) passes the busy and stale nodes so that
kube-scheduler decides among them: it then binds the pod to a node whose GPUs only its own count
calls free (busy outside Kubernetes) and never tries preemption, which runs only when no node
passes. So where the pod may preempt (its `preemptionPolicy` is not `Never`) and one of those
nodes holds a GPU pod of lower priority, the fallback is held back: the nodes fail with their
soft (resolvable) reasons and kube-scheduler's preemption decides which pods to evict. The
fallback stays for pods preemption cannot help: equal or higher priority everywhere, or
`Never`. Pure: the bound pods come from the ledger through the snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.state.pod_ledger import BoundPod


def holds_gpus(pod: BoundPod) -> bool:
    """It holds GPUs an eviction would give back: whole ones, MIG devices or ResourceClaims."""
    return pod.gpus > 0 or bool(pod.mig) or bool(pod.claims)


def preemptible_nodes(
    pod: PodRequest, nodes: Iterable[str], bound_pods: Callable[[str], Iterable[BoundPod]]
) -> list[str]:
    """Of `nodes`, those where a GPU pod of priority below `pod`'s is bound (what kube-scheduler's
    preemption may evict); none for a pod that may not preempt."""
    if not pod.preempts:
        return []
    mine = pod.priority
    return [n for n in nodes if any(b.priority < mine and holds_gpus(b) for b in bound_pods(n))]
