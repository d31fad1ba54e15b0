"""/explain with no candidates named (a Pod manifest, the fleet page's form): every node the
inventory or the agents know, sorted by name, at most EXPLAIN_MAX_CANDIDATES of them."""

from __future__ import annotations

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import EXPLAIN_MAX_CANDIDATES, ExtenderArgs
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from tests.extender.builders import gpu, report

NOW = 1000.0
POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


def api_knowing(agent_nodes: int, inventory_nodes: tuple[str, ...] = ()) -> SchedulerApi:
    state = GpuState(IdleRule())
    for i in range(agent_nodes):
        state.ingest(report(f"n{i:05d}", [gpu(0, 0, 1)]), NOW)
    view = InventoryView(node_labels={name: {} for name in inventory_nodes})
    return SchedulerApi(
        state, ExtenderMetrics(state), ApiSettings(DecisionPolicy()), inventory=lambda: view, clock=lambda: NOW
    )


def test_nodes_of_the_inventory_and_of_the_agents_are_both_candidates() -> None:
    answer = api_knowing(2, ("a-no-agent", "n00001")).explain(ExtenderArgs(POD, None, None))
    assert answer["candidates"] == {"source": "every known node", "known": 3, "explained": 3}
    assert {n["node"]: n["data"] for n in answer["nodes"]} == {
        "n00000": "fresh",
        "n00001": "fresh",
        "a-no-agent": "none",
    }


@pytest.mark.parametrize("known", [EXPLAIN_MAX_CANDIDATES, EXPLAIN_MAX_CANDIDATES + 1])
def test_at_most_one_explain_worth_of_nodes(known: int) -> None:
    answer = api_knowing(known).explain(ExtenderArgs(POD, None, None))
    assert answer["candidates"] == {"source": "every known node", "known": known, "explained": EXPLAIN_MAX_CANDIDATES}
    names = {n["node"] for n in answer["nodes"]}
    assert len(names) == EXPLAIN_MAX_CANDIDATES and f"n{EXPLAIN_MAX_CANDIDATES - 1:05d}" in names
    assert f"n{EXPLAIN_MAX_CANDIDATES:05d}" not in names  # the first by name are kept


def test_named_candidates_are_explained_as_given() -> None:
    answer = api_knowing(3).explain(ExtenderArgs(POD, ["n00002"], None))
    assert "candidates" not in answer and [n["node"] for n in answer["nodes"]] == ["n00002"]


def test_each_healthy_gpu_says_which_reading_judged_it() -> None:
    api = api_knowing(0, ("no-agent",))
    spinning = gpu(0, 100, 1)
    spinning.gpm.sm_active_percent = 0.754
    lost = gpu(2, None, None, healthy=False)
    api.state.ingest(report("mixed", [spinning, gpu(1, 100, 1), lost]), NOW)
    answer = api.explain(ExtenderArgs(POD, ["mixed", "no-agent"], None))
    rules = {n["node"]: n["gpuIdleRule"] for n in answer["nodes"]}
    assert rules == {
        "mixed": [
            {"gpu": 0, "judgedBy": "sm-active", "smActivePercent": 0.75},
            {"gpu": 1, "judgedBy": "utilization", "utilizationPercent": 100},
        ],  # the unhealthy GPU is judged by its health, not by a reading
        "no-agent": None,  # no report: nothing judged
    }
