"""The bound-pod ledger (extender/state/pod_ledger.py): which pods it keeps, how slim, and which nodes
it says changed."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.model.kube_objects import KINDS, POD
from gpuextender.extender.model.pod_gpus import MAX_GPU_COUNT, may_request
from gpuextender.extender.state import pod_ledger
from gpuextender.extender.state.pod_ledger import BoundPod, PodLedger

GPU = "nvidia.com/gpu"
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pod(
    name: str,
    node: str | None = "n1",
    *,
    gpus: Any = 1,
    uid: str | None = None,
    namespace: str | None = "ml",
    phase: str | None = "Pending",
    resources: dict[str, Any] | None = None,
    deleting: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid or f"uid-{name}"}
    if namespace is not None:
        meta["namespace"] = namespace
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    if labels:
        meta["labels"] = labels
    requests = resources if resources is not None else ({GPU: gpus} if gpus is not None else {})
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": requests}}]}
    if node is not None:
        spec["nodeName"] = node
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ledger(clock: Clock) -> PodLedger:
    return PodLedger([GPU, MIG_1G, MIG_3G], clock=clock)


def listen(ledger: PodLedger) -> list[str]:
    heard: list[str] = []
    ledger.on_change(heard.append)
    return heard


def on(ledger: PodLedger, node: str) -> list[BoundPod]:
    return sorted(ledger.pods_on(node), key=lambda p: p.key)


# -- slim ------------------------------------------------------------------------------------------


def test_slim_keeps_only_what_the_decision_reads(ledger: PodLedger) -> None:
    record = ledger.slim(pod("a", gpus="2", phase="Running", labels={"ome.io/inferenceservice": "llama"}), 7.0)
    assert record == BoundPod(
        "uid-a", "ml/a", "n1", 2, (), "Running", 7.0, "llama", labels=(("ome.io/inferenceservice", "llama"),)
    )


def test_slim_keeps_the_priority_preemption_reads(ledger: PodLedger) -> None:
    """spec.priority (model/pod_priority.py: int32, else 0): who may preempt the pod (issue 51)."""
    obj = pod("a")
    obj["spec"]["priority"] = -100
    record = ledger.slim(obj, 7.0)
    assert record is not None and record.priority == -100
    obj["spec"]["priority"] = 2**31
    record = ledger.slim(obj, 7.0)
    assert record is not None and record.priority == 0


@pytest.mark.parametrize(
    "obj",
    [
        pod("unbound", node=None),
        pod("empty-node", node=""),
        pod("done", phase="Succeeded"),
        pod("failed", phase="Failed"),
        pod("deleting", deleting=True),
        pod("no-gpu", gpus=None),
        pod("zero-gpu", gpus="0"),
        pod("cpu-only", resources={"cpu": "2"}),
        pod("other-resource", resources={"amd.com/gpu": "1"}),
        {"kind": "Pod", "metadata": {"name": "no-uid"}, "spec": {"nodeName": "n1"}},
    ],
    ids=lambda o: o["metadata"]["name"],
)
def test_slim_is_none_for_a_pod_that_holds_nothing_here(ledger: PodLedger, obj: dict[str, Any]) -> None:
    assert ledger.slim(obj, 0.0) is None
    assert ledger.invalid == 0


@pytest.mark.parametrize("phase", [None, "Pending", "Running", "Unknown"])
def test_slim_keeps_every_unfinished_phase(ledger: PodLedger, phase: str | None) -> None:
    record = ledger.slim(pod("a", phase=phase), 0.0)
    assert record is not None and record.phase == (phase or "")


def test_slim_counts_each_mig_profile_apart_from_whole_gpus(ledger: PodLedger) -> None:
    mixed = pod("mig", resources={MIG_3G: "1", MIG_1G: "2"})
    mixed["spec"]["containers"].append({"name": "side", "resources": {"limits": {MIG_1G: 1, GPU: "1"}}})
    record = ledger.slim(mixed, 0.0)
    assert record is not None
    assert (record.gpus, record.mig) == (1, (("1g.10gb", 3), ("3g.40gb", 1)))
    only_mig = ledger.slim(pod("m", resources={MIG_1G: "1"}), 0.0)
    assert only_mig is not None and (only_mig.gpus, only_mig.mig) == (0, (("1g.10gb", 1),))


def test_slim_reads_only_the_configured_resources(clock: Clock) -> None:
    whole_only = PodLedger([GPU], clock=clock)
    assert whole_only.slim(pod("m", resources={MIG_1G: "1"}), 0.0) is None
    mig_only = PodLedger([MIG_1G], clock=clock)
    assert mig_only.slim(pod("g", gpus="4"), 0.0) is None
    record = mig_only.slim(pod("m", resources={MIG_1G: "1", GPU: "4"}), 0.0)
    assert record is not None and (record.gpus, record.mig) == (0, (("1g.10gb", 1),))


@pytest.mark.parametrize("quantity", ["1e999999", "0.5", "-1", "lots", str(MAX_GPU_COUNT + 1)])
def test_a_refused_quantity_is_counted_invalid_and_not_stored(ledger: PodLedger, quantity: str) -> None:
    assert ledger.slim(pod("bad", gpus=quantity), 0.0) is None
    assert ledger.invalid == 1
    ledger.upsert("Pod", pod("bad", gpus=quantity))
    assert ledger.invalid == 2 and len(ledger) == 0 and list(ledger.nodes()) == []


def test_the_largest_accepted_quantity_is_stored(ledger: PodLedger) -> None:
    record = ledger.slim(pod("big", gpus=str(MAX_GPU_COUNT)), 0.0)
    assert record is not None and record.gpus == MAX_GPU_COUNT and ledger.invalid == 0


def test_a_pod_without_namespace_is_in_default(ledger: PodLedger) -> None:
    record = ledger.slim(pod("a", namespace=None), 0.0)
    assert record is not None and record.key == "default/a"


def test_the_watch_asks_for_what_slim_keeps() -> None:
    """The Pod watch's field selector is the ledger's, and pods never reach the InventoryStore."""
    assert POD.field_selector == pod_ledger.FIELD_SELECTOR
    assert POD not in KINDS and POD.plural == "pods" and POD.namespaced and POD.group == ""


# -- may_request: the LIST filter in front of slim ------------------------------------------------


@pytest.mark.parametrize(
    "obj",
    [
        pod("g", gpus="1"),
        pod("zero", gpus="0"),
        pod("bad", gpus="1e999999"),
        pod("m", resources={MIG_1G: "1"}),
        {"spec": {"initContainers": [{"resources": {"limits": {GPU: "1"}}}]}},
        {"spec": "garbage"},
        {"spec": {"containers": "garbage"}},
        {"spec": {"containers": ["garbage"]}},
        {"spec": {"containers": [{"resources": "garbage"}]}},
        {"spec": {"containers": [{"resources": {"limits": 3}}]}},
        {"spec": {"resourceClaims": [{"name": "gpus", "resourceClaimName": "two"}], "containers": [{}]}},
        "not a pod",
    ],
)
def test_may_request_keeps_every_pod_slim_could_keep_or_count(obj: Any) -> None:
    assert may_request(obj, [GPU, MIG_1G])


@pytest.mark.parametrize(
    "obj",
    [
        pod("cpu", resources={"cpu": "2", "memory": "1Gi"}),
        pod("none", gpus=None),
        pod("other", resources={MIG_3G: "1"}),
        {"metadata": {"name": "no-spec"}},
        {"spec": {"containers": [{"name": "bare"}]}},
        {"spec": {"containers": None, "initContainers": [{"resources": {"requests": None}}]}},
    ],
)
def test_may_request_drops_pods_that_name_no_configured_resource(obj: Any) -> None:
    assert not may_request(obj, [GPU, MIG_1G])


# -- the sink --------------------------------------------------------------------------------------


def test_upsert_then_delete(ledger: PodLedger) -> None:
    heard = listen(ledger)
    ledger.upsert("Pod", pod("a"))
    assert [p.key for p in on(ledger, "n1")] == ["ml/a"] and len(ledger) == 1 and heard == ["n1"]
    ledger.upsert("Pod", pod("a"))  # the same content again: nothing changed, no one told
    assert heard == ["n1"]
    ledger.delete("Pod", {"metadata": {"name": "a", "namespace": "ml", "uid": "uid-a"}})
    assert len(ledger) == 0 and list(ledger.pods_on("n1")) == [] and list(ledger.nodes()) == [] and heard == ["n1"] * 2
    ledger.delete("Pod", {"metadata": {"name": "a", "namespace": "ml", "uid": "uid-a"}})  # unknown now: no news
    ledger.delete("Pod", {"metadata": {"name": "x"}})
    assert heard == ["n1"] * 2


def test_moving_to_another_node_tells_both_and_resets_seen_at(ledger: PodLedger, clock: Clock) -> None:
    ledger.upsert("Pod", pod("a", node="n1"))
    heard = listen(ledger)
    clock.now = 150.0
    ledger.upsert("Pod", pod("a", node="n2"))
    assert sorted(heard) == ["n1", "n2"]
    assert list(ledger.pods_on("n1")) == [] and list(ledger.nodes()) == ["n2"]
    [moved] = on(ledger, "n2")
    assert moved.seen_at == 150.0


def test_seen_at_is_kept_across_updates_on_the_same_node(ledger: PodLedger, clock: Clock) -> None:
    ledger.upsert("Pod", pod("a", phase="Pending"))
    heard = listen(ledger)
    clock.now = 130.0
    ledger.upsert("Pod", pod("a", phase="Running"))
    [running] = on(ledger, "n1")
    assert (running.phase, running.seen_at) == ("Running", 100.0) and heard == ["n1"]
    ledger.replace_all("Pod", [pod("a", phase="Running")])
    assert on(ledger, "n1")[0].seen_at == 100.0 and heard == ["n1"]  # a relist that changes nothing says nothing


@pytest.mark.parametrize(
    "gone",
    [pod("a", phase="Succeeded"), pod("a", phase="Failed"), pod("a", deleting=True), pod("a", node=None)],
    ids=["succeeded", "failed", "deleting", "unbound"],
)
def test_an_upsert_that_no_longer_holds_gpus_leaves(ledger: PodLedger, gone: dict[str, Any]) -> None:
    ledger.upsert("Pod", pod("a"))
    ledger.upsert("Pod", pod("b"))
    heard = listen(ledger)
    ledger.upsert("Pod", gone)
    assert [p.key for p in on(ledger, "n1")] == ["ml/b"] and heard == ["n1"]


def test_replace_all_tells_only_the_nodes_that_changed(ledger: PodLedger, clock: Clock) -> None:
    assert not ledger.synced
    ledger.replace_all("Pod", [pod("a", node="n1"), pod("b", node="n2"), pod("c", node="n3"), pod("d", node="n4")])
    assert ledger.synced and len(ledger) == 4
    heard = listen(ledger)
    clock.now = 200.0
    ledger.replace_all(
        "Pod",
        [
            pod("a", node="n1"),  # unchanged
            pod("b", node="n2", phase="Running"),  # changed in place
            pod("d", node="n5"),  # moved n4 -> n5
            pod("e", node="n6", gpus=None),  # not a GPU pod: not stored, no news
        ],
    )  # c on n3: gone
    assert sorted(heard) == ["n2", "n3", "n4", "n5"]
    assert sorted(ledger.nodes()) == ["n1", "n2", "n5"]
    assert [(p.key, p.seen_at) for n in ("n1", "n2", "n5") for p in on(ledger, n)] == [
        ("ml/a", 100.0),
        ("ml/b", 100.0),
        ("ml/d", 200.0),
    ]
    heard.clear()
    ledger.replace_all("Pod", [])
    assert sorted(heard) == ["n1", "n2", "n5"] and len(ledger) == 0 and list(ledger.nodes()) == []


def test_replace_all_with_nothing_marks_synced_and_tells_no_one(ledger: PodLedger) -> None:
    heard = listen(ledger)
    ledger.replace_all("Pod", [])
    assert ledger.synced and heard == []


def test_each_listener_hears_each_node(ledger: PodLedger) -> None:
    first, second = listen(ledger), listen(ledger)
    ledger.upsert("Pod", pod("a"))
    assert first == second == ["n1"]


def test_a_pod_with_claims_is_kept_for_its_binding_and_counts_no_request(ledger: PodLedger) -> None:
    """A DRA pod holds its GPUs through its claims (the claim ledger counts them); the ledger keeps it
    so its binding is heard (binding_gate), with no GPUs of its own."""
    bound: list[str] = []
    ledger.on_bound(bound.append)
    obj = pod("claimer", gpus=None)
    obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "two"}]
    ledger.upsert("Pod", obj)
    [kept] = on(ledger, "n1")
    assert (kept.gpus, kept.mig, kept.claims) == (0, (), ("ml/two",)) and bound == [kept.uid]
    ledger.upsert("Pod", pod("plain-cpu", gpus=None))
    assert len(ledger) == 1  # no GPU request and no claim: not kept


def test_a_pod_whose_gpu_request_dra_served_is_kept_for_its_binding(ledger: PodLedger) -> None:
    """kube-scheduler gave the pod's nvidia.com/gpu DRA devices (KEP-5004): the claim it made holds
    them (claim ledger), the pod counts none of its own, and is kept so its binding closes the gate
    (a mixed burst otherwise waited out --binding-wait for every such pod: tests/kube/test_dra_burst.py)."""
    bound: list[str] = []
    ledger.on_bound(bound.append)
    obj = pod("served", gpus=1)
    obj["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "served-extended-resources-x"}
    ledger.upsert("Pod", obj)
    [kept] = on(ledger, "n1")
    assert (kept.gpus, kept.claims) == (0, ("ml/served-extended-resources-x",)) and bound == [kept.uid]
