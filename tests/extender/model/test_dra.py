"""model/dra.py: ResourceSlices, DeviceClasses and ResourceClaims as NVIDIA's DRA driver and
kube-scheduler write them, and what a malformed one is refused with."""

from __future__ import annotations

import copy
import json

import pytest

from gpuextender.extender.model.dra import (
    ALL_DEVICES,
    MAX_DEVICE_TAINTS,
    MAX_SLICE_DEVICES,
    MAX_TOLERATIONS,
    ClaimRequest,
    DeviceTaint,
    DraDevice,
    Toleration,
    device_kind,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
    pod_claims,
    served_by_dra,
)
from gpuextender.extender.model.untrusted import InvalidInput
from tests.extender.dra_objects import (
    allocated_claim,
    device_class,
    gpu_device,
    gpu_slice,
    mig_device,
    resource_slice,
)


def test_a_slice_of_eight_gpus_and_a_mig_device() -> None:
    obj = resource_slice(
        "n1", [*(gpu_device(i, taint="NoSchedule" if i == 7 else "") for i in range(8)), mig_device(0)]
    )
    s = parse_resource_slice(obj)
    assert (s.name, s.driver, s.pool, s.generation, s.slice_count) == (
        "n1-gpu.nvidia.com",
        "gpu.nvidia.com",
        "n1",
        1,
        1,
    )
    assert [node for node, _ in s.devices] == ["n1"] * 9
    gpu0, gpu7, mig = s.devices[0][1], s.devices[7][1], s.devices[8][1]
    assert (gpu0.name, gpu0.kind, gpu0.product, gpu0.memory_bytes) == (
        "gpu-0",
        "gpu",
        "NVIDIA H100 80GB HBM3",
        80 << 30,
    )
    assert gpu0.uuid.startswith("GPU-") and gpu0.allocatable
    assert not gpu7.allocatable and gpu7.taints[0].value == "79"
    assert mig.kind == "mig"


@pytest.mark.parametrize(("effect", "allocatable"), [("None", True), ("NoSchedule", False), ("NoExecute", False)])
def test_only_noschedule_and_noexecute_taints_keep_a_device_from_the_allocator(effect: str, allocatable: bool) -> None:
    s = parse_resource_slice(gpu_slice("n1", 1, tainted=(0,), effect=effect))
    assert s.devices[0][1].allocatable is allocatable


def test_which_node_a_device_is_on() -> None:
    per_device = resource_slice("n1", [gpu_device(0), gpu_device(1)])
    del per_device["spec"]["nodeName"]
    per_device["spec"]["perDeviceNodeSelection"] = True
    per_device["spec"]["devices"][0]["nodeName"] = "n2"
    per_device["spec"]["devices"][1]["allNodes"] = True
    assert [n for n, _ in parse_resource_slice(per_device).devices] == ["n2", None]
    everywhere = resource_slice("n1", [gpu_device(0)])
    del everywhere["spec"]["nodeName"]
    everywhere["spec"]["allNodes"] = True
    assert [n for n, _ in parse_resource_slice(everywhere).devices] == [None]  # no one node's


@pytest.mark.parametrize(
    ("name", "type_attribute", "kind"),
    [
        ("gpu-0", "", "gpu"),
        ("gpu-12", "", "gpu"),
        ("gpu-3-mig-1g10gb-19-0", "", "mig"),
        ("gpu-x", "", "other"),
        ("nic-0", "", "other"),
        ("anything", "gpu", "gpu"),  # the type attribute wins over the name
        ("gpu-0", "vfio", "other"),
    ],
)
def test_device_kind(name: str, type_attribute: str, kind: str) -> None:
    assert device_kind(name, type_attribute) == kind


def test_qualified_attribute_names_read_like_short_ones() -> None:
    obj = gpu_slice("n1", 1)
    attrs = obj["spec"]["devices"][0]["attributes"]
    attrs["gpu.nvidia.com/type"] = attrs.pop("type")
    attrs["gpu.nvidia.com/uuid"] = attrs.pop("uuid")
    device = parse_resource_slice(obj).devices[0][1]
    assert device.kind == "gpu" and device.uuid.startswith("GPU-")


@pytest.mark.parametrize("count", [MAX_SLICE_DEVICES, MAX_SLICE_DEVICES + 1])
def test_at_most_128_devices_per_slice(count: int) -> None:
    obj = resource_slice("n1", [gpu_device(i) for i in range(count)])
    if count <= MAX_SLICE_DEVICES:
        assert len(parse_resource_slice(obj).devices) == count
    else:
        with pytest.raises(InvalidInput, match="at most 128"):
            parse_resource_slice(obj)


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda o: o["spec"].pop("driver"), "spec.driver"),
        (lambda o: o["spec"].pop("pool"), "spec.pool"),
        (lambda o: o["spec"]["pool"].update(generation=-1), "spec.pool.generation"),
        (lambda o: o["spec"].update(devices={"gpu-0": {}}), "spec.devices"),
        (lambda o: o["spec"]["devices"][0].pop("name"), "spec.devices[0].name"),
        (lambda o: o["spec"]["devices"][0]["capacity"]["memory"].update(value="lots"), "spec.devices[0].capacity"),
        (lambda o: o["metadata"].pop("name"), "metadata.name"),
    ],
)
def test_a_malformed_slice_is_refused_naming_the_field(change: object, path: str) -> None:
    obj = copy.deepcopy(gpu_slice("n1", 2))
    change(obj)  # type: ignore[operator]
    with pytest.raises(InvalidInput) as info:
        parse_resource_slice(obj)
    assert info.value.path.startswith(path) and info.value.code == "invalid_object"


def test_device_classes() -> None:
    c = parse_device_class(device_class())
    assert (c.name, c.drivers, c.device_type, c.extended_resource) == (
        "gpu.nvidia.com",
        frozenset({"gpu.nvidia.com"}),
        "gpu",
        "nvidia.com/gpu",
    )
    double = parse_device_class(device_class(cel='device.driver == "gpu.nvidia.com"', extended=None))
    assert (
        double.drivers == frozenset({"gpu.nvidia.com"}) and double.device_type == "" and double.extended_resource == ""
    )
    opaque = parse_device_class(device_class(cel="device.attributes['x'].y > 3"))
    assert opaque.drivers == frozenset()  # a CEL the extender cannot read selects nothing it counts


def test_an_allocated_claim_and_one_not_allocated_yet() -> None:
    claim = parse_resource_claim(allocated_claim("two", "n1", ["gpu-0", "gpu-1"], namespace="team"))
    assert claim is not None
    assert (claim.key, claim.node) == ("team/two", "n1")
    assert claim.devices == (("gpu.nvidia.com", "n1", "gpu-0"), ("gpu.nvidia.com", "n1", "gpu-1"))
    assert claim.allocated and claim.requests == (ClaimRequest("gpus", (("gpu.nvidia.com", 1),)),)
    pending = allocated_claim("later", "n1", [])
    del pending["status"]
    later = parse_resource_claim(pending)
    assert (later.allocated, later.node, later.devices) == (False, "", ())


def test_what_a_claim_asks_for() -> None:
    obj = allocated_claim("ask", "n1", [])
    del obj["status"]
    obj["spec"]["devices"]["requests"] = [
        {"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
        {"name": "b", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
        {
            "name": "c",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
                {"name": "small", "deviceClassName": "mig.nvidia.com"},
            ],
        },
    ]
    assert parse_resource_claim(obj).requests == (
        ClaimRequest("a", (("gpu.nvidia.com", 2),)),
        ClaimRequest("b", (("gpu.nvidia.com", ALL_DEVICES),)),
        ClaimRequest("c", (("gpu.nvidia.com", 4), ("mig.nvidia.com", 1))),
    )
    obj["spec"]["devices"]["requests"][0]["exactly"]["count"] = 0
    with pytest.raises(InvalidInput, match=r"requests\[0\]\.exactly\.count"):
        parse_resource_claim(obj)


def test_the_claims_a_pod_uses() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "resourceClaims": [
                {"name": "gpus", "resourceClaimName": "shared"},
                {"name": "scratch", "resourceClaimTemplateName": "one-gpu"},
                {"name": "odd", "resourceClaimName": 5},
            ]
        },
        "status": {"resourceClaimStatuses": [{"name": "scratch", "resourceClaimName": "p-scratch-x7k2"}]},
    }
    assert pod_claims(pod) == ("ml/shared", "ml/p-scratch-x7k2")
    assert pod_claims({"spec": {"resourceClaims": "nope"}}) == () and pod_claims(None) == ()
    # The claim kube-scheduler made for an extended-resource request: only when asked (its GPUs are
    # the request's, counted already; the ledger keeps the pod by it so its binding closes the gate).
    pod["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "p-extended-resources-q"}
    assert pod_claims(pod) == ("ml/shared", "ml/p-scratch-x7k2")
    assert pod_claims(pod, extended=True) == ("ml/shared", "ml/p-scratch-x7k2", "ml/p-extended-resources-q")


def test_admin_access_results_hold_nothing_and_a_claim_without_one_node_has_none() -> None:
    obj = allocated_claim("mon", "n1", ["gpu-0", "gpu-1"])
    obj["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    obj["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"] *= 2
    claim = parse_resource_claim(obj)
    assert claim is not None and claim.devices == (("gpu.nvidia.com", "n1", "gpu-1"),) and claim.node == ""


def test_a_claim_needs_a_name_and_namespace() -> None:
    obj = allocated_claim("x", "n1", ["gpu-0"])
    del obj["metadata"]["namespace"]
    with pytest.raises(InvalidInput, match="name and namespace"):
        parse_resource_claim(obj)


def test_served_by_dra() -> None:
    assert served_by_dra({"status": {"extendedResourceClaimStatus": {"resourceClaimName": "p-extended-resources-x"}}})
    assert not served_by_dra({"status": {}}) and not served_by_dra({}) and not served_by_dra(None)


def test_a_huge_name_never_makes_a_huge_message() -> None:
    obj = gpu_slice("n1", 1)
    obj["metadata"]["name"] = "s" * 100_000
    del obj["spec"]["driver"]
    with pytest.raises(InvalidInput) as info:
        parse_resource_slice(obj)
    assert len(str(info.value)) < 200 and "100000 characters" in str(info.value)


@pytest.mark.parametrize(("effect", "allocatable"), [("", False), ("PreferNoSchedule", False), ("none", False)])
def test_a_taint_effect_the_api_does_not_define_keeps_the_device(effect: str, allocatable: bool) -> None:
    """Only `None` leaves a device to the allocator; anything else a hand-written file says is not free."""
    obj = gpu_slice("n1", 1)
    obj["spec"]["devices"][0]["taints"] = [{"key": "k", "value": "v", "effect": effect}]
    assert parse_resource_slice(obj).devices[0][1].allocatable is allocatable


@pytest.mark.parametrize("count", [MAX_DEVICE_TAINTS, MAX_DEVICE_TAINTS + 1])
def test_at_most_16_taints_per_device(count: int) -> None:
    obj = gpu_slice("n1", 1)
    obj["spec"]["devices"][0]["taints"] = [{"key": f"k{i}", "value": "v", "effect": "None"} for i in range(count)]
    if count <= MAX_DEVICE_TAINTS:
        assert len(parse_resource_slice(obj).devices[0][1].taints) == count
    else:
        with pytest.raises(InvalidInput, match="at most 16 per device"):
            parse_resource_slice(obj)


def test_a_requests_tolerations_are_read_and_bounded() -> None:
    obj = allocated_claim("diag", "n1", [])
    del obj["status"]
    exactly = obj["spec"]["devices"]["requests"][0]["exactly"]
    exactly["tolerations"] = [{"key": "k", "operator": "Exists"}] * MAX_TOLERATIONS
    claim = parse_resource_claim(obj)
    assert claim is not None and claim.requests[0].tolerations == (Toleration("k", "Exists"),)  # once each
    exactly["tolerations"] = [{"key": "k", "operator": "Exists"}] * (MAX_TOLERATIONS + 1)
    with pytest.raises(InvalidInput, match=r"tolerations.*at most 16"):
        parse_resource_claim(obj)
    exactly["tolerations"] = [{"key": "k", "operator": "Near"}]
    with pytest.raises(InvalidInput, match="neither Equal nor Exists"):
        parse_resource_claim(obj)


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerates"),
    [
        (Toleration("a", "Equal", "1"), ("a", "1", "NoSchedule"), True),
        (Toleration("a", "Equal", "1"), ("a", "2", "NoSchedule"), False),
        (Toleration("a", "Equal", ""), ("a", "", "NoSchedule"), True),
        (Toleration("a", "Exists"), ("a", "anything", "NoExecute"), True),
        (Toleration("a", "Exists"), ("b", "1", "NoSchedule"), False),
        (Toleration("", "Exists"), ("b", "1", "NoSchedule"), True),  # no key with Exists: every taint
        (Toleration("a", "Exists", effect="NoSchedule"), ("a", "1", "NoExecute"), False),
        (Toleration("a", "Exists", effect="NoExecute"), ("a", "1", "NoExecute"), True),
    ],
)
def test_tolerations_match_taints_as_kubernetes_does(
    toleration: Toleration, taint: tuple[str, str, str], tolerates: bool
) -> None:
    assert toleration.tolerates(*taint) is tolerates
    device = DraDevice("gpu-0", "gpu", "", "", None, (DeviceTaint(*taint),))
    assert not device.allocatable and device.allocatable_with((toleration,)) is tolerates


def test_the_store_keeps_only_what_the_parser_reads_of_a_slice() -> None:
    """40,000 NVIDIA devices as decoded JSON took 168 MiB (bench/RESULTS.md): the store keeps the
    parts parse_resource_slice reads, and the parse of the slim slice equals the full one's."""
    from gpuextender.extender.model.dra import relevant_slice_part

    full = gpu_slice("n1", 4, tainted=(2,), uuid_of=lambda minor: f"GPU-{minor}")
    full["spec"]["devices"].append(mig_device(0))
    full["metadata"].update({"resourceVersion": "7", "managedFields": [{"manager": "driver"}], "labels": {"a": "b"}})
    for d in full["spec"]["devices"]:
        # What NVIDIA's driver publishes besides (../shared/reference/dra.md), which the store drops.
        d["attributes"].update(
            {
                "architecture": {"string": "Hopper"},
                "brand": {"string": "Nvidia"},
                "driverVersion": {"version": "580.159.4"},
                "cudaDriverVersion": {"version": "13.0.0"},
                "cudaComputeCapability": {"version": "9.0.0"},
                "resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"},
                "gpu.nvidia.com/pcieRoot": {"string": "pci0000:00"},
            }
        )
        d["capacity"]["cores"] = {"value": "132"}
    before = copy.deepcopy(full)
    slim = relevant_slice_part(full)
    assert full == before  # the input is not changed
    assert parse_resource_slice(slim) == parse_resource_slice(full)
    for device in slim["spec"]["devices"]:
        read = {"type", "uuid", "productName", "profile", "parentUUID"}
        assert set(device["attributes"]) <= read and set(device["capacity"]) == {"memory"}
    assert slim["metadata"] == {"name": full["metadata"]["name"], "resourceVersion": "7"}
    assert len(json.dumps(slim)) < len(json.dumps(full)) / 2
    # Malformed parts stay as they are, for the view to report them.
    broken = {"metadata": {"name": "x"}, "spec": {"driver": "gpu.nvidia.com", "devices": "not a list"}}
    assert relevant_slice_part(broken) is broken
    odd = resource_slice("n1", ["not a device"])
    assert relevant_slice_part(odd)["spec"]["devices"] == ["not a device"]
