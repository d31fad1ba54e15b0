"""The shortlist (issue 13): filter answers at most --shortlist of the nodes that pass a GPU pod,
the best by prioritize's score; the others pass but are left out of the answer (never failed),
and explain says which ones. Bounds at exactly the limit, on both sides."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import ExtenderArgs, parse_extender_args
from gpuextender.extender.settings import DEFAULT_SHORTLIST, ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from tests.extender.builders import gpu, report

NOW = 1000.0


def api_with(idle_per_node: dict[str, int], shortlist: int) -> SchedulerApi:
    """Nodes of 8 GPUs, the given number idle (the rest at 90 %)."""
    state = GpuState(IdleRule())
    for name, idle in idle_per_node.items():
        gpus = [gpu(i, 0, 1) for i in range(idle)] + [gpu(i, 90, 80) for i in range(idle, 8)]
        state.ingest(report(name, gpus), NOW)
    return SchedulerApi(
        state, ExtenderMetrics(state), ApiSettings(DecisionPolicy(), shortlist=shortlist), clock=lambda: NOW
    )


def args(names: list[str], gpus: int = 1, uid: str = "uid-1") -> ExtenderArgs:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": uid},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }
    return parse_extender_args(json.dumps({"Pod": pod, "NodeNames": names}).encode())


def fleet(n: int) -> dict[str, int]:
    """n nodes with 1..8 idle GPUs, cycling: the best have 8."""
    return {f"n{i:03d}": 1 + i % 8 for i in range(n)}


@pytest.mark.parametrize("passing, cut", [(4, False), (5, True)])
def test_cut_only_above_the_limit(passing: int, cut: bool) -> None:
    """Exactly `shortlist` passing nodes are all answered; one more and the worst is left out."""
    nodes = {f"n{i}": 1 + i for i in range(passing)} | {"busy": 0}
    api = api_with(nodes, shortlist=4)
    answer = api.filter(args(list(nodes)))
    assert set(answer["FailedNodes"]) == {"busy"}  # a held-back node is never failed
    if cut:
        assert answer["NodeNames"] == ["n4", "n3", "n2", "n1"]  # the best first; n0 (1 idle GPU) is the worst
    else:
        assert answer["NodeNames"] == [f"n{i}" for i in range(passing)]
    metrics = api.metrics.registry
    held = metrics.get_sample_value("gpu_extender_filter_nodes_total", {"result": "held_back"})
    assert (held or 0) == (1 if cut else 0)
    assert metrics.get_sample_value("gpu_extender_filter_nodes_total", {"result": "passed"}) == 4 if cut else passing


def test_the_best_are_kept_best_first_and_prioritize_sees_only_them() -> None:
    nodes = fleet(40)
    api = api_with(nodes, shortlist=10)
    names = list(nodes)
    answer = api.filter(args(names))
    kept = answer["NodeNames"]
    # 5 nodes have 8 idle, 5 have 7: the 10 best, the best first (kube-scheduler reads them as a set)
    assert len(kept) == len(set(kept)) == 10 and [nodes[n] for n in kept] == [8] * 5 + [7] * 5
    scores = {s["Host"]: s["Score"] for s in api.prioritize(args(kept))}
    assert {n for n, s in scores.items() if s > 0} == {n for n in kept if nodes[n] == 8}


def test_ties_are_cut_differently_per_pod() -> None:
    """40 equal nodes, 10 kept: which ten depends on the pod, so equal nodes share the pods."""
    nodes = {f"n{i:02d}": 8 for i in range(40)}
    api = api_with(nodes, shortlist=10)
    kept = {frozenset(api.filter(args(list(nodes), uid=f"uid-{k}"))["NodeNames"]) for k in range(8)}
    assert all(len(k) == 10 for k in kept)
    assert len(kept) > 1
    again = api.filter(args(list(nodes), uid="uid-3"))["NodeNames"]
    assert again == api.filter(args(list(nodes), uid="uid-3"))["NodeNames"]  # repeatable per pod


def test_zero_answers_every_passing_node_and_pods_without_gpus_are_never_cut() -> None:
    nodes = fleet(30)
    assert len(api_with(nodes, shortlist=0).filter(args(list(nodes)))["NodeNames"]) == 30
    assert len(api_with(nodes, shortlist=5).filter(args(list(nodes), gpus=0))["NodeNames"]) == 30


def test_explain_shows_the_held_back_nodes_as_passing() -> None:
    nodes = {"a": 8, "b": 2, "c": 0}
    why = api_with(nodes, shortlist=1).explain(args(list(nodes)))
    rows = {r["node"]: r for r in why["nodes"]}
    assert why["shortlist"] == 1
    assert rows["a"]["result"] == "pass" and rows["a"]["shortlisted"] is True
    assert rows["b"]["result"] == "pass" and rows["b"]["shortlisted"] is False and rows["b"]["reasonCode"] is None
    assert rows["c"]["result"] == "fail" and rows["c"]["shortlisted"] is None
    assert api_with(nodes, shortlist=0).explain(args(list(nodes)))["shortlist"] is None


def test_the_flag() -> None:
    assert build_config([]).api.shortlist == DEFAULT_SHORTLIST == 100
    assert build_config(["--shortlist", "0"]).api.shortlist == 0
    with pytest.raises(ConfigError, match="--shortlist -1"):
        build_config(["--shortlist", "-1"])


def test_explain_shows_the_very_cut_filter_answers() -> None:
    """A failing 16-GPU node makes explain's scale (every candidate) coarser than the shortlist's
    (the passing nodes): explain still marks exactly the nodes filter answered."""
    state = GpuState(IdleRule())
    names = []
    for i in range(30):
        idle = 1 + i % 8
        gpus = [gpu(j, i % 25, 1) for j in range(idle)] + [gpu(j, 90, 80) for j in range(idle, 8)]
        state.ingest(report(f"n{i:02d}", gpus), NOW)
        names.append(f"n{i:02d}")
    state.ingest(report("big", [gpu(j, 90, 80) for j in range(16)]), NOW)  # fails: no idle GPU
    api = SchedulerApi(state, ExtenderMetrics(state), ApiSettings(DecisionPolicy(), shortlist=7), clock=lambda: NOW)
    for uid in ("a", "b", "c"):
        answered = api.filter(args([*names, "big"], uid=uid))["NodeNames"]
        rows = api.explain(args([*names, "big"], uid=uid))["nodes"]
        assert len(answered) == 7
        assert {r["node"] for r in rows if r["shortlisted"]} == set(answered)
