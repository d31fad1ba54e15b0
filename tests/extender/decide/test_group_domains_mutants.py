"""Edges of the domain choice (decide/group_domains.py) that mutation testing found unheld: no
nodes at "any nodes", the room of members without whole GPUs, the order keys a domain is ranked
by, the tallied road's refusals and its rooms, the placement's skipped nodes, and the shortfall
when nothing is known."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

from gpuextender.extender.decide.group_domains import (
    ANY,
    NO_LABEL,
    Domain,
    choose_tallied,
    domains,
    level_index,
    place,
    preference,
    room,
    shortfall,
)

INDEX = {"clique": level_index("clique", {"a0": {"clique": "a"}, "a1": {"clique": "a"}})}


@dataclass
class Tallies:
    """What fit_index.DomainRooms gives choose_tallied: per value, room, idle GPUs and nodes (and
    the idle GPUs squared and summed: here as if on one node, unless given)."""

    room: dict[str, int] = field(default_factory=dict)
    idle: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    unlabelled: dict[str, int] = field(default_factory=dict)
    square: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.square = {value: idle * idle for value, idle in self.idle.items()} | self.square


def never(*_: object) -> NoReturn:
    """A callback the answer must not need."""
    raise AssertionError("not asked")


def test_no_passing_node_is_no_any_nodes_domain() -> None:
    assert domains(ANY, [], never) == []


def test_the_any_nodes_domain_has_the_any_value() -> None:
    assert domains(ANY, ["x"], never) == [Domain(ANY, ANY, ("x",))]


def test_the_room_of_members_without_whole_gpus_counts_the_passing_nodes() -> None:
    r = room(Domain("clique", "a", ("a0", "a1")), {"a0": 0, "a1": 3}, 0)
    assert (r.members, r.idle, r.nodes, r.square) == (2, 3, 2, 9)


def test_a_holding_domain_is_ranked_by_the_gpus_it_would_strand() -> None:
    assert preference(3, 10, 2, "clique=a", 2, 4, 50) == (0, 2, 50, 2, "clique=a")
    assert preference(3, 5, 2, "clique=a", 2, 0, 13) == (0, 5, 13, 2, "clique=a")  # no whole GPU: none used up


def test_a_domain_short_of_room_is_ranked_after_every_holding_one_by_its_room() -> None:
    assert preference(1, 8, 1, "clique=a", 2, 8, 64) == (1, -1, 0, 1, "clique=a")  # (concentration: no order)


def test_the_tallied_road_does_not_answer_members_without_whole_gpus() -> None:
    assert choose_tallied(2, 0, ["clique"], INDEX.__getitem__, ["a0"], never, never, never) is None


def test_the_tallied_shortfall_with_no_fitting_node_names_the_first_carried_level() -> None:
    choice = choose_tallied(2, 8, ["clique"], INDEX.__getitem__, ["a0"], lambda _: Tallies(), never, never)
    assert choice is not None and choice.chosen is None and choice.rooms == ()
    assert choice.reason is not None
    assert choice.reason.sentence == "no clique domain holds 2 x 8 GPUs: no node fits a member"


def test_the_tallied_rooms_besides_the_chosen_list_no_nodes() -> None:
    tallies = Tallies({"a": 1}, {"a": 8}, {"a": 1}, {"x": 16})
    choice = choose_tallied(
        1, 8, ["clique"], INDEX.__getitem__, ["a0", "x"], lambda _: tallies, lambda *_: ["a0"], lambda _: 8
    )
    assert choice is not None and choice.chosen is not None and choice.chosen.domain.nodes == ("a0",)
    assert [(r.domain.name, r.domain.nodes) for r in choice.rooms] == [("clique=a", ()), ("node x", ("x",))]


def test_a_node_too_small_for_a_member_gets_no_placement_entry() -> None:
    idle = {"a0": 4, "a1": 8}
    assert place(Domain("clique", "a", ("a0", "a1")), idle, 1, 8) == {"a1": 1}


def test_a_one_gpu_member_per_idle_gpu_of_a_node() -> None:
    assert place(Domain("clique", "a", ("a0",)), {"a0": 3}, 3, 1) == {"a0": 3}


def test_the_shortfall_with_no_level_and_no_domain() -> None:
    reason = shortfall(2, 8, [], [])
    assert reason.sentence == "no node set domain holds 2 x 8 GPUs: no node fits a member"
    assert reason.code == "GroupDoesNotFit" and reason.unresolvable is False  # explain's JSON: false, not null


def test_the_shortfall_of_one_gpu_members_counts_gpus() -> None:
    assert shortfall(2, 1, ["clique"], []).sentence.startswith("no clique domain holds 2 x 1 GPUs")


def test_a_domain_of_one_is_named_for_its_node() -> None:
    (d,) = domains("clique", ["x"], INDEX.__getitem__)
    assert d == Domain("clique", NO_LABEL, ("x",)) and d.name == "node x"
