"""The idle rule and the per-node summary computed on ingest."""

from __future__ import annotations

import pytest

from gpuextender.common.idle_rule import IdleRule, gpu_is_idle
from gpuextender.extender.state.gpu_summary import summarize
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, node, report


@pytest.mark.parametrize(
    ("util", "mem_pct", "healthy", "idle"),
    [
        (0, 0, True, True),
        (29, 49, True, True),
        (30, 10, True, False),  # utilization at the threshold is busy
        (10, 50, True, False),  # memory at the threshold is busy
        (95, 95, True, False),
        (0, 0, False, False),  # an unhealthy GPU is never idle
        (None, 10, True, True),  # no utilization reading (MIG): memory decides
        (None, 60, True, False),
        (10, None, True, True),  # no memory reading: utilization decides
        (None, None, True, True),
    ],
)
def test_idle_rule(util: int | None, mem_pct: float | None, healthy: bool, idle: bool) -> None:
    assert gpu_is_idle(gpu(0, util, mem_pct, healthy=healthy), IdleRule()) is idle


def test_thresholds_are_configurable() -> None:
    strict = IdleRule(max_utilization_percent=5, max_memory_used_percent=10)
    assert not gpu_is_idle(gpu(0, 6, 0), strict)
    assert not gpu_is_idle(gpu(0, 0, 12), strict)
    assert gpu_is_idle(gpu(0, 4, 9), strict)


def test_summary_counts_and_mean() -> None:
    s = node("n1", idle=3, busy=4, lost=1, received_at=42.0)
    assert (s.node, s.gpu_count, s.healthy_gpus, s.idle_gpus) == ("n1", 8, 7, 3)
    assert s.mean_utilization == pytest.approx(4 * 90 / 7)  # the lost GPU has no reading
    assert s.received_at == 42.0 and s.sample_time == 1000.0


def test_node_error_means_no_healthy_gpus() -> None:
    s = summarize(report("n1", [gpu(0)], node_error="DriverNotLoaded"), IdleRule(), 1.0)
    assert (s.healthy_gpus, s.idle_gpus, s.node_error) == (0, 0, "DriverNotLoaded")


def _sm(g: pb.GpuSample, percent: float) -> pb.GpuSample:
    g.gpm.sm_active_percent = percent
    return g


def test_by_default_a_gpu_reporting_sm_activity_is_judged_by_it_and_the_summary_says_which_rule() -> None:
    """One thread spinning on a Hopper GPU (100 % utilization, 0.75 % SM active, measured) is idle
    under the default rule; a GPU without GPM (or an agent before 0.5) keeps the utilization rule,
    and an unhealthy GPU is judged by neither."""
    gpus = [_sm(gpu(0, 100, 1), 0.75), gpu(1, 100, 1), _sm(gpu(2, 0, 1), 10.0), gpu(3, None, None, healthy=False)]
    s = summarize(report("n", gpus), IdleRule(), 1.0)
    assert s.idle_gpus == 1  # GPU 0 only: 1 busy by utilization, 2 at the SM bound, 3 unhealthy
    assert s.sm_active == (0.75, None, 10.0, None)
    off = summarize(report("n", gpus), IdleRule(30.0, 50.0, None), 1.0)
    assert (off.idle_gpus, off.sm_active) == (1, ())  # GPU 2 (0 % utilization) idle, GPU 0 busy
    assert [c[1] for c in off.gpus] != [c[1] for c in s.gpus]
    plain = summarize(report("n", [gpu(0, 100, 1), gpu(1)]), IdleRule(), 1.0)
    assert plain.sm_active == ()  # nothing judged by SM activity: the common case keeps no tuple
