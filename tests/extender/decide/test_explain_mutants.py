"""Tests that pin what /explain (decide/explain.py) answers field by field, so that every mutant of
explain.py that changes the answer fails one (issue 52, docs/testing.md "Mutation testing")."""

from __future__ import annotations

import copy
from typing import Any

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide import class_plan
from gpuextender.extender.decide.explain import CLASS_FORMULA, NODE_FORMULA
from gpuextender.extender.model.kube_objects import CLUSTER_SERVING_RUNTIME, KINDS
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import ExtenderArgs, parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import InventoryView, ViewBuilder
from gpuextender.extender.state.node_gpu_status import NodeGpuStatus
from gpuextender.extender.state.publication import NodePublished, PublishedTaint
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.e2e.test_accelerator_classes import NODES as EXAMPLE_NODES
from tests.e2e.test_accelerator_classes import ome_request
from tests.extender.builders import GIB, gpu, report
from tests.extender.decide.test_class_plan import pod as class_plan_pod
from tests.extender.decide.test_class_plan import view  # noqa: F401  (module fixture: examples/ome inventory)
from tests.extender.decide.test_ome_conformance import OBJECTS as OME_OBJECTS
from tests.extender.decide.test_ome_conformance import _api as ome_api
from tests.extender.decide.test_ome_conformance import _args as ome_args
from tests.extender.dra_objects import allocated_claim, device_class, gpu_device, mig_class, mig_device, resource_slice
from tests.extender.scheduler.test_dra_decisions import dra_api
from tests.extender.scheduler.test_groups import Cluster, fleet, lws_pod
from tests.extender.scheduler.test_http_api_explain import NOW, POD, api_knowing
from tests.extender.state.test_bound_pods import World
from tests.extender.state.test_bound_pods import node_report as bound_pods_report
from tests.extender.state.test_bound_pods import pod as bound_pod
from tests.extender.state.test_sharing_inferred import api_with, args

FRESH_NODE: dict[str, Any] = {
    "node": "n00000",
    "classes": [],
    "classesExcludedByGpus": {},
    "data": "fresh",
    "dataAgeSeconds": 0.0,
    "gpus": 1,
    "healthyGpus": 1,
    "idleGpus": 1,
    "allocation": "unknown (agent before 0.2): idle readings alone decide",
    "sharingInferred": None,
    "freeGpus": None,
    "degradedIdleGpus": 0,
    "migDevices": {},
    "migDevicesFree": {},
    "allocatedIdleGpus": None,
    "allocatedIdleByNamespace": None,
    "gpuSet": None,
    "reportedIdleGpus": 1,
    "boundPodsPending": [],
    "boundPodsPendingGpus": 0,
    "draDevices": None,
    "draMigDevices": None,
    "published": None,
    "meanUtilization": 0.0,
    "gpuIdleRule": [{"gpu": 0, "judgedBy": "utilization", "utilizationPercent": 0}],
    "assumedData": False,
    "result": "pass",
    "shortlisted": True,
    "reasonCode": None,
    "reason": None,
    "unresolvable": None,
    "classRank": None,
    "score": 10,
    "scoreParts": {"nodeScore": 10, "classPosition": None, "classesRanked": None, "inWholeDomain": None},
}

SILENT_NODE: dict[str, Any] = {
    "node": "no-agent",
    "classes": [],
    "classesExcludedByGpus": {},
    "data": "none",
    "dataAgeSeconds": None,
    "gpus": None,
    "healthyGpus": None,
    "idleGpus": 1,
    "allocation": None,
    "sharingInferred": None,
    "freeGpus": None,
    "degradedIdleGpus": None,
    "migDevices": None,
    "migDevicesFree": None,
    "allocatedIdleGpus": None,
    "allocatedIdleByNamespace": None,
    "gpuSet": None,
    "reportedIdleGpus": None,
    "boundPodsPending": [],
    "boundPodsPendingGpus": 0,
    "draDevices": None,
    "draMigDevices": None,
    "published": None,
    "meanUtilization": None,
    "gpuIdleRule": None,
    "assumedData": True,
    "result": "fail",
    "shortlisted": None,
    "reasonCode": "NoFreshGPUData",
    "reason": "no fresh GPU data while reporting nodes fit",
    "unresolvable": False,
    "classRank": None,
    "score": 0,
    "scoreParts": {"nodeScore": 0, "classPosition": None, "classesRanked": None, "inWholeDomain": None},
}


def test_a_fresh_node_and_a_silent_one_are_explained_field_by_field() -> None:
    answer = api_knowing(1, ("no-agent",)).explain(ExtenderArgs(POD, ["no-agent", "n00000"], None))
    assert answer == {
        "pod": "ns/p",
        "gpusNeeded": 1,
        "migDevicesNeeded": {},
        "resolved": {"classes": "none apply (not an OME pod)", "nodeStrategy": "spread", "classRulesApply": False},
        "fallback": False,
        "preemption": {"priority": 0, "mayPreempt": True, "nodesWithLowerPriorityGPUPods": 0},
        "shortlist": 100,
        "inWholeDomains": [],
        "passedOnAssumedData": [],
        "formulas": {"node": NODE_FORMULA, "class": None},
        "nodes": [FRESH_NODE, SILENT_NODE],  # best score first, whatever the request's order
    }


def test_the_formulas_name_the_readme_sections_they_come_from() -> None:
    assert NODE_FORMULA.endswith("(gpuextender/extender/decide/README.md, Prioritize)")
    assert CLASS_FORMULA.endswith("(gpuextender/extender/decide/README.md, Classes in the score)")


def test_a_node_whose_agent_knows_allocation_shows_free_and_allocated_idle_gpus() -> None:
    api = api_knowing(0)
    r = report("k", [gpu(0, 0, 1), gpu(1, 0, 1), gpu(2, 90, 80)])
    r.allocation_source = pb.ALLOCATION_KUBELET
    r.gpus[0].holders.add(namespace="team-a", pod="x", container="c", device_id="GPU-0")
    api.state.ingest(r, NOW)
    two: dict[str, Any] = copy.deepcopy(POD)
    two["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    row = api.explain(ExtenderArgs(two, ["k"], None))["nodes"][0]
    allocation = ["allocation", "sharingInferred", "freeGpus", "degradedIdleGpus", "migDevices", "migDevicesFree"]
    allocation += ["allocatedIdleGpus", "allocatedIdleByNamespace", "gpuSet"]
    assert {k: row[k] for k in allocation} == {
        "allocation": "kubelet",
        "sharingInferred": None,
        "freeGpus": 2,  # GPU 0 is held; GPU 2 is busy but held by no pod
        "degradedIdleGpus": 0,
        "migDevices": {},
        "migDevicesFree": {},
        "allocatedIdleGpus": 1,
        "allocatedIdleByNamespace": {"team-a": 1},
        "gpuSet": "apart-or-unknown",  # a 2-GPU pod: how its best pair connects
    }


def test_replicas_read_off_the_allocatable_are_explained_with_their_numbers() -> None:
    api, _ = api_with(32)
    row = api.explain(args(32))["nodes"][0]
    assert row["sharingInferred"] == (
        "4 replicas per GPU, read off the Node's allocatable (32 for 8 GPUs): its agent reports no sharing"
    )


def test_a_bound_pod_not_yet_in_the_report_is_listed_with_its_age_and_phase() -> None:
    w = World()
    w.ledger._clock = lambda: NOW - 0.12345  # seen by the ledger 0.12345 s ago
    w.agent(bound_pods_report("n1", 4))
    w.bind(bound_pod("p0", "n1"))
    row = w.explain_row("n1")
    assert row["boundPodsPending"] == [
        {
            "pod": "ml/p0",
            "uid": "uid-p0",
            "gpus": 1,
            "migDevices": {},
            "phase": "Pending",
            "ageSeconds": 0.123,
            "inferenceService": None,  # no InferenceService label: None, not ""
        }
    ]
    assert (row["reportedIdleGpus"], row["idleGpus"], row["boundPodsPendingGpus"]) == (4, 3, 1)


def test_an_unhealthy_first_gpu_still_lets_the_healthy_ones_after_it_be_listed() -> None:
    api = api_knowing(0)
    api.state.ingest(report("m", [gpu(0, None, None, healthy=False), gpu(1, 7, 1)]), NOW)
    row = api.explain(ExtenderArgs(POD, ["m"], None))["nodes"][0]
    assert row["gpuIdleRule"] == [{"gpu": 1, "judgedBy": "utilization", "utilizationPercent": 7}]


def test_a_stale_node_shows_no_reported_idle_count() -> None:
    api = api_knowing(0)
    api.state.ingest(report("old", [gpu(0, 0, 1)]), NOW - 3600)
    row = api.explain(ExtenderArgs(POD, ["old"], None))["nodes"][0]
    assert (row["data"], row["reportedIdleGpus"]) == ("stale", None)  # stale readings are not its idle count


def _api_publishing(published: dict[str, NodePublished]) -> SchedulerApi:
    """Agent nodes n00000 and n00001 (one idle GPU each); `published`: what the device-taint writer
    publishes per node (state/publication.py), nothing for the others."""
    plain = api_knowing(2)
    return SchedulerApi(
        plain.state,
        plain.metrics,
        plain.settings,
        clock=lambda: NOW,
        sources=ClusterSources(published=published.get),
    )


def test_published_taints_and_the_gpus_usable_condition_are_explained_with_their_pending_time() -> None:
    taints = (
        # Asked for 3.14159 s ago, not standing yet: pending for 3.1 s (one decimal).
        PublishedTaint("gpu-0", "gpu.nvidia.com/busy", "true", "NoSchedule", False, NOW - 3.14159),
        PublishedTaint("gpu-1", "gpu.nvidia.com/xid", "79", "NoExecute", True, None),  # stands, agrees
        # A pending time on a clock ahead of this replica's: never negative.
        PublishedTaint("gpu-2", "gpu.nvidia.com/busy", "true", "NoSchedule", True, NOW + 5.0),
    )
    status = NodeGpuStatus("False", "NoUsableGpu", "every GPU is unhealthy", no_usable_gpu=True)
    api = _api_publishing({"n00000": NodePublished(taints, status), "n00001": NodePublished((), None)})
    rows = {r["node"]: r for r in api.explain(ExtenderArgs(POD, ["n00000", "n00001"], None))["nodes"]}
    assert rows["n00000"]["published"] == {
        "deviceTaints": [
            {
                "device": "gpu-0",
                "taint": "gpu.nvidia.com/busy=true:NoSchedule",
                "stands": False,
                "pendingForSeconds": 3.1,
            },
            {"device": "gpu-1", "taint": "gpu.nvidia.com/xid=79:NoExecute", "stands": True, "pendingForSeconds": None},
            {
                "device": "gpu-2",
                "taint": "gpu.nvidia.com/busy=true:NoSchedule",
                "stands": True,
                "pendingForSeconds": 0.0,
            },
        ],
        "gpusUsable": {
            "status": "False",
            "reason": "NoUsableGpu",
            "message": "every GPU is unhealthy",
            "noUsableGpu": True,
        },
    }
    # Published, but no taint and no condition (a DRA node whose devices are all clear).
    assert rows["n00001"]["published"] == {"deviceTaints": [], "gpusUsable": None}


def test_a_node_with_nothing_published_shows_none_beside_one_that_has() -> None:
    status = NodeGpuStatus("True", "GpusUsable", "2 of 2 GPUs usable")
    api = _api_publishing({"n00001": NodePublished((), status)})
    rows = {r["node"]: r for r in api.explain(ExtenderArgs(POD, ["n00000", "n00001"], None))["nodes"]}
    assert rows["n00000"]["published"] is None
    assert rows["n00001"]["published"] == {
        "deviceTaints": [],
        "gpusUsable": {"status": "True", "reason": "GpusUsable", "message": "2 of 2 GPUs usable", "noUsableGpu": False},
    }


def test_dra_devices_without_a_uuid_are_joined_to_the_agents_gpus_by_name_and_show_their_product() -> None:
    """A driver that publishes no uuid: each device is the agent's GPU of the same DRA name (agent
    0.4+); the product is the slice's productName, None where the slice gives none."""
    store = InventoryStore()
    views = ViewBuilder(store, ("nvidia.com/gpu",))
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "d"}, "status": {"allocatable": {"cpu": "8"}}}
    store.replace_all("Node", [node])
    store.replace_all("DeviceClass", [device_class()])
    devices = [gpu_device(0, uuid=""), gpu_device(1, uuid="", product=""), gpu_device(2, uuid="", taint="NoSchedule")]
    store.replace_all("ResourceSlice", [resource_slice("d", devices)])
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("held", "d", ["gpu-1"])])
    state = GpuState(IdleRule())
    r = report("d", [gpu(0, 0, 1), gpu(1, 0, 1), gpu(2, 95, 80)])
    for g in r.gpus:
        g.dra_device = f"gpu-{g.index}"
    state.ingest(r, NOW)
    api = dra_api(state, views, claims)
    row = api.explain(ExtenderArgs(POD, ["d"], None))["nodes"][0]
    product = "NVIDIA H100 80GB HBM3"
    assert row["draDevices"] == [
        {
            "device": "gpu-0",
            "pool": "d",
            "uuid": None,
            "product": product,
            "claim": None,
            "taints": [],
            "allocatable": True,
            "agent": "free, idle",
        },
        {
            "device": "gpu-1",
            "pool": "d",
            "uuid": None,
            "product": None,
            "claim": "default/held",
            "taints": [],
            "allocatable": False,
            "agent": "free, idle",  # the agent's own reading: no container holds it yet
        },
        {
            "device": "gpu-2",
            "pool": "d",
            "uuid": None,
            "product": product,
            "claim": None,
            "taints": ["gpu.nvidia.com/xid=79:NoSchedule"],
            "allocatable": False,
            "agent": "free, busy",
        },
    ]


def test_dra_mig_devices_are_explained_with_pool_parent_and_taints() -> None:
    """Each MIG device: the pool of its slice (not the node's name here), its parent GPU's UUID
    (None where the slice gives none) and its taints."""
    store = InventoryStore()
    views = ViewBuilder(store, ("nvidia.com/gpu",))
    store.replace_all("Node", [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "m"}}])
    store.replace_all("DeviceClass", [device_class(), mig_class()])
    tainted, orphan = mig_device(0, placement=0), mig_device(0, placement=1)
    tainted["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule"}]
    del orphan["attributes"]["parentUUID"]
    store.replace_all("ResourceSlice", [resource_slice("m", [tainted, orphan], pool="pool-a")])
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [])
    state = GpuState(IdleRule())
    api = dra_api(state, views, claims)
    row = api.explain(ExtenderArgs(POD, ["m"], None))["nodes"][0]
    assert row["draMigDevices"] == [
        {
            "device": "gpu-0-mig-1g10gb-19-0",
            "pool": "pool-a",
            "profile": "1g.10gb",
            "parentUuid": "GPU-00000000-0000-0000-0000-000000000000",
            "claim": None,
            "taints": ["gpu.nvidia.com/xid=48:NoSchedule"],
            "allocatable": False,
        },
        {
            "device": "gpu-0-mig-1g10gb-19-1",
            "pool": "pool-a",
            "profile": "1g.10gb",
            "parentUuid": None,
            "claim": None,
            "taints": [],
            "allocatable": True,
        },
    ]


def test_a_groups_level_of_any_nodes_is_named_so() -> None:
    """--group-levels ending in "" (any nodes): explain names that level, not an empty label key."""
    cluster = Cluster({"x": (None, 8, 0), "y": (None, 8, 0)}, group_levels=("nvidia.com/gpu.clique", ""))
    group = cluster.api.explain(ExtenderArgs(lws_pod("g", 0, 2), cluster.nodes, None))["group"]
    assert group["levels"] == ["nvidia.com/gpu.clique", "any nodes"]


def test_a_later_member_is_told_the_domain_an_earlier_member_planned() -> None:
    cluster = Cluster(fleet())
    assert cluster.api.explain(ExtenderArgs(lws_pod("g", 0, 3), cluster.nodes, None))["group"]["plannedBefore"] is None
    cluster.filter(lws_pod("g", 0, 3))  # the first member plans clique c for the group
    group = cluster.api.explain(ExtenderArgs(lws_pod("g", 1, 3), cluster.nodes, None))["group"]
    assert group["plannedBefore"] == "nvidia.com/gpu.clique=c"


def test_the_hold_left_is_shown_to_the_millisecond_and_each_room_with_its_idle_gpus() -> None:
    cluster = Cluster(fleet(), group_hold_s=120.0)
    cluster.filter(lws_pod("g", 0, 3))
    cluster.clock.now += 0.2504
    group = cluster.api.explain(ExtenderArgs(lws_pod("g", 1, 3), cluster.nodes, None))["group"]
    assert group["holdExpiresInSeconds"] == 119.75  # 119.7496 s, to the millisecond
    assert group["rooms"] == [{"domain": "nvidia.com/gpu.clique=c", "members": 3, "idleGpus": 24, "nodes": 3}]


A100_ONLY = {
    "apiVersion": "ome.io/v1beta1",
    "kind": "ClusterServingRuntime",
    "metadata": {"name": "rt-a100"},
    "spec": {
        "supportedModelFormats": [{"name": "safetensors"}],
        "acceleratorRequirements": {"acceleratorClasses": ["a100"]},
    },
}


def _ome_view() -> InventoryView:
    """test_ome_conformance's inventory: h100-node and a100-node, their AcceleratorClasses h100 and
    a100, runtime rt-both listing both (and rt-a100 listing a100 alone); no agent data."""
    store = InventoryStore()
    views = ViewBuilder(store, ("nvidia.com/gpu",))
    objects = {
        **OME_OBJECTS,
        CLUSTER_SERVING_RUNTIME.kind: [*OME_OBJECTS[CLUSTER_SERVING_RUNTIME.kind], A100_ONLY],
    }
    for kind in KINDS:
        store.replace_all(kind.kind, objects.get(kind.kind, []))
    return views.current


def _ome_api() -> SchedulerApi:
    return ome_api(_ome_view())


def _class_fields(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["node"], row["classes"], row["classRank"], row["score"], row["scoreParts"]


def test_a_ranked_policy_gives_each_node_its_classs_position_and_the_ranking() -> None:
    answer = _ome_api().explain(ome_args("first-available", "rt-both"))
    assert [_class_fields(r) for r in answer["nodes"]] == [
        ("h100-node", ["h100"], 0, 7, {"nodeScore": 3, "classPosition": 0, "classesRanked": 2, "inWholeDomain": None}),
        ("a100-node", ["a100"], 1, 2, {"nodeScore": 3, "classPosition": 1, "classesRanked": 2, "inWholeDomain": None}),
    ]
    assert answer["classRanking"] == {
        "policy": "FirstAvailable",
        "ranked": [
            {"class": "h100", "score": None, "basis": "runtime list position 0"},
            {"class": "a100", "score": None, "basis": "runtime list position 1"},
        ],
        "excluded": [],
        "omeWouldChoose": "h100",
    }
    assert answer["formulas"]["class"] == CLASS_FORMULA
    assert answer["resolved"]["allowedClasses"] == ["h100", "a100"]


def test_a_named_class_is_the_one_ranked_class_and_other_nodes_have_no_rank() -> None:
    answer = _ome_api().explain(ome_args("named", "rt-both"))
    assert [_class_fields(r) for r in answer["nodes"]] == [
        ("h100-node", ["h100"], 0, 4, {"nodeScore": 3, "classPosition": 0, "classesRanked": 1, "inWholeDomain": None}),
        (
            "a100-node",
            ["a100"],
            None,
            0,
            {"nodeScore": 3, "classPosition": None, "classesRanked": 1, "inWholeDomain": None},
        ),
    ]
    assert "classRanking" not in answer  # a named class is not ranked by a policy
    assert answer["resolved"]["allowedClasses"] == ["h100"]


def test_a_named_class_the_runtime_does_not_support_is_explained_as_incompatible() -> None:
    resolved = _ome_api().explain(ome_args("named", "rt-a100"))["resolved"]
    assert resolved["incompatible"] == (
        "accelerator class h100 (from InferenceService acceleratorSelector) is not supported by runtime "
        "rt-a100 (supports a100)"
    )


def _h100s_of_40_gib(count: int) -> list[pb.GpuSample]:
    """GPUs named H100 (labels say class h100) whose memory is 40 GiB: NVML contradicts the class."""
    return [
        pb.GpuSample(
            index=i,
            uuid=f"GPU-h100-40-{i}",
            name="NVIDIA H100 80GB HBM3",
            healthy=True,
            memory_total_bytes=40 * GIB,
            compute_capability=pb.ComputeCapability(major=9, minor=0),
        )
        for i in range(count)
    ]


def test_a_class_the_nodes_gpus_contradict_is_shown_as_excluded_on_that_node_only() -> None:
    api = _ome_api()
    api.state.ingest(report("h100-node", _h100s_of_40_gib(2)), NOW)
    rows = {r["node"]: r for r in api.explain(ome_args("first-available", "rt-both"))["nodes"]}
    assert (rows["h100-node"]["classes"], rows["h100-node"]["classesExcludedByGpus"]) == (
        [],
        {
            "h100": "GPU 0 (NVIDIA H100 80GB HBM3) has 40.0 GiB; class needs 80.0 GiB "
            "(at least 76.0 GiB with 5% tolerance)"
        },
    )
    assert (rows["a100-node"]["classes"], rows["a100-node"]["classesExcludedByGpus"]) == (["a100"], {})


def test_the_data_age_is_shown_to_the_millisecond() -> None:
    api = api_knowing(0)
    api.state.ingest(report("m", [gpu(0, 0, 1)]), NOW - 1.23456)
    row = api.explain(ExtenderArgs(POD, ["m"], None))["nodes"][0]
    assert row["dataAgeSeconds"] == 1.235


def test_the_mean_utilization_is_shown_to_one_decimal() -> None:
    api = api_knowing(0)
    api.state.ingest(report("m", [gpu(0, 1, 1), gpu(1, 1, 1), gpu(2, 2, 1)]), NOW)
    row = api.explain(ExtenderArgs(POD, ["m"], None))["nodes"][0]
    assert row["meanUtilization"] == 1.3  # 4 / 3


def test_a_runtime_too_small_for_the_model_is_explained_as_a_warning(view: InventoryView) -> None:
    """examples/ome under --runtime-check warn (the default): the plan applies and explain says why
    the runtime does not suit the model."""
    state = GpuState(IdleRule())
    api = SchedulerApi(state, ExtenderMetrics(state), ApiSettings(DecisionPolicy()), inventory=lambda: view)
    request = ome_request("llama-70b-on-small-runtime", "vllm-llama-small", EXAMPLE_NODES)
    resolved = api.explain(parse_extender_args(request))["resolved"]
    warning = class_plan.plan_classes(
        class_plan_pod("llama-70b-on-small-runtime", "vllm-llama-small"), view, "FirstAvailable"
    ).runtime_warning
    assert warning and resolved["runtimeWarning"] == warning


def test_a_class_whose_nodes_are_all_busy_is_listed_as_excluded_with_its_stage_and_reason() -> None:
    view = _ome_view()
    state = GpuState(IdleRule())
    api = SchedulerApi(
        state, ExtenderMetrics(state), ApiSettings(DecisionPolicy()), inventory=lambda: view, clock=lambda: NOW
    )
    state.ingest(report("a100-node", [gpu(i, 95, 80) for i in range(8)]), NOW)  # every GPU busy
    state.ingest(report("h100-node", [gpu(i, 0, 1) for i in range(8)]), NOW)
    ranking = api.explain(ome_args("first-available", "rt-both"))["classRanking"]
    assert ranking["ranked"] == [{"class": "h100", "score": None, "basis": "runtime list position 0"}]
    assert ranking["excluded"] == [
        {"class": "a100", "stage": "Unavailable", "reason": "no node of this class can take the pod now"}
    ]
