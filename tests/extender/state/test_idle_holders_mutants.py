"""Rules of the idle holders (state/idle_holders.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: a node none of whose held GPUs reads
idle asks for nothing, a pod holding no unit is never a holder, a stale node's pods start over, and
the reclaim outcomes and status start as the metrics name them."""

from __future__ import annotations

from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.idle_holders import OUTCOMES, IdleHolders, ReclaimStatus

WINDOW = 10.0
STALE = 30.0


def summary(
    received_at: float, pods: tuple[tuple[str, int, int], ...], allocated_idle: int = 2, node: str = "n1"
) -> dict[str, NodeSummary]:
    s = NodeSummary(
        node=node,
        gpu_count=8,
        healthy_gpus=8,
        idle_gpus=0,
        mean_utilization=None,
        node_error="",
        sequence=1,
        sample_time=0.0,
        received_at=received_at,
        free_gpus=0,
        allocated_idle_gpus=allocated_idle,
        pod_units=pods,
    )
    return {node: s}


def test_a_node_with_no_held_gpu_idle_asks_for_nothing() -> None:
    holders = IdleHolders(WINDOW)
    holders.update(summary(0.0, (("team/a", 1, 1),), allocated_idle=0), STALE, 0.0)
    holders.update(summary(10.0, (("team/a", 1, 1),), allocated_idle=0), STALE, 10.0)
    assert holders.standing() == {}


def test_a_node_asking_nothing_does_not_stop_the_nodes_after_it() -> None:
    holders = IdleHolders(WINDOW)
    assert holders.window_s == WINDOW
    for now in (0.0, WINDOW):
        nodes = {**summary(now, (), allocated_idle=0, node="n0"), **summary(now, (("team/a", 1, 1),))}
        holders.update(nodes, STALE, now)
    assert holders.standing() == {("n1", "team/a"): 1}


def test_a_pod_holding_no_unit_is_never_a_holder() -> None:
    holders = IdleHolders(WINDOW)
    pods = (("team/none", 0, 0), ("team/a", 1, 1))
    holders.update(summary(0.0, pods), STALE, 0.0)
    holders.update(summary(10.0, pods), STALE, 10.0)
    assert holders.standing() == {("n1", "team/a"): 1}


def test_a_node_gone_stale_starts_over_when_fresh_again() -> None:
    holders = IdleHolders(WINDOW)
    pods = (("team/a", 1, 1),)
    holders.update(summary(0.0, pods), STALE, 0.0)
    holders.update(summary(0.0, pods), STALE, STALE + 1.0)  # stale
    holders.update(summary(STALE + 2.0, pods), STALE, STALE + 2.0)
    holders.update(summary(STALE + 3.0, pods), STALE, STALE + 2.0 + WINDOW - 1.0)
    assert holders.standing() == {}
    holders.update(summary(STALE + 3.0, pods), STALE, STALE + 2.0 + WINDOW)
    assert holders.standing() == {("n1", "team/a"): 1}


def test_reclaim_outcomes_and_status_start_as_the_metrics_name_them() -> None:
    assert OUTCOMES == ("evicted", "dry_run", "refused_by_pdb", "gone", "failed")
    status = ReclaimStatus()
    assert status.mode == "off" and status.idle_pods == 0
    assert status.evictions == {"evicted": 0, "dry_run": 0, "refused_by_pdb": 0, "gone": 0, "failed": 0}
