"""decide/preemption.py on its own: a node counts when a bound pod holding GPUs (whole, MIG or
ResourceClaims) has a priority strictly below the pod's, and only for a pod that may preempt."""

from __future__ import annotations

from gpuextender.extender.decide.preemption import holds_gpus, preemptible_nodes
from gpuextender.extender.model.ome.pod_intent import PodIdentity
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.state.pod_ledger import BoundPod


def bound(
    node: str, priority: int, gpus: int = 1, mig: tuple[tuple[str, int], ...] = (), claims: tuple[str, ...] = ()
) -> BoundPod:
    return BoundPod(
        f"uid-{node}-{priority}", f"ns/{node}", node, gpus, mig, "Running", 0.0, claims=claims, priority=priority
    )


def pod(priority: int, preempts: bool = True) -> PodRequest:
    return PodRequest(
        "ns/p", 1, PodIdentity("ns", "", "", "", "", ""), "spread", "", priority=priority, preempts=preempts
    )


def test_what_holds_gpus() -> None:
    assert holds_gpus(bound("n", 0, gpus=1))
    assert holds_gpus(bound("n", 0, gpus=0, mig=(("1g.10gb", 1),)))
    assert holds_gpus(bound("n", 0, gpus=0, claims=("ns/claim",)))
    assert not holds_gpus(bound("n", 0, gpus=0))


def test_strictly_lower_priority_gpu_holders_only() -> None:
    on = {
        "below": [bound("below", 9)],
        "equal": [bound("equal", 10)],
        "above": [bound("above", 11)],
        "no-gpus": [bound("no-gpus", 0, gpus=0)],
        "empty": [],
        "mixed": [bound("mixed", 11), bound("mixed", 9)],
    }
    assert preemptible_nodes(pod(10), list(on), lambda n: on[n]) == ["below", "mixed"]
    assert preemptible_nodes(pod(10, preempts=False), list(on), lambda n: on[n]) == []
