"""Rules of model/pod_group.py that mutation testing (mutmut) found no test holding, each test
failing on a one-line change: a namespace of at most 253 characters keys a group; an unusable group
name or topology key is said with the value sent; a size annotation of 6 digits is read; and a
PodGroup (or JobSet's Job) that cannot be used says which field and value, keeps the topology key
it read, and reads a topology level without a key as none."""

from __future__ import annotations

from typing import Any

from gpuextender.extender.model.pod_group import (
    COSCHEDULING,
    JOBSET,
    LWS_EXCLUSIVE_TOPOLOGY,
    LWS_GROUP_KEY,
    LWS_SIZE,
    NO_GROUP,
    WORKLOAD,
    GroupReading,
    PodGroupSpec,
    read_group,
    read_pod_group,
)


def lws_pod(size: str = "2", topology: str = "", namespace: str = "ns") -> dict[str, Any]:
    annotations = {LWS_SIZE: size}
    if topology:
        annotations[LWS_EXCLUSIVE_TOPOLOGY] = topology
    return {"metadata": {"namespace": namespace, "labels": {LWS_GROUP_KEY: "g"}, "annotations": annotations}}


def test_a_namespace_of_253_characters_keys_a_group_and_254_none() -> None:
    ref = read_group(lws_pod(namespace="n" * 253)).ref
    assert ref is not None and ref.namespace == "n" * 253
    assert read_group(lws_pod(namespace="n" * 254)) == NO_GROUP


def test_an_unusable_group_name_is_said_with_its_value() -> None:
    reading = read_group({"spec": {"schedulingGroup": {"podGroupName": 5}}})
    assert reading == GroupReading(None, "workload group name 5 is not a name of 1-253 characters: single pod")


def test_an_unusable_topology_key_is_said_with_its_value() -> None:
    assert read_group(lws_pod(topology="a b")) == GroupReading(
        None,
        "leaderworkerset group 'g': topology key 'a b' is not a label key of at most 317 characters: "
        "decided as a single pod",
    )


def test_a_size_annotation_of_six_digits_is_read() -> None:
    ref = read_group(lws_pod(size="000002")).ref
    assert ref is not None and ref.size == 2


def test_an_unusable_size_names_its_field_and_value() -> None:
    assert read_pod_group(JOBSET, {"spec": {"parallelism": "x"}}) == PodGroupSpec(
        None, "", "spec.parallelism = 'x' is not a whole number"
    )
    assert read_pod_group(JOBSET, {"spec": {"parallelism": 0}}) == PodGroupSpec(
        None, "", "spec.parallelism = 0 is outside 1..512"
    )
    assert read_pod_group(COSCHEDULING, {"spec": {"minMember": "x"}}) == PodGroupSpec(
        None, "", "spec.minMember = 'x' is not a whole number"
    )
    workload = {"spec": {"schedulingPolicy": {"gang": {"minCount": "x"}}}}
    assert read_pod_group(WORKLOAD, workload) == PodGroupSpec(
        None, "", "spec.schedulingPolicy.gang.minCount = 'x' is not a whole number"
    )


def workload(topology: Any, gang: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingConstraints": {"topology": topology}}
    if gang is not None:
        spec["schedulingPolicy"] = {"gang": gang}
    return {"spec": spec}


def test_a_workload_without_a_gang_policy_keeps_its_topology_key() -> None:
    assert read_pod_group(WORKLOAD, workload([{"key": "zone"}])) == PodGroupSpec(
        None, "zone", "no gang policy (spec.schedulingPolicy.gang.minCount)"
    )


def test_a_workload_topology_that_is_empty_or_without_a_key_names_none() -> None:
    assert read_pod_group(WORKLOAD, workload([], {"minCount": 4})) == PodGroupSpec(4, "", "")
    assert read_pod_group(WORKLOAD, workload([5], {"minCount": 4})) == PodGroupSpec(4, "", "")
    assert read_pod_group(WORKLOAD, workload([{}], {"minCount": 4})) == PodGroupSpec(4, "", "")


def test_a_workload_topology_key_that_is_no_label_key_is_refused() -> None:
    assert read_pod_group(WORKLOAD, workload([{"key": "a b"}], {"minCount": 4})) == PodGroupSpec(
        None, "", "topology key 'a b' is not a label key of at most 317 characters"
    )
