"""state/idle_holders.py: a pod stands once every GPU it holds read idle for the window without a
break (at exactly the window, not a moment before), and starts over when busy or stale."""

from __future__ import annotations

from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.idle_holders import IdleHolders

WINDOW = 10.0
STALE = 30.0


def summary(received_at: float, units: int = 2, idle: int = 2) -> dict[str, NodeSummary]:
    s = NodeSummary(
        node="n1",
        gpu_count=8,
        healthy_gpus=8,
        idle_gpus=0,
        mean_utilization=None,
        node_error="",
        sequence=1,
        sample_time=0.0,
        received_at=received_at,
        free_gpus=0,
        allocated_idle_gpus=idle,
        pod_units=(("team/idle", units, idle), ("team/busy", 2, 0)),
    )
    return {"n1": s}


def test_a_pod_stands_at_exactly_the_window() -> None:
    holders = IdleHolders(WINDOW)
    holders.update(summary(0.0), STALE, 0.0)
    holders.update(summary(9.9), STALE, WINDOW - 0.1)
    assert holders.standing() == {}
    holders.update(summary(10.0), STALE, WINDOW)
    assert holders.standing() == {("n1", "team/idle"): 2}


def test_one_busy_gpu_starts_the_window_over() -> None:
    holders = IdleHolders(WINDOW)
    holders.update(summary(0.0), STALE, 0.0)
    holders.update(summary(5.0, idle=1), STALE, 5.0)  # one of its two GPUs busy
    holders.update(summary(10.0), STALE, 10.0)
    assert holders.standing() == {}
    holders.update(summary(20.0), STALE, 20.0)
    assert holders.standing() == {("n1", "team/idle"): 2}


def test_stale_data_is_never_idle() -> None:
    holders = IdleHolders(WINDOW)
    holders.update(summary(0.0), STALE, 0.0)
    holders.update(summary(0.0), STALE, STALE)  # exactly stale_after old: still fresh
    assert holders.standing() == {("n1", "team/idle"): 2}
    holders.update(summary(0.0), STALE, STALE + 0.1)
    assert holders.standing() == {}
