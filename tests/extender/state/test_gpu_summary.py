"""The idle rule and the per-node summary computed on ingest."""

from __future__ import annotations

import pytest

from gpuextender.common.idle_rule import IdleRule, gpu_is_idle
from gpuextender.extender.state.gpu_summary import summarize
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
