"""The bound-pod rule (decide/README.md, "Bound pods"; bound_pods.py), through the real decision path:
a PodLedger fed like the watch feeds it, a GpuState fed agent reports, SchedulerApi's verbs.
Every count at exactly its bound, on both sides."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.bound_pods import NOTHING, offered, pending
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report

NOW = 1000.0
MIG = "nvidia.com/mig-1g.10gb"


def pod(
    name: str,
    node: str | None,
    gpus: int = 1,
    *,
    phase: str = "Pending",
    resource: str = "nvidia.com/gpu",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {resource: str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def node_report(
    name: str,
    idle: int,
    busy: int = 0,
    *,
    holders: dict[int, str] | None = None,
    allocation_known: bool = True,
    replicas: int = 0,
) -> pb.NodeReport:
    """`idle` idle GPUs then `busy` busy ones; `holders`: GPU index -> pod name (namespace ml)."""
    gpus = [gpu(i, 0, 1) for i in range(idle)] + [gpu(idle + i, 90, 80) for i in range(busy)]
    for index, pod_name in (holders or {}).items():
        gpus[index].holders.add(
            namespace="ml", pod=pod_name, container="c", resource_name="nvidia.com/gpu", device_id=f"GPU-{index}"
        )
    if replicas:
        for g in gpus:
            g.sharing.mode, g.sharing.replicas = pb.SHARING_TIME_SLICING, replicas
    r = report(name, gpus)
    if allocation_known:
        r.allocation_source = pb.ALLOCATION_KUBELET
    return r


class World:
    """One extender's state: agent reports, the ledger, the verbs."""

    def __init__(self, resources: tuple[str, ...] = ("nvidia.com/gpu",), allocatable: dict[str, int] | None = None):
        self.state = GpuState(IdleRule())
        self.ledger = PodLedger(resources, clock=lambda: NOW - 5)
        view = InventoryView(allocatable_gpus=allocatable or {}, node_labels={n: {} for n in allocatable or {}})
        self.api = SchedulerApi(
            self.state,
            ExtenderMetrics(self.state),
            ApiSettings(DecisionPolicy(no_fit_policy="reject"), gpu_resources=resources),
            inventory=lambda: view,
            clock=lambda: NOW,
            sources=ClusterSources(ledger=self.ledger),
        )
        self.ledger.replace_all(POD_KIND, [])

    def agent(self, r: pb.NodeReport) -> None:
        self.state.ingest(r, NOW)

    def bind(self, *pods: dict[str, Any]) -> None:
        for p in pods:
            self.ledger.upsert(POD_KIND, p)

    def filter(self, nodes: list[str], gpus: int = 1, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
        body = {"Pod": pod("new", None, gpus, resource=resource), "NodeNames": nodes}
        return self.api.filter(parse_extender_args(json.dumps(body).encode()))

    def passes(self, node: str, gpus: int = 1, resource: str = "nvidia.com/gpu") -> bool:
        answer = self.filter([node], gpus, resource)
        return answer["NodeNames"] == [node]

    def explain_row(self, node: str, gpus: int = 1) -> dict[str, Any]:
        body = {"Pod": pod("new", None, gpus), "NodeNames": [node]}
        (row,) = self.api.explain(parse_extender_args(json.dumps(body).encode()))["nodes"]
        return row


@pytest.mark.parametrize("allocation_known", [True, False])
@pytest.mark.parametrize(("bound", "needed", "fits"), [(2, 2, True), (2, 3, False), (0, 4, True), (3, 2, False)])
def test_free_idle_minus_unattributed_bound_pods(allocation_known: bool, bound: int, needed: int, fits: bool) -> None:
    """4 idle GPUs, `bound` one-GPU pods bound but not yet attributed: offers 4 - bound."""
    w = World()
    w.agent(node_report("n1", idle=4, busy=4, allocation_known=allocation_known))
    w.bind(*[pod(f"p{i}", "n1") for i in range(bound)])
    assert w.passes("n1", needed) is fits  # 4 - bound == needed passes; one GPU short fails
    row = w.explain_row("n1", needed)
    assert (row["reportedIdleGpus"], row["idleGpus"], row["boundPodsPendingGpus"]) == (4, 4 - bound, bound)
    assert [p["pod"] for p in row["boundPodsPending"]] == [f"ml/p{i}" for i in range(bound)]
    if not fits:  # the agent's 4 would have done: the bound pods are why
        assert row["reasonCode"] == "GPUsTakenByBoundPods"


def test_never_below_zero() -> None:
    w = World()
    w.agent(node_report("n1", idle=1, busy=7))
    w.bind(pod("big", "n1", 3))
    row = w.explain_row("n1")
    assert row["idleGpus"] == 0 and row["freeGpus"] == 8 - 3 and row["boundPodsPendingGpus"] == 3
    w.bind(pod("huge", "n1", 8))
    row = w.explain_row("n1")
    assert row["idleGpus"] == 0 and row["freeGpus"] == 0 and row["boundPodsPendingGpus"] == 11


def test_a_pod_the_agent_attributes_is_counted_once() -> None:
    """Bound, then admitted: the agent's report lists it as a holder while the ledger still has it."""
    w = World()
    w.agent(node_report("n1", idle=4, busy=4))
    w.bind(pod("a", "n1"))
    assert w.explain_row("n1")["idleGpus"] == 3
    # The kubelet admitted it: GPU 0 is now held by ml/a (allocated, no longer free).
    w.agent(node_report("n1", idle=4, busy=4, holders={0: "a"}))
    row = w.explain_row("n1")
    assert (row["reportedIdleGpus"], row["idleGpus"], row["boundPodsPending"]) == (3, 3, [])
    # Another pod holding a GPU does not attribute this one: namespace/name must match.
    w.agent(node_report("n1", idle=4, busy=4, holders={0: "other"}))
    assert w.explain_row("n1")["idleGpus"] == 2


def test_allocation_unknown_a_running_pod_shows_in_the_readings_instead() -> None:
    w = World()
    w.agent(node_report("n1", idle=4, allocation_known=False))
    w.bind(pod("a", "n1", phase="Pending"), pod("b", "n1", phase="Running"), pod("c", "n1", phase=""))
    row = w.explain_row("n1")
    assert row["idleGpus"] == 2 and sorted(p["pod"] for p in row["boundPodsPending"]) == ["ml/a", "ml/c"]


@pytest.mark.parametrize("how", ["deleted", "deletionTimestamp", "Succeeded", "Failed"])
def test_a_deleted_or_finished_pod_releases_its_gpus_at_once(how: str) -> None:
    w = World()
    w.agent(node_report("n1", idle=1, busy=7))
    w.bind(pod("a", "n1"))
    assert not w.passes("n1")
    if how == "deleted":
        w.ledger.delete(POD_KIND, pod("a", "n1"))
    elif how == "deletionTimestamp":
        w.ledger.upsert(POD_KIND, pod("a", "n1", deleting=True))
    else:
        w.ledger.upsert(POD_KIND, pod("a", "n1", phase=how))
    assert w.passes("n1") and len(w.ledger) == 0


def test_a_pod_bound_to_a_node_without_agent_data_counts_against_its_allocatable() -> None:
    w = World(allocatable={"silent": 4})
    w.bind(*[pod(f"p{i}", "silent") for i in range(3)])
    assert w.passes("silent", 1) and not w.passes("silent", 2)  # 4 - 3 = 1: exactly one more fits
    row = w.explain_row("silent", 2)
    assert row["data"] == "none" and row["reasonCode"] == "InsufficientGPUs"
    assert row["boundPodsPendingGpus"] == 3 and row["reportedIdleGpus"] is None


def test_a_time_sliced_node_counts_replicas() -> None:
    """2 idle GPUs x 4 replicas = 8 units; a pod asking 3 replicas is bound: 5 left."""
    w = World()
    w.agent(node_report("n1", idle=2, replicas=4))
    w.bind(pod("a", "n1", 3))
    assert w.passes("n1", 5) and not w.passes("n1", 6)
    assert w.explain_row("n1", 5)["idleGpus"] == 5


def test_mig_devices_follow_the_rule_per_profile() -> None:
    w = World(resources=("nvidia.com/gpu", MIG))
    g = gpu(0, None, None)
    g.sharing.mode = pb.SHARING_MIG
    for i in range(3):
        g.mig_instances.add(uuid=f"MIG-{i}", profile="1g.10gb", memory_total_bytes=10, memory_used_bytes=0)
    r = report("n1", [g])
    r.allocation_source = pb.ALLOCATION_KUBELET
    w.agent(r)
    w.bind(pod("a", "n1", 2, resource=MIG))
    assert w.passes("n1", 1, MIG) and not w.passes("n1", 2, MIG)  # 3 - 2 = 1
    w.ledger.delete(POD_KIND, pod("a", "n1", 2, resource=MIG))
    assert w.passes("n1", 3, MIG)


def test_a_new_report_keeps_counting_the_pending_pods() -> None:
    """The offered summary is rebuilt from every report, not only when the ledger changes."""
    w = World()
    w.agent(node_report("n1", idle=2, busy=6))
    w.bind(pod("a", "n1"))
    w.agent(node_report("n1", idle=2, busy=6))
    assert w.explain_row("n1")["idleGpus"] == 1
    assert not w.passes("n1", 2)


def test_prioritize_ranks_by_what_is_left() -> None:
    w = World()
    w.agent(node_report("a", idle=4, busy=4))
    w.agent(node_report("b", idle=3, busy=5))
    w.bind(pod("x", "a"), pod("y", "a"), pod("z", "a"))  # a: 4 - 3 = 1 idle; b: 3
    body = {"Pod": pod("new", None, 1), "NodeNames": ["a", "b"]}
    scores = dict((s["Host"], s["Score"]) for s in w.api.prioritize(parse_extender_args(json.dumps(body).encode())))
    assert scores.get("b", 0) > scores.get("a", 0)


def test_the_reason_names_the_bound_pods_only_when_they_are_why() -> None:
    w = World()
    w.agent(node_report("n1", idle=2, busy=6))
    w.bind(pod("a", "n1"))
    assert w.explain_row("n1", 2)["reasonCode"] == "GPUsTakenByBoundPods"  # 2 - 1 < 2 <= 2
    assert w.explain_row("n1", 3)["reasonCode"] == "InsufficientIdleGPUs"  # 2 < 3 even without it


def test_pure_parts() -> None:
    w = World()
    w.agent(node_report("n1", idle=2))
    summary = w.state.reported("n1")
    assert summary is not None
    assert pending(summary, ()) is NOTHING and offered(summary, NOTHING) is summary


def test_metrics_per_node_exist_only_while_pods_are_pending() -> None:
    w = World()
    w.agent(node_report("n1", idle=4, busy=4))
    w.agent(node_report("n2", idle=4, busy=4))
    registry = w.api.metrics.registry
    w.bind(pod("a", "n1"), pod("b", "n1"))
    assert registry.get_sample_value("gpu_extender_node_bound_pods_pending", {"node": "n1"}) == 2
    assert registry.get_sample_value("gpu_extender_node_bound_pods_pending_oldest_seconds", {"node": "n1"}) == 5
    assert registry.get_sample_value("gpu_extender_node_bound_pods_pending", {"node": "n2"}) is None
    w.agent(node_report("n1", idle=4, busy=4, holders={0: "a", 1: "b"}))  # both admitted
    assert registry.get_sample_value("gpu_extender_node_bound_pods_pending", {"node": "n1"}) is None
