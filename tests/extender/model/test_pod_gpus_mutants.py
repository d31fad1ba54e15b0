"""Rules of model/pod_gpus.py that mutation testing (mutmut) found no test holding, each test
failing on a one-line change: a refusal names the field from the Pod down (the spec, a container
list, a container, its resources, requests and limits, and a quantity); a resource read from the
limits adds to one read from the requests; a name of exactly 254 characters is cut; a container
without resources does not end the look for a GPU in the ones after it; and two MIG needs of the
same profile add up."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.model.pod_gpus import add_mig, gpus_requested, may_request, parse_count, pod_ref
from gpuextender.extender.model.untrusted import InvalidInput

GPU = ("nvidia.com/gpu",)


def refusal(pod: dict[str, Any], resources: tuple[str, ...] = GPU) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        gpus_requested(pod, resources)
    return info.value


@pytest.mark.parametrize(
    ("pod", "path"),
    [
        ({"spec": [1]}, "Pod.spec"),
        ({"spec": {"containers": "x"}}, "Pod.spec.containers"),
        ({"spec": {"initContainers": "x"}}, "Pod.spec.initContainers"),
        ({"spec": {"containers": [5]}}, "Pod.spec.containers[0]"),
        ({"spec": {"containers": [{"resources": 5}]}}, "Pod.spec.containers[0].resources"),
        ({"spec": {"containers": [{"resources": {"requests": 5}}]}}, "Pod.spec.containers[0].resources.requests"),
        ({"spec": {"initContainers": [{"resources": {"limits": 5}}]}}, "Pod.spec.initContainers[0].resources.limits"),
    ],
)
def test_a_mistyped_field_is_refused_with_its_path_from_the_pod(pod: dict[str, Any], path: str) -> None:
    err = refusal(pod)
    assert err.path == path
    assert str(err).startswith(f"{path}: expected ")


def test_a_bad_quantity_is_refused_with_its_path_in_requests_or_limits() -> None:
    requests = refusal({"spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "x"}}}]}})
    assert str(requests).startswith("Pod.spec.containers[0].resources.requests[nvidia.com/gpu]: ")
    limits = refusal({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "x"}}}]}})
    assert str(limits).startswith("Pod.spec.containers[0].resources.limits[nvidia.com/gpu]: ")


def test_a_resource_read_from_limits_adds_to_one_read_from_requests() -> None:
    container = {"resources": {"requests": {"a/gpu": "1"}, "limits": {"b/gpu": "2"}}}
    assert gpus_requested({"spec": {"containers": [container]}}, ("a/gpu", "b/gpu")) == 3


def test_a_name_of_254_characters_is_cut_at_253() -> None:
    assert pod_ref({"metadata": {"namespace": "ns", "name": "p" * 254}}) == "ns/" + "p" * 253 + "..."


def test_a_container_without_resources_does_not_hide_a_gpu_in_the_next() -> None:
    pod = {"spec": {"containers": [{"name": "a"}, {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    assert may_request(pod, GPU)


def test_two_mig_needs_of_one_profile_add_up() -> None:
    assert add_mig((("1g.10gb", 1),), (("1g.10gb", 2), ("2g.20gb", 1))) == (("1g.10gb", 3), ("2g.20gb", 1))


def test_too_many_containers_counts_both_lists_in_its_message() -> None:
    err = refusal({"spec": {"containers": [{}] * 600, "initContainers": [{}] * 401}})
    assert (err.code, str(err)) == (
        "too_many_containers",
        "Pod has 1001 containers and initContainers; at most 1000 are read",
    )


def test_sidecars_add_up_beside_each_other() -> None:
    sidecar = {"restartPolicy": "Always", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
    pod = {"spec": {"containers": [{}], "initContainers": [sidecar, sidecar]}}
    assert gpus_requested(pod, GPU) == 2


@pytest.mark.parametrize(
    ("value", "code", "message"),
    [
        (True, "wrong_type", "w: expected a quantity, got True"),
        ([1], "bad_quantity", "w: a JSON array is not a Kubernetes quantity"),
        ("-1", "bad_quantity", "w: '-1' is not a whole, non-negative number of devices"),
        ("0.5", "bad_quantity", "w: '0.5' is not a whole, non-negative number of devices"),
        (2**31 + 1, "too_many_gpus", "w: 2147483649 is more than 2147483648 (2**31) devices"),
        ("2147483649", "too_many_gpus", "w: '2147483649' is more than 2147483648 (2**31) devices"),
        ("9" * 65, "bad_quantity", f"w: {'9' * 40!r}... (65 characters) is longer than 64 characters"),
        ("x", "bad_quantity", "w: 'x' is not a Kubernetes quantity"),
        ("0e65", "bad_quantity", "w: '0e65' has an exponent beyond +-64"),
    ],
)
def test_a_refused_count_says_where_what_and_why(value: object, code: str, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_count(value, "w")
    assert (info.value.code, str(info.value)) == (code, message)


def test_a_quantity_is_read_exactly_past_28_digits() -> None:
    # 2 plus 10**-31: not whole, however close; Python's default context (28 digits) would round it to 2.
    with pytest.raises(InvalidInput) as info:
        parse_count("2.0000000000000000000000000000001", "w")
    assert info.value.code == "bad_quantity"
    with pytest.raises(InvalidInput):
        parse_count("2.0000000000000000000000000000001Ki", "w")
