"""Rules of the per-node GPU summary (state/gpu_summary.py) that mutation testing (mutmut) found no
test holding; each test fails on a one-line change to the module: a GPU's position and state by UUID
or DRA name, the units a GPU counts for, where allocation came from, when sharing is unknown, when
positions and topology apply, the memory reading, MIG GPUs and instances, held GPUs (free units,
holder namespaces), degraded and allocated-idle counts; the sample time's nanoseconds, the pods
holding MIG instances, the quality class per set size and its table's length, and sharing inferred
from allocatable (degraded units scaled, no topology nor positions, a node of one GPU)."""

from __future__ import annotations

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.state.gpu_summary import (
    ALLOCATION_BEFORE_0_2,
    ALLOCATION_FROM_KUBELET,
    GPU_DEGRADED,
    GPU_FREE_BUSY,
    GPU_FREE_IDLE,
    QUALITY_SIZES,
    NodeSummary,
    allocation_of,
    gpu_units,
    quality_for,
    quality_table,
    summarize,
    with_inferred_sharing,
)
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import GIB, gpu, report
from tests.extender.decide.test_mig_devices import mig_gpu

RULE = IdleRule()


def named(g: pb.GpuSample) -> pb.GpuSample:
    g.dra_device = f"gpu-{g.index}"
    return g


def two_gpus(**edit: int) -> NodeSummary:
    """GPU 0 idle, GPU 1 busy, each with a UUID and a DRA name."""
    r = report("n", [named(gpu(0, 0, 1)), named(gpu(1, 95, 90))])
    for key, value in edit.items():
        setattr(r, key, value)
    return summarize(r, RULE, 1.0)


def test_a_gpu_not_reported_has_no_position() -> None:
    positions = two_gpus().positions
    assert positions is not None
    assert (positions.position("GPU-1", ""), positions.position("", "gpu-0")) == (1, 0)
    assert positions.position("GPU-9", "") is None and positions.position("", "gpu-9") is None
    assert positions.position("", "") is None


def test_a_gpus_state_is_read_by_uuid_or_dra_name() -> None:
    s = two_gpus()
    assert (s.gpu_state("GPU-0", ""), s.gpu_state("", "gpu-1"), s.gpu_state("GPU-9", "")) == (
        GPU_FREE_IDLE,
        GPU_FREE_BUSY,
        None,
    )
    scattered = summarize(report("n", [gpu(0, 0, 1), gpu(2, 0, 1)]), RULE, 1.0)  # not at their index
    assert scattered.positions is None and scattered.gpu_state("GPU-0", "") is None


def gpu_in(mode: int, replicas: int = 0) -> pb.GpuSample:
    g = gpu(0, 0, 1)
    g.sharing.mode, g.sharing.replicas = mode, replicas  # type: ignore[assignment]
    return g


def test_what_one_gpu_counts_for_by_how_it_is_shared() -> None:
    cases = [
        (pb.SHARING_MODE_UNSPECIFIED, 0, 1),
        (pb.SHARING_EXCLUSIVE, 0, 1),
        (pb.SHARING_TIME_SLICING, 4, 4),
        (pb.SHARING_TIME_SLICING, 0, 1),
        (pb.SHARING_MPS, 3, 3),
        (pb.SHARING_MPS, 0, 1),
        (pb.SHARING_MIG, 7, 0),
    ]
    assert [gpu_units(gpu_in(mode, replicas)) for mode, replicas, _ in cases] == [units for *_, units in cases]
    assert [summarize(report("n", [gpu_in(m, r)]), RULE, 1.0).gpu_count for m, r, _ in cases] == [
        units for *_, units in cases
    ]


def test_where_allocation_came_from_is_said() -> None:
    said = []
    for source, problem in [
        (pb.ALLOCATION_KUBELET, ""),
        (pb.ALLOCATION_UNAVAILABLE, "socket missing"),
        (pb.ALLOCATION_UNAVAILABLE, ""),
        (pb.ALLOCATION_SOURCE_UNSPECIFIED, ""),
    ]:
        r = report("n", [gpu(0)])
        r.allocation_source, r.allocation_problem = source, problem
        said.append((allocation_of(r), summarize(r, RULE, 1.0).allocation))
    assert said == [
        (ALLOCATION_FROM_KUBELET,) * 2,
        ("unavailable (socket missing)",) * 2,
        ("unavailable (no reason given)",) * 2,
        (ALLOCATION_BEFORE_0_2,) * 2,
    ]


def test_a_gpu_that_says_how_it_is_shared_leaves_nothing_to_infer() -> None:
    for mode, replicas in [(pb.SHARING_TIME_SLICING, 4), (pb.SHARING_MPS, 2), (pb.SHARING_EXCLUSIVE, 0)]:
        s = summarize(report("n", [gpu_in(mode, replicas), gpu(1)]), RULE, 1.0)
        assert s.sharing_unknown is False, mode
    unknown = summarize(report("n", [gpu_in(pb.SHARING_TIME_SLICING, 0), gpu(1)]), RULE, 1.0)
    assert unknown.sharing_unknown is True


def test_shared_or_misplaced_gpus_have_no_positions_nor_topology() -> None:
    shared = summarize(report("n", [gpu_in(pb.SHARING_TIME_SLICING, 2), gpu(1)]), RULE, 1.0)
    misplaced = summarize(report("n", [gpu(1), gpu(0)]), RULE, 1.0)
    whole = summarize(report("n", [gpu(0), gpu(1)]), RULE, 1.0)
    assert (shared.positions, shared.set_tiers, misplaced.positions, misplaced.set_tiers) == (None, (), None, ())
    assert whole.positions is not None


def test_a_memory_total_without_a_used_reading_is_no_memory_reading() -> None:
    g = gpu(0, 0, None)
    g.memory_total_bytes = 80 * GIB
    s = summarize(report("n", [g]), RULE, 1.0)
    assert s.gpus == ((0, GPU_FREE_IDLE, 0, None),)


@pytest.mark.parametrize(("total", "used", "percent"), [(0, 0, None), (1, 0, 0.0), (1, 1, 100.0)])
def test_memory_percent_needs_a_positive_total(total: int, used: int, percent: float | None) -> None:
    g = gpu(0, 0, None)
    g.memory_total_bytes, g.memory_used_bytes = total, used
    assert summarize(report("n", [g]), RULE, 1.0).gpus[0][3] == percent


def test_unhealthy_gpus_in_mig_mode_are_counted_as_mig_gpus_each() -> None:
    gpus = [gpu_in(pb.SHARING_MIG), gpu_in(pb.SHARING_MIG), gpu(2, healthy=False)]
    for at, g in enumerate(gpus):
        g.index, g.healthy = at, False
    assert summarize(report("n", gpus), RULE, 1.0).mig_gpus == 2


def known(gpus: list[pb.GpuSample]) -> NodeSummary:
    r = report("n", gpus)
    r.allocation_source = pb.ALLOCATION_KUBELET
    return summarize(r, RULE, 1.0)


def hold(g: pb.GpuSample, namespace: str, pod: str, device_id: str) -> pb.GpuSample:
    g.holders.add(namespace=namespace, pod=pod, container="c", resource_name="nvidia.com/gpu", device_id=device_id)
    return g


def test_healthy_gpus_in_mig_mode_are_counted_and_held_instances_are_not_free() -> None:
    gpus = [mig_gpu(0, ("1g.10gb", True, 1), ("1g.10gb", False, 1)), mig_gpu(1, ("1g.10gb", False, 1))]
    s = known(gpus)
    assert (s.mig_gpus, s.mig_instances, s.mig_free) == (2, (("1g.10gb", 3),), (("1g.10gb", 2),))


def test_more_device_ids_than_units_leave_no_free_unit_and_no_debt() -> None:
    s = known([hold(hold(gpu(0), "a", "p", "id-1"), "b", "q", "id-2"), gpu(1)])
    assert (s.free_gpus, s.idle_gpus) == (1, 1)


def test_held_by_names_the_namespaces_holding_each_gpu() -> None:
    gpus = [hold(gpu(0), "team-b", "p", "GPU-0"), gpu(1), hold(hold(gpu(2), "team-b", "q", "x"), "team-a", "r", "x")]
    assert known(gpus).held_by == ((0, "team-b"), (2, "team-a,team-b"))


def test_a_degraded_gpu_reads_degraded_held_or_free() -> None:
    gpus = [hold(gpu(0), "a", "p", "GPU-0"), gpu(1)]
    for g in gpus:
        g.health = pb.HEALTH_DEGRADED
        g.health_reasons.append("ThermalSlowdown")
    assert [cell[1] for cell in known(gpus).gpus] == [GPU_DEGRADED, GPU_DEGRADED]


def test_idle_degraded_gpus_are_counted_each_and_marked_by_position() -> None:
    gpus = [gpu(0), gpu(1), gpu(2)]
    for g in gpus[:2]:
        g.health = pb.HEALTH_DEGRADED
    s = known(gpus)
    assert s.positions is not None
    assert (s.idle_gpus, s.degraded_idle_gpus, s.positions.degraded) == (3, 2, 0b011)


def test_allocated_idle_gpus_are_counted_each_and_per_holder_namespace() -> None:
    gpus = [hold(gpu(0), "a", "p", "GPU-0"), hold(gpu(1), "a", "q", "GPU-1"), hold(gpu(2), "b", "r", "GPU-2")]
    s = known([*gpus, gpu(3, 95, 90)])
    assert (s.allocated_idle_gpus, s.idle_by_namespace) == (3, (("a", 2), ("b", 1)))


def test_a_reported_topology_ranks_the_available_gpus() -> None:
    r = report("n", [gpu(0), gpu(1)])
    r.topology.links.add(a=0, b=1, nvlinks=12)
    s = summarize(r, RULE, 1.0)
    assert s.positions is not None and s.positions.topology_key == r.topology.SerializeToString()
    assert len(s.set_tiers) == 3 and s.set_tiers != summarize(report("n", [gpu(0), gpu(1)]), RULE, 1.0).set_tiers


def test_the_quality_class_is_twice_the_set_tier_plus_one_where_degraded_gpus_must_join() -> None:
    # 3 available GPUs, 1 degraded; a 2-GPU set connects over a PCIe switch (tier 1), 3 lie apart (3).
    tiers = (0, 0, 1, 3)
    assert quality_table(3, 1, tiers) == (0, 0, 2, 7)
    assert [quality_for(k, 3, 1, tiers) for k in range(4)] == [0, 0, 2, 7]
    assert quality_for(4, 3, 1, tiers) == 2 * 4 + 1  # more than the node has: not enough GPUs


def test_the_quality_table_stops_at_the_idle_units_or_the_precomputed_sizes() -> None:
    assert len(quality_table(0, 0, ())) == 1 and len(quality_table(3, 0, ())) == 4
    assert len(quality_table(QUALITY_SIZES - 1, 0, ())) == QUALITY_SIZES
    assert len(quality_table(QUALITY_SIZES + 5, 0, ())) == QUALITY_SIZES


def test_the_sample_time_carries_its_nanoseconds() -> None:
    r = report("n", [gpu(0)], seconds=1000)
    r.sample_time.nanos = 250_000_000
    assert summarize(r, RULE, 1.0).sample_time == 1000.25


def test_the_holder_pods_include_the_pods_holding_mig_instances() -> None:
    s = known([hold(gpu(0), "a", "p", "GPU-0"), mig_gpu(1, ("1g.10gb", True, 1), ("1g.10gb", False, 1))])
    assert s.holder_pods == frozenset({"a/p", "ns/p1-0"})


def test_inferred_replicas_scale_the_degraded_ones_and_drop_topology_and_positions() -> None:
    r = report("n", [gpu(i) for i in range(4)])  # no sharing said, allocation unknown
    r.gpus[0].health = pb.HEALTH_DEGRADED
    r.topology.links.add(a=0, b=1, nvlinks=12)
    plain = summarize(r, RULE, 1.0)
    assert plain.positions is not None and plain.set_tiers != ()
    s = with_inferred_sharing(plain, 8)
    assert (s.inferred_replicas, s.gpu_count, s.idle_gpus, s.degraded_idle_gpus) == (2, 8, 8, 2)
    assert (s.set_tiers, s.positions) == ((), None)
    assert s.quality == (0, 0, 6, 6, 6, 6, 6, 7, 7)  # sets of replicas lie apart; the last 2 are degraded


def test_one_gpu_shared_without_saying_so_is_read_as_replicas() -> None:
    s = with_inferred_sharing(summarize(report("n", [gpu(0)]), RULE, 1.0), 4)
    assert (s.inferred_replicas, s.gpu_count, s.idle_gpus) == (4, 4, 4)
