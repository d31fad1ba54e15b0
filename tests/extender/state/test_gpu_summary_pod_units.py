"""NodeSummary.pod_units (issue 51): per pod holding whole or shared GPUs, where the kubelet's
allocation is known, ("namespace/pod", units it holds on healthy GPUs, the part of them idle by the
idle rule), sorted. What evicting a pod gives back and which victims are cheapest
(decide/preempt_victims.py) read it."""

from __future__ import annotations

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.extender.state.summary_codec import decode_summary, encode_summary
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report

RULE = IdleRule()  # utilization 30 %, memory 50 %, SM activity 10 %: busy at or above each


def hold(g: pb.GpuSample, namespace: str, pod: str, device_id: str | None = None, container: str = "main") -> None:
    g.holders.add(
        namespace=namespace,
        pod=pod,
        container=container,
        resource_name="nvidia.com/gpu",
        device_id=device_id if device_id is not None else g.uuid,
    )


def held(g: pb.GpuSample, namespace: str, pod: str) -> pb.GpuSample:
    hold(g, namespace, pod)
    return g


def time_sliced(g: pb.GpuSample, replicas: int) -> pb.GpuSample:
    g.sharing.mode = pb.SHARING_TIME_SLICING
    g.sharing.replicas = replicas
    return g


def summary(gpus: list[pb.GpuSample], source: int = pb.ALLOCATION_KUBELET, *, rule: IdleRule = RULE) -> NodeSummary:
    r = report("n1", gpus)
    r.allocation_source = source  # type: ignore[assignment]
    return summarize(r, rule, 100.0)


def idle(index: int) -> pb.GpuSample:
    return gpu(index, 0, 1)


def busy(index: int) -> pb.GpuSample:
    return gpu(index, 90, 80)


# -- whole GPUs ------------------------------------------------------------------------------------


def test_exclusive_gpus_held_by_one_pod_each() -> None:
    s = summary([held(busy(0), "team-b", "q"), held(idle(1), "team-a", "p"), idle(2)])
    assert s.pod_units == (("team-a/p", 1, 1), ("team-b/q", 1, 0))
    assert s.free_gpus == 1  # the third GPU is held by no one


def test_no_holder_is_no_pod_units() -> None:
    s = summary([idle(0), busy(1)])
    assert s.pod_units == ()
    assert s.free_gpus == 2


def test_one_pod_holding_several_gpus_counts_only_its_idle_ones_as_idle() -> None:
    gpus = [
        held(gpu(0, 30, 1), "ml", "big"),  # utilization exactly at the threshold: busy
        held(gpu(1, 29, 1), "ml", "big"),  # one below: idle
        held(gpu(2, 0, 1), "ml", "big"),
        held(gpu(3, 95, 90), "ml", "big"),
    ]
    assert summary(gpus).pod_units == (("ml/big", 4, 2),)


@pytest.mark.parametrize(("util", "idle_units"), [(29, 1), (30, 0), (31, 0), (None, 1)])
def test_utilization_at_the_threshold_is_busy_one_below_idle(util: int | None, idle_units: int) -> None:
    assert summary([held(gpu(0, util, 1), "ml", "p")]).pod_units == (("ml/p", 1, idle_units),)


@pytest.mark.parametrize(("mem_pct", "idle_units"), [(49, 1), (50, 0), (None, 1)])
def test_memory_at_the_threshold_is_busy_one_below_idle(mem_pct: float | None, idle_units: int) -> None:
    assert summary([held(gpu(0, 0, mem_pct), "ml", "p")]).pod_units == (("ml/p", 1, idle_units),)


@pytest.mark.parametrize(("sm_active", "idle_units"), [(9.9, 1), (10.0, 0)])
def test_sm_activity_judges_a_gpu_that_reports_it(sm_active: float, idle_units: int) -> None:
    g = held(gpu(0, 100, 1), "ml", "p")  # utilization busy, but SM activity replaces it
    g.gpm.sm_active_percent = sm_active
    assert summary([g]).pod_units == (("ml/p", 1, idle_units),)


def test_a_custom_rule_moves_the_threshold() -> None:
    rule = IdleRule(max_utilization_percent=50.0)
    assert summary([held(gpu(0, 49, 1), "ml", "p")], rule=rule).pod_units == (("ml/p", 1, 1),)
    assert summary([held(gpu(0, 50, 1), "ml", "p")], rule=rule).pod_units == (("ml/p", 1, 0),)


def test_an_unhealthy_held_gpu_is_not_counted() -> None:
    gpus = [
        held(idle(0), "ml", "p"),
        held(gpu(1, None, None, healthy=False), "ml", "p"),
        held(gpu(2, None, None, healthy=False), "ml", "lost"),  # holds only a failed GPU: absent
    ]
    s = summary(gpus)
    assert s.pod_units == (("ml/p", 1, 1),)
    assert s.healthy_gpus == 1
    assert "ml/lost" in s.holder_pods  # the agent still attributes it: evicting it frees nothing


def test_a_degraded_gpu_is_healthy_and_counted() -> None:
    g = held(idle(0), "ml", "p")
    g.health = pb.HEALTH_DEGRADED
    g.health_reasons.append("ThermalSlowdown")
    s = summary([g])
    assert s.healthy_gpus == 1
    assert s.pod_units == (("ml/p", 1, 1),)


def test_a_broken_node_counts_nothing() -> None:
    r = report("n1", [held(idle(0), "ml", "p")], node_error="NVML init failed")
    r.allocation_source = pb.ALLOCATION_KUBELET
    assert summarize(r, RULE, 100.0).pod_units == ()


def test_pods_are_sorted_by_key() -> None:
    gpus = [held(idle(0), "z", "a"), held(idle(1), "a", "z"), held(busy(2), "a", "b"), held(idle(3), "m", "m")]
    assert summary(gpus).pod_units == (("a/b", 1, 0), ("a/z", 1, 1), ("m/m", 1, 1), ("z/a", 1, 1))


def test_a_pod_of_several_containers_on_one_whole_gpu_counts_it_once() -> None:
    g = idle(0)
    hold(g, "ml", "p", container="a")
    hold(g, "ml", "p", container="b")
    s = summary([g])
    assert s.pod_units == (("ml/p", 1, 1),)
    assert s.free_gpus == 0


# -- shared GPUs -----------------------------------------------------------------------------------


def test_time_sliced_gpu_counts_each_pods_distinct_replicas() -> None:
    g = time_sliced(idle(0), 4)
    hold(g, "ml", "a", "GPU-0::0", container="c1")
    hold(g, "ml", "a", "GPU-0::1", container="c2")
    hold(g, "ml", "b", "GPU-0::2")
    s = summary([g])
    assert s.pod_units == (("ml/a", 2, 2), ("ml/b", 1, 1))
    assert s.free_gpus == 1  # 4 replicas, 3 distinct device IDs held


def test_a_replica_listed_for_two_containers_of_one_pod_counts_once() -> None:
    g = time_sliced(busy(0), 4)
    hold(g, "ml", "a", "GPU-0::0", container="c1")
    hold(g, "ml", "a", "GPU-0::0", container="c2")
    hold(g, "ml", "b", "GPU-0::1")
    s = summary([g])
    assert s.pod_units == (("ml/a", 1, 0), ("ml/b", 1, 0))
    assert s.free_gpus == 2


def test_a_single_holder_of_a_time_sliced_gpu_holds_one_replica() -> None:
    g = time_sliced(idle(0), 8)
    hold(g, "ml", "a", "GPU-0::5")
    s = summary([g])
    assert s.pod_units == (("ml/a", 1, 1),)
    assert s.free_gpus == 7


def test_a_pod_holding_replicas_of_several_gpus_sums_them() -> None:
    g0, g1 = time_sliced(idle(0), 4), time_sliced(gpu(1, 30, 1), 4)
    hold(g0, "ml", "a", "GPU-0::0")
    hold(g0, "ml", "b", "GPU-0::1")
    hold(g1, "ml", "a", "GPU-1::0")
    hold(g1, "ml", "a", "GPU-1::3")
    s = summary([g0, g1])
    assert s.pod_units == (("ml/a", 3, 1), ("ml/b", 1, 1))  # GPU 1 at the threshold: its 2 are busy


def test_the_same_pod_name_in_two_namespaces_is_two_pods() -> None:
    g = time_sliced(idle(0), 2)
    hold(g, "ns1", "p", "GPU-0::0")
    hold(g, "ns2", "p", "GPU-0::1")
    assert summary([g]).pod_units == (("ns1/p", 1, 1), ("ns2/p", 1, 1))


# -- allocation unknown ----------------------------------------------------------------------------


@pytest.mark.parametrize("source", [pb.ALLOCATION_SOURCE_UNSPECIFIED, pb.ALLOCATION_UNAVAILABLE])
def test_allocation_unknown_is_no_pod_units(source: int) -> None:
    g = time_sliced(idle(1), 2)
    hold(g, "ml", "b", "GPU-1::0")
    s = summary([held(idle(0), "ml", "a"), g], source)
    assert s.pod_units == ()
    assert s.free_gpus is None
    assert s.holder_pods == frozenset()


# -- the codec -------------------------------------------------------------------------------------


def test_the_summary_codec_carries_pod_units() -> None:
    g = time_sliced(gpu(2, 30, 1), 4)
    hold(g, "ml", "a", "GPU-2::0")
    hold(g, "ml", "c", "GPU-2::1")
    s = summary([held(idle(0), "ml", "b"), held(busy(1), "ml", "a"), g])
    assert s.pod_units == (("ml/a", 2, 0), ("ml/b", 1, 1), ("ml/c", 1, 0))
    decoded = decode_summary(encode_summary(s))
    assert decoded == s
    assert decoded.pod_units == s.pod_units
    assert isinstance(decoded.pod_units, tuple) and all(isinstance(t, tuple) for t in decoded.pod_units)


def test_the_codec_carries_empty_pod_units() -> None:
    s = summary([idle(0)])
    assert s.pod_units == ()
    assert decode_summary(encode_summary(s)) == s


def test_a_one_unit_gpu_several_pods_hold_counts_for_none_of_them() -> None:
    """Sharing the agent cannot tell (no mode): evicting one of the pods would not free the GPU."""
    g = idle(0)
    hold(g, "ml", "a", "GPU-0::0")
    hold(g, "ml", "b", "GPU-0::1")
    assert summary([g]).pod_units == ()
    two = time_sliced(idle(0), 2)  # 2 units: each pod's replica is its own
    hold(two, "ml", "a", "GPU-0::0")
    hold(two, "ml", "b", "GPU-0::1")
    assert summary([two]).pod_units == (("ml/a", 1, 1), ("ml/b", 1, 1))
