"""Tests that pin what /explain (decide/explain.py) answers field by field, so that every mutant of
explain.py that changes the answer fails one (issue 52, docs/testing.md "Mutation testing")."""

from __future__ import annotations

import copy
from typing import Any

from gpuextender.extender.decide.explain import CLASS_FORMULA, NODE_FORMULA
from gpuextender.extender.scheduler.wire import ExtenderArgs
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
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
