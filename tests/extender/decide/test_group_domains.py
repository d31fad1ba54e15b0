"""The domain for a group (decide/group_domains.py): room, the least stranding, ties, levels, the
shortfall, and the placement inside."""

from __future__ import annotations

import random

import pytest

from gpuextender.extender.decide.fit_index import FitIndex
from gpuextender.extender.decide.group_domains import (
    ANY,
    NO_LABEL,
    GroupChoice,
    LevelIndex,
    choose,
    choose_tallied,
    domains,
    level_index,
    place,
    room,
)
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_summary import NodeSummary
from tests.extender import builders

LABELS: dict[str, dict[str, str]] = {}


def labels(level: str) -> LevelIndex:
    """The level's index over LABELS (as scheduler/decision_inputs.py builds it per inventory version)."""
    return level_index(level, LABELS)


def fleet(**cliques: list[int]) -> dict[str, int]:
    """clique -> idle GPUs per node; nodes are named <clique><i>."""
    LABELS.clear()
    idle: dict[str, int] = {}
    for clique, nodes in cliques.items():
        for i, n in enumerate(nodes):
            LABELS[f"{clique}{i}"] = {"clique": clique}
            idle[f"{clique}{i}"] = n
    return idle


def test_the_tightest_domain_that_holds_the_group_is_chosen() -> None:
    idle = fleet(a=[8, 8, 8, 8], b=[8, 8], c=[8, 8, 8])
    choice = choose(2, 8, idle, ["clique"], labels, list(idle))
    assert choice.chosen is not None and choice.chosen.domain.value == "b"
    assert choice.placement == {"b0": 1, "b1": 1}
    assert [r.domain.value for r in choice.rooms] == ["b", "c", "a"]


def test_room_counts_members_per_node_not_gpus() -> None:
    idle = fleet(a=[7, 7, 7], b=[16])  # a: 21 idle GPUs but no node holds an 8-GPU member
    assert room(domains("clique", ["a0", "a1", "a2"], labels)[0], idle, 8).members == 0
    choice = choose(2, 8, idle, ["clique"], labels, list(idle))
    assert choice.chosen is not None and choice.chosen.domain.value == "b" and choice.placement == {"b0": 2}


def test_exactly_enough_room_holds_and_one_less_does_not() -> None:
    idle = fleet(a=[8, 8, 8])
    assert choose(3, 8, idle, ["clique"], labels, list(idle)).chosen is not None
    none = choose(4, 8, idle, ["clique"], labels, list(idle))
    assert none.chosen is None and none.reason is not None
    assert none.reason.sentence == "no clique domain holds 4 x 8 GPUs: best clique=a has room for 3"
    assert none.reason.code == "GroupDoesNotFit" and not none.reason.unresolvable


def test_equal_domains_are_chosen_by_name_so_every_replica_agrees() -> None:
    idle = fleet(z=[8, 8], m=[8, 8], q=[8, 8])
    assert choose(2, 8, idle, ["clique"], labels, list(idle)).chosen.domain.value == "m"  # type: ignore[union-attr]
    idle = fleet(z=[8, 8], m=[8, 8, 0])  # equal idle GPUs left over: fewer nodes first
    assert choose(2, 8, idle, ["clique"], labels, list(idle)).chosen.domain.value == "z"  # type: ignore[union-attr]


def test_the_first_level_that_holds_the_group_wins() -> None:
    idle = fleet(a=[8], b=[8])
    LABELS["a0"]["rack"] = LABELS["b0"]["rack"] = "r"
    choice = choose(2, 8, idle, ["clique", "rack"], labels, list(idle))
    assert choice.chosen is not None and choice.chosen.domain.level == "rack"
    assert choice.chosen.domain.name == "rack=r"


def test_a_level_no_candidate_carries_is_skipped_and_none_carried_is_any_nodes() -> None:
    idle = {"x": 8, "y": 8}
    LABELS.clear()
    choice = choose(2, 8, idle, ["clique"], labels, ["x", "y"])
    assert choice.chosen is not None and choice.chosen.domain.level == ANY and choice.chosen.domain.name == "any nodes"
    # One labelled candidate (even a failing one): the level counts, unlabelled nodes are domains of one.
    LABELS["z"] = {"clique": "c"}
    choice = choose(2, 8, idle, ["clique"], labels, ["x", "y", "z"])
    assert choice.chosen is None
    assert [r.domain.value for r in choice.rooms] == [NO_LABEL, NO_LABEL]
    assert choice.reason is not None and "best node x has room for 1" in choice.reason.sentence


def test_only_the_bound_members_domain_may_be_chosen() -> None:
    idle = fleet(a=[8, 8], b=[8, 8, 8])
    choice = choose(2, 8, idle, ["clique"], labels, list(idle), only=lambda d: d.value == "b")
    assert choice.chosen is not None and choice.chosen.domain.value == "b"


def test_members_are_placed_tightest_first() -> None:
    idle = fleet(a=[16, 8, 24])
    (d,) = domains("clique", list(idle), labels)
    assert place(d, idle, 3, 8) == {"a1": 1, "a0": 2}
    assert place(d, idle, 6, 8) == {"a1": 1, "a0": 2, "a2": 3}


def test_members_without_whole_gpus_take_one_per_node() -> None:
    idle = fleet(a=[0, 0])
    choice = choose(2, 0, idle, ["clique"], labels, list(idle))
    assert choice.chosen is not None and choice.placement == {"a0": 1, "a1": 1}
    assert choose(3, 0, idle, ["clique"], labels, list(idle)).reason.sentence.endswith(
        "holds 3 members: best clique=a has room for 2"
    )  # type: ignore[union-attr]


def test_the_level_index_both_ways() -> None:
    index = level_index("clique", {"a0": {"clique": "a"}, "a1": {"clique": "a"}, "x": {"other": "1"}})
    assert index.value_of == {"a0": "a", "a1": "a"}
    assert index.nodes_of == {"a": frozenset({"a0", "a1"})}


# -- the tallied road (fit_index.DomainRooms) held equal to choose() --------------------------------


def _summary(name: str, idle: int, busy: int, received_at: float) -> NodeSummary:
    return builders.node(name, idle, busy, received_at=received_at)


def _view(choice: GroupChoice) -> tuple[object, ...]:
    chosen = choice.chosen
    return (
        None
        if chosen is None
        else (chosen.domain.name, chosen.members, chosen.idle, chosen.nodes, sorted(chosen.domain.nodes)),
        dict(choice.placement),
        [(r.domain.name, r.members, r.idle, r.nodes) for r in choice.rooms],
        choice.considered,
        None if choice.reason is None else choice.reason.message,
    )


@pytest.mark.parametrize("seed", range(12))
def test_the_tallied_choice_is_choose_on_generated_fleets_as_nodes_change(seed: int) -> None:
    rng = random.Random(seed)
    now, stale_after = 1000.0, 10.0
    node_labels: dict[str, dict[str, str]] = {}
    summaries: dict[str, NodeSummary] = {}
    for i in range(80):
        name = f"n{i:02d}"
        labels = {} if rng.random() < 0.15 else {"clique": f"c{rng.randrange(9)}"}
        if rng.random() < 0.5:
            labels["rack"] = f"r{rng.randrange(3)}"
        node_labels[name] = labels
        idle = rng.randrange(9)
        summaries[name] = _summary(name, idle, 8 - idle, now - (30.0 if rng.random() < 0.1 else 1.0))
    fit = FitIndex(summaries)
    policy = DecisionPolicy(stale_after_s=stale_after, no_fit_policy="reject")
    indexes = {level: level_index(level, node_labels) for level in ("clique", "rack")}
    for _round in range(4):
        for _ in range(10):  # nodes change between calls: the tallies follow
            name = f"n{rng.randrange(80):02d}"
            idle = rng.randrange(9)
            summaries[name] = _summary(name, idle, 8 - idle, now - (30.0 if rng.random() < 0.1 else 1.0))
            fit.changed(name)
        names = [n for n in summaries if rng.random() < 0.9] + [f"n{rng.randrange(80):02d}"]  # a name twice
        for k in (1, 2, 4, 8):
            outcome = fit.filter(k, names, {}, now, policy)
            assert outcome is not None
            if outcome.assumed:
                continue
            idle = {n: summaries[n].idle_gpus for n in outcome.passed}
            fresh = frozenset(outcome.passed)
            for members in (1, 2, 3, 5, 8):
                for levels in (["clique"], ["clique", "rack"], ["rack"]):
                    slow = choose(members, k, idle, levels, indexes.__getitem__, names)
                    quick = choose_tallied(
                        members,
                        k,
                        levels,
                        indexes.__getitem__,
                        names,
                        lambda level, k=k, names=names: fit.domain_rooms(
                            k, level, indexes[level].value_of, names, now, stale_after
                        ),
                        lambda level, value, single, fresh=fresh: (
                            {value} & fresh if single else indexes[level].nodes_of.get(value, frozenset()) & fresh
                        ),
                        lambda node: summaries[node].idle_gpus,
                    )
                    assert quick is not None
                    assert _view(quick) == _view(slow), (k, members, levels)


def test_domains_of_a_few_nodes_and_of_many_are_grouped_alike() -> None:
    """Two roads (a planned domain's few nodes by their values, thousands by each domain's set): the same domains."""
    LABELS.clear()
    for i in range(40):
        LABELS[f"n{i}"] = {"clique": f"c{i % 10}"} if i % 7 else {}

    def grouped(nodes: list[str]) -> set[tuple[str, tuple[str, ...]]]:
        return {(d.value, tuple(sorted(d.nodes))) for d in domains("clique", nodes, labels)}

    few = ["n1", "n11", "n2", "n7"]  # 4 nodes < 10 values: by their own values; n7 unlabelled
    many = [f"n{i}" for i in range(40)]
    assert grouped(few) == {("c1", ("n1", "n11")), ("c2", ("n2",)), (NO_LABEL, ("n7",))}
    assert {v for v in grouped(many) if v[0] in ("c1", "c2") or v[1] == ("n7",)} >= {(NO_LABEL, ("n7",))}
    assert {(v, n) for v, n in grouped(many) if v != NO_LABEL} == {
        (f"c{c}", tuple(sorted(f"n{i}" for i in range(40) if i % 10 == c and i % 7))) for c in range(10)
    }
