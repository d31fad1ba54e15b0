"""How well a node can connect k of its available GPUs: precomputed per topology, looked up per report.

Pair tier (lower is better), from the agent's Topology links (it reports the PCIe relation
of every pair NVML can place, nvmlDeviceGetTopologyCommonAncestor, so the NUMA level is
known from it; GpuSample.numa_node adds nothing here):
  0 NVLINK  at least one active NVLink between the two GPUs
  1 SWITCH  same board or one PCIe switch (PCIE_INTERNAL, PCIE_SINGLE)
  2 NUMA    within one NUMA node: several switches or one host bridge (PCIE_MULTIPLE,
            PCIE_HOSTBRIDGE, PCIE_NODE)
  3 APART   across NUMA nodes (PCIE_SYSTEM), or nothing known about the pair
A set's tier is its worst pair's (one GPU alone: 0). For a pod of k GPUs a node offers the best
tier of any k GPUs among its available ones; TIER_NONE when it has fewer than k.

Bounded: for a node of up to MAX_EXACT_GPUS (8) GPUs, every subset's tier (2**8 sets) and then
the best tier per size for every availability mask (3**8 = 6,561 steps, a few ms) are computed
once per topology and cached (at most CACHE_SIZE topologies: one per hardware type in practice);
each report then costs one lookup. A larger node gets tier 0 for every size when all its pairs
have NVLink (an NVSwitch system) and TIER_APART otherwise: exact search there is 3**n.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from gpuextender.v1 import gpu_state_pb2 as pb

NVLINK, SWITCH, NUMA, APART = 0, 1, 2, 3
TIER_NONE = 4  # fewer available GPUs than the pod needs
TIER_NAMES = ("nvlink", "pcie-switch", "numa-node", "apart-or-unknown", "not enough GPUs")
MAX_EXACT_GPUS = 8
CACHE_SIZE = 64

_SWITCH = (pb.PCIE_INTERNAL, pb.PCIE_SINGLE)
_NUMA = (pb.PCIE_MULTIPLE, pb.PCIE_HOSTBRIDGE, pb.PCIE_NODE)


def pair_tiers(links: Sequence[pb.GpuLink], n: int) -> list[list[int]]:
    """n x n pair tiers for GPUs at positions 0..n-1 (links name GPUs by those positions)."""
    tiers = [[APART] * n for _ in range(n)]
    for a in range(n):
        tiers[a][a] = NVLINK
    for link in links:
        a, b = link.a, link.b
        if a >= n or b >= n or a == b:
            continue
        tier = NVLINK if link.nvlinks else SWITCH if link.pcie in _SWITCH else NUMA if link.pcie in _NUMA else APART
        if tier < tiers[a][b]:
            tiers[a][b] = tiers[b][a] = tier
    return tiers


@lru_cache(maxsize=CACHE_SIZE)
def best_tiers_by_mask(key: bytes, n: int) -> tuple[tuple[int, ...], ...]:
    """For every availability mask of n <= MAX_EXACT_GPUS GPUs: the best tier per set size 0..n.
    `key` is the serialized Topology (hashable, so cacheable)."""
    tiers = pair_tiers(pb.Topology.FromString(key).links, n)
    set_tier = [NVLINK] * (1 << n)
    for s in range(1, 1 << n):
        low = (s & -s).bit_length() - 1  # the set = its lowest GPU + the rest, whose tier is known
        rest = s & (s - 1)
        worst = set_tier[rest]
        row = tiers[low]
        r = rest
        while r and worst < APART:
            b = (r & -r).bit_length() - 1
            if row[b] > worst:
                worst = row[b]
            r &= r - 1
        set_tier[s] = worst
    table = []
    for mask in range(1 << n):
        best = [TIER_NONE] * (n + 1)
        best[0] = NVLINK
        sub = mask
        while sub:  # every non-empty subset of the mask
            size = sub.bit_count()
            if set_tier[sub] < best[size]:
                best[size] = set_tier[sub]
            sub = (sub - 1) & mask
        table.append(tuple(best))
    return tuple(table)


def set_tiers(report: pb.NodeReport, available_mask: int) -> tuple[int, ...]:
    """Best tier per set size 0..n for the GPUs in `available_mask` (bit i: report.gpus[i]);
    () when the topology is unknown (every size then counts as APART)."""
    return tiers_for_mask(topology_key(report), len(report.gpus), available_mask)


def topology_key(report: pb.NodeReport) -> bytes:
    """The report's topology, serialized (the cache key of its tables); b"" when unknown."""
    return report.topology.SerializeToString() if report.gpus and report.topology.links else b""


def tiers_for_mask(key: bytes, n: int, mask: int) -> tuple[int, ...]:
    """set_tiers for a topology given by its `key`, of n GPUs, and the GPUs in `mask`."""
    if n == 0 or not key:
        return ()
    if n <= MAX_EXACT_GPUS:
        return best_tiers_by_mask(key, n)[mask]
    links = pb.Topology.FromString(key).links
    nvlinked = {(min(x.a, x.b), max(x.a, x.b)) for x in links if x.nvlinks and x.a != x.b}
    all_nvlink = sum(1 for a, b in nvlinked if b < n) == n * (n - 1) // 2
    count = mask.bit_count()
    return tuple(NVLINK if all_nvlink and k <= count else APART if k <= count else TIER_NONE for k in range(n + 1))


def tier_for(tiers: tuple[int, ...], k: int) -> int:
    """The node's tier for a k-GPU set; APART when its topology is unknown."""
    if k <= 1:
        return NVLINK
    return tiers[k] if k < len(tiers) else APART if not tiers else TIER_NONE
