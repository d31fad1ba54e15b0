"""Rules of model/dra.py's slice and claim readers (`parse_resource_slice`, `_device`,
`parse_resource_claim`, `_claim_requests`, `_tolerations`, `_compute_domain`, `relevant_slice_part`)
that mutation testing (mutmut) found no test holding, each test failing on a one-line change: a
device is read whole (its kind from its `type` attribute else its name, UUID, product, memory and
taints, and a MIG device's profile and parent, by short or driver-qualified attribute names; a
whole GPU's profile and parent are not read); a slice whole (its pool's generation 0 to 2^63-1 and
slice count 1 to 2^31, defaults 0 and 1); a claim whole, allocated or not (its key, uid, devices,
ComputeDomain; a request's selectors, profile, tolerations with Equal by default); a malformed
slice, device, taint, claim, allocation, request, toleration or config list is refused with the
field's path and the problem, naming the object once its name is read; and the store keeps a
slice's kind, apiVersion, uid and driver-qualified attributes, and odd parts as they are. Also,
held elsewhere only by tests outside this folder: a string attribute is read up to 64 characters,
and a DeviceClass's MIG profile and its bound of 32 selectors."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.model.dra import (
    COMPUTE_DOMAIN_DRIVER,
    Claim,
    ClaimRequest,
    DeviceTaint,
    DraDevice,
    Toleration,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
    relevant_slice_part,
)
from gpuextender.extender.model.untrusted import InvalidInput
from tests.extender.dra_objects import allocated_claim, resource_slice

GPU_UUID = "GPU-00000000-0000-0000-0000-000000000000"


def refusal(call: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        call()
    return info.value


def device_read(device: dict[str, Any]) -> DraDevice:
    return parse_resource_slice(resource_slice("n1", [device])).devices[0][1]


def slice_refusal(device: Any) -> tuple[str, str]:
    err = refusal(lambda: parse_resource_slice(resource_slice("n1", [device])))
    assert err.code == "invalid_object"
    return err.path, err.problem


def test_a_whole_gpu_is_read_whole_and_its_profile_and_parent_are_not() -> None:
    device = {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": GPU_UUID},
            "gpu.nvidia.com/productName": {"string": "NVIDIA H100"},
            "profile": {"string": "1g.10gb"},
            "parentUUID": {"string": GPU_UUID},
        },
        "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}],
    }
    assert device_read(device) == DraDevice(
        "gpu-0", "gpu", GPU_UUID, "NVIDIA H100", None, (DeviceTaint("k", "v", "NoSchedule"),)
    )
    assert device_read(device).memory_bytes is None


def test_a_mig_device_reads_its_profile_and_parent_by_qualified_names() -> None:
    device = {
        "name": "mig-a",
        "attributes": {
            "gpu.nvidia.com/type": {"string": "mig"},
            "gpu.nvidia.com/profile": {"string": "1g.10gb"},
            "gpu.nvidia.com/parentUUID": {"string": GPU_UUID},
        },
        "capacity": {"memory": {"value": "10Gi"}},
    }
    assert device_read(device) == DraDevice("mig-a", "mig", "", "", 10 << 30, (), "1g.10gb", GPU_UUID)
    short = {**device, "attributes": {"type": {"string": "mig"}, "profile": {"string": "2g.20gb"}}}
    assert device_read(short) == DraDevice("mig-a", "mig", "", "", 10 << 30, (), "2g.20gb", "")


def test_a_device_s_type_attribute_names_its_kind_else_its_name_does() -> None:
    assert device_read({"name": "nic-0", "attributes": {"type": {"string": "gpu"}}}).kind == "gpu"
    assert device_read({"name": "gpu-0"}).kind == "gpu"
    assert device_read({"name": "gpu-0", "attributes": {"type": {"string": "vfio"}}}).kind == "other"


@pytest.mark.parametrize(
    ("device", "path", "problem"),
    [
        (None, "spec.devices[0]", "required field is missing"),
        ({"name": 5}, "spec.devices[0].name", "expected a string, got int 5"),
        ({"name": ""}, "spec.devices[0].name", "required field is missing"),
        ({"name": "d", "attributes": "x"}, "spec.devices[0].attributes", "expected an object, got str 'x'"),
        ({"name": "d", "capacity": "x"}, "spec.devices[0].capacity", "expected an object, got str 'x'"),
        (
            {"name": "d", "capacity": {"memory": {"value": "lots"}}},
            "spec.devices[0].capacity.memory.value",
            "'lots' is not a Kubernetes quantity",
        ),
        ({"name": "d", "taints": "x"}, "spec.devices[0].taints", "expected a list, got str 'x'"),
        (
            {"name": "d", "taints": [{"key": "k", "effect": "None"}] * 17},
            "spec.devices[0].taints",
            "17 taints; at most 16 per device",
        ),
        ({"name": "d", "taints": [None]}, "spec.devices[0].taints[0]", "required field is missing"),
        ({"name": "d", "taints": [{"key": 5}]}, "spec.devices[0].taints[0].key", "expected a string, got int 5"),
        ({"name": "d", "taints": [{"value": 5}]}, "spec.devices[0].taints[0].value", "expected a string, got int 5"),
        ({"name": "d", "taints": [{"effect": 5}]}, "spec.devices[0].taints[0].effect", "expected a string, got int 5"),
        ({"name": "d", "nodeName": 5}, "spec.devices[0].nodeName", "expected a string, got int 5"),
    ],
)
def test_a_malformed_device_is_refused_with_its_path_and_problem(device: Any, path: str, problem: str) -> None:
    assert slice_refusal(device) == (path, problem)


def a_slice(**spec: Any) -> dict[str, Any]:
    obj = resource_slice("n1", [{"name": "gpu-0"}], name="s")
    obj["spec"].update(spec)
    return obj


def test_a_slice_is_read_whole_with_its_pool() -> None:
    obj = a_slice(pool={"name": "p", "generation": 2**63 - 1, "resourceSliceCount": 3})
    s = parse_resource_slice(obj)
    assert (s.name, s.driver, s.pool, s.generation, s.slice_count) == ("s", "gpu.nvidia.com", "p", 2**63 - 1, 3)
    obj["spec"]["pool"] = {"name": "p", "generation": 0, "resourceSliceCount": 2**31}
    assert (parse_resource_slice(obj).generation, parse_resource_slice(obj).slice_count) == (0, 2**31)
    obj["spec"]["pool"] = {"name": "p"}
    assert (parse_resource_slice(obj).generation, parse_resource_slice(obj).slice_count) == (0, 1)


@pytest.mark.parametrize(
    ("spec", "path", "problem"),
    [
        ({"driver": 5}, "spec.driver", "expected a string, got int 5"),
        ({"driver": ""}, "spec.driver", "required field is missing"),
        ({"pool": {"name": 5}}, "spec.pool.name", "expected a string, got int 5"),
        (
            {"pool": {"generation": 2**63}},
            "spec.pool.generation",
            "9223372036854775808 is out of range [0, 9223372036854775807]",
        ),
        ({"pool": {"resourceSliceCount": 0}}, "spec.pool.resourceSliceCount", "0 is out of range [1, 2147483648]"),
        (
            {"pool": {"resourceSliceCount": 2**31 + 1}},
            "spec.pool.resourceSliceCount",
            "2147483649 is out of range [1, 2147483648]",
        ),
        ({"pool": {"resourceSliceCount": "3"}}, "spec.pool.resourceSliceCount", "expected an integer, got str '3'"),
        ({"nodeName": 5}, "spec.nodeName", "expected a string, got int 5"),
        ({"perDeviceNodeSelection": "yes"}, "spec.perDeviceNodeSelection", "expected true or false, got str 'yes'"),
        ({"devices": [{"name": "gpu-0"}] * 129}, "spec.devices", "129 devices; at most 128 per slice"),
    ],
)
def test_a_malformed_slice_is_refused_with_its_path_and_problem(spec: dict[str, Any], path: str, problem: str) -> None:
    err = refusal(lambda: parse_resource_slice(a_slice(**spec)))
    assert (err.code, err.path, err.problem) == ("invalid_object", path, problem)


def test_a_slice_refusal_names_the_slice_once_its_name_is_read() -> None:
    assert str(refusal(lambda: parse_resource_slice("x"))) == "ResourceSlice: (object): expected an object"
    assert str(refusal(lambda: parse_resource_slice(a_slice(driver=None)))) == (
        "ResourceSlice 's': spec.driver: required field is missing"
    )


def claim_refusal(obj: Any) -> InvalidInput:
    err = refusal(lambda: parse_resource_claim(obj))
    assert err.code == "invalid_object"
    return err


def test_a_claim_that_is_no_object_is_refused_as_such() -> None:
    err = claim_refusal("x")
    assert (str(err), err.path, err.problem) == (
        "ResourceClaim: (object): expected an object",
        "(object)",
        "expected an object",
    )


@pytest.mark.parametrize(("name", "namespace"), [(5, "ml"), ("", "ml"), ("c", 5), ("c", ""), ("c", None)])
def test_a_claim_needs_a_name_and_a_namespace_both_strings(name: Any, namespace: Any) -> None:
    obj = allocated_claim("c", "n1", ["gpu-0"])
    obj["metadata"].update(name=name, namespace=namespace)
    err = claim_refusal(obj)
    assert (str(err), err.path, err.problem) == (
        "ResourceClaim: metadata: name and namespace are required",
        "metadata",
        "name and namespace are required",
    )


@pytest.mark.parametrize(
    ("allocation", "path", "problem"),
    [
        ("x", "status.allocation", "expected an object, got str 'x'"),
        ({"devices": {"results": "x"}}, "status.allocation.devices.results", "expected a list, got str 'x'"),
        ({"devices": {"results": [None]}}, "status.allocation.devices.results[0]", "required field is missing"),
        (
            {"devices": {"results": [{"driver": 5}]}},
            "status.allocation.devices.results[0].driver",
            "expected a string, got int 5",
        ),
        (
            {"devices": {"results": [{"pool": 5}]}},
            "status.allocation.devices.results[0].pool",
            "expected a string, got int 5",
        ),
        (
            {"devices": {"results": [{"device": 5}]}},
            "status.allocation.devices.results[0].device",
            "expected a string, got int 5",
        ),
    ],
)
def test_a_malformed_allocation_is_refused_naming_the_claim_and_the_field(
    allocation: Any, path: str, problem: str
) -> None:
    obj = allocated_claim("c", "n1", [], namespace="ml")
    obj["status"]["allocation"] = allocation
    assert str(claim_refusal(obj)) == f"ResourceClaim 'ml/c': {path}: {problem}"


def with_domain(obj: dict[str, Any]) -> dict[str, Any]:
    parameters = {"kind": "ComputeDomainChannelConfig", "domainID": "cd-1"}
    obj["spec"]["devices"]["config"] = [{"opaque": {"driver": COMPUTE_DOMAIN_DRIVER, "parameters": parameters}}]
    return obj


def test_a_claim_is_read_whole_allocated_or_not() -> None:
    requests = (ClaimRequest("gpus", (("gpu.nvidia.com", 1),)),)
    allocated = with_domain(allocated_claim("c", "n1", ["gpu-0"], namespace="ml"))
    device = ("gpu.nvidia.com", "n1", "gpu-0")
    assert parse_resource_claim(allocated) == Claim("ml/c", "n1", (device,), requests, True, "uid-c", "cd-1")
    del allocated["status"]
    assert parse_resource_claim(allocated) == Claim("ml/c", "", (), requests, False, "", "cd-1")


def test_a_claim_uid_that_is_no_string_reads_as_none() -> None:
    obj = allocated_claim("c", "n1", ["gpu-0"])
    obj["metadata"]["uid"] = 5
    assert parse_resource_claim(obj).uid == ""


def claim_with(*requests: Any) -> dict[str, Any]:
    obj = allocated_claim("c", "n1", [])
    obj["spec"]["devices"]["requests"] = list(requests)
    return obj


REQUEST = "spec.devices.requests[0]"
GPU_CHOICE = {"deviceClassName": "gpu.nvidia.com"}


@pytest.mark.parametrize(
    ("requests", "path", "problem"),
    [
        ("x", "spec.devices.requests", "expected a list, got str 'x'"),
        ([{"name": "r", "exactly": GPU_CHOICE}] * 33, "spec.devices.requests", "33 requests; at most 32"),
        ([None], REQUEST, "required field is missing"),
        ([{"name": 5, "exactly": GPU_CHOICE}], f"{REQUEST}.name", "expected a string, got int 5"),
        ([{"exactly": "x"}], f"{REQUEST}.exactly", "expected an object, got str 'x'"),
        ([{"firstAvailable": "x"}], f"{REQUEST}.firstAvailable", "expected a list, got str 'x'"),
        ([{"firstAvailable": [GPU_CHOICE] * 33}], f"{REQUEST}.firstAvailable", "33 choices; at most 32"),
    ],
)
def test_a_malformed_request_is_refused_with_its_path_and_problem(requests: Any, path: str, problem: str) -> None:
    obj = allocated_claim("c", "n1", [])
    obj["spec"]["devices"]["requests"] = requests
    err = claim_refusal(obj)
    assert (err.path, err.problem) == (path, problem)


def test_32_requests_of_32_choices_each_are_the_most_a_claim_asks() -> None:
    claim = parse_resource_claim(claim_with(*[{"name": "r", "firstAvailable": [GPU_CHOICE] * 32}] * 32))
    assert len(claim.requests) == 32 and len(claim.requests[0].choices) == 32


def test_a_request_with_its_own_selectors_is_read_as_selected_with_its_profile() -> None:
    profile = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}
    other = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'H100'"}}
    claim = parse_resource_claim(
        claim_with(
            {"name": "a", "exactly": {**GPU_CHOICE, "selectors": [profile]}},
            {"name": "b", "exactly": {**GPU_CHOICE, "selectors": [other]}},
            {"name": "c", "exactly": GPU_CHOICE},
        )
    )
    choice = (("gpu.nvidia.com", 1),)
    assert claim.requests == (
        ClaimRequest("a", choice, (), ("1g.10gb",), True),
        ClaimRequest("b", choice, (), (), True),
        ClaimRequest("c", choice, (), (), False),
    )


def tolerations_read(*tolerations: Any) -> tuple[Toleration, ...]:
    claim = parse_resource_claim(claim_with({"name": "r", "exactly": {**GPU_CHOICE, "tolerations": list(tolerations)}}))
    return claim.requests[0].tolerations


def test_a_toleration_is_read_whole_and_equal_is_its_default_operator() -> None:
    assert tolerations_read(
        {"key": "k", "value": "v", "effect": "NoSchedule"},
        {"key": "k", "operator": "Equal", "value": "w"},
        {"key": "j", "operator": "Exists", "effect": "NoExecute"},
    ) == (
        Toleration("k", "Equal", "v", "NoSchedule"),
        Toleration("k", "Equal", "w", ""),
        Toleration("j", "Exists", "", "NoExecute"),
    )


TOLERATIONS = f"{REQUEST}.exactly.tolerations"


@pytest.mark.parametrize(
    ("tolerations", "path", "problem"),
    [
        ("x", TOLERATIONS, "expected a list, got str 'x'"),
        ([{"operator": "Exists"}] * 17, TOLERATIONS, "17 tolerations; at most 16"),
        ([None], f"{TOLERATIONS}[0]", "required field is missing"),
        ([{"operator": 5}], f"{TOLERATIONS}[0].operator", "expected a string, got int 5"),
        ([{"operator": "Near"}], f"{TOLERATIONS}[0].operator", "'Near' is neither Equal nor Exists"),
        ([{"key": 5}], f"{TOLERATIONS}[0].key", "expected a string, got int 5"),
        ([{"value": 5}], f"{TOLERATIONS}[0].value", "expected a string, got int 5"),
        ([{"effect": 5}], f"{TOLERATIONS}[0].effect", "expected a string, got int 5"),
    ],
)
def test_a_malformed_toleration_is_refused_with_its_path_and_problem(tolerations: Any, path: str, problem: str) -> None:
    err = claim_refusal(claim_with({"name": "r", "exactly": {**GPU_CHOICE, "tolerations": tolerations}}))
    assert (err.path, err.problem) == (path, problem)


def test_the_store_keeps_a_slice_s_kind_version_uid_and_driver_qualified_attributes() -> None:
    device = {
        "name": "gpu-0",
        "attributes": {"gpu.nvidia.com/uuid": {"string": GPU_UUID}, "gpu.nvidia.com/brand": {"string": "Nvidia"}},
    }
    obj = resource_slice("n1", [], name="s")
    obj["spec"]["devices"] = ["not a device", device]
    obj["metadata"]["uid"] = "u"
    slim = relevant_slice_part(obj)
    assert (slim["apiVersion"], slim["kind"], slim["metadata"]) == (
        "resource.k8s.io/v1",
        "ResourceSlice",
        {"name": "s", "uid": "u"},
    )
    assert slim["spec"]["devices"] == [
        "not a device",
        {"name": "gpu-0", "attributes": {"gpu.nvidia.com/uuid": {"string": GPU_UUID}}},
    ]


def test_the_store_keeps_no_qualified_attribute_of_a_slice_without_a_driver() -> None:
    obj = resource_slice("n1", [{"name": "gpu-0", "attributes": {"None/uuid": {"string": GPU_UUID}}}])
    del obj["spec"]["driver"]
    assert relevant_slice_part(obj)["spec"]["devices"] == [{"name": "gpu-0", "attributes": {}}]


def test_the_store_keeps_metadata_that_is_no_object_as_it_is() -> None:
    obj = resource_slice("n1", [])
    obj["metadata"] = "x"
    assert relevant_slice_part(obj)["metadata"] == "x"


@pytest.mark.parametrize(
    ("configs", "problem"),
    [("x", "expected a list, got str 'x'"), ([{}] * 33, "33 configs; at most 32")],
)
def test_malformed_opaque_configs_are_refused_with_their_path(configs: Any, problem: str) -> None:
    obj = allocated_claim("c", "n1", [])
    obj["spec"]["devices"]["config"] = configs
    err = claim_refusal(obj)
    assert (err.path, err.problem) == ("spec.devices.config", problem)


@pytest.mark.parametrize(
    ("uuid", "read"),
    [({"string": "u" * 64}, "u" * 64), ({"string": "u" * 65}, ""), ({"int": 5}, "")],
)
def test_a_string_attribute_is_read_up_to_64_characters_and_no_other_value(uuid: Any, read: str) -> None:
    assert device_read({"name": "gpu-0", "attributes": {"uuid": uuid}}).uuid == read


def test_a_device_class_reads_the_mig_profile_its_selectors_require_and_at_most_32_selectors() -> None:
    cel = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}
    obj: dict[str, Any] = {"metadata": {"name": "c"}, "spec": {"selectors": [cel] * 32}}
    assert parse_device_class(obj).profile == "1g.10gb"
    obj["spec"]["selectors"] = [cel] * 33
    err = refusal(lambda: parse_device_class(obj))
    assert (err.path, err.problem) == ("spec.selectors", "33 selectors; at most 32")
