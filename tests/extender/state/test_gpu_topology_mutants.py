"""Rules of the topology tiers (state/gpu_topology.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: a link naming a GPU at exactly the
node's GPU count (one past the last position) is ignored, on either end; the topology is known only
for a report with GPUs and links; a node of no GPU has no tiers, one of one GPU has them; past
MAX_EXACT_GPUS (at 9 GPUs already) a node is NVLINK for sizes up to its available GPUs only when every
pair of its GPUs has an NVLink (each pair counted once, either way round; links to itself or past
its GPUs count for nothing), else APART, and TIER_NONE past them; a set's tier is the table's up to
its last size."""

from __future__ import annotations

import itertools

from gpuextender.extender.state.gpu_topology import (
    APART,
    MAX_EXACT_GPUS,
    NVLINK,
    TIER_NONE,
    pair_tiers,
    tier_for,
    tiers_for_mask,
    topology_key,
)
from gpuextender.v1 import gpu_state_pb2 as pb

N = 10  # past MAX_EXACT_GPUS: not searched


def nvlink(a: int, b: int) -> pb.GpuLink:
    return pb.GpuLink(a=a, b=b, nvlinks=12)


def key(links: list[pb.GpuLink]) -> bytes:
    return pb.Topology(links=links).SerializeToString()


def every_pair(n: int, but: tuple[int, int] | None = None) -> list[pb.GpuLink]:
    return [nvlink(a, b) for a, b in itertools.combinations(range(n), 2) if (a, b) != but]


def test_a_link_to_the_position_just_past_the_last_gpu_is_ignored() -> None:
    links = [pb.GpuLink(a=2, b=0, nvlinks=12), pb.GpuLink(a=1, b=2, nvlinks=12)]
    assert pair_tiers(links, 2) == [[NVLINK, APART], [APART, NVLINK]]


def test_the_topology_is_known_only_for_a_report_with_gpus_and_links() -> None:
    no_gpus = pb.NodeReport(node_name="n")
    no_gpus.topology.links.append(nvlink(0, 1))
    assert topology_key(no_gpus) == b""
    no_links = pb.NodeReport(node_name="n", gpus=[pb.GpuSample(index=0), pb.GpuSample(index=1)])
    assert topology_key(no_links) == b""
    both = pb.NodeReport(node_name="n", gpus=[pb.GpuSample(index=0), pb.GpuSample(index=1)])
    both.topology.links.append(nvlink(0, 1))
    assert topology_key(both) == key([nvlink(0, 1)])


def test_no_gpu_has_no_tiers_and_one_gpu_has_them() -> None:
    assert tiers_for_mask(key([nvlink(0, 1)]), 0, 0) == ()
    assert tiers_for_mask(key([nvlink(0, 1)]), 1, 1) == (NVLINK, NVLINK)


def test_past_the_exact_bound_islands_count_apart() -> None:
    n = MAX_EXACT_GPUS + 1
    islands = [nvlink(a, b) for a, b in itertools.combinations(range(n), 2) if (a < 4) == (b < 4)]
    assert tiers_for_mask(key(islands), n, (1 << n) - 1)[4] == APART


def test_every_pair_nvlinked_is_nvlink_up_to_the_available_gpus() -> None:
    assert tiers_for_mask(key(every_pair(N)), N, 0b11111) == (NVLINK,) * 6 + (TIER_NONE,) * 5


def test_one_pair_without_nvlink_is_apart_up_to_the_available_gpus() -> None:
    links = [*every_pair(N, but=(0, 1)), pb.GpuLink(a=0, b=1, pcie=pb.PCIE_SINGLE)]
    assert tiers_for_mask(key(links), N, 0b11111) == (APART,) * 6 + (TIER_NONE,) * 5


def test_each_pair_counts_once_either_way_round() -> None:
    links = every_pair(N) + [nvlink(b, a) for a, b in itertools.combinations(range(N), 2)]
    assert tiers_for_mask(key(links), N, (1 << N) - 1) == (NVLINK,) * (N + 1)


def test_links_to_itself_or_past_the_gpus_count_for_nothing() -> None:
    for extra in (nvlink(0, 0), nvlink(0, N), nvlink(N, 0)):
        links = [*every_pair(N, but=(0, 1)), extra]
        assert tiers_for_mask(key(links), N, 0b11)[2] == APART, extra


def test_a_sets_tier_is_the_tables_up_to_its_last_size() -> None:
    assert tier_for((NVLINK, NVLINK, APART), 2) == APART
    assert tier_for((NVLINK, NVLINK, APART), 3) == TIER_NONE
    assert tier_for((NVLINK, NVLINK), 1) == NVLINK and tier_for((), 0) == NVLINK
