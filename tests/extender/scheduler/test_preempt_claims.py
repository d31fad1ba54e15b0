"""Issue 51, item 5: kube-scheduler's preemption for pods whose GPUs come through DRA ResourceClaims
(decide/preempt_claims.py), pure and through the preempt verb (SchedulerApi.answer_preempt over
real agent reports, DRA inventory, claim and bound-pod ledgers). kube-scheduler's dry run frees no
claim (its DynamicResources plugin has no RemovePod), so a claim pod's candidate is kept with
kube-scheduler's victims only where the devices free in DRA now can serve it, never extended, and
dropped where they cannot; a victim's GPUs held through a claim another pod uses are never counted
as freed. Each rule both ways."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide import preempt_claims
from gpuextender.extender.decide.preempt_victims import AS_PROPOSED, DROPPED, EXTENDED, KEPT, Proposal, Room
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import ExtenderArgs, PreemptionArgs
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import summarize
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import ViewBuilder
from gpuextender.extender.state.pod_ledger import POD_KIND, BoundPod, PodLedger
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.dra_objects import allocated_claim, device_class, gpu_slice

NOW = 1000.0
NS = "ml"
HIGH, LOW = 1000, 10
GPU = ("nvidia.com/gpu",)
STALE_AFTER = 10.0


# -- the pure rule ---------------------------------------------------------------------------------


def claim_pod(gpus: int, priority: int = HIGH) -> PodRequest:
    return PodRequest(ref=f"{NS}/p", gpus_needed=gpus, identity=None, strategy="spread", seed="", priority=priority)  # type: ignore[arg-type]


def summary(states: str, holders: dict[int, str] | None = None) -> Any:
    """One GPU per letter: i idle, b busy, f failing; `holders`: position -> pod holding it."""
    gpus = []
    for i, c in enumerate(states):
        g = gpu(i, 95 if c == "b" else 0, 60 if c == "b" else 1, healthy=c != "f")
        if holders and i in holders:
            g.holders.add(namespace=NS, pod=holders[i], container="main", resource_name="", device_id=g.uuid)
        gpus.append(g)
    r = report("n", gpus)
    r.allocation_source = pb.ALLOCATION_KUBELET
    return summarize(r, IdleRule(), NOW)


def bound_pod(name: str, priority: int, claims: tuple[str, ...] = (), node: str = "n") -> BoundPod:
    return BoundPod(
        uid=f"uid-{name}",
        key=f"{NS}/{name}",
        node=node,
        gpus=0,
        mig=(),
        phase="Running",
        seen_at=0.0,
        claims=claims,
        priority=priority,
    )


def test_a_claim_pods_candidate_is_kept_only_where_the_gpus_free_now_serve_it() -> None:
    """4 GPUs idle: a 4-GPU claim pod is served (kept, kube-scheduler's victims), a 5-GPU one is not."""
    s = summary("iiiibbbb")
    kept = preempt_claims.judge(claim_pod(4), "n", ("uid-cpu",), s, lambda _uid: None)
    assert (kept.kept, kept.usable) == (True, 4)
    dropped = preempt_claims.judge(claim_pod(5), "n", ("uid-cpu",), s, lambda _uid: None)
    assert (dropped.kept, dropped.usable) == (False, 4)
    assert "4 of 5 GPUs usable" in dropped.why and "frees no claim" in dropped.why


def test_failing_gpus_are_never_usable_for_a_claim_pod() -> None:
    s = summary("ffiiiiii")
    assert preempt_claims.judge(claim_pod(6), "n", ("uid-cpu",), s, lambda _uid: None).kept
    assert not preempt_claims.judge(claim_pod(7), "n", ("uid-cpu",), s, lambda _uid: None).kept


def test_a_victim_of_equal_or_higher_priority_drops_a_claim_pods_candidate() -> None:
    s = summary("iiii")
    for priority, kept in ((HIGH, False), (HIGH + 1, False), (HIGH - 1, True)):
        victim = bound_pod("v", priority)
        verdict = preempt_claims.judge(claim_pod(2), "n", (victim.uid,), s, {victim.uid: victim}.get)
        assert verdict.kept is kept, priority
        if not kept:
            assert verdict.why == "a victim's priority is not below the pod's"
    # A pod of that UID bound to another node is not this candidate's victim.
    elsewhere = bound_pod("v", HIGH, node="other")
    assert preempt_claims.judge(claim_pod(2), "n", (elsewhere.uid,), s, {elsewhere.uid: elsewhere}.get).kept


def test_a_candidate_without_victims_is_never_kept() -> None:
    s = summary("iiii")
    assert preempt_claims.judge(claim_pod(2), "n", ("uid-cpu",), s, lambda _uid: None).kept
    bare = preempt_claims.judge(claim_pod(2), "n", (), s, lambda _uid: None)
    assert not bare.kept and "no victim to name" in bare.why


def after(room: Room, *gone: BoundPod) -> int:
    """The GPUs usable once `gone` are evicted."""
    return room.usable(*room.tally(gone))


def test_gpus_held_through_a_claim_another_pod_uses_are_not_counted_as_freed() -> None:
    """`holder` holds GPUs 2-3 through claim ml/pair. Alone on it, evicting it frees them (its claim
    is deallocated once it is gone); while `twin` also uses ml/pair, evicting `holder` frees nothing."""
    s = summary("iiii", holders={2: "holder", 3: "holder"})
    holder = bound_pod("holder", LOW, claims=(f"{NS}/pair",))
    twin = bound_pod("twin", LOW, claims=(f"{NS}/pair",))
    other = bound_pod("other", LOW, claims=(f"{NS}/own",))
    alone = preempt_claims.freed_only(s, [holder, other])
    assert alone is s and after(Room(alone, None), holder) == 4
    shared = preempt_claims.freed_only(s, [holder, twin, other])
    assert after(Room(shared, None), holder) == 2 and sum(Room(shared, None).part(holder)) == 0
    assert preempt_claims.freed_only(s, [bound_pod("cpu", LOW)]) is s  # no claims on the node


# -- through the preempt verb ----------------------------------------------------------------------


def node_object(name: str) -> dict[str, Any]:
    """A DRA node: its allocatable lists no nvidia.com/gpu."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": {"cpu": "64"}}}


class DraFleet:
    """DRA nodes of 4 GPUs (their slices' uuids are the agents' GPUs), fresh agents except `silent`:
    `good` all idle; `busy` GPUs 0-1 busy outside Kubernetes; `failing` GPUs 0-1 failing (no taint
    yet); `tainted` gpu-0, gpu-1 tainted NoSchedule in its slice; `silent` no agent data."""

    NODES = ("good", "busy", "failing", "tainted", "silent")

    def __init__(self, policy: DecisionPolicy | None = None, shared: bool = False) -> None:
        store = InventoryStore()
        self.views = ViewBuilder(store, GPU)
        names = (*self.NODES, "shared")
        store.replace_all("Node", [node_object(n) for n in names])
        store.replace_all("DeviceClass", [device_class()])
        uuid_of = lambda minor: f"GPU-{minor}"  # noqa: E731 (builders.gpu's UUIDs)
        slices = [gpu_slice(n, 4, tainted=(0, 1) if n == "tainted" else (), uuid_of=uuid_of) for n in names]
        store.replace_all("ResourceSlice", slices)
        self.claims = ClaimLedger()
        self.claims.replace_all(
            RESOURCE_CLAIM_KIND,
            [
                to_allocate("four", 4),
                to_allocate("two", 2),
                allocated_claim("pair", "shared", ["gpu-2", "gpu-3"], namespace=NS),
            ],
        )
        self.state = GpuState(IdleRule())
        states = {"good": "iiii", "busy": "bbii", "failing": "ffii", "tainted": "iiii", "shared": "iiii"}
        for n, letters in states.items():
            samples = [
                gpu(i, 95 if c == "b" else 0, 60 if c == "b" else 1, healthy=c != "f") for i, c in enumerate(letters)
            ]
            if n == "shared":  # GPUs 2-3: the claim ml/pair of `holder` (the kubelet's dynamic resources)
                for g in samples[2:]:
                    g.holders.add(namespace=NS, pod="holder", container="main", resource_name="", device_id=g.uuid)
            r = report(n, samples)
            r.allocation_source = pb.ALLOCATION_KUBELET
            self.state.ingest(r, NOW)
        settings = ApiSettings(policy or DecisionPolicy(stale_after_s=STALE_AFTER), shortlist=0)
        self.ledger = PodLedger(GPU)
        self.ledger.replace_all(POD_KIND, [])
        self.api = SchedulerApi(
            self.state,
            ExtenderMetrics(self.state),
            settings,
            inventory=lambda: self.views.current,
            clock=lambda: NOW,
            sources=ClusterSources(ledger=self.ledger, claims=self.claims),
        )
        self.ledger.upsert(POD_KIND, bound("holder", "shared", LOW, "pair"))
        if shared:  # a pod that uses ml/pair too (no container of it is given the devices)
            self.ledger.upsert(POD_KIND, bound("twin", "shared", LOW, "pair"))

    def preempt(self, preemptor: dict[str, Any], proposals: dict[str, list[str]]) -> dict[str, list[str]]:
        args = PreemptionArgs(preemptor, [Proposal(n, tuple(v), 0) for n, v in proposals.items()])
        answer, record = self.api.answer_preempt(args)
        record()
        return {n: [p["UID"] for p in v["Pods"]] for n, v in answer["NodeNameToMetaVictims"].items()}

    def last_call(self, preemptor: dict[str, Any]) -> dict[str, dict[str, Any]]:
        found = self.api.explain(ExtenderArgs(preemptor, [*self.NODES, "shared"], None))["preemption"]["lastCall"]
        return {c["node"]: c for c in found["candidates"]}


def to_allocate(name: str, gpus: int) -> dict[str, Any]:
    obj = allocated_claim(name, "n", [], namespace=NS)
    obj["spec"]["devices"]["requests"][0]["exactly"].update(allocationMode="ExactCount", count=gpus)
    del obj["status"]
    return obj


def bound(name: str, node: str, priority: int, claim: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {
            "nodeName": node,
            "priority": priority,
            "resourceClaims": [{"name": "gpus", "resourceClaimName": claim}],
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpus"}]}}],
        },
        "status": {"phase": "Running", "startTime": "2026-12-07T01:00:00Z"},
    }


def preemptor(claim: str | None, gpus: int = 0) -> dict[str, Any]:
    """A pod of HIGH priority asking GPUs through ResourceClaim `claim`, or `gpus` nvidia.com/gpu."""
    spec: dict[str, Any] = {"priority": HIGH}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
        spec["containers"] = [{"name": "c", "resources": {"claims": [{"name": "gpus"}]}}]
    else:
        spec["containers"] = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
    return {"metadata": {"name": "p", "namespace": NS, "uid": "uid-p"}, "spec": spec}


def cpu_victims(*nodes: str) -> dict[str, list[str]]:
    """kube-scheduler's candidates for a claim pod: victims that free CPU, ports, ... (no GPU pod)."""
    return {n: [f"uid-cpu-{n}"] for n in nodes}


def test_through_the_verb_a_claim_pod_keeps_only_the_nodes_whose_free_devices_serve_it() -> None:
    """4 GPUs: `good` alone (busy: 2 idle; failing: 2 healthy; tainted: 2 devices the allocator may
    give; silent: no fresh data while a fresh node is kept). 2 GPUs: every node with fresh data."""
    fleet = DraFleet()
    nodes = ("good", "busy", "failing", "tainted", "silent")
    four = preemptor("four")
    assert fleet.preempt(four, cpu_victims(*nodes)) == cpu_victims("good")
    plans = fleet.last_call(four)
    assert {n: p["action"] for n, p in plans.items()} == {
        "good": KEPT,
        "busy": DROPPED,
        "failing": DROPPED,
        "tainted": DROPPED,
        "silent": DROPPED,
    }
    assert plans["failing"]["why"].startswith("InsufficientHealthyGPUs")
    assert "2 of 4 GPUs usable" in plans["busy"]["why"] and "2 of 4 GPUs usable" in plans["tainted"]["why"]
    assert plans["silent"]["why"].startswith("NoFreshGPUData")
    two = preemptor("two")
    assert fleet.preempt(two, cpu_victims(*nodes)) == cpu_victims("good", "busy", "failing", "tainted")


def test_without_fresh_data_a_claim_pods_candidate_is_as_proposed_unless_stale_under_fail_closed() -> None:
    for policy, expected in (("fail-open", AS_PROPOSED), ("fail-closed", DROPPED)):
        fleet = DraFleet(DecisionPolicy(stale_after_s=STALE_AFTER, stale_policy=policy))
        fleet.state.ingest(report("silent", [gpu(i, 0, 1) for i in range(4)]), NOW - STALE_AFTER - 1)
        answer = fleet.preempt(preemptor("four"), cpu_victims("silent"))
        assert fleet.last_call(preemptor("four"))["silent"]["action"] == expected, policy
        assert answer == (cpu_victims("silent") if expected == AS_PROPOSED else {})


def test_no_victim_is_ever_added_for_a_claim_pod_while_a_gpu_pod_would_get_one() -> None:
    """`shared`: GPUs 0-1 free, 2-3 held by the low-priority `holder` (claim ml/pair). A 4-GPU
    nvidia.com/gpu pod (DRA-backed) gets `holder` added; a 4-GPU claim pod is dropped, nothing added
    (kube-scheduler's dry run does not free claims: it would not see what the eviction frees)."""
    fleet = DraFleet()
    assert fleet.preempt(preemptor(None, 4), cpu_victims("shared")) == {"shared": ["uid-cpu-shared", "uid-holder"]}
    assert fleet.last_call(preemptor(None, 4))["shared"]["action"] == EXTENDED
    assert fleet.preempt(preemptor("four"), cpu_victims("shared")) == {}
    plan = fleet.last_call(preemptor("four"))["shared"]
    assert plan["action"] == DROPPED and "2 of 4 GPUs usable" in plan["why"]


def test_a_victims_gpus_held_through_a_shared_claim_are_not_counted_as_freed_through_the_verb() -> None:
    """As above, but `twin` also uses ml/pair: evicting `holder` frees nothing, so no victim is added
    and the node is dropped."""
    fleet = DraFleet(shared=True)
    assert fleet.preempt(preemptor(None, 4), cpu_victims("shared")) == {}
    plan = fleet.last_call(preemptor(None, 4))["shared"]
    assert plan["action"] == DROPPED and "leaves 2 of 4" in plan["why"]


@pytest.mark.parametrize(("victim_priority", "answered"), [(HIGH, False), (LOW, True)])
def test_a_claim_pods_candidate_with_a_victim_not_below_it_is_dropped(victim_priority: int, answered: bool) -> None:
    fleet = DraFleet()
    fleet.ledger.upsert(POD_KIND, bound("peer", "good", victim_priority, "elsewhere"))
    answer = fleet.preempt(preemptor("four"), {"good": ["uid-peer"]})
    assert answer == ({"good": ["uid-peer"]} if answered else {})


def test_the_claim_pods_plan_carries_no_not_judged_note_any_more() -> None:
    """Before item 5 every claim pod's candidates were kept as proposed with a note."""
    fleet = DraFleet()
    fleet.preempt(preemptor("four"), cpu_victims("good"))
    found = fleet.api.explain(ExtenderArgs(preemptor("four"), ["good"], None))["preemption"]["lastCall"]
    assert "note" not in found or not found["note"], json.dumps(found)
