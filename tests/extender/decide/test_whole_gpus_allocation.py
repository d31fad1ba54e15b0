"""Free ∧ idle ∧ healthy (issue 12): allocation from the kubelet, time-slicing replicas, MIG,
degraded GPUs and allocated-but-idle waste, from the summary through filter and prioritize.

Includes the exact cases reported against main: a time-sliced node refused a 12-replica pod as
"too few GPUs", and a node with 6 allocated-but-quiet GPUs ranked like an empty one."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.whole_gpus import assess, filter_nodes, prioritize
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import (
    ALLOCATION_BEFORE_0_2,
    ALLOCATION_FROM_KUBELET,
    NodeSummary,
    gpu_units,
    summarize,
)
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report

NOW = 100.0
POLICY = DecisionPolicy()


def held(g: pb.GpuSample, *holders: tuple[str, str], device: str | None = None) -> pb.GpuSample:
    """`g` held by (namespace, pod) containers, each on its own device ID unless `device` is given."""
    for i, (namespace, pod) in enumerate(holders):
        g.holders.add(
            namespace=namespace,
            pod=pod,
            container="main",
            resource_name="nvidia.com/gpu",
            device_id=device or (f"{g.uuid}::{i}" if g.sharing.replicas > 1 else g.uuid),
        )
    return g


def shared(g: pb.GpuSample, replicas: int, mode: int = pb.SHARING_TIME_SLICING) -> pb.GpuSample:
    g.sharing.mode = mode  # type: ignore[assignment]
    g.sharing.replicas = replicas
    return g


def health(g: pb.GpuSample, state: int, *codes: str) -> pb.GpuSample:
    g.health = state  # type: ignore[assignment]
    g.health_reasons.extend(codes)
    if state == pb.HEALTH_UNHEALTHY:
        g.healthy = False
    return g


def kubelet(name: str, gpus: list[pb.GpuSample], source: int = pb.ALLOCATION_KUBELET, problem: str = "") -> NodeSummary:
    r = report(name, gpus)
    r.allocation_source = source  # type: ignore[assignment]
    r.allocation_problem = problem
    return summarize(r, IdleRule(), NOW)


def quiet(index: int) -> pb.GpuSample:
    return gpu(index, 0, 1)


def busy(index: int) -> pb.GpuSample:
    return gpu(index, 90, 80)


def table(*summaries: NodeSummary) -> Callable[[str], NodeSummary | None]:
    return {s.node: s for s in summaries}.get


# -- the summary ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "source", "counts"),  # counts: (gpu_count, healthy, free, idle, allocated_idle)
    [
        # Allocation known: a held GPU is not free, quiet or not.
        ([held(quiet(0), ("a", "p")), quiet(1)], pb.ALLOCATION_KUBELET, (2, 2, 1, 1, 1)),
        ([held(busy(0), ("a", "p")), quiet(1)], pb.ALLOCATION_KUBELET, (2, 2, 1, 1, 0)),
        # An unheld GPU still needs idle readings: load from outside Kubernetes.
        ([busy(0), quiet(1)], pb.ALLOCATION_KUBELET, (2, 2, 2, 1, 0)),
        # Allocation unknown: holders (there are none to trust) are ignored, readings decide.
        ([held(quiet(0), ("a", "p")), quiet(1)], pb.ALLOCATION_UNAVAILABLE, (2, 2, None, 2, 0)),
        ([held(quiet(0), ("a", "p")), quiet(1)], pb.ALLOCATION_SOURCE_UNSPECIFIED, (2, 2, None, 2, 0)),
        # Unhealthy never counts, held or not.
        ([health(quiet(0), pb.HEALTH_UNHEALTHY, "XidCritical"), quiet(1)], pb.ALLOCATION_KUBELET, (2, 1, 1, 1, 0)),
        # The same device listed for two containers (init + app) is held once.
        ([held(quiet(0), ("a", "p"), ("a", "p"), device="GPU-0"), quiet(1)], pb.ALLOCATION_KUBELET, (2, 2, 1, 1, 1)),
        # Time-slicing: 4 replicas per GPU; two held replicas leave two free, while the GPU is idle enough.
        (
            [held(shared(quiet(0), 4), ("a", "p"), ("b", "q")), shared(quiet(1), 4)],
            pb.ALLOCATION_KUBELET,
            (8, 8, 6, 6, 1),
        ),
        ([held(shared(busy(0), 4), ("a", "p")), shared(quiet(1), 4)], pb.ALLOCATION_KUBELET, (8, 8, 7, 4, 0)),
        # All four replicas held: nothing free on that GPU.
        (
            [held(shared(quiet(0), 4), ("a", "p"), ("a", "q"), ("a", "r"), ("a", "s"))],
            pb.ALLOCATION_KUBELET,
            (4, 4, 0, 0, 1),
        ),
        # Replicas unknown (0) under time-slicing: one unit, never more.
        ([shared(quiet(0), 0)], pb.ALLOCATION_KUBELET, (1, 1, 1, 1, 0)),
        # MIG-enabled: no whole-GPU units at all.
        ([shared(quiet(0), 0, pb.SHARING_MIG), quiet(1)], pb.ALLOCATION_KUBELET, (1, 1, 1, 1, 0)),
    ],
)
def test_summary_counts(gpus: list[pb.GpuSample], source: int, counts: tuple[int, int, int | None, int, int]) -> None:
    s = kubelet("n", gpus, source)
    assert (s.gpu_count, s.healthy_gpus, s.free_gpus, s.idle_gpus, s.allocated_idle_gpus) == counts


@pytest.mark.parametrize(
    ("mode", "replicas", "units"),
    [
        (pb.SHARING_MODE_UNSPECIFIED, 0, 1),
        (pb.SHARING_EXCLUSIVE, 1, 1),
        (pb.SHARING_TIME_SLICING, 4, 4),
        (pb.SHARING_TIME_SLICING, 1, 1),
        (pb.SHARING_MPS, 8, 8),
        (pb.SHARING_TIME_SLICING, 0, 1),
        (pb.SHARING_MIG, 0, 0),
        (pb.SHARING_MIG, 7, 0),
    ],
)
def test_units_per_gpu(mode: int, replicas: int, units: int) -> None:
    assert gpu_units(shared(quiet(0), replicas, mode)) == units


def test_allocation_source_is_said() -> None:
    assert kubelet("n", [quiet(0)]).allocation == ALLOCATION_FROM_KUBELET
    assert (
        kubelet("n", [quiet(0)], pb.ALLOCATION_UNAVAILABLE, "socket_missing").allocation
        == "unavailable (socket_missing)"
    )
    assert kubelet("n", [quiet(0)], pb.ALLOCATION_SOURCE_UNSPECIFIED).allocation == ALLOCATION_BEFORE_0_2


def test_allocated_but_idle_gpus_per_namespace() -> None:
    s = kubelet(
        "n",
        [
            held(quiet(0), ("team-a", "p")),
            held(quiet(1), ("team-a", "q")),
            held(busy(2), ("team-b", "r")),
            held(shared(quiet(3), 2), ("team-b", "s"), ("team-c", "t")),
            quiet(4),
        ],
    )
    assert s.allocated_idle_gpus == 3
    # A GPU shared by two namespaces counts once for each of them.
    assert s.idle_by_namespace == (("team-a", 2), ("team-b", 1), ("team-c", 1))


def test_degraded_idle_gpus_count_toward_idle() -> None:
    s = kubelet(
        "n", [health(quiet(0), pb.HEALTH_DEGRADED, "ThermalSlowdown"), health(busy(1), pb.HEALTH_DEGRADED), quiet(2)]
    )
    assert (s.healthy_gpus, s.idle_gpus, s.degraded_idle_gpus) == (3, 2, 1)


# -- filter and prioritize --------------------------------------------------------------------


def test_time_slicing_counts_replicas_the_reported_case() -> None:
    """replicas "4": 8 GPUs advertise nvidia.com/gpu 32; a pod asking for 12 fits (it was refused
    as InsufficientGPUs, score 7 in explain)."""
    ts = kubelet("ts", [shared(quiet(i), 4) for i in range(8)])
    assert (ts.gpu_count, ts.idle_gpus) == (32, 32)
    outcome = filter_nodes(12, ["ts"], {"ts": 32}, table(ts), NOW, POLICY)
    assert outcome.passed == ["ts"] and not outcome.failed
    assert prioritize(12, ["ts"], {"ts": 32}, table(ts), NOW, POLICY)[0][1] > 0
    # 32 free replicas minus 21 held leaves 11: one short of 12.
    holders = [("ns", f"p{i}") for i in range(3)]
    gpus = [held(shared(quiet(i), 4), *holders) for i in range(7)] + [shared(quiet(7), 4)]
    crowded = kubelet("ts", gpus)
    assert crowded.free_gpus == 11
    strict = DecisionPolicy(no_fit_policy="reject")  # no pass-all fallback for the lone node
    assert filter_nodes(12, ["ts"], {"ts": 32}, table(crowded), NOW, strict).failed == {
        "ts": reasons.INSUFFICIENT_FREE_GPUS
    }
    assert filter_nodes(11, ["ts"], {"ts": 32}, table(crowded), NOW, strict).passed == ["ts"]


def test_idle_is_not_free_the_reported_case() -> None:
    """6 allocated-but-quiet GPUs and 2 free ranked like an empty node."""
    half = kubelet("half", [held(quiet(i), ("ns", f"p{i}")) for i in range(6)] + [quiet(6), quiet(7)])
    empty = kubelet("empty", [quiet(i) for i in range(8)])
    lookup = table(half, empty)
    assert (half.idle_gpus, half.free_gpus, half.allocated_idle_gpus) == (2, 2, 6)
    spread = dict(prioritize(1, ["half", "empty"], {}, lookup, NOW, POLICY, "spread"))
    binpack = dict(prioritize(1, ["half", "empty"], {}, lookup, NOW, POLICY, "binpack"))
    assert spread["empty"] > spread["half"] > 0
    assert binpack["half"] > binpack["empty"] > 0
    outcome = filter_nodes(3, ["half", "empty"], {}, lookup, NOW, POLICY)
    assert outcome.passed == ["empty"] and outcome.failed == {"half": reasons.INSUFFICIENT_FREE_GPUS}


@pytest.mark.parametrize(
    ("free", "needed", "reason"),
    [(2, 2, None), (2, 3, reasons.INSUFFICIENT_FREE_GPUS), (0, 1, reasons.INSUFFICIENT_FREE_GPUS)],
)
def test_free_gpus_bound_is_exact(free: int, needed: int, reason: reasons.Reason | None) -> None:
    s = kubelet(
        "n", [held(quiet(i), ("ns", f"p{i}")) for i in range(4 - free)] + [quiet(i) for i in range(4 - free, 4)]
    )
    assert s.free_gpus == free
    assert assess("n", 4, s, needed, NOW, POLICY).reason is reason


def test_free_but_busy_is_still_insufficient_idle() -> None:
    s = kubelet("n", [quiet(0), busy(1), busy(2)])
    assert assess("n", 3, s, 2, NOW, POLICY).reason is reasons.INSUFFICIENT_IDLE_GPUS


def test_unknown_allocation_keeps_todays_rule() -> None:
    gpus = [held(quiet(i), ("ns", f"p{i}")) for i in range(6)] + [quiet(6), quiet(7)]
    s = kubelet("n", gpus, pb.ALLOCATION_UNAVAILABLE, "permission_denied")
    assert (s.free_gpus, s.idle_gpus) == (None, 8)
    assert assess("n", 8, s, 8, NOW, POLICY).reason is None


def test_mig_enabled_gpus_offer_no_whole_gpus() -> None:
    s = kubelet("mig", [shared(quiet(i), 0, pb.SHARING_MIG) for i in range(8)])
    assert assess("mig", 8, s, 1, NOW, POLICY).reason is reasons.MIG_PARTITIONED
    # Half in MIG mode: the 4 whole GPUs take a 4-GPU pod; a 5th is not there.
    mixed = kubelet("mixed", [shared(quiet(i), 0, pb.SHARING_MIG) for i in range(4)] + [quiet(i) for i in range(4, 8)])
    assert assess("mixed", 8, mixed, 4, NOW, POLICY).reason is None
    assert assess("mixed", 8, mixed, 5, NOW, POLICY).reason is reasons.MIG_PARTITIONED
    whole = kubelet("whole", [quiet(i) for i in range(4)])
    assert assess("whole", 4, whole, 5, NOW, POLICY).reason is reasons.INSUFFICIENT_GPUS


def degraded_node(name: str, clean: int, degraded: int) -> NodeSummary:
    gpus = [quiet(i) for i in range(clean)]
    gpus += [health(quiet(clean + i), pb.HEALTH_DEGRADED, "HwSlowdown") for i in range(degraded)]
    return kubelet(name, gpus)


@pytest.mark.parametrize(
    ("clean", "degraded", "needed", "tier"),
    [
        (2, 6, 2, "clean"),  # available minus degraded == needed: fits on healthy GPUs
        (1, 7, 2, "degraded"),  # one short: only by counting degraded ones
        (0, 8, 1, "degraded"),
    ],
)
def test_degraded_gpus_rank_below_every_node_that_fits_on_healthy_ones(
    clean: int, degraded: int, needed: int, tier: str
) -> None:
    # The healthy rival is the worst-placed fit possible: 1 clean GPU more than needed is enough.
    rival = kubelet("rival", [quiet(i) for i in range(needed)] + [busy(needed + i) for i in range(7)])
    node = degraded_node("d", clean, degraded)
    scores = dict(prioritize(needed, ["d", "rival"], {}, table(node, rival), NOW, POLICY))
    assert filter_nodes(needed, ["d", "rival"], {}, table(node, rival), NOW, POLICY).passed == ["d", "rival"]
    if tier == "clean":  # one quality class: spread alone, and d has more available GPUs
        assert scores["d"] > scores["rival"] >= 1
    else:  # two classes: the rival's is best (2 + round(8 * v / (C + 1))), d's scores 2 - 1
        assert scores["d"] == 1 and scores["rival"] >= 2


def test_without_a_healthy_fit_degraded_nodes_are_ranked_normally() -> None:
    a, b = degraded_node("a", 0, 8), degraded_node("b", 0, 2)
    scores = dict(prioritize(2, ["a", "b"], {}, table(a, b), NOW, POLICY))
    assert scores["a"] > scores["b"] >= 1  # spread: more available GPUs first


def test_a_gpu_leaves_the_candidate_set_with_the_report_that_says_it_failed() -> None:
    state = GpuState(IdleRule())
    good = report("n", [quiet(0), quiet(1)])
    good.allocation_source = pb.ALLOCATION_KUBELET
    state.ingest(good, NOW)
    assert filter_nodes(2, ["n"], {}, state.summary, NOW, POLICY).passed == ["n"]
    xid = report("n", [quiet(0), health(quiet(1), pb.HEALTH_UNHEALTHY, "XidCritical")], seq=2)
    xid.allocation_source = pb.ALLOCATION_KUBELET
    state.ingest(xid, NOW + 0.001)
    # The very next call, on the same clock reading: no wait for a sample or a cache.
    assert filter_nodes(2, ["n"], {}, state.summary, NOW + 0.001, POLICY).failed == {
        "n": reasons.INSUFFICIENT_HEALTHY_GPUS
    }


def test_pods_beyond_the_precomputed_sizes_are_ranked_the_same_way() -> None:
    """Quality classes are precomputed per report for pods of up to 64 units; a larger pod (here
    100 replicas) gets its class computed at ranking time, by the same rule."""
    from gpuextender.extender.state.gpu_summary import QUALITY_SIZES

    clean = kubelet("clean", [shared(quiet(i), 16) for i in range(8)])
    worn = kubelet("worn", [health(shared(quiet(i), 16), pb.HEALTH_DEGRADED, "ThermalSlowdown") for i in range(8)])
    assert clean.idle_gpus == 128 and len(clean.quality) == QUALITY_SIZES
    scores = dict(prioritize(100, ["worn", "clean"], {}, table(clean, worn), NOW, POLICY))
    assert scores["worn"] == 1 and scores["clean"] >= 2  # degraded-only ranks below
    assert dict(prioritize(64, ["worn", "clean"], {}, table(clean, worn), NOW, POLICY))["worn"] == 1  # precomputed
