"""Rules of decide/shortlist.py that a one-line change would break unseen (mutation testing): `best`
takes the snapshot's index where it has one (no node's summary read, nothing scored), the fast road
for spread and binpack without one, and the definition where those step aside (the pod's own
strategy and seed); the fast road's steps aside and its cut at the edges of each bound."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import pytest

from gpuextender.extender.decide import class_plan, shortlist
from gpuextender.extender.decide.fit_index import FitIndex
from gpuextender.extender.decide.snapshot import Candidates, Snapshot
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.inventory_view import InventoryView
from tests.extender.decide.test_shortlist import IDENTITY, NEUTRAL, NOW, fresh, snapshot


def rotated(names: list[str], seed: str) -> list[str]:
    """`names` in the order `best` cuts equal scores in: rotated by the pod's seed."""
    start = zlib.crc32(seed.encode()) % len(names)
    return names[start:] + names[:start]


def counting(summaries: dict[str, NodeSummary]) -> tuple[Callable[[str], NodeSummary | None], list[str]]:
    """A summary lookup that records every node it is asked for."""
    asked: list[str] = []

    def lookup(name: str) -> NodeSummary | None:
        asked.append(name)
        return summaries.get(name)

    return lookup, asked


def spy_on_scoring(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many nodes each class_plan.prioritize_with_classes call (the definition's scoring) was given."""
    scored: list[int] = []
    real = class_plan.prioritize_with_classes

    def spy(needed: int, candidates: Candidates, *rest: Any) -> Any:
        scored.append(len(candidates.names))
        return real(needed, candidates, *rest)

    monkeypatch.setattr(class_plan, "prioritize_with_classes", spy)
    return scored


# Four fresh 8-GPU nodes, each idle count once: spread keeps the most idle, binpack the fewest.
IDLE = {"a": 8, "b": 6, "c": 4, "d": 2}
SPREAD_BEST, BINPACK_BEST = ["a", "b"], ["d", "c"]


def fleet() -> dict[str, NodeSummary]:
    return {name: fresh(name, idle_gpus=idle) for name, idle in IDLE.items()}


def pod(strategy: str, seed: str = "seed", gpus: int = 1) -> PodRequest:
    return PodRequest("ns/p", gpus, IDENTITY, strategy, seed)


@pytest.mark.parametrize(("strategy", "kept"), [("spread", SPREAD_BEST), ("binpack", BINPACK_BEST)])
def test_with_an_index_the_shortlist_is_the_indexs_and_reads_no_summary(
    strategy: str, kept: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A class-neutral whole-GPU pod on a snapshot with an index: the index's ranking, the best
    first; no node's summary is looked up and nothing is scored (the road that skips 5,000 of each)."""
    summaries = fleet()
    lookup, asked = counting(summaries)
    known = Snapshot(lookup, InventoryView(), {}, NOW, DecisionPolicy(), fit_index=FitIndex(summaries))
    scored = spy_on_scoring(monkeypatch)
    names = list(summaries)
    assert shortlist.best(pod(strategy), names, 2, Candidates(names, {}), known, NEUTRAL) == kept
    assert asked == [] and scored == []


def test_where_the_index_steps_aside_the_definition_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """The random strategy has no ranking in the index (it answers None): the definition scores the
    passing nodes with the pod's seed, the same as without an index."""
    summaries = {f"n{i}": fresh(f"n{i}") for i in range(10)}
    names = list(summaries)
    with_index = Snapshot(summaries.get, InventoryView(), {}, NOW, DecisionPolicy(), fit_index=FitIndex(summaries))
    scored = spy_on_scoring(monkeypatch)
    got = shortlist.best(pod("random"), names, 3, Candidates(names, {}), with_index, NEUTRAL)
    assert got == shortlist.best(pod("random"), names, 3, Candidates(names, {}), snapshot(summaries), NEUTRAL)
    assert len(got) == 3 and scored == [10, 10]


@pytest.mark.parametrize(("strategy", "kept"), [("spread", SPREAD_BEST), ("binpack", BINPACK_BEST)])
def test_without_an_index_spread_and_binpack_take_the_fast_road(
    strategy: str, kept: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every passing node a fresh fit, no index: the fast road's cut by its own sort key, each node
    looked up once and nothing scored by the definition."""
    summaries = fleet()
    lookup, asked = counting(summaries)
    known = Snapshot(lookup, InventoryView(), {}, NOW, DecisionPolicy())
    scored = spy_on_scoring(monkeypatch)
    names = list(summaries)
    assert shortlist.best(pod(strategy), names, 2, Candidates(names, {}), known, NEUTRAL) == kept
    assert sorted(asked) == sorted(names) and scored == []


def test_without_any_agent_data_the_first_of_the_rotated_order_are_kept() -> None:
    """No node has agent data, each allocatable fits the pod: all score alike, so `best` keeps the
    first of the passing nodes rotated by the pod's seed."""
    names = [f"n{i}" for i in range(7)]
    known = snapshot({})
    allocatable = {name: 4 for name in names}
    for seed in ("a", "b", "c"):
        got = shortlist.best(pod("spread", seed, gpus=2), names, 3, Candidates(names, allocatable), known, NEUTRAL)
        assert got == rotated(names, seed)[:3]


def test_where_the_fast_road_steps_aside_the_definition_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """One passing node without agent data beside fresh ones: the fast road steps aside and the
    definition scores them (a list, never None)."""
    summaries = fleet()
    names = [*summaries, "unknown"]
    known = snapshot(summaries)
    scored = spy_on_scoring(monkeypatch)
    got = shortlist.best(pod("spread"), names, 2, Candidates(names, {"unknown": 8}), known, NEUTRAL)
    assert got == SPREAD_BEST and scored == [5]


@pytest.mark.parametrize("seed", ["s1", "s2", "s3"])
def test_the_definition_scores_with_the_pods_strategy_and_seed(seed: str) -> None:
    """The random strategy (the definition's road): the pod's own seed picks the nodes, as
    best_by_score with that seed over the rotated order does."""
    summaries = {f"n{i}": fresh(f"n{i}") for i in range(12)}
    names = list(summaries)
    known = snapshot(summaries)
    order = rotated(names, seed)
    want = shortlist.best_by_score(1, order, Candidates(order, {}), known, NEUTRAL, "random", seed, 4)
    assert shortlist.best(pod("random", seed), names, 4, Candidates(names, {}), known, NEUTRAL) == want
    spread = shortlist.best_by_score(1, order, Candidates(order, {}), known, NEUTRAL, "spread", seed, 4)
    assert want != spread  # (the strategy matters here: equal nodes would keep the first four)


def test_the_definition_with_the_random_strategy_depends_on_the_seed() -> None:
    """best_by_score hands the seed on to prioritize: the same twelve equal nodes in the same order
    give each seed its own random pick."""
    summaries = {f"n{i}": fresh(f"n{i}") for i in range(12)}
    names = list(summaries)
    known = snapshot(summaries)
    picks = {
        tuple(shortlist.best_by_score(1, names, Candidates(names, {}), known, NEUTRAL, "random", seed, 3))
        for seed in ("s1", "s2", "s3")
    }
    assert len(picks) == 3


def test_the_fast_road_steps_aside_for_a_pod_of_no_whole_gpus() -> None:
    """Needed 0 (a MIG-only pod): rank_nodes scores every node 0, so the fast road's keys would not
    order the scores; it leaves it to the definition."""
    summaries = fleet()
    assert shortlist._best_fresh(0, list(summaries), {}, snapshot(summaries), "spread", 2) is None


def test_on_single_gpu_nodes_the_fast_road_scores_on_their_own_scale() -> None:
    """Only 1-GPU nodes: C = 1, so 15 % apart already scores apart (on C = 2 they would tie and the
    first of the order would be kept): the idler node, as the definition keeps."""
    summaries = {
        name: fresh(name, gpu_count=1, healthy_gpus=1, idle_gpus=1, mean_utilization=u, quality=(0, 0))
        for name, u in (("x", 15.0), ("y", 0.0))
    }
    names = list(summaries)
    known = snapshot(summaries)
    assert shortlist._best_fresh(1, names, {}, known, "spread", 1) == ["y"]
    assert shortlist.best_by_score(1, names, Candidates(names, {}), known, NEUTRAL, "spread", "s", 1) == ["y"]


def test_with_several_classes_a_best_class_key_under_one_still_scores_by_its_value() -> None:
    """Binpack on 1-GPU nodes, two quality classes: in the best class x (idle, 50 % busy: v = 0.5)
    scores above z (v = 0), which y of the worse class is below; keep 1 is x, as the definition keeps."""
    one_gpu = {"gpu_count": 1, "healthy_gpus": 1, "idle_gpus": 1}
    summaries = {
        "z": fresh("z", mean_utilization=0.0, quality=(0, 0), **one_gpu),
        "x": fresh("x", mean_utilization=50.0, quality=(0, 0), **one_gpu),
        "y": fresh("y", mean_utilization=0.0, quality=(0, 2), **one_gpu),
    }
    names = list(summaries)
    known = snapshot(summaries)
    assert shortlist._best_fresh(1, names, {}, known, "binpack", 1) == ["x"]
    assert shortlist.best_by_score(1, names, Candidates(names, {}), known, NEUTRAL, "binpack", "s", 1) == ["x"]
