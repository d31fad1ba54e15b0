"""Rules of the bound-pod ledger (state/pod_ledger.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: which malformed pods it skips (and
that none breaks it), what it logs for a refused request, the inference service and labels it
keeps, which nodes and UIDs its listeners hear of, and its indexes by node and by group as pods
move, change and leave."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gpuextender.extender.model.ome.pod_intent import INFERENCE_SERVICE_LABEL
from gpuextender.extender.model.pod_gpus import gpus_requested
from gpuextender.extender.model.pod_group import COSCHEDULING_LABEL
from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.state.pod_ledger import POD_KIND, BoundPod, PodLedger
from tests.extender.state.test_pod_ledger import GPU, pod


def ledger() -> PodLedger:
    return PodLedger([GPU], clock=lambda: 100.0)


def member(name: str, group: str = "g") -> dict[str, Any]:
    return pod(name, labels={COSCHEDULING_LABEL: group})


def bound(name: str, node: str) -> BoundPod:
    return BoundPod(f"uid-{name}", f"ml/{name}", node, 1, (), "Pending", 0.0)


def test_a_pod_without_a_name_is_keyed_by_its_namespace_alone() -> None:
    obj = pod("a")
    del obj["metadata"]["name"]
    record = ledger().slim(obj, 0.0)
    assert record is not None and record.key == "ml/"


@pytest.mark.parametrize(("where", "value"), [("uid", ""), ("nodeName", 5)], ids=["empty uid", "node not a string"])
def test_slim_is_none_for_a_pod_without_a_usable_uid_or_node(where: str, value: Any) -> None:
    obj = pod("a")
    (obj["metadata"] if where == "uid" else obj["spec"])[where] = value
    assert ledger().slim(obj, 0.0) is None


def test_a_refused_request_is_logged_with_the_pod_its_node_and_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    obj = pod("bad", gpus="1e999999")
    with pytest.raises(InvalidInput) as refused:
        gpus_requested(obj, [GPU])
    with caplog.at_level(logging.WARNING, logger="gpu_extender.pods"):
        assert ledger().slim(obj, 0.0) is None
    (record,) = caplog.records
    assert record.getMessage() == f"pod ml/bad on n1: GPU request not counted: {refused.value.message}"
    assert (record.pod, record.node, record.reason) == ("ml/bad", "n1", refused.value.code)  # type: ignore[attr-defined]


@pytest.mark.parametrize("labels", [{}, {INFERENCE_SERVICE_LABEL: 5}], ids=["no label", "not a string"])
def test_a_pod_serving_no_named_inference_service_has_none(labels: dict[str, Any]) -> None:
    obj = pod("a")
    obj["metadata"]["labels"] = labels
    record = ledger().slim(obj, 0.0)
    assert record is not None and record.inference_service == ""


def test_only_labels_whose_key_and_value_are_strings_are_kept() -> None:
    obj = pod("a")
    obj["metadata"]["labels"] = {"team": "ml", "count": 5}
    record = ledger().slim(obj, 0.0)
    assert record is not None and record.labels == (("team", "ml"),)


@pytest.mark.parametrize("uid", [["not", "hashable"], {"a": 1}])
def test_a_pod_whose_uid_is_not_a_string_is_skipped_by_every_verb(uid: Any) -> None:
    pods = ledger()
    obj = pod("a")
    obj["metadata"]["uid"] = uid
    pods.replace_all(POD_KIND, [obj])
    pods.upsert(POD_KIND, obj)
    pods.delete(POD_KIND, obj)
    assert len(pods) == 0


def test_a_pod_assumed_on_another_node_moves_and_both_nodes_are_heard() -> None:
    pods = ledger()
    heard: list[str] = []
    pods.on_change(heard.append)
    assert pods.assume(bound("a", "n1"))
    assert heard == ["n1"]
    assert pods.assume(bound("a", "n2"))
    assert sorted(heard[1:]) == ["n1", "n2"]
    assert list(pods.pods_on("n1")) == [] and [p.node for p in pods.pods_on("n2")] == ["n2"]


def test_bound_listeners_hear_the_uid_of_each_pod_that_enters() -> None:
    pods = ledger()
    uids: list[str] = []
    pods.on_bound(uids.append)
    pods.assume(bound("a", "n1"))
    pods.replace_all(POD_KIND, [pod("a"), pod("b")])
    assert uids == ["uid-a", "uid-b"]
    running = pod("b", phase="Running")  # a change of a pod already bound: no second "bound"
    pods.upsert(POD_KIND, running)
    assert uids == ["uid-a", "uid-b"]


def test_a_group_member_seen_before_the_first_list_is_indexed_by_its_group() -> None:
    pods = ledger()
    pods.upsert(POD_KIND, member("a"))
    record = pods.get("uid-a")
    assert record is not None and record.group
    assert [p.uid for p in pods.members(record.group)] == ["uid-a"]


def test_a_group_keeps_its_other_members_when_one_leaves() -> None:
    pods = ledger()
    pods.replace_all(POD_KIND, [member("a"), member("b")])
    record = pods.get("uid-a")
    assert record is not None and record.group
    key = record.group
    pods.delete(POD_KIND, member("a"))
    assert [p.uid for p in pods.members(key)] == ["uid-b"]
    pods.delete(POD_KIND, member("b"))
    assert list(pods.members(key)) == []


def test_a_node_keeping_pods_gets_a_new_version_when_one_leaves() -> None:
    pods = ledger()
    pods.replace_all(POD_KIND, [pod("a"), pod("b")])
    before = pods.version("n1")
    pods.delete(POD_KIND, pod("a"))
    assert pods.version("n1") > before
