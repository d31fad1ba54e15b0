"""state/dra_inventory.py and state/claim_ledger.py: a node's DRA GPUs from its slices (pools,
generations), the classes that map them to nvidia.com/gpu, and what is left once claims and taints
are taken off; through the inventory store and view as the watch feeds them."""

from __future__ import annotations

import logging

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.dra import Toleration, parse_device_class, parse_resource_slice
from gpuextender.extender.state.claim_ledger import CHANGE_LOG, MAX_POD_TOLERATIONS, RESOURCE_CLAIM_KIND, ClaimLedger
from gpuextender.extender.state.dra_inventory import DraAllocatable, DraFree, DraInventory, build_dra, carried_over
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import ViewBuilder
from tests.extender.builders import gpu, report
from tests.extender.dra_objects import (
    allocated_claim,
    device_class,
    gpu_device,
    gpu_slice,
    mig_device,
    resource_slice,
)

GPU = ("nvidia.com/gpu",)


def dra(*slices: dict, classes: tuple[dict, ...] = (device_class(),), resources: tuple[str, ...] = GPU):  # type: ignore[no-untyped-def]
    return build_dra([parse_resource_slice(s) for s in slices], [parse_device_class(c) for c in classes], resources)


def names(inventory, node: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [ref[2] for ref, _ in inventory.devices(node)]


def test_whole_gpus_of_a_gpu_class() -> None:
    s = resource_slice("n1", [gpu_device(0), gpu_device(1), mig_device(0)])
    assert names(dra(s), "n1") == ["gpu-0", "gpu-1"]  # MIG devices are not whole GPUs
    # A class is a GPU class when it maps a configured GPU resource or its selectors require type gpu
    # (claims for it ask for whole GPUs); a class with neither counts nothing.
    driver_only = "device.driver == 'gpu.nvidia.com'"
    assert names(dra(s, classes=(device_class(extended=None),)), "n1") == ["gpu-0", "gpu-1"]  # type gpu
    assert names(dra(s, classes=(device_class(extended=None, cel=driver_only),)), "n1") == []
    assert names(dra(s, classes=(device_class(extended="example.com/gpu", cel=driver_only),)), "n1") == []
    assert names(dra(s, classes=(device_class(cel=driver_only),)), "n1") == ["gpu-0", "gpu-1"]  # nvidia.com/gpu
    assert names(dra(s, resources=("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")), "n1") == ["gpu-0", "gpu-1"]
    other = resource_slice("n1", [gpu_device(0)], driver="example.com")
    assert names(dra(other), "n1") == []  # a driver no GPU class selects


def test_a_pool_split_over_slices_adds_up_and_only_its_newest_generation_counts() -> None:
    a = resource_slice("n1", [gpu_device(0), gpu_device(1)], name="a", count=2)
    b = resource_slice("n1", [gpu_device(2)], name="b", count=2)
    assert names(dra(a, b), "n1") == ["gpu-0", "gpu-1", "gpu-2"]
    # Republished as generation 2 (one slice), the old ones not deleted yet: generation 2 only.
    new = resource_slice("n1", [gpu_device(4)], name="c", generation=2)
    assert names(dra(a, new, b), "n1") == ["gpu-4"]
    assert names(dra(new, a, b), "n1") == ["gpu-4"]  # in any order


def test_a_pool_naming_a_device_twice_counts_for_nothing_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    bad = resource_slice("n1", [gpu_device(0), gpu_device(0)])
    inventory = dra(bad, gpu_slice("n2", 2))
    assert names(inventory, "n1") == [] and names(inventory, "n2") == ["gpu-0", "gpu-1"]
    assert inventory.invalid_pools == frozenset({("gpu.nvidia.com", "n1")})
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    store.replace_all("DeviceClass", [device_class()])
    store.replace_all("ResourceSlice", [bad])
    store.upsert("ResourceSlice", gpu_slice("n2", 2))
    assert len([r for r in caplog.records if "names a device twice" in r.getMessage()]) == 1
    assert views.current.dra.devices("n2")


def test_allocatable_counts_untainted_unclaimed_devices_where_no_device_plugin_gpu_is_listed() -> None:
    inventory = dra(gpu_slice("dra", 8, tainted=(7,)), gpu_slice("both", 8))
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("two", "dra", ["gpu-0", "gpu-1"])])
    free, _ = DraFree().refresh(inventory, claims, {})
    counts = DraAllocatable({"dra": 0, "both": 4, "plain": 8}, inventory, free)
    assert counts["dra"] == 5  # 8 - 2 claimed - 1 tainted NoSchedule
    assert counts["both"] == 4  # a device-plugin count wins (kube-scheduler uses DRA only without one)
    assert counts["plain"] == 8
    assert counts.get("unknown") is None
    with pytest.raises(KeyError):
        counts["unknown"]
    assert sorted(counts) == ["both", "dra", "plain"] and len(counts) == 3
    absent = DraAllocatable({}, inventory, free)  # a node the inventory lists without GPUs
    assert absent["dra"] == 5 and sorted(absent) == ["both", "dra"]


def test_the_claim_ledger_follows_allocations_and_deletions() -> None:
    claims = ClaimLedger()
    assert not claims.synced
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("a", "n1", ["gpu-0"])])
    assert claims.synced and len(claims) == 1
    ref = ("gpu.nvidia.com", "n1", "gpu-0")
    assert claims.allocated_on("n1") == {ref}
    shared = allocated_claim("b", "n1", ["gpu-0", "gpu-1"])  # gpu-0 shared by two claims: counted once
    claims.upsert(RESOURCE_CLAIM_KIND, shared)
    assert len(claims.allocated_on("n1")) == 2
    unallocated = allocated_claim("b", "n1", [])
    del unallocated["status"]
    claims.upsert(RESOURCE_CLAIM_KIND, unallocated)  # deallocated: its devices are free again
    assert claims.allocated_on("n1") == {ref} and not claims.claim("default/b").allocated  # type: ignore[union-attr]
    claims.delete(RESOURCE_CLAIM_KIND, allocated_claim("a", "n1", []))
    claims.delete(RESOURCE_CLAIM_KIND, allocated_claim("b", "n1", []))
    assert claims.allocated_on("n1") == frozenset() and len(claims) == 0
    claims.upsert(RESOURCE_CLAIM_KIND, {"metadata": {"name": "bad"}})  # no namespace: skipped, counted
    assert claims.invalid == 1 and len(claims) == 0


def test_the_view_carries_dra_and_a_bad_slice_is_counted_invalid() -> None:
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    store.replace_all("DeviceClass", [device_class()])
    broken = gpu_slice("n2", 1)
    del broken["spec"]["driver"]
    store.replace_all("ResourceSlice", [gpu_slice("n1", 8), broken])
    view = views.current
    assert len(view.dra.devices("n1")) == 8 and view.invalid == {"ResourceSlice": 1}


def test_a_view_rebuilt_for_other_objects_keeps_its_dra_inventory_and_a_slice_change_names_its_node() -> None:
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    store.replace_all("DeviceClass", [device_class()])
    store.replace_all("ResourceSlice", [gpu_slice("n1", 8), gpu_slice("n2", 8)])
    first = views.current.dra
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "b"}}, "status": {}}
    store.upsert("Node", node)
    assert views.current.version != 0 and views.current.dra is first  # not walked again
    store.upsert("DeviceClass", device_class())  # an equal class, a new object: still the same
    assert views.current.dra is first
    store.upsert("ResourceSlice", gpu_slice("n2", 8, tainted=(1,)))
    second = views.current.dra
    assert second.generation == first.generation + 1 and second.changed == {"n2"}
    assert second.devices("n1") is first.devices("n1") and second.devices("n2") != first.devices("n2")


class CountingClaims(ClaimLedger):
    """A ClaimLedger that records which nodes were asked for their held devices."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def allocated_on(self, node: str):  # type: ignore[no-untyped-def]
        self.asked.append(node)
        return super().allocated_on(node)


def test_free_devices_are_counted_once_per_node_and_only_again_where_a_claim_moved() -> None:
    inventory = dra(gpu_slice("n1", 8), gpu_slice("n2", 8))
    claims = CountingClaims()
    claims.replace_all(RESOURCE_CLAIM_KIND, [])
    cache = DraFree()
    free, _ = cache.refresh(inventory, claims, {})
    assert (free("n1"), free("n1"), free("n2"), free("nope")) == (8, 8, 8, None) and claims.asked == ["n1", "n2"]
    claims.upsert(RESOURCE_CLAIM_KIND, allocated_claim("a", "n1", ["gpu-3"]))
    free, _ = cache.refresh(inventory, claims, {})
    assert (free("n1"), free("n2")) == (7, 8) and claims.asked == ["n1", "n2", "n1"]  # n2 kept
    # A claim that holds nothing yet (not allocated) changes no node's count.
    pending = allocated_claim("p", "n2", [])
    del pending["status"]
    claims.upsert(RESOURCE_CLAIM_KIND, pending)
    free, _ = cache.refresh(inventory, claims, {})
    assert (free("n1"), free("n2")) == (7, 8) and claims.asked == ["n1", "n2", "n1"]
    # A re-list, or an inventory that does not follow the last one: every node again.
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("a", "n1", ["gpu-3"])])
    free, _ = cache.refresh(inventory, claims, {})
    assert (free("n1"), free("n2")) == (7, 8) and claims.asked[3:] == ["n1", "n2"]
    free, _ = cache.refresh(dra(gpu_slice("n1", 8), gpu_slice("n2", 8)), claims, {})
    assert (free("n1"), free("n2")) == (7, 8) and claims.asked[5:] == ["n1", "n2"]


def test_an_inventory_that_follows_the_last_recounts_only_the_nodes_whose_gpus_changed() -> None:
    first = carried_over(DraInventory(), dra(gpu_slice("n1", 8), gpu_slice("n2", 8), gpu_slice("n3", 8)))
    claims = CountingClaims()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("a", "n1", ["gpu-3"])])
    cache = DraFree()
    free, _ = cache.refresh(first, claims, {})
    assert (free("n1"), free("n2"), free("n3")) == (7, 8, 8) and claims.asked == ["n1", "n2", "n3"]
    # n2 republished with a taint, n3 gone, n4 new; n1's devices equal: its very tuple is kept.
    second = carried_over(first, dra(gpu_slice("n1", 8), gpu_slice("n2", 8, tainted=(0,)), gpu_slice("n4", 2)))
    assert second.generation == first.generation + 1 and second.changed == {"n2", "n3", "n4"}
    assert second.devices("n1") is first.devices("n1")
    free, _ = cache.refresh(second, claims, {})
    assert (free("n1"), free("n2"), free("n3"), free("n4")) == (7, 7, None, 2)
    assert claims.asked[3:] == ["n2", "n4"]  # n1 kept; n3 has no devices to count
    # One that skips a generation (a builder that restarted) cannot say what changed: all again.
    skipped = carried_over(second, second)
    free, _ = cache.refresh(carried_over(skipped, skipped), claims, {})
    assert free("n1") == 7 and claims.asked[5:] == ["n1", "n2", "n4"]


def test_the_change_log_says_unknown_past_its_bound() -> None:
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [])
    start = claims.version
    assert claims.nodes_changed_since(start) == set() and claims.nodes_changed_since(start - 1) is None
    for i in range(CHANGE_LOG):
        claims.upsert(RESOURCE_CLAIM_KIND, allocated_claim(f"c{i}", f"n{i}", ["gpu-0"]))
    # Exactly CHANGE_LOG changes since `start`: all still in the log.
    assert claims.nodes_changed_since(start) == {f"n{i}" for i in range(CHANGE_LOG)}
    claims.upsert(RESOURCE_CLAIM_KIND, allocated_claim("one-more", "n-last", ["gpu-0"]))
    assert claims.nodes_changed_since(start) is None  # the first change fell out of the log
    assert claims.nodes_changed_since(start + 1) == {f"n{i}" for i in range(1, CHANGE_LOG)} | {"n-last"}
    # A claim that moves from one node to another changes both.
    before = claims.version
    claims.upsert(RESOURCE_CLAIM_KIND, allocated_claim("c0", "elsewhere", ["gpu-0"]))
    assert claims.nodes_changed_since(before) == {"n0", "elsewhere"}


def test_a_capped_summary_is_made_once_per_report_and_claims_change() -> None:
    inventory = dra(gpu_slice("n1", 8))
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("a", "n1", ["gpu-0", "gpu-1"])])
    state = GpuState(IdleRule())
    cache = DraFree()
    state.on_offered_change(cache.summary_changed)
    state.ingest(report("n1", [gpu(i, 0, 1) for i in range(8)]), 0.0)
    _, summary = cache.refresh(inventory, claims, state.offered_summaries)
    first = summary("n1")
    assert first is not None and first.idle_gpus == 6
    assert cache.refresh(inventory, claims, state.offered_summaries)[1]("n1") is first  # reused
    assert summary("elsewhere") is None
    state.ingest(report("n1", [gpu(i, 0, 1) for i in range(8)], seq=2), 1.0)  # a new report: made again
    again = cache.refresh(inventory, claims, state.offered_summaries)[1]("n1")
    assert again is not first and again is not None and again.idle_gpus == 6
    claims.delete(RESOURCE_CLAIM_KIND, allocated_claim("a", "n1", []))  # a new claims version: 8
    newer = cache.refresh(inventory, claims, state.offered_summaries)[1]("n1")
    assert newer is not None and newer.idle_gpus == 8
    # A node that left GpuState leaves the lookup too.
    state.forget_older_than(2.0)
    assert cache.refresh(inventory, claims, state.offered_summaries)[1]("n1") is None


def test_a_pods_tolerations_are_bounded_and_the_first_ones_kept() -> None:
    """Each toleration is matched against every taint on the nodes with taints, per filter: the set a
    decision uses stops at MAX_POD_TOLERATIONS (tolerating fewer offers fewer GPUs, never more)."""

    def claim(name: str, count: int) -> dict:
        obj = allocated_claim(name, "n1", [])
        del obj["status"]
        requests = obj["spec"]["devices"]["requests"]
        requests[:] = [
            {
                "name": f"r{i}",
                "exactly": {
                    "deviceClassName": "gpu.nvidia.com",
                    "tolerations": [{"key": f"k{i}-{j}", "operator": "Exists"} for j in range(16)],
                },
            }
            for i in range(-(-count // 16))
        ]
        requests[-1]["exactly"]["tolerations"] = requests[-1]["exactly"]["tolerations"][
            : count - 16 * (len(requests) - 1)
        ]
        return obj

    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [claim("at", MAX_POD_TOLERATIONS), claim("over", MAX_POD_TOLERATIONS + 1)])
    at = claims.tolerations(["default/at"], {"gpu.nvidia.com"})
    assert len(at) == MAX_POD_TOLERATIONS == 64
    over = claims.tolerations(["default/over"], {"gpu.nvidia.com"})
    assert over == at and Toleration("k4-0", "Exists") not in over  # the 65th is left out


def test_a_pool_whose_slices_are_the_same_objects_is_not_walked_again() -> None:
    classes = [parse_device_class(device_class())]
    one, two = parse_resource_slice(gpu_slice("n1", 8)), parse_resource_slice(gpu_slice("n2", 8))
    split = [parse_resource_slice(resource_slice("n3", [gpu_device(i)], name=f"n3-{i}", count=2)) for i in range(2)]
    cache: dict = {}
    first = build_dra([one, two, *split], classes, GPU, cache)
    assert first == build_dra([one, two, *split], classes, GPU)  # the same answer as without a cache
    kept = dict(cache)
    changed = parse_resource_slice(gpu_slice("n2", 8, tainted=(3,)))
    second = build_dra([one, changed, *split], classes, GPU, cache)
    assert second == build_dra([one, changed, *split], classes, GPU)
    pool = ("gpu.nvidia.com", "n1")
    assert cache[pool] is kept[pool] and second.devices("n1") is first.devices("n1")  # n1: not walked
    assert cache[("gpu.nvidia.com", "n2")] is not kept[("gpu.nvidia.com", "n2")]
    assert names(second, "n3") == ["gpu-0", "gpu-1"]  # a pool over two slices, reused whole
    # An equal slice that is another object is walked again (identity, never a guess).
    again = build_dra([parse_resource_slice(gpu_slice("n1", 8)), changed, *split], classes, GPU, cache)
    assert cache[pool] is not kept[pool] and again.devices("n1") == first.devices("n1")
    # A pool gone leaves the cache; classes that select nothing leave it empty.
    build_dra([one], classes, GPU, cache)
    assert set(cache) == {pool}
    build_dra([one], [], GPU, cache)
    assert cache == {}
