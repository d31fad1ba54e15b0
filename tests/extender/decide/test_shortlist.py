"""decide/shortlist.py: the fast road to the shortlist gives the very set the one definition (every
passing node scored by class_plan.prioritize_with_classes, cut by score, ties in rotated order)
gives, on generated fleets: ties at the cut, one and several quality classes, utilization at 0, 100
and unknown, spread and binpack, keep at 1, at n - 1 and past n. And it steps aside (None) whenever
a node does not fit on fresh data, so the general road decides those."""

from __future__ import annotations

import random

import pytest

from gpuextender.extender.decide import shortlist
from gpuextender.extender.decide.class_plan import ClassPlan
from gpuextender.extender.decide.snapshot import Candidates, Snapshot
from gpuextender.extender.model.ome.pod_intent import PodIdentity
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.inventory_view import InventoryView

NOW = 1000.0
STALE_AFTER = DecisionPolicy().stale_after_s
NEUTRAL = ClassPlan(False)


def summary(name: str, rng: random.Random, needed: int, classes: int) -> NodeSummary:
    count = rng.randint(needed, 16)
    idle = rng.randint(needed, count)
    utilization = rng.choice([None, 0.0, 100.0, 50.0, 49.5, rng.uniform(0, 100), float(rng.randint(0, 100))])
    # A quality class per set size; the ones at `needed` span `classes` values.
    quality = tuple(rng.randrange(classes) * 2 if k == needed else rng.randrange(10) for k in range(idle + 1))
    return NodeSummary(
        node=name,
        gpu_count=count,
        healthy_gpus=idle,
        idle_gpus=idle,
        mean_utilization=utilization,
        node_error="",
        sequence=1,
        sample_time=0.0,
        received_at=NOW - rng.choice([0.0, STALE_AFTER, rng.uniform(0, STALE_AFTER)]),  # at the bound: fresh
        quality=quality,
    )


def fresh(name: str, **changes: object) -> NodeSummary:
    fields: dict[str, object] = dict(
        node=name,
        gpu_count=8,
        healthy_gpus=8,
        idle_gpus=8,
        mean_utilization=0.0,
        node_error="",
        sequence=1,
        sample_time=0.0,
        received_at=NOW,
        quality=(0,) * 9,
    )
    fields.update(changes)
    return NodeSummary(**fields)  # type: ignore[arg-type]


def snapshot(summaries: dict[str, NodeSummary]) -> Snapshot:
    return Snapshot(summaries.get, InventoryView(), {}, NOW, DecisionPolicy())


def by_the_definition(
    needed: int, names: list[str], known: Snapshot, strategy: str, keep: int, plan: ClassPlan = NEUTRAL
) -> set[str]:
    return set(shortlist.best_by_score(needed, names, Candidates(names, {}), known, plan, strategy, "seed", keep))


@pytest.mark.parametrize("strategy", ["spread", "binpack"])
@pytest.mark.parametrize("classes", [1, 2, 4])
def test_the_fast_road_keeps_the_set_the_definition_keeps(strategy: str, classes: int) -> None:
    rng = random.Random(f"{strategy}-{classes}")
    taken = 0
    for case in range(150):
        needed = rng.randint(1, 4)
        n = rng.randint(1, 60)
        # Few distinct readings: many equal scores, so the cut often falls inside a run of ties.
        summaries = {f"n{i}": summary(f"n{i}", rng, needed, classes) for i in range(n)}
        names = list(summaries)
        rng.shuffle(names)
        known = snapshot(summaries)
        for keep in {1, max(1, n - 1), n, n + 1, rng.randint(1, n)}:
            fast = shortlist._best_fresh(needed, names, {}, known, strategy, keep)
            assert fast is not None, case
            assert len(fast) == min(keep, n)
            assert set(fast) == by_the_definition(needed, names, known, strategy, keep), (case, keep)
            taken += 1
    assert taken >= 150 * 3


@pytest.mark.parametrize("strategy", ["spread", "binpack"])
def test_without_any_agent_data_all_tie_and_the_first_are_kept(strategy: str) -> None:
    """Every node fits on assumed data (idle = needed, 0 %): one score for all, so the first `keep`
    of the order given, on both roads; allocatable differs per node and changes nothing."""
    names = [f"n{i}" for i in (3, 9, 0, 4, 1, 8, 2, 7, 5, 6)]
    known = Snapshot({}.get, InventoryView(), {}, NOW, DecisionPolicy())
    allocatable = {name: 2 + i for i, name in enumerate(names)}
    for keep in (1, 4, 9, 10, 11):
        assert shortlist._best_fresh(2, names, allocatable, known, strategy, keep) == names[:keep]
        got = shortlist.best_by_score(2, names, Candidates(names, allocatable), known, NEUTRAL, strategy, "s", keep)
        assert set(got) == set(names[:keep])
    # One node that does not fit 2 GPUs (it would not have passed): the general road decides.
    assert shortlist._best_fresh(2, names, {**allocatable, "n5": 1}, known, strategy, 3) is None


def test_equal_scores_are_cut_in_the_order_given() -> None:
    """Ten equal nodes, keep 3: the first three of the (already rotated) order, on both roads."""
    summaries = {f"n{i}": fresh(f"n{i}") for i in range(10)}  # identical readings
    names = [f"n{i}" for i in (4, 7, 1, 0, 2, 3, 5, 6, 8, 9)]
    known = snapshot(summaries)
    assert shortlist._best_fresh(1, names, {}, known, "spread", 3) == ["n4", "n7", "n1"]
    assert by_the_definition(1, names, known, "spread", 3) == {"n4", "n7", "n1"}


@pytest.mark.parametrize(
    "odd",
    [
        None,  # no data: assumed
        fresh("odd", received_at=NOW - STALE_AFTER - 0.001),  # just past fresh
        fresh("odd", idle_gpus=1),  # does not fit 2 GPUs (its quality table is full length)
        fresh("odd", node_error="NVML gone"),
        fresh("odd", quality=(0,)),  # quality not in the per-report table for 2 GPUs: computed elsewhere
    ],
    ids=["no-data", "stale-by-a-millisecond", "does-not-fit", "nvml-error", "past-quality-table"],
)
def test_the_fast_road_steps_aside_unless_every_node_fits_on_fresh_data(odd: NodeSummary | None) -> None:
    summaries = {f"n{i}": fresh(f"n{i}") for i in range(5)}
    known_ok = snapshot(summaries)
    assert shortlist._best_fresh(2, list(summaries), {}, known_ok, "spread", 2) is not None
    if odd is not None:
        summaries["odd"] = odd
    known = Snapshot(lambda n: summaries.get(n) if n != "odd" else odd, InventoryView(), {}, NOW, DecisionPolicy())
    assert shortlist._best_fresh(2, [*list(summaries)[:5], "odd"], {}, known, "spread", 2) is None


def test_stale_at_exactly_the_bound_is_still_fresh() -> None:
    summaries = {f"n{i}": fresh(f"n{i}", received_at=NOW - STALE_AFTER) for i in range(3)}
    assert shortlist._best_fresh(2, list(summaries), {}, snapshot(summaries), "spread", 2) is not None


IDENTITY = PodIdentity("ns", "", "", "", "", "")


@pytest.mark.parametrize(
    "strategy, plan",
    [("random", NEUTRAL), ("cost", NEUTRAL), ("spread", ClassPlan(True, ("a",), explicit=True))],
    ids=["random", "cost", "class-plan"],
)
def test_other_strategies_and_class_plans_take_the_definition(
    strategy: str, plan: ClassPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only spread and binpack, class-neutral, take the fast road."""
    called: list[str] = []
    monkeypatch.setattr(shortlist, "_best_fresh", lambda *a: called.append("fast"))
    summaries = {f"n{i}": fresh(f"n{i}") for i in range(5)}
    names = list(summaries)
    pod = PodRequest("ns/p", 2, IDENTITY, strategy, "seed")
    assert len(shortlist.best(pod, names, 2, Candidates(names, {}), snapshot(summaries), plan)) == 2
    assert called == []
    spread = PodRequest("ns/p", 2, IDENTITY, "spread", "seed")
    shortlist.best(spread, names, 2, Candidates(names, {}), snapshot(summaries), NEUTRAL)
    assert called == ["fast"]
