"""MIG devices through DRA (issue 24, deliverable 2 "MIG device classes"): a node's MIG devices from
its slices by profile, a claim's MIG demand from its selectors (or its class's), and the agent's free
instances capped per profile by the devices no claim holds (state/dra_inventory.py, claim_ledger.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.dra import (
    MAX_ATTRIBUTE_CHARS,
    MAX_CEL_CHARS,
    MAX_SELECTORS,
    Toleration,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger, mig_total
from gpuextender.extender.state.device_taints import TolerantView
from gpuextender.extender.state.dra_inventory import (
    DraFree,
    DraInventory,
    build_dra,
    carried_over,
    mig_capped,
    mig_free,
)
from gpuextender.extender.state.gpu_state import GpuState
from tests.extender.builders import gpu, report
from tests.extender.decide.test_mig_devices import mig_gpu
from tests.extender.dra_objects import (
    allocated_claim,
    device_class,
    gpu_device,
    gpu_slice,
    mig_claim,
    mig_class,
    mig_device,
    resource_slice,
)

GPU = ("nvidia.com/gpu",)
CLASSES = (device_class(), mig_class())


def mig_slice(node: str, *profiles: str, tainted: tuple[int, ...] = ()) -> dict:
    devices = [mig_device(0, profile, placement=i) for i, profile in enumerate(profiles)]
    for i in tainted:
        devices[i]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    return resource_slice(node, devices)


def dra(*slices: dict, classes: tuple[dict, ...] = CLASSES) -> DraInventory:
    return build_dra([parse_resource_slice(s) for s in slices], [parse_device_class(c) for c in classes], GPU)


def test_a_mig_device_has_its_profile_from_its_attribute_and_none_without() -> None:
    """The device name holds the profile without dots (gpu-0-mig-3g40gb-19-0: a device name may hold
    none), which is not the profile a claim's selector compares: without the attribute, no profile."""
    unnamed = mig_device(0, "3g.40gb")
    del unnamed["attributes"]["profile"]
    devices = [d for _, d in parse_resource_slice(resource_slice("n", [mig_device(0, "1g.10gb"), unnamed])).devices]
    assert [(d.name, d.kind, d.profile, d.parent_uuid) for d in devices] == [
        ("gpu-0-mig-1g10gb-19-0", "mig", "1g.10gb", "GPU-00000000-0000-0000-0000-000000000000"),
        ("gpu-0-mig-3g40gb-19-0", "mig", "", "GPU-00000000-0000-0000-0000-000000000000"),
    ]
    whole = parse_resource_slice(gpu_slice("n", 1)).devices[0][1]
    assert (whole.kind, whole.profile, whole.parent_uuid) == ("gpu", "", "")
    # A MIG device without a profile is not one of the node's MIG devices.
    assert [d.profile for _, d in dra(resource_slice("n", [mig_device(0, "1g.10gb"), unnamed])).mig_devices["n"]] == [
        "1g.10gb"
    ]


def test_mig_classes_and_the_profile_a_class_or_a_request_requires() -> None:
    assert parse_device_class(mig_class()).device_type == "mig" and parse_device_class(mig_class()).profile == ""
    assert parse_device_class(mig_class("mig-1g", profile="1g.10gb")).profile == "1g.10gb"
    request = parse_resource_claim(mig_claim("c", 2, profile="2g.20gb")).requests[0]
    assert (request.choices, request.profiles) == ((("mig.nvidia.com", 2),), ("2g.20gb",))
    assert parse_resource_claim(mig_claim("c", profile="")).requests[0].profiles == ()


def test_selectors_are_bounded_and_an_expression_is_read_up_to_the_api_limit() -> None:
    claim = mig_claim("c")
    selectors = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    selectors.extend([{"cel": {"expression": "true"}}] * (MAX_SELECTORS - 1))
    assert len(selectors) == MAX_SELECTORS and parse_resource_claim(claim).requests[0].profiles == ("1g.10gb",)
    selectors.append({"cel": {"expression": "true"}})
    with pytest.raises(InvalidInput, match="33 selectors; at most 32"):
        parse_resource_claim(claim)
    # A profile past the first MAX_CEL_CHARS characters of an expression is not read.
    tail = " && device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    for pad, read in ((MAX_CEL_CHARS - len(tail), ("1g.10gb",)), (MAX_CEL_CHARS - len(tail) + 1, ())):
        long = mig_claim("c", profile="")
        long["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": " " * pad + tail}}]
        assert parse_resource_claim(long).requests[0].profiles == read


def test_a_nodes_mig_devices_need_a_mig_class_and_a_profile() -> None:
    inventory = dra(mig_slice("n", "1g.10gb", "1g.10gb", "3g.40gb"), gpu_slice("w", 2))
    assert [d.profile for _, d in inventory.mig_devices["n"]] == ["1g.10gb", "1g.10gb", "3g.40gb"]
    assert "n" not in inventory.gpu_devices and "w" not in inventory.mig_devices
    assert set(inventory.mig_classes) == {"mig.nvidia.com"}
    # Without a MIG class, no MIG device counts; a whole-GPU class alone does not select them.
    assert dra(mig_slice("n", "1g.10gb"), classes=(device_class(),)).mig_devices == {}


def test_free_mig_devices_per_profile_leave_out_claimed_and_tainted_ones() -> None:
    inventory = dra(mig_slice("n", "1g.10gb", "1g.10gb", "1g.10gb", "3g.40gb", tainted=(2,)))
    claims = ClaimLedger()
    held = "gpu-0-mig-1g10gb-19-0"
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("c", "n", [held])])
    assert mig_free(inventory.mig_devices["n"], claims.allocated_on("n")) == (("1g.10gb", 1), ("3g.40gb", 1))


def test_the_agents_free_instances_are_capped_per_profile_and_an_unchanged_summary_is_kept() -> None:
    r = report("n", [mig_gpu(0, ("1g.10gb", False, 1), ("1g.10gb", False, 1), ("1g.10gb", False, 1))])
    summary = GpuState(IdleRule())
    summary.ingest(r, 0.0)
    own = summary.reported("n")
    assert own is not None and own.mig_free == (("1g.10gb", 3),)
    assert mig_capped(own, (("1g.10gb", 2),)).mig_free == (("1g.10gb", 2),)
    assert mig_capped(own, (("1g.10gb", 3),)) is own  # exactly as many: nothing to take off
    assert mig_capped(own, (("1g.10gb", 4),)) is own
    assert mig_capped(own, (("3g.40gb", 0),)) is own  # a profile the slices do not publish: the agent's
    assert mig_capped(replace(own, mig_free=()), (("1g.10gb", 0),)).mig_free == ()


def test_a_claims_mig_demand() -> None:
    claims = ClaimLedger()
    first = mig_claim("two", 2)
    first_available = mig_claim("fa", profile="")
    first_available["spec"]["devices"]["requests"][0] = {
        "name": "mig",
        "firstAvailable": [
            {"name": "big", "deviceClassName": "mig-1g", "count": 3},
            {"name": "small", "deviceClassName": "mig.nvidia.com", "count": 1, **_profile_selector("1g.10gb")},
        ],
    }
    mixed = mig_claim("mixed", profile="")
    mixed["spec"]["devices"]["requests"][0] = {
        "name": "any",
        "firstAvailable": [
            {"name": "mig", "deviceClassName": "mig-1g"},
            {"name": "whole", "deviceClassName": "gpu.nvidia.com"},
        ],
    }
    two_profiles = mig_claim("two-profiles", profile="")
    two_profiles["spec"]["devices"]["requests"][0] = {
        "name": "mig",
        "firstAvailable": [
            {"name": "a", "deviceClassName": "mig-1g"},
            {"name": "b", "deviceClassName": "mig.nvidia.com", **_profile_selector("3g.40gb")},
        ],
    }
    every = mig_claim("all", profile="3g.40gb")
    every["spec"]["devices"]["requests"][0]["exactly"] = {
        "deviceClassName": "mig.nvidia.com",
        "allocationMode": "All",
        **_profile_selector("3g.40gb"),
    }
    held = allocated_claim("held", "n", ["gpu-0-mig-1g10gb-19-0"], namespace="ml")
    claims.replace_all(
        RESOURCE_CLAIM_KIND,
        [first, first_available, mixed, two_profiles, every, mig_claim("any", profile=""), held],
    )
    classes = {c.name: c for c in map(parse_device_class, (mig_class(), mig_class("mig-1g", profile="1g.10gb")))}

    def wanted(keys: list[str], classes: dict) -> tuple[tuple[str, int], ...]:
        return mig_total(claims.read(keys, (), classes))

    assert wanted(["ml/two"], classes) == (("1g.10gb", 2),)
    assert wanted(["ml/fa"], classes) == (("1g.10gb", 1),)  # one profile either way: the smaller count
    assert wanted(["ml/mixed"], classes) == ()  # may be given a whole GPU instead
    assert wanted(["ml/two-profiles"], classes) == ()  # which profile the allocator picks is not known
    assert wanted(["ml/all"], classes) == (("3g.40gb", 1),)  # All: at least one
    assert wanted(["ml/any"], classes) == ()  # no profile said: not known
    assert wanted(["ml/held", "ml/missing"], classes) == ()  # allocated: held already; unknown: not known
    assert wanted(["ml/two", "ml/fa", "ml/all"], classes) == (("1g.10gb", 3), ("3g.40gb", 1))


def _profile_selector(profile: str) -> dict:
    return {"selectors": [{"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"}}]}


def test_dra_free_caps_a_mig_only_node_and_follows_its_changes() -> None:
    first = carried_over(DraInventory(), dra(mig_slice("n", "1g.10gb", "1g.10gb")))
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("c", "n", ["gpu-0-mig-1g10gb-19-0"])])
    state = GpuState(IdleRule())
    cache = DraFree()
    state.on_offered_change(cache.summary_changed)
    state.ingest(report("n", [mig_gpu(0, ("1g.10gb", False, 1), ("1g.10gb", False, 1))]), 0.0)
    free, summary = cache.refresh(first, claims, state.offered_summaries)
    assert free("n") is None  # no whole GPUs through DRA: allocatable stays the Node's
    capped = summary("n")
    assert capped is not None and capped.mig_free == (("1g.10gb", 1),)
    # A third device published: n changed, its cap follows (the agent still reads 2 free).
    second = carried_over(first, dra(mig_slice("n", "1g.10gb", "1g.10gb", "1g.10gb")))
    assert second.changed == {"n"}
    _, summary = cache.refresh(second, claims, state.offered_summaries)
    assert summary("n").mig_free == (("1g.10gb", 2),)  # type: ignore[union-attr]


def test_a_pod_with_tolerations_sees_the_same_mig_cap_as_every_pod() -> None:
    """A claim that tolerates a whole GPU's taint gets its own view of the node (TolerantView); the
    node's MIG devices are capped there as in the shared one."""
    devices = [gpu_device(0, taint="NoSchedule", uuid="GPU-0"), gpu_device(1, uuid="GPU-1")]
    devices += [mig_device(2, "1g.10gb", placement=i) for i in range(2)]
    inventory = dra(resource_slice("n", devices))
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("c", "n", ["gpu-2-mig-1g10gb-19-0"])])
    state = GpuState(IdleRule())
    cache = DraFree()
    state.on_offered_change(cache.summary_changed)
    state.ingest(report("n", [gpu(0), gpu(1), mig_gpu(2, ("1g.10gb", False, 1), ("1g.10gb", False, 1))]), 0.0)
    shared = cache.refresh(inventory, claims, state.offered_summaries)
    assert shared[1]("n").mig_free == (("1g.10gb", 1),)  # type: ignore[union-attr]
    view = TolerantView(
        inventory, claims.allocated_on, (Toleration("gpu.nvidia.com/xid", "Exists"),), shared, state.summary
    )
    mine = view.summary("n")
    assert mine is not None and mine is not shared[1]("n")  # its own view: the tainted GPU is free to it
    assert (view.free("n"), mine.idle_gpus, mine.mig_free) == (2, 2, (("1g.10gb", 1),))


def test_a_string_attribute_longer_than_the_api_allows_reads_as_absent() -> None:
    """A hand-written file's worst case: a profile is a metric label and a dict key. At the API
    server's 64 characters it is read; one more and the device has no profile (counts for nothing)."""
    for length, read in ((MAX_ATTRIBUTE_CHARS, True), (MAX_ATTRIBUTE_CHARS + 1, False)):
        profile = "1g." + "x" * (length - 3)
        device = mig_device(0, "1g.10gb")
        device["attributes"]["profile"] = {"string": profile}
        device["attributes"]["uuid"] = {"string": "M" * length}
        ((_, parsed),) = parse_resource_slice(resource_slice("n", [device])).devices
        assert (parsed.profile, parsed.uuid) == ((profile, "M" * length) if read else ("", ""))
