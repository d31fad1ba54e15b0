"""Rules of claim-pod preemption (decide/preempt_claims.py) that mutation testing found no test
holding: a victim on the node at equal or higher priority drops the candidate (one a priority
below, on another node or unknown to the ledger does not); the pod's GPUs are the fewer of idle
and healthy, exactly the count is enough and one fewer is not; no victim drops it; each judgement
says why in full. `freed_only` drops the GPUs of pods sharing a claim with another pod on the node
and keeps the summary itself when no claim is shared. Each test fails on a one-line change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from gpuextender.extender.decide.preempt_claims import ClaimJudgement, freed_only, judge
from gpuextender.extender.model.ome.pod_intent import PodIdentity
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.pod_ledger import BoundPod

Units = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class Summary:
    """The fields of a NodeSummary the claim rules read."""

    idle_gpus: int = 0
    healthy_gpus: int = 0
    pod_units: Units = ()


def summary(idle: int = 0, healthy: int = 0, units: Units = ()) -> NodeSummary:
    return cast(NodeSummary, Summary(idle, healthy, units))


def pod(gpus: int, priority: int = 10) -> PodRequest:
    return PodRequest("ns/p", gpus, PodIdentity("ns", "", "", "", "", ""), "spread", "", priority=priority)


def bound(key: str, node: str = "n", priority: int = 5, claims: tuple[str, ...] = ()) -> BoundPod:
    return BoundPod(f"uid-{key}", key, node, 0, (), "Running", 0.0, claims=claims, priority=priority)


def ledger(*pods: BoundPod) -> dict[str, BoundPod]:
    return {b.uid: b for b in pods}


KEPT = ClaimJudgement(True, "2 GPUs usable free in DRA: kube-scheduler's victims, none added", 2)


def test_a_lower_priority_victim_with_enough_usable_gpus_is_kept_saying_so() -> None:
    pods = ledger(bound("v", priority=9))
    assert judge(pod(2), "n", ["uid-v"], summary(2, 2), pods.get) == KEPT


def test_a_victim_of_equal_priority_on_the_node_drops_the_candidate() -> None:
    pods = ledger(bound("low", priority=9), bound("v", priority=10))
    got = judge(pod(2), "n", ["uid-low", "uid-v"], summary(2, 2), pods.get)
    assert got == ClaimJudgement(False, "a victim's priority is not below the pod's")


def test_a_higher_priority_pod_on_another_node_or_unknown_victim_does_not_drop_it() -> None:
    pods = ledger(bound("v", node="other", priority=11))
    assert judge(pod(2), "n", ["uid-v", "uid-gone"], summary(2, 2), pods.get) == KEPT


def test_usable_gpus_are_the_fewer_of_idle_and_healthy_and_exactly_the_count_is_enough() -> None:
    pods = ledger(bound("v"))
    assert judge(pod(2), "n", ["uid-v"], summary(2, 3), pods.get) == KEPT
    assert judge(pod(2), "n", ["uid-v"], summary(3, 2), pods.get) == KEPT


def test_one_usable_gpu_fewer_than_needed_drops_the_candidate_saying_so() -> None:
    pods = ledger(bound("v"))
    why = (
        "1 of 2 GPUs usable (the others claimed, tainted, busy or failing), and "
        "kube-scheduler frees no claim for a claim pod"
    )
    assert judge(pod(2), "n", ["uid-v"], summary(1, 5), pods.get) == ClaimJudgement(False, why, 1)
    assert judge(pod(2), "n", ["uid-v"], summary(5, 1), pods.get) == ClaimJudgement(False, why, 1)


def test_no_victim_drops_the_candidate_saying_so() -> None:
    got = judge(pod(2), "n", [], summary(2, 2), ledger().get)
    assert got == ClaimJudgement(False, "fits without evictions (2 GPUs usable): no victim to name", 2)


def test_freed_only_keeps_the_summary_itself_without_claims() -> None:
    s = summary(units=(("ns/a", 0, 1),))
    assert freed_only(s, [bound("ns/a")]) is s


def test_freed_only_keeps_the_summary_itself_when_each_claim_has_one_user() -> None:
    s = summary(units=(("ns/a", 0, 1), ("ns/b", 1, 1)))
    assert freed_only(s, [bound("ns/a", claims=("c1",)), bound("ns/b", claims=("c2",))]) is s


def test_freed_only_drops_the_units_of_every_pod_sharing_a_claim() -> None:
    s = summary(idle=1, units=(("ns/a", 0, 1), ("ns/b", 1, 1), ("ns/c", 2, 1)))
    pods = [bound("ns/a", claims=("own", "shared")), bound("ns/b", claims=("shared",)), bound("ns/c", claims=("c",))]
    got = cast(Summary, freed_only(s, pods))
    assert got.pod_units == (("ns/c", 2, 1),) and got.idle_gpus == 1
