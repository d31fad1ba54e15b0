"""A pod's multi-pod group from what its controller wrote (model/pod_group.py): each source, the
order between them, and every bound at its value and one past it."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.model.pod_group import (
    COSCHEDULING,
    JOBSET,
    LWS,
    MAX_GROUP_SIZE,
    MAX_LABEL_KEY_CHARS,
    MAX_NAME_CHARS,
    VOLCANO,
    WORKLOAD,
    GroupRef,
    PodGroupSpec,
    read_group,
    read_pod_group,
)


def pod(labels: dict[str, Any] | None = None, annotations: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
    }


def lws(size: Any = "4", key: Any = "abc", **annotations: Any) -> dict[str, Any]:
    return pod(
        {"leaderworkerset.sigs.k8s.io/group-key": key}, {"leaderworkerset.sigs.k8s.io/size": size, **annotations}
    )


def test_each_source_and_its_key_in_the_pods_namespace() -> None:
    assert read_group(lws()).ref == GroupRef("ns/leaderworkerset/abc", LWS, "ns", "abc", 4)
    assert read_group(pod(schedulingGroup={"podGroupName": "pg"})).ref == GroupRef(
        "ns/workload/pg", WORKLOAD, "ns", "pg", None
    )
    assert read_group(pod({"scheduling.x-k8s.io/pod-group": "pg"})).ref == GroupRef(
        "ns/coscheduling/pg", COSCHEDULING, "ns", "pg", None
    )
    assert read_group(pod(annotations={"scheduling.k8s.io/group-name": "pg"})).ref == GroupRef(
        "ns/volcano/pg", VOLCANO, "ns", "pg", None
    )
    assert read_group(pod()).ref is None and read_group(pod()).problem == ""


def test_the_workload_api_comes_first_then_lws_then_coscheduling_then_volcano() -> None:
    everything = lws()
    everything["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "c"
    everything["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "v"
    assert read_group(everything).ref.source == LWS  # type: ignore[union-attr]
    everything["spec"] = {"schedulingGroup": {"podGroupName": "w"}}
    assert read_group(everything).ref.source == WORKLOAD  # type: ignore[union-attr]
    del everything["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-key"]
    everything["spec"] = {}
    assert read_group(everything).ref.source == COSCHEDULING  # type: ignore[union-attr]


def test_a_pod_without_a_namespace_is_in_default() -> None:
    p = lws()
    del p["metadata"]["namespace"]
    assert read_group(p).ref.key == "default/leaderworkerset/abc"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("size", "expected"),
    [("2", 2), (" 3 ", 3), (str(MAX_GROUP_SIZE), MAX_GROUP_SIZE)],
)
def test_sizes_within_bounds(size: str, expected: int) -> None:
    assert read_group(lws(size)).ref.size == expected  # type: ignore[union-attr]


def test_a_group_of_one_is_a_single_pod_without_a_problem() -> None:
    assert read_group(lws("1")) == read_group(pod())


@pytest.mark.parametrize(
    "size",
    [str(MAX_GROUP_SIZE + 1), "0", "-3", "2.5", "abc", "", "٣", "1e3", "0000007", None, 4, ["4"]],
)
def test_an_unreadable_size_is_a_single_pod_with_the_reason(size: Any) -> None:
    reading = read_group(lws(size))
    assert reading.ref is None
    assert reading.problem.startswith("leaderworkerset group 'abc': annotation leaderworkerset.sigs.k8s.io/size")
    assert reading.problem.endswith(": decided as a single pod")


def test_a_group_name_of_the_longest_kubernetes_name_and_one_past_it() -> None:
    assert read_group(lws(key="k" * MAX_NAME_CHARS)).ref is not None
    reading = read_group(lws(key="k" * (MAX_NAME_CHARS + 1)))
    assert reading.ref is None and "is not a name of 1-253 characters" in reading.problem
    assert "k" * 60 not in reading.problem  # a megabyte of name is shown cut
    assert read_group(lws(key="")).ref is None and read_group(lws(key=7)).ref is None


def test_an_exclusive_topology_key_at_the_label_key_bound_and_one_past_it() -> None:
    key = "k" * MAX_LABEL_KEY_CHARS
    ref = read_group(lws(**{"leaderworkerset.sigs.k8s.io/exclusive-topology": key})).ref
    assert ref is not None and ref.topology_key == key
    reading = read_group(lws(**{"leaderworkerset.sigs.k8s.io/exclusive-topology": key + "k"}))
    assert reading.ref is None and "topology key" in reading.problem


def test_workload_pod_group_size_and_topology() -> None:
    obj = {
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 4}},
            "schedulingConstraints": {"topology": [{"key": "rack"}]},
        }
    }
    assert read_pod_group(WORKLOAD, obj) == PodGroupSpec(4, "rack")
    basic = {"spec": {"schedulingPolicy": {"basic": {}}}}
    assert read_pod_group(WORKLOAD, basic).size is None and "no gang policy" in read_pod_group(WORKLOAD, basic).problem


@pytest.mark.parametrize("source", [COSCHEDULING, VOLCANO])
@pytest.mark.parametrize(
    ("minimum", "size"),
    [
        (1, 1),
        (2, 2),
        (MAX_GROUP_SIZE, MAX_GROUP_SIZE),
        (MAX_GROUP_SIZE + 1, None),
        (0, None),
        (-1, None),
        (True, None),
        ("3", None),
        (2.0, None),
    ],
)
def test_min_member_bounds(source: str, minimum: Any, size: int | None) -> None:
    spec = read_pod_group(source, {"spec": {"minMember": minimum}})
    assert spec.size == size
    assert bool(spec.problem) == (size is None)


def jobset_pod(**annotations: Any) -> dict[str, Any]:
    labels = {"jobset.sigs.k8s.io/jobset-name": "js", "batch.kubernetes.io/job-name": "js-workers-0"}
    return pod(labels, annotations)


def test_a_jobset_job_is_a_group_where_jobset_asks_for_one_domain_per_job() -> None:
    ref = read_group(jobset_pod(**{"alpha.jobset.sigs.k8s.io/exclusive-topology": "nvidia.com/gpu.clique"})).ref
    assert ref == GroupRef("ns/jobset/js-workers-0", JOBSET, "ns", "js-workers-0", None, "nvidia.com/gpu.clique")
    assert read_group(jobset_pod()).ref is None  # no exclusive placement asked: single pods, as before
    old = pod(
        {"jobset.sigs.k8s.io/jobset-name": "js", "job-name": "js-w-1"},
        {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"},
    )
    assert read_group(old).ref.name == "js-w-1"  # type: ignore[union-attr]  # the label before Kubernetes 1.27
    nameless = pod({"jobset.sigs.k8s.io/jobset-name": "js"}, {"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"})
    assert read_group(nameless).ref is None and "jobset group name None" in read_group(nameless).problem


@pytest.mark.parametrize(
    ("spec", "size"),
    [({"parallelism": 4}, 4), ({}, 1), ({"parallelism": 0}, None), ({"parallelism": MAX_GROUP_SIZE + 1}, None)],
)
def test_a_jobset_jobs_size_is_its_parallelism(spec: dict[str, Any], size: int | None) -> None:
    assert read_pod_group(JOBSET, {"spec": spec}).size == size
