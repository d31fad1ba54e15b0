"""Well-connected GPU sets (issue 12): pair tiers from the agent's topology, the precomputed
best tier per set size and availability mask (checked against brute force), the bounds (8 GPUs
exact, larger nodes by the all-NVLink rule), and the quality classes prioritize ranks by."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide.whole_gpus import prioritize
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.extender.state.gpu_topology import (
    APART,
    MAX_EXACT_GPUS,
    NUMA,
    NVLINK,
    SWITCH,
    TIER_NONE,
    best_tiers_by_mask,
    pair_tiers,
    set_tiers,
    tier_for,
)
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report

NOW = 100.0


def link(a: int, b: int, nvlinks: int = 0, pcie: int = pb.PCIE_RELATION_UNSPECIFIED) -> pb.GpuLink:
    return pb.GpuLink(a=a, b=b, nvlinks=nvlinks, pcie=pcie)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("nvlinks", "pcie", "tier"),
    [
        (18, pb.PCIE_SYSTEM, NVLINK),  # any active NVLink wins over the PCIe path
        (1, pb.PCIE_RELATION_UNSPECIFIED, NVLINK),
        (0, pb.PCIE_INTERNAL, SWITCH),
        (0, pb.PCIE_SINGLE, SWITCH),
        (0, pb.PCIE_MULTIPLE, NUMA),
        (0, pb.PCIE_HOSTBRIDGE, NUMA),
        (0, pb.PCIE_NODE, NUMA),
        (0, pb.PCIE_SYSTEM, APART),
        (0, pb.PCIE_RELATION_UNSPECIFIED, APART),
    ],
)
def test_pair_tier(nvlinks: int, pcie: int, tier: int) -> None:
    tiers = pair_tiers([link(0, 1, nvlinks, pcie)], 2)
    assert tiers[0][1] == tiers[1][0] == tier and tiers[0][0] == NVLINK


def test_links_out_of_range_or_to_themselves_are_ignored() -> None:
    tiers = pair_tiers([link(0, 5, 18), link(1, 1, 18), link(0, 1, 0, pb.PCIE_SINGLE)], 2)
    assert tiers == [[NVLINK, SWITCH], [SWITCH, NVLINK]]


def _brute(tiers: list[list[int]], mask: int, n: int) -> tuple[int, ...]:
    members = [i for i in range(n) if mask >> i & 1]
    best = [TIER_NONE] * (n + 1)
    best[0] = NVLINK
    for k in range(1, len(members) + 1):
        best[k] = min(
            max((tiers[a][b] for a, b in itertools.combinations(combo, 2)), default=NVLINK)
            for combo in itertools.combinations(members, k)
        )
    return tuple(best)


@pytest.mark.parametrize("seed", range(6))
def test_the_precomputed_table_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([2, 4, 5, 8])
    relations = [pb.PCIE_INTERNAL, pb.PCIE_SINGLE, pb.PCIE_MULTIPLE, pb.PCIE_HOSTBRIDGE, pb.PCIE_NODE, pb.PCIE_SYSTEM]
    topology = pb.Topology(
        links=[
            link(a, b, rng.choice([0, 0, 12]), rng.choice(relations))
            for a, b in itertools.combinations(range(n), 2)
            if rng.random() < 0.9
        ]
    )
    table = best_tiers_by_mask(topology.SerializeToString(), n)
    tiers = pair_tiers(topology.links, n)
    assert len(table) == 2**n
    for mask in range(2**n):
        assert table[mask] == _brute(tiers, mask, n), (seed, mask)


def dgx_like(n: int = 8) -> pb.Topology:
    """Two NVLink islands of n/2 GPUs, one per NUMA node (PCIe: same node within, across between)."""
    half = n // 2
    return pb.Topology(
        links=[
            link(a, b, 12, pb.PCIE_NODE) if (a < half) == (b < half) else link(a, b, 0, pb.PCIE_SYSTEM)
            for a, b in itertools.combinations(range(n), 2)
        ]
    )


def node_report(name: str, gpus: list[pb.GpuSample], topology: pb.Topology | None) -> pb.NodeReport:
    r = report(name, gpus)
    r.allocation_source = pb.ALLOCATION_KUBELET
    if topology is not None:
        r.topology.CopyFrom(topology)
    return r


def test_islands_the_best_set_per_size() -> None:
    r = node_report("n", [gpu(i) for i in range(8)], dgx_like())
    assert set_tiers(r, 0b1111_1111) == (0, 0, 0, 0, 0, 3, 3, 3, 3)
    # GPUs 0, 1, 2 | 4, 5, 7 available: three NVLinked at most.
    assert set_tiers(r, 0b1011_0111) == (0, 0, 0, 0, 3, 3, 3, 4, 4)


def test_unknown_topology_is_no_tiers_and_ranks_as_apart() -> None:
    r = node_report("n", [gpu(i) for i in range(8)], None)
    assert set_tiers(r, 0xFF) == ()
    assert tier_for((), 2) == APART and tier_for((), 1) == NVLINK
    assert tier_for((0, 0, 0), 3) == TIER_NONE  # known topology, fewer GPUs than the set


@pytest.mark.parametrize(
    ("n", "all_nvlink", "tiers_of_4"),
    [
        (MAX_EXACT_GPUS, False, NVLINK),  # at the bound: exact (two islands of 4)
        (MAX_EXACT_GPUS + 2, True, NVLINK),  # past it: every pair NVLinked (an NVSwitch system)
        (MAX_EXACT_GPUS + 2, False, APART),  # past it, islands: not searched, counted apart
    ],
)
def test_the_exact_search_stops_at_eight_gpus(n: int, all_nvlink: bool, tiers_of_4: int) -> None:
    topology = (
        pb.Topology(links=[link(a, b, 12) for a, b in itertools.combinations(range(n), 2)])
        if all_nvlink
        else dgx_like(n)
    )
    r = node_report("n", [gpu(i) for i in range(n)], topology)
    tiers = set_tiers(r, (1 << n) - 1)
    assert len(tiers) == n + 1 and tiers[4] == tiers_of_4


def summary(
    name: str, available: list[int], n: int = 8, topology: pb.Topology | None = None, busy: tuple[int, ...] = ()
) -> NodeSummary:
    """n GPUs on the islands topology; those not in `available` are held by a pod (quiet)."""
    gpus = []
    for i in range(n):
        g = gpu(i, 90 if i in busy else 0, 1)
        if i not in available and i not in busy:
            g.holders.add(namespace="ns", pod=f"p{i}", container="c", resource_name="nvidia.com/gpu", device_id=g.uuid)
        gpus.append(g)
    return summarize(node_report(name, gpus, topology or dgx_like(n)), IdleRule(), NOW)


def table(*summaries: NodeSummary) -> Callable[[str], NodeSummary | None]:
    return {s.node: s for s in summaries}.get


def test_shared_or_out_of_order_gpus_have_no_topology() -> None:
    sliced = [gpu(i) for i in range(8)]
    sliced[3].sharing.mode, sliced[3].sharing.replicas = pb.SHARING_TIME_SLICING, 4
    assert summarize(node_report("n", sliced, dgx_like()), IdleRule(), NOW).set_tiers == ()
    shuffled = [gpu(i) for i in (1, 0, 2, 3, 4, 5, 6, 7)]
    assert summarize(node_report("n", shuffled, dgx_like()), IdleRule(), NOW).set_tiers == ()
    assert summary("n", list(range(8))).set_tiers[4] == NVLINK


def test_a_4_gpu_pod_prefers_an_nvlinked_set_over_more_scattered_idle_gpus() -> None:
    linked = summary("linked", [0, 1, 2, 3])  # one island free: 4 NVLinked GPUs
    scattered = summary("scattered", [0, 1, 4, 5, 6])  # 5 free, but at most 3 on one island
    lookup = table(linked, scattered)
    four = dict(prioritize(4, ["linked", "scattered"], {}, lookup, NOW, DecisionPolicy()))
    assert four["linked"] > four["scattered"] >= 1
    # Two classes (q 0 and 3): the best scores 2 + round(8 * v / 9), the other 2 - 1.
    assert four["scattered"] == 1
    # A 1-GPU pod does not care: more idle GPUs first.
    one = dict(prioritize(1, ["linked", "scattered"], {}, lookup, NOW, DecisionPolicy()))
    assert one["scattered"] > one["linked"]


def test_quality_classes_connection_before_degraded_and_bands_are_exact() -> None:
    best = summary("best", [0, 1, 2, 3])  # one island free, healthy: q 0
    apart = summary("apart", [0, 1, 4, 5])  # 2 + 2 across the islands, healthy: q 2 * 3 = 6
    degraded = [gpu(i) for i in range(8)]
    for g in degraded[:4]:
        g.health = pb.HEALTH_DEGRADED
    for g in degraded[4:]:  # the other island held
        g.holders.add(
            namespace="ns", pod=f"p{g.index}", container="c", resource_name="nvidia.com/gpu", device_id=g.uuid
        )
    linked_worn = summarize(node_report("worn", degraded, dgx_like()), IdleRule(), NOW)  # NVLinked, degraded: q 1
    scores = dict(prioritize(4, ["apart", "worn", "best"], {}, table(best, apart, linked_worn), NOW, DecisionPolicy()))
    # m = 3 classes (0, 1, 6): the best in 3..10, then 2, then 1. An NVLinked set of degraded GPUs
    # outranks healthy GPUs that must talk over PCIe across NUMA nodes.
    assert scores["worn"] == 2 and scores["apart"] == 1 and 3 <= scores["best"] <= 10
    # Without the best, two classes remain: the NVLinked degraded node takes the band.
    two = dict(prioritize(4, ["apart", "worn"], {}, table(apart, linked_worn), NOW, DecisionPolicy()))
    assert two["apart"] == 1 and two["worn"] >= 2
    # Same connection: the healthy set first.
    healthy_linked = summary("fresh", [0, 1, 2, 3])
    same = dict(prioritize(4, ["worn", "fresh"], {}, table(healthy_linked, linked_worn), NOW, DecisionPolicy()))
    assert same["worn"] == 1 and same["fresh"] >= 2


def test_one_quality_class_keeps_the_plain_formula() -> None:
    a, b = summary("a", [0, 1, 2, 3]), summary("b", [0, 1, 2, 3, 4, 5, 6, 7])
    scores = dict(prioritize(2, ["a", "b"], {}, table(a, b), NOW, DecisionPolicy()))
    # C = 8, spread v = idle + 100/101: 1 + round(9 * v / 9).
    assert scores == {"a": 1 + round(4 + 100 / 101), "b": min(10, 1 + round(8 + 100 / 101))}
