"""decide/fit_index.py: the index gives filter's very outcome (whole_gpus.filter_nodes: passes,
failures with their reasons in request order, assumed passes, the fallback) and the shortlist's very
set (shortlist.best_by_score) on generated fleets, before and after nodes change, go stale or go
away; and it steps aside (None) where the definition must decide."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from gpuextender.extender.decide import class_plan, fit_index, shortlist, whole_gpus
from gpuextender.extender.decide.class_plan import ClassPlan
from gpuextender.extender.decide.fit_index import IDLE_ASKS, MAX_SIZES, FitIndex
from gpuextender.extender.decide.snapshot import Candidates, Snapshot
from gpuextender.extender.model.ome.pod_intent import PodIdentity
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_summary import QUALITY_SIZES, NodeSummary
from gpuextender.extender.state.inventory_view import InventoryView

NOW = 1000.0
STALE_AFTER = DecisionPolicy().stale_after_s
NEUTRAL = ClassPlan(False)
IDENTITY = PodIdentity("ns", "", "", "", "", "")
POLICIES = [
    DecisionPolicy(),
    DecisionPolicy(stale_policy="fail-closed"),
    DecisionPolicy(no_fit_policy="reject"),
]


def node(name: str, rng: random.Random, classes: int = 3) -> NodeSummary:
    """A node of any kind: fitting or not for small pods, broken, partly held, bound pods, MIG, old."""
    count = rng.randint(0, 12)
    healthy = rng.randint(0, count)
    free = rng.choice([None, rng.randint(0, healthy)])
    idle = rng.randint(0, healthy if free is None else free)
    return NodeSummary(
        node=name,
        gpu_count=count,
        healthy_gpus=healthy,
        idle_gpus=idle,
        mean_utilization=rng.choice([None, 0.0, 100.0, 50.0, rng.uniform(0, 100), float(rng.randint(0, 100))]),
        node_error=rng.choice(["", "", "", "", "NVML: driver not loaded"]),
        sequence=1,
        sample_time=0.0,
        received_at=NOW - rng.choice([0.0, STALE_AFTER, STALE_AFTER + 0.001, rng.uniform(0, 3 * STALE_AFTER)]),
        free_gpus=free,
        degraded_idle_gpus=rng.randint(0, idle),
        bound_pod_units=rng.choice([0, 0, 1, 2]),
        mig_gpus=rng.choice([0, 0, 1]),
        set_tiers=rng.choice([(), (0, 0, 1, 2)]),
        quality=tuple(rng.randrange(classes) * 2 for _ in range(idle + 1)),
    )


def fleet(rng: random.Random, n: int, classes: int = 3) -> dict[str, NodeSummary]:
    return {f"n{i}": node(f"n{i}", rng, classes) for i in range(n)}


def candidates(rng: random.Random, summaries: dict[str, NodeSummary]) -> list[str]:
    """Some or all of the nodes, some no agent reports, now and then one named twice."""
    names = [name for name in summaries if rng.random() < 0.9] + [f"x{i}" for i in range(rng.randint(0, 3))]
    if names and rng.random() < 0.1:
        names.append(rng.choice(names))
    rng.shuffle(names)
    return names


def assert_same_outcome(
    index: FitIndex,
    summaries: dict[str, NodeSummary],
    k: int,
    names: list[str],
    allocatable: dict[str, int],
    now: float,
    policy: DecisionPolicy,
) -> None:
    got = index.filter(k, names, allocatable, now, policy)
    want = whole_gpus.filter_nodes(k, names, allocatable, summaries.get, now, policy)
    assert got.passed == want.passed
    assert list(got.failed.items()) == list(want.failed.items())  # the reasons, in request order
    assert got.assumed == want.assumed
    assert got.fallback == want.fallback


@pytest.mark.parametrize("policy", POLICIES, ids=["fail-open", "fail-closed", "reject"])
def test_filter_gives_the_outcome_filter_nodes_gives(policy: DecisionPolicy) -> None:
    rng = random.Random(f"filter-{policy}")
    for case in range(120):
        summaries = fleet(rng, rng.randint(0, 40))
        index = FitIndex(summaries)
        allocatable = {name: rng.randint(0, 8) for name in summaries if rng.random() < 0.5}
        allocatable.update({f"x{i}": rng.randint(0, 8) for i in range(3) if rng.random() < 0.5})
        for _ in range(4):
            names = candidates(rng, summaries)
            now = NOW + rng.choice([0.0, 0.0, rng.uniform(0, STALE_AFTER), -rng.uniform(0, STALE_AFTER)])
            assert_same_outcome(index, summaries, rng.randint(1, 6), names, allocatable, now, policy), case


def change(rng: random.Random, summaries: dict[str, NodeSummary], index: FitIndex, count: int) -> None:
    """`count` nodes get a new report, go away or arrive, each heard by the index as GpuState tells it."""
    for _ in range(count):
        name = f"n{rng.randint(0, 50)}"
        if name in summaries and rng.random() < 0.2:
            del summaries[name]
        elif name in summaries and rng.random() < 0.3:  # a heartbeat: the same numbers, a newer report
            summaries[name] = replace(summaries[name], received_at=summaries[name].received_at + 1.0)
        else:
            summaries[name] = node(name, rng)
        index.changed(name)


@pytest.mark.parametrize("changes", [1, 3, 40], ids=["one", "few", "most (sizes rebuilt)"])
def test_after_changes_the_outcome_is_still_the_definitions(changes: int) -> None:
    rng = random.Random(f"changes-{changes}")
    policy = DecisionPolicy()
    for _ in range(40):
        summaries = fleet(rng, 40)
        index = FitIndex(summaries)
        now = NOW
        for _ in range(6):
            for k in (1, 2, rng.randint(1, 6)):  # sizes kept and updated, one maybe new
                assert_same_outcome(index, summaries, k, candidates(rng, summaries), {}, now, policy)
            change(rng, summaries, index, changes)
            now += rng.choice([0.0, 1.0, STALE_AFTER / 2])  # nodes go stale as time passes


def _fields(s: NodeSummary) -> dict[str, object]:
    return {name: getattr(s, name) for name in NodeSummary.__dataclass_fields__}


def test_stale_exactly_at_the_bound_is_fresh_and_just_past_it_is_not() -> None:
    base = _fields(node("a", random.Random(3)))
    base.update(idle_gpus=2, healthy_gpus=2, gpu_count=2, free_gpus=None, node_error="", bound_pod_units=0)
    base.update(mig_gpus=0, quality=(0, 0, 0))
    summaries = {
        "edge": NodeSummary(**{**base, "node": "edge", "received_at": NOW - STALE_AFTER}),
        "past": NodeSummary(**{**base, "node": "past", "received_at": NOW - STALE_AFTER - 0.001}),
    }
    index = FitIndex(summaries)
    outcome = index.filter(2, ["edge", "past"], {}, NOW, DecisionPolicy(stale_policy="fail-closed"))
    assert outcome.passed == ["edge"]
    assert list(outcome.failed) == ["past"]
    assert index.stale(NOW, STALE_AFTER) == {"past"}


def known(summaries: dict[str, NodeSummary], index: FitIndex | None, now: float = NOW) -> Snapshot:
    return Snapshot(summaries.get, InventoryView(), {}, now, DecisionPolicy(), fit_index=index)


def by_the_definition(
    k: int, passed: list[str], start: int, summaries: dict[str, NodeSummary], strategy: str, keep: int
) -> set[str]:
    rotated = passed[start:] + passed[:start]
    return set(
        shortlist.best_by_score(
            k, rotated, Candidates(rotated, {}), known(summaries, None), NEUTRAL, strategy, "seed", keep
        )
    )


@pytest.mark.parametrize("strategy", ["spread", "binpack"])
@pytest.mark.parametrize("classes", [1, 2, 4])
def test_best_keeps_the_set_the_definition_keeps(strategy: str, classes: int) -> None:
    rng = random.Random(f"best-{strategy}-{classes}")
    policy = DecisionPolicy(no_fit_policy="reject")
    answered = 0
    for case in range(150):
        summaries = fleet(rng, rng.randint(2, 60), classes)
        index = FitIndex(summaries)
        for round_ in range(3):
            k = rng.randint(1, 4)
            names = [n for n in summaries if rng.random() < (1.0 if round_ == 0 else 0.7)]  # all, or some
            rng.shuffle(names)
            outcome = index.filter(k, names, {}, NOW, policy)
            passed = outcome.passed
            if not passed or outcome.assumed:  # no fresh fit: nothing the index ranks
                continue
            for keep in {1, max(1, len(passed) - 1), len(passed), len(passed) + 1, rng.randint(1, len(passed))}:
                start = rng.randrange(len(passed))
                want = by_the_definition(k, passed, start, summaries, strategy, keep)
                score = dict(whole_gpus.prioritize(k, passed, {}, summaries.get, NOW, policy, strategy))
                for given in (passed, list(passed)):  # as filter answered it, and a copy it did not vouch for
                    got = index.best(k, given, start, keep, strategy, NOW, STALE_AFTER)
                    assert got is not None, case
                    assert len(got) == len(set(got)) == min(keep, len(passed))
                    assert set(got) == want, (case, keep, start)
                    assert [score[n] for n in got] == sorted((score[n] for n in got), reverse=True)  # best first
                answered += 1
            change(rng, summaries, index, 2)
    assert answered >= 300


def fitting(name: str, q: int = 0, idle: int = 8, received_at: float = NOW) -> NodeSummary:
    return NodeSummary(
        node=name,
        gpu_count=max(8, idle),  # idle <= healthy <= count, as every summary holds
        healthy_gpus=max(8, idle),
        idle_gpus=idle,
        mean_utilization=10.0,
        node_error="",
        sequence=1,
        sample_time=0.0,
        received_at=received_at,
        quality=(q,) * (idle + 1),
    )


@pytest.mark.parametrize(
    "odd",
    [
        lambda s: s.__setitem__("odd", fitting("odd", idle=1)),  # does not fit
        lambda s: s.__setitem__("odd", fitting("odd", received_at=NOW - STALE_AFTER - 1)),  # stale
        lambda s: s.pop("odd"),  # no data
    ],
    ids=["not-fitting", "stale", "no-data"],
)
def test_best_steps_aside_unless_every_node_given_fits_on_fresh_data(
    odd: Callable[[dict[str, NodeSummary]], object],
) -> None:
    summaries = {f"n{i}": fitting(f"n{i}") for i in range(6)} | {"odd": fitting("odd")}
    names = list(summaries)
    index = FitIndex(summaries)
    assert index.best(2, names, 0, 2, "spread", NOW, STALE_AFTER) is not None
    odd(summaries)
    index.changed("odd")
    assert index.best(2, names, 0, 2, "spread", NOW, STALE_AFTER) is None


def test_best_steps_aside_for_a_node_named_twice_other_strategies_and_sizes_out_of_range() -> None:
    summaries = {f"n{i}": fitting(f"n{i}") for i in range(6)}
    names = list(summaries)
    index = FitIndex(summaries)
    assert index.best(2, [*names, "n0"], 0, 2, "spread", NOW, STALE_AFTER) is None
    for strategy in ("random", "cost"):
        assert index.best(2, names, 0, 2, strategy, NOW, STALE_AFTER) is None
    assert not index.applies(0)
    assert index.applies(1)
    assert index.applies(QUALITY_SIZES - 1)
    assert not index.applies(QUALITY_SIZES)
    assert index.best(QUALITY_SIZES, names, 0, 2, "spread", NOW, STALE_AFTER) is None


def test_best_takes_up_to_ten_quality_classes_and_steps_aside_past_that() -> None:
    """With more classes than scores, the classes' scores would overlap: the definition decides."""
    for m, applies in ((whole_gpus.MAX_SCORE, True), (whole_gpus.MAX_SCORE + 1, False)):
        summaries = {f"n{q}": fitting(f"n{q}", q=q) for q in range(m)}
        names = list(summaries)
        got = FitIndex(summaries).best(2, names, 0, 3, "spread", NOW, STALE_AFTER)
        assert (got is not None) == applies
        if applies:
            assert set(got or ()) == by_the_definition(2, names, 0, summaries, "spread", 3) == {"n0", "n1", "n2"}


def test_ties_at_the_cut_are_taken_in_the_rotated_order() -> None:
    summaries = {f"n{i}": fitting(f"n{i}") for i in range(8)}
    names = [f"n{i}" for i in (4, 7, 1, 0, 6, 2, 5, 3)]
    index = FitIndex(summaries)
    assert set(index.best(2, names, 2, 3, "spread", NOW, STALE_AFTER) or ()) == {"n1", "n0", "n6"}
    assert set(index.best(2, names, 7, 3, "binpack", NOW, STALE_AFTER) or ()) == {"n3", "n4", "n7"}


def test_sizes_kept_are_bounded_and_one_in_use_is_never_dropped_for_another() -> None:
    """MAX_SIZES sizes kept; another size takes the least recently asked one's place only once that
    one has gone IDLE_ASKS asks unasked. Until then its calls take the definition (filter_nodes),
    with the same answer."""
    summaries = {f"n{i}": fitting(f"n{i}", idle=12) for i in range(4)}
    names = list(summaries)
    index = FitIndex(summaries)
    policy = DecisionPolicy()
    for k in range(1, MAX_SIZES + 1):  # asks 1..MAX_SIZES; size 1 last asked at ask 1
        assert index.filter(k, names, {}, NOW, policy) is not None
    assert list(index._sizes) == list(range(1, MAX_SIZES + 1))
    for _ in range(IDLE_ASKS - MAX_SIZES):  # up to ask IDLE_ASKS, all of size 2
        index.filter(2, names, {}, NOW, policy)
    new = MAX_SIZES + 1
    # Ask IDLE_ASKS + 1: size 1 unasked for exactly IDLE_ASKS asks: still kept, the new size refused.
    assert index.filter(new, names, {}, NOW, policy) is None
    # Ask IDLE_ASKS + 2: size 1 unasked for longer: dropped, the new size built and answering.
    scored = index.scores(new, names, "spread", NOW, STALE_AFTER)
    assert scored is not None and scored == whole_gpus.prioritize(new, names, {}, summaries.get, NOW, policy)
    assert new in index._sizes and 1 not in index._sizes and len(index._sizes) == MAX_SIZES
    assert index.filter(new, names, {}, NOW, policy) is not None


def test_a_size_refused_is_decided_by_the_definition() -> None:
    summaries = {f"n{i}": fitting(f"n{i}", idle=12 - i) for i in range(6)}
    names = list(summaries)
    index = FitIndex(summaries)
    for k in range(1, MAX_SIZES + 1):
        index.filter(k, names, {}, NOW, DecisionPolicy())
    k = MAX_SIZES + 2  # 10: fits n0..n2 only
    assert index.filter(k, names, {}, NOW, DecisionPolicy()) is None
    got = class_plan.filter_with_classes(k, Candidates(names, {}), known(summaries, index), NEUTRAL)
    want = whole_gpus.filter_nodes(k, names, {}, summaries.get, NOW, DecisionPolicy())
    assert (got.passed, got.failed) == (want.passed, want.failed) and got.passed == ["n0", "n1", "n2"]
    assert index.best(k, got.passed, 0, 2, "spread", NOW, STALE_AFTER) is None
    assert MAX_SIZES + 2 not in index._sizes


@pytest.mark.parametrize("settled", [False, True])
def test_changes_are_applied_in_place_up_to_a_quarter_of_the_nodes_past_that_sizes_are_rebuilt(settled: bool) -> None:
    """By the next call, or before it where the state settles (catch_up)."""
    summaries = {f"n{i}": fitting(f"n{i}") for i in range(8)}
    index = FitIndex(summaries)
    policy = DecisionPolicy()
    index.filter(2, list(summaries), {}, NOW, policy)
    size = index._sizes[2]
    for name in ("n0", "n1"):  # 2 of 8: a quarter, applied in place
        summaries[name] = fitting(name, idle=1)
        index.changed(name)
    if settled:
        index.catch_up()
        assert index._sizes[2] is size and size.verdict["n0"] and size.verdict["n1"]
    assert index.filter(2, list(summaries), {}, NOW, policy).failed.keys() == {"n0", "n1"}
    assert index._sizes[2] is size
    for name in ("n2", "n3", "n4"):  # 3 of 8: past a quarter, built again when next asked
        summaries[name] = fitting(name, idle=1)
        index.changed(name)
    if settled:
        index.catch_up()
        assert index._sizes == {}
    assert index.filter(2, list(summaries), {}, NOW, policy).failed.keys() == {"n0", "n1", "n2", "n3", "n4"}
    assert index._sizes[2] is not size


def test_catch_up_applies_the_marks_before_a_call_so_the_call_applies_none(monkeypatch: pytest.MonkeyPatch) -> None:
    summaries = {f"n{i}": fitting(f"n{i}") for i in range(8)}
    index = FitIndex(summaries)
    policy = DecisionPolicy()
    index.filter(2, list(summaries), {}, NOW, policy)
    index.filter(1, list(summaries), {}, NOW, policy)
    updated: list[tuple[int, str]] = []
    real = fit_index._Size.update

    def spy(size: Any, name: str, summary: NodeSummary | None) -> None:
        updated.append((size.k, name))
        real(size, name, summary)

    monkeypatch.setattr(fit_index._Size, "update", spy)
    index.catch_up()  # nothing marked: nothing to do
    assert updated == []
    for name in ("n0", "n1"):
        summaries[name] = fitting(name, idle=1)
        index.changed(name)
    index.catch_up()
    assert sorted(updated) == [(1, "n0"), (1, "n1"), (2, "n0"), (2, "n1")]  # every size kept
    updated.clear()
    got = index.filter(2, list(summaries), {}, NOW, policy)
    assert updated == []  # the call found them applied
    want = whole_gpus.filter_nodes(2, list(summaries), {}, summaries.get, NOW, policy)
    assert (got.passed, got.failed) == (want.passed, want.failed) and got.failed.keys() == {"n0", "n1"}


def test_a_report_older_than_any_fresh_one_and_a_stale_node_that_reports_again() -> None:
    summaries = {"a": fitting("a"), "b": fitting("b")}
    index = FitIndex(summaries)
    policy = DecisionPolicy(stale_policy="fail-closed", no_fit_policy="reject")
    assert index.filter(1, ["a", "b"], {}, NOW, policy).passed == ["a", "b"]
    summaries["c"] = fitting("c", received_at=NOW - 2 * STALE_AFTER)  # a first report, already old
    index.changed("c")
    assert_same_outcome(index, summaries, 1, ["a", "b", "c"], {}, NOW, policy)
    assert list(index.filter(1, ["c"], {}, NOW, policy).failed) == ["c"]
    summaries["c"] = fitting("c")
    index.changed("c")
    assert index.filter(1, ["a", "b", "c"], {}, NOW, policy).passed == ["a", "b", "c"]


def test_the_shortlist_asks_the_snapshots_index_and_keeps_its_set() -> None:
    rng = random.Random("snapshot")
    summaries = {f"n{i}": fitting(f"n{i}", idle=rng.randint(2, 8)) for i in range(30)}
    index = FitIndex(summaries)
    names = list(summaries)
    passed = index.filter(2, names, {}, NOW, DecisionPolicy()).passed
    asked: list[list[str] | None] = []
    answer = index.best

    def spy(*args: Any) -> list[str] | None:
        asked.append(answer(*args))
        return asked[-1]

    index.best = spy  # type: ignore[method-assign]
    pod = PodRequest("ns/p", 2, IDENTITY, "spread", "seed")
    got = shortlist.best(pod, passed, 5, Candidates(names, {}), known(summaries, index), NEUTRAL)
    assert asked == [got]
    assert set(got) == set(shortlist.best(pod, passed, 5, Candidates(names, {}), known(summaries, None), NEUTRAL))


@pytest.mark.parametrize("strategy", ["spread", "binpack"])
@pytest.mark.parametrize("classes", [1, 2, 4, 12])
def test_scores_are_prioritizes_when_every_node_fits_on_fresh_data(strategy: str, classes: int) -> None:
    rng = random.Random(f"scores-{strategy}-{classes}")
    scored = 0
    for case in range(150):
        summaries = fleet(rng, rng.randint(1, 60), classes)
        index = FitIndex(summaries)
        k = rng.randint(1, 4)
        policy = DecisionPolicy(no_fit_policy="reject")
        outcome = index.filter(k, list(summaries), {}, NOW, policy)
        if outcome.assumed or not outcome.passed:
            continue
        names = [n for n in outcome.passed if rng.random() < 0.8] or outcome.passed[:1]
        if rng.random() < 0.2:
            names.append(names[0])  # named twice: scored twice, as prioritize does
        rng.shuffle(names)
        want = whole_gpus.prioritize(k, names, {}, summaries.get, NOW, policy, strategy)
        assert index.scores(k, names, strategy, NOW, STALE_AFTER) == want, case
        scored += 1
        change(rng, summaries, index, 2)
    assert scored >= 100


def test_scores_step_aside_for_a_node_that_does_not_fit_is_stale_or_unknown() -> None:
    summaries = {f"n{i}": fitting(f"n{i}") for i in range(4)}
    summaries["small"] = fitting("small", idle=1)
    summaries["old"] = fitting("old", received_at=NOW - STALE_AFTER - 0.001)
    summaries["edge"] = fitting("edge", received_at=NOW - STALE_AFTER)
    index = FitIndex(summaries)
    fit = ["n0", "n1", "edge"]
    assert index.scores(2, fit, "spread", NOW, STALE_AFTER) is not None
    for odd in ("small", "old", "unknown"):
        assert index.scores(2, [*fit, odd], "spread", NOW, STALE_AFTER) is None, odd
    assert index.scores(2, fit, "random", NOW, STALE_AFTER) is None
    assert index.scores(0, fit, "spread", NOW, STALE_AFTER) is None
    # No node at all (explain on an extender that knows none): as prioritize, nothing to score.
    assert (
        index.scores(2, [], "spread", NOW, STALE_AFTER)
        == []
        == whole_gpus.prioritize(2, [], {}, summaries.get, NOW, DecisionPolicy())
    )
    assert FitIndex({}).scores(2, [], "binpack", NOW, STALE_AFTER) == []
    assert FitIndex({}).best(2, [], 0, 3, "spread", NOW, STALE_AFTER) == []
    assert index.best(2, fit, 0, 0, "spread", NOW, STALE_AFTER) == []


def spy_on_judge_nodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many nodes each whole_gpus.judge_nodes call was given, in call order."""
    judged: list[int] = []
    real = whole_gpus.judge_nodes

    def spy(k: int, given: list[str], *rest: Any) -> Any:
        judged.append(len(given))
        return real(k, given, *rest)

    monkeypatch.setattr(whole_gpus, "judge_nodes", spy)
    return judged


@pytest.mark.parametrize(("unknown", "one_by_one"), [(4, False), (5, True)])
def test_candidates_mostly_without_agent_data_are_judged_one_by_one(
    unknown: int, one_by_one: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past half the candidates unknown (an agent rollout), the index steps aside for the whole call
    (its lookups would only add to the work); at half, it judges the unknown ones alone. Same outcome."""
    summaries = {f"n{i}": fitting(f"n{i}") for i in range(4)}
    names = [*summaries, *(f"x{i}" for i in range(unknown))]
    index = FitIndex(summaries)
    judged = spy_on_judge_nodes(monkeypatch)
    assert_same_outcome(index, summaries, 2, names, {"x0": 1}, NOW, DecisionPolicy())
    assert judged[0] == (len(names) if one_by_one else unknown)


def test_a_name_given_again_and_again_does_not_count_as_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names given more than once leave the filter's quick bound on the unknown ones above half;
    the exact count (3 of 7) keeps the index's road, the unknown ones judged alone."""
    summaries = {"n0": fitting("n0"), "f": fitting("f", idle=1)}
    names = ["f", "x0", "f", "x1", "n0", "f", "x2"]
    index = FitIndex(summaries)
    judged = spy_on_judge_nodes(monkeypatch)
    assert_same_outcome(index, summaries, 2, names, {}, NOW, DecisionPolicy())
    assert judged[0] == 3  # (then the definition judges all 7)


@pytest.mark.parametrize("step", [1, 2, 5])
def test_filter_in_steps_gives_the_outcome_filter_nodes_gives(step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidates are looked up STEP at a time: any step gives the one outcome (names given
    twice across steps, unknown and stale ones included)."""
    monkeypatch.setattr(fit_index, "STEP", step)
    rng = random.Random(f"steps-{step}")
    for policy in POLICIES:
        for _ in range(40):
            summaries = fleet(rng, rng.randint(0, 30))
            index = FitIndex(summaries)
            for _ in range(3):
                now = NOW + rng.choice([0.0, rng.uniform(0, STALE_AFTER)])
                assert_same_outcome(index, summaries, rng.randint(1, 4), candidates(rng, summaries), {}, now, policy)


@pytest.mark.parametrize("count", [fit_index.STEP, fit_index.STEP + 1, 2 * fit_index.STEP + 1])
def test_filter_at_the_step_bounds(count: int) -> None:
    """Exactly STEP candidates, one more, and past two steps; a name in the first step given again
    in the last, and an unknown one there."""
    rng = random.Random(f"bounds-{count}")
    summaries = fleet(rng, count - 2)
    names = [*summaries, "x0", "n0"]
    assert len(names) == count
    for policy in POLICIES:
        for k in (1, 2):
            assert_same_outcome(FitIndex(summaries), summaries, k, names, {}, NOW, policy)


@pytest.mark.parametrize("strategy", ["spread", "binpack"])
def test_ties_found_one_by_one_or_from_a_set_are_the_same_names(strategy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run of equal scores at the cut is searched name by name (up to a budget) or as a set:
    the same names in the same order (the filter answer's), also for a part of the nodes."""
    rng = random.Random(f"ties-{strategy}")
    answered = 0
    for case in range(120):
        summaries = fleet(rng, rng.randint(2, 60), rng.choice([1, 2, 3]))
        k = rng.randint(1, 3)
        names = [n for n in summaries if rng.random() < rng.choice([1.0, 0.6])]
        rng.shuffle(names)
        index = FitIndex(summaries)
        outcome = index.filter(k, names, {}, NOW, DecisionPolicy(no_fit_policy="reject"))
        passed = outcome.passed
        if not passed or outcome.assumed:  # no fresh fit: nothing the index ranks
            continue
        keep, start = rng.randint(1, len(passed)), rng.randrange(len(passed))
        got = {}
        for cost in (1, fit_index.SCAN_COST, 10**9):  # the names one by one; as shipped; always a set
            monkeypatch.setattr(fit_index, "SCAN_COST", cost)
            got[cost] = index.best(k, passed, start, keep, strategy, NOW, STALE_AFTER)
        assert got[1] is not None, case
        assert got[1] == got[fit_index.SCAN_COST] == got[10**9], case
        assert set(got[1] or ()) == by_the_definition(k, passed, start, summaries, strategy, keep), case
        answered += 1
    assert answered >= 100


@pytest.mark.parametrize(("worse_first", "scanned_only"), [(1, True), (2, False)])
def test_ties_are_searched_name_by_name_up_to_a_third_of_the_run(
    worse_first: int, scanned_only: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of 9 equal nodes at the cut, 2 to keep: the names are tested one by one up to 9 // 3 = 3;
    the second tied one third in rotated order is found so, fourth is found from the run's set. The
    first two tied ones in rotated order either way."""
    tied = {f"t{i}": fitting(f"t{i}") for i in range(9)}
    worse = {f"w{i}": fitting(f"w{i}", idle=2) for i in range(3)}
    summaries = tied | worse
    passed = [*list(worse)[:worse_first], *tied, *list(worse)[worse_first:]]
    index = FitIndex(summaries)
    assert index.filter(2, passed, {}, NOW, DecisionPolicy()).passed == passed
    looked_up: list[str] = []
    real = fit_index._entry_of

    def counted(*args: Any) -> Callable[[str], Any]:
        entry_of = real(*args)

        def spy(name: str) -> Any:
            looked_up.append(name)
            return entry_of(name)

        return spy

    monkeypatch.setattr(fit_index, "_entry_of", counted)
    got = index.best(2, passed, 0, 2, "spread", NOW, STALE_AFTER)
    assert got == ["t0", "t1"]
    assert len(looked_up) == 9 // fit_index.SCAN_COST == 3
    assert scanned_only == (looked_up[-1] == "t1")
