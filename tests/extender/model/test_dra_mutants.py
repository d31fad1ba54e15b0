"""Rules of model/dra.py (the functions run so far) that mutation testing (mutmut) found no test
holding, each test failing on a one-line change: a claim's node is read only from a node selector of
exactly one term holding exactly one `metadata.name In [node]` field, every other shape reading as
no node; a pod without a namespace uses claims in `default`, and a claim status without a string
claim name adds none; a mistyped or missing request field (class, mode, count past 8,192,
selectors, a choice), an object that is no object and one without a name or a spec are refused
with their path (a DeviceClass's refusals name it, with the code invalid_object); a request is read
whole (name, count, choices, All, its own selectors, said to be not evaluated), and one that may get
another kind of device, or no GPU, counts nothing."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.model.dra import (
    ALL_DEVICES,
    NO_CLASS,
    NOT_A_GPU_CLASS,
    OTHER_KIND_POSSIBLE,
    PROFILE_UNKNOWN,
    ClaimRequest,
    DeviceClassInfo,
    RequestReading,
    parse_device_class,
    parse_resource_claim,
    pod_claims,
    read_request,
)
from gpuextender.extender.model.untrusted import InvalidInput
from tests.extender.dra_objects import allocated_claim

FIELD = {"key": "metadata.name", "operator": "In", "values": ["n1"]}


def node_of(selector: Any) -> str:
    obj = allocated_claim("c", "n1", ["gpu-0"])
    obj["status"]["allocation"]["nodeSelector"] = selector
    claim = parse_resource_claim(obj)
    assert claim is not None
    return claim.node


def test_one_term_of_one_name_field_names_the_node() -> None:
    assert node_of({"nodeSelectorTerms": [{"matchFields": [FIELD]}]}) == "n1"


@pytest.mark.parametrize(
    "selector",
    [
        {},
        {"nodeSelectorTerms": {"matchFields": [FIELD]}},
        {"nodeSelectorTerms": []},
        {"nodeSelectorTerms": [{"matchFields": [FIELD]}, {"matchFields": [FIELD]}]},
        {"nodeSelectorTerms": ["x"]},
        {"nodeSelectorTerms": [{}]},
        {"nodeSelectorTerms": [{"matchFields": FIELD}]},
        {"nodeSelectorTerms": [{"matchFields": []}]},
        {"nodeSelectorTerms": [{"matchFields": [FIELD, FIELD]}]},
        {"nodeSelectorTerms": [{"matchFields": ["x"]}]},
        {"nodeSelectorTerms": [{"matchFields": [{**FIELD, "key": "metadata.uid"}]}]},
        {"nodeSelectorTerms": [{"matchFields": [{**FIELD, "operator": "NotIn"}]}]},
        {"nodeSelectorTerms": [{"matchFields": [{**FIELD, "values": "n1"}]}]},
        {"nodeSelectorTerms": [{"matchFields": [{**FIELD, "values": []}]}]},
        {"nodeSelectorTerms": [{"matchFields": [{**FIELD, "values": ["n1", "n2"]}]}]},
        {"nodeSelectorTerms": [{"matchFields": [{**FIELD, "values": [5]}]}]},
    ],
)
def test_any_other_node_selector_names_no_node(selector: Any) -> None:
    assert node_of(selector) == ""


def test_a_pod_without_a_namespace_uses_claims_in_default() -> None:
    assert pod_claims({"spec": {"resourceClaims": [{"name": "g", "resourceClaimName": "shared"}]}}) == (
        "default/shared",
    )


def test_a_claim_status_without_a_claim_name_adds_none() -> None:
    pod = {
        "metadata": {"namespace": "ml"},
        "status": {"resourceClaimStatuses": [{"name": "a"}, {"name": "b", "resourceClaimName": 5}]},
    }
    assert pod_claims(pod) == ()


def refusal(call: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        call()
    return info.value


def claim_asking(request: dict[str, Any]) -> dict[str, Any]:
    obj = allocated_claim("c", "n1", ["gpu-0"])
    obj["spec"]["devices"]["requests"] = [{"name": "gpus", **request}]
    return obj


EXACTLY = "spec.devices.requests[0].exactly"


@pytest.mark.parametrize(
    ("exactly", "path"),
    [
        ({"deviceClassName": 5}, f"{EXACTLY}.deviceClassName"),
        ({"deviceClassName": "gpu.nvidia.com", "allocationMode": 5}, f"{EXACTLY}.allocationMode"),
        ({"deviceClassName": "gpu.nvidia.com", "count": 8193}, f"{EXACTLY}.count"),
        ({"deviceClassName": "gpu.nvidia.com", "selectors": "x"}, f"{EXACTLY}.selectors"),
        ({"selectors": [{"cel": {"expression": "true"}}] * 33}, f"{EXACTLY}.selectors"),
        ({"selectors": ["x"]}, f"{EXACTLY}.selectors[0]"),
        ({"selectors": [{"cel": {"expression": 5}}]}, f"{EXACTLY}.selectors[0].cel.expression"),
    ],
)
def test_a_mistyped_request_field_is_refused_with_its_path(exactly: dict[str, Any], path: str) -> None:
    assert refusal(lambda: parse_resource_claim(claim_asking({"exactly": exactly}))).path == path


def test_a_count_of_8192_devices_is_the_most_one_request_asks() -> None:
    claim = parse_resource_claim(claim_asking({"exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8192}}))
    assert claim.requests[0].choices == (("gpu.nvidia.com", 8192),)
    too_many = refusal(lambda: parse_resource_claim(claim_asking({"exactly": {"count": 8193}})))
    assert too_many.problem == "8193 is out of range [1, 8192]"


def test_a_missing_choice_is_refused_with_its_path() -> None:
    err = refusal(lambda: parse_resource_claim(claim_asking({"firstAvailable": [None]})))
    assert (err.path, err.problem) == ("spec.devices.requests[0].firstAvailable[0]", "required field is missing")


def test_an_object_that_is_no_object_is_refused_as_such() -> None:
    err = refusal(lambda: parse_device_class("x"))
    assert err.code == "invalid_object"
    assert (str(err), err.path, err.problem) == (
        "DeviceClass: (object): expected an object",
        "(object)",
        "expected an object",
    )


def test_a_request_with_its_own_selectors_says_they_are_not_evaluated() -> None:
    assert RequestReading("r", gpus=1, selected=True).why() == (
        "1 whole GPU(s); its own selectors are not evaluated (kube-scheduler's allocator checked them)"
    )


def test_an_object_without_a_name_is_refused() -> None:
    for name in ("", 5):
        err = refusal(lambda n=name: parse_device_class({"metadata": {"name": n}, "spec": {}}))
        assert (err.path, err.problem) == ("metadata.name", "required field is missing")


def test_an_object_without_a_spec_is_refused() -> None:
    err = refusal(lambda: parse_device_class({"metadata": {"name": "c"}}))
    assert (err.path, err.problem) == ("spec", "required field is missing")


GPU_CLASSES = ("gpu.nvidia.com",)
MIG_CLASSES = {
    "mig-1g": DeviceClassInfo("mig-1g", frozenset(), "mig", "", "1g.10gb"),
    "mig-any": DeviceClassInfo("mig-any", frozenset(), "mig", ""),
}


def read(*choices: tuple[str, int], selected: bool = False) -> RequestReading:
    return read_request(ClaimRequest("r", choices, selected=selected), GPU_CLASSES, MIG_CLASSES)


def test_a_request_is_read_whole_with_its_name_count_choices_and_mode() -> None:
    assert read() == RequestReading("r", skipped=NO_CLASS)
    assert read(("gpu.nvidia.com", 2)) == RequestReading("r", gpus=2, choices=1, all_mode=False)
    both = read(("gpu.nvidia.com", 2), ("gpu.nvidia.com", ALL_DEVICES), selected=True)
    assert both == RequestReading("r", gpus=1, choices=2, all_mode=True, selected=True)
    assert read(("mig-1g", 2), ("mig-1g", 3)) == RequestReading("r", mig=("1g.10gb", 2), choices=2, all_mode=False)
    assert read(("mig-any", 1)) == RequestReading("r", skipped=PROFILE_UNKNOWN)
    assert read(("mig-1g", ALL_DEVICES)) == RequestReading("r", mig=("1g.10gb", 1), choices=1, all_mode=True)


def test_a_request_that_may_get_another_kind_or_no_gpu_counts_nothing() -> None:
    assert read(("gpu.nvidia.com", 1), ("other", 1)) == RequestReading("r", skipped=OTHER_KIND_POSSIBLE)
    assert read(("other", 1)) == RequestReading("r", skipped=NOT_A_GPU_CLASS)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"extendedResourceName": 5}, "DeviceClass 'c': spec.extendedResourceName: expected a string, got int 5"),
        ({"selectors": "x"}, "DeviceClass 'c': spec.selectors: expected a list, got str 'x'"),
    ],
)
def test_a_device_class_refusal_names_the_class_and_the_field(spec: dict[str, Any], message: str) -> None:
    err = refusal(lambda: parse_device_class({"metadata": {"name": "c"}, "spec": spec}))
    assert (err.code, str(err)) == ("invalid_object", message)
