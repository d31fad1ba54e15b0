"""SchedulerApi's readiness under --readiness-grace, in-process with a fake clock."""

from __future__ import annotations

from collections.abc import Callable

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources, listed
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from tests.extender.builders import gpu, report


def api_with(
    grace: float, gpus: dict[str, int], inventory_ready: Callable[[], bool] = listed
) -> tuple[SchedulerApi, GpuState, list[float]]:
    state = GpuState(IdleRule())
    now = [100.0]
    view = InventoryView(version=1, allocatable_gpus=gpus)
    api = SchedulerApi(
        state,
        ExtenderMetrics(state),
        ApiSettings(DecisionPolicy(10.0, "fail-open", "pass-all"), readiness_grace_s=grace),
        inventory=lambda: view,
        clock=lambda: now[0],
        sources=ClusterSources(inventory_ready=inventory_ready),
    )
    api.set_serving(True)
    return api, state, now


def test_waits_for_gpu_nodes_then_stays_ready() -> None:
    api, state, now = api_with(30.0, {"a": 8, "b": 8, "cpu": 0})
    assert api.not_ready_reason() == (
        "waiting for agent data: 2 of 2 GPU node(s) not reported yet (--readiness-grace, 30s left)"
    )
    state.ingest(report("a", [gpu(0)]), now[0])
    now[0] += 10
    assert api.not_ready_reason() == (
        "waiting for agent data: 1 of 2 GPU node(s) not reported yet (--readiness-grace, 20s left)"
    )
    state.ingest(report("b", [gpu(0)]), now[0])
    assert api.not_ready_reason() is None
    state.forget_older_than(now[0] + 1)  # the data goes away later: readiness does not flap
    assert api.not_ready_reason() is None


def test_the_grace_ends_the_wait_and_zero_disables_it() -> None:
    api, _, now = api_with(30.0, {"a": 8})
    assert api.not_ready_reason() is not None
    now[0] += 30
    assert api.not_ready_reason() is None
    assert api_with(0.0, {"a": 8})[0].not_ready_reason() is None


def test_inventory_and_start_come_first() -> None:
    is_listed = [True]
    api, _, _ = api_with(30.0, {"a": 8}, lambda: is_listed[0])
    api.set_serving(False)
    assert api.not_ready_reason() == "starting"
    api.set_serving(True)
    is_listed[0] = False
    assert api.not_ready_reason() == "waiting for the first full inventory list"
