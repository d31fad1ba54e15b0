"""Rules of the DRA inventory (state/dra_inventory.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: which slices a build walks past (other
drivers, older generations, devices of no one node), a node's devices over several pools, a MIG-only
driver, the classes an inventory keeps, an invalid pool reused from the cache, MIG tuples carried
over, which GPUs a None-effect taint marks, the kinds of device a counter says a node publishes,
DraFree without a claim ledger and as nodes leave, and DraAllocatable's length."""

from __future__ import annotations

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.dra import parse_device_class, parse_resource_slice
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger
from gpuextender.extender.state.dra_inventory import (
    DraAllocatable,
    DraFree,
    DraInventory,
    DraNode,
    FreeCounter,
    PoolCache,
    build_dra,
    carried_over,
    joined,
)
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import summarize
from tests.extender.builders import gpu, report
from tests.extender.dra_objects import (
    allocated_claim,
    device_class,
    gpu_device,
    gpu_slice,
    mig_class,
    mig_device,
    resource_slice,
)
from tests.extender.state.test_dra_join import agent_report

GPU = ("nvidia.com/gpu",)
CLASSES = (device_class(), mig_class())


def dra(*slices: dict, classes: tuple[dict, ...] = CLASSES) -> DraInventory:
    return build_dra([parse_resource_slice(s) for s in slices], [parse_device_class(c) for c in classes], GPU)


def names(inventory: DraInventory, node: str) -> list[str]:
    return [ref[2] for ref, _ in inventory.devices(node)]


def mig_slice(node: str, *profiles: str) -> dict:
    return resource_slice(node, [mig_device(0, p, placement=i) for i, p in enumerate(profiles)])


def test_a_slice_of_another_driver_or_an_older_generation_skips_only_itself() -> None:
    other = resource_slice("x", [gpu_device(0)], driver="example.com")
    assert names(dra(other, gpu_slice("n1", 2)), "n1") == ["gpu-0", "gpu-1"]
    new = resource_slice("n1", [gpu_device(4)], name="new", generation=2)
    old = resource_slice("n1", [gpu_device(0)], name="old")
    inventory = dra(new, old, gpu_slice("n2", 1))
    assert names(inventory, "n1") == ["gpu-4"] and names(inventory, "n2") == ["gpu-0"]


def test_a_device_of_no_one_node_skips_only_itself() -> None:
    s = resource_slice("n1", [gpu_device(0), gpu_device(1)])
    del s["spec"]["nodeName"]
    s["spec"]["perDeviceNodeSelection"] = True
    s["spec"]["devices"][1]["nodeName"] = "n1"
    assert names(dra(s), "n1") == ["gpu-1"]


def test_a_nodes_devices_add_up_over_its_pools() -> None:
    a = resource_slice("n1", [gpu_device(0)], name="a", pool="a")
    b = resource_slice("n1", [gpu_device(1)], name="b", pool="b")
    assert names(dra(a, b), "n1") == ["gpu-0", "gpu-1"]


def test_a_driver_only_a_mig_class_selects_gives_mig_devices_and_the_inventory_keeps_its_gpu_classes() -> None:
    inventory = dra(mig_slice("n", "1g.10gb", "2g.20gb"), classes=(mig_class(),))
    assert [d.profile for _, d in inventory.mig_devices["n"]] == ["1g.10gb", "2g.20gb"]
    assert inventory.devices("n") == () and dict(inventory.classes) == {}
    both = dra(gpu_slice("n", 1))
    assert set(both.classes) == {"gpu.nvidia.com"} and set(both.mig_classes) == {"mig.nvidia.com"}


def test_an_invalid_pool_is_reused_from_the_cache() -> None:
    bad = parse_resource_slice(resource_slice("n1", [gpu_device(0), gpu_device(0)]))
    classes = [parse_device_class(c) for c in CLASSES]
    cache: PoolCache = {}
    first = build_dra([bad], classes, GPU, cache)
    kept = dict(cache)
    again = build_dra([bad], classes, GPU, cache)
    pool = ("gpu.nvidia.com", "n1")
    assert first.invalid_pools == again.invalid_pools == {pool} and cache[pool] is kept[pool]


def test_equal_mig_devices_carried_over_keep_the_previous_tuple() -> None:
    first = carried_over(DraInventory(), dra(mig_slice("n", "1g.10gb")))
    second = carried_over(first, dra(mig_slice("n", "1g.10gb")))
    assert second.changed == frozenset() and second.mig_devices["n"] is first.mig_devices["n"]


def test_a_none_effect_taint_marks_exactly_its_gpu_by_uuid_or_by_dra_name() -> None:
    positions = summarize(agent_report([0] * 4, named=True), IdleRule(), 0.0).positions
    assert positions is not None
    empty: frozenset[str] = frozenset()

    def marked(*keys: str) -> int:
        return DraNode(0, empty, empty, empty, empty, frozenset(keys)).marked_mask(positions)

    assert marked("gpu-2") == 0b100  # by DRA name
    assert marked("GPU-agent-1") == 0b10  # by uuid
    assert marked("gpu-9") == 0


def test_the_counter_says_which_kinds_of_device_a_node_publishes() -> None:
    inventory = dra(gpu_slice("both", 2), mig_slice("both", "1g.10gb"), mig_slice("mig", "1g.10gb"))
    counter = FreeCounter(inventory.gpu_devices, lambda _node: frozenset(), {}, inventory.mig_devices)
    both, mig = counter.node("both"), counter.node("mig")
    assert both is not None and both.whole is True and both.mig_free == (("1g.10gb", 1),)
    assert mig is not None and mig.whole is False and mig.free == 0


def test_a_mig_only_nodes_summary_keeps_the_agents_whole_gpus() -> None:
    summary = summarize(report("m", [gpu(0, 0, 1), gpu(1, 0, 1)]), IdleRule(), 0.0)
    empty: frozenset[str] = frozenset()
    assert joined(summary, DraNode(0, empty, empty, empty, empty, whole=False, mig_free=())) is summary


def test_without_a_claim_ledger_nothing_is_held() -> None:
    inventory = dra(gpu_slice("n1", 8))
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("a", "n1", ["gpu-0"])])
    assert claims.version == 1
    cache = DraFree()
    assert cache.refresh(inventory, claims, {})[0]("n1") == 7
    assert cache.refresh(inventory, None, {})[0]("n1") == 8  # the ledger gone: its claims too
    assert DraFree().refresh(inventory, None, {})[0]("n1") == 8


def test_nodes_that_leave_or_report_again_change_the_lookup_each() -> None:
    state = GpuState(IdleRule())
    cache = DraFree()
    state.on_offered_change(cache.summary_changed)
    for node in ("a", "b", "c"):
        state.ingest(report(node, [gpu(0, 0, 1)]), 0.0)
    inventory = dra(gpu_slice("dra", 1))
    _, summary = cache.refresh(inventory, None, state.offered_summaries)
    assert summary("a") is not None and summary("b") is not None
    state.ingest(report("c", [gpu(0, 0, 1)], seq=2), 3.0)
    state.forget_older_than(2.0)  # a and b leave; c (no DRA GPUs) reported again
    _, summary = cache.refresh(inventory, None, state.offered_summaries)
    assert summary("a") is None and summary("b") is None
    assert summary("c") is state.offered_summaries["c"]


def test_allocatable_counts_each_dra_only_node_once() -> None:
    inventory = dra(gpu_slice("x", 1), gpu_slice("y", 1))
    free, _ = DraFree().refresh(inventory, None, {})
    assert len(DraAllocatable({}, inventory, free)) == 2
    assert len(DraAllocatable({"x": 0, "z": 4}, inventory, free)) == 3
