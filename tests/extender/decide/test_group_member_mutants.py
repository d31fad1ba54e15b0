"""Edges of a group member's filter (decide/group_member.py) that mutation testing found unheld,
each through filter_member or domain_nodes with a plain filter given as a table: the candidates of
"any nodes" and of a domain of one, a plan whose domain is now named otherwise, a gang member's
one node, the tallied road's answer for the nodes outside the domain, passes on assumed data or
without a summary holding no room, when a member counts as planned again, the full book's answer,
and bound members on "any nodes" or on a node without the label."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.filter_outcome import FilterOutcome
from gpuextender.extender.decide.group_domains import ANY, ELSEWHERE, NO_LABEL, GroupChoice, LevelIndex, level_index
from gpuextender.extender.decide.group_member import (
    BOOK_FULL,
    GANG_NODE,
    GroupContext,
    MemberOutcome,
    domain_nodes,
    filter_member,
)
from gpuextender.extender.decide.reasons import Reason
from gpuextender.extender.model.pod_group import LWS, GroupRef
from gpuextender.extender.state.gpu_summary import NodeSummary
from tests.extender import builders
from tests.extender.decide.test_group_domains_mutants import Tallies

REF = GroupRef("llm/leaderworkerset/g", LWS, "llm", "g", 2)
LABELS = {"a0": {"clique": "a"}, "a1": {"clique": "a"}, "b0": {"clique": "b"}, "x": {}}
OWN = Reason("Own", "the node's own verdict", unresolvable=False)


def index(level: str) -> LevelIndex:
    return level_index(level, LABELS)


def group(
    size: int = 2,
    bound: tuple[str, ...] = (),
    planned: tuple[str, str, str] | None = None,
    can_plan: bool = True,
    gang: bool = False,
) -> GroupContext:
    """A group of `size` 8-GPU members tried at the clique level."""
    return GroupContext(REF, size, bound, 8, ("clique",), index, planned, can_plan=can_plan, gang=gang)


def plain(idle: dict[str, int], assumed: Sequence[str] = ()) -> Callable[[Sequence[str]], FilterOutcome]:
    """Each candidate of `idle` passes (those of `assumed` on assumed data); every other fails OWN."""

    def run(names: Sequence[str]) -> FilterOutcome:
        return FilterOutcome(
            [n for n in names if n in idle],
            {n: OWN for n in names if n not in idle},
            assumed=[n for n in names if n in assumed],
        )

    return run


def summaries(idle: dict[str, int]) -> Callable[[str], NodeSummary | None]:
    table = {n: builders.node(n, i) for n, i in idle.items()}
    return table.get


def run(
    g: GroupContext,
    names: list[str],
    idle: dict[str, int],
    summary_idle: dict[str, int] | None = None,
    tallied: Callable[[str], Tallies | None] | None = None,
) -> MemberOutcome:
    """filter_member with `plain(idle)` and the summaries of `summary_idle` (default: `idle`)."""
    return filter_member(g, names, plain(idle), summaries(idle if summary_idle is None else summary_idle), tallied)


def test_the_candidates_of_any_nodes_are_every_candidate() -> None:
    assert domain_nodes(ANY, ANY, "any nodes", ["x", "y"], index) == ["x", "y"]


def test_the_candidates_of_a_domain_of_one_are_its_node() -> None:
    assert domain_nodes("clique", NO_LABEL, "node x", ["a0", "x"], index) == ["x"]


def test_a_value_no_node_carries_has_no_candidates() -> None:
    assert domain_nodes("clique", "zz", "clique=zz", ["a0"], index) == []


def test_a_first_member_is_not_planned_again() -> None:
    out = run(group(), ["a0", "a1"], {"a0": 8, "a1": 8})
    assert out.choice.chosen is not None and out.planned_again is False


def test_a_full_book_answers_the_wait_and_no_domain() -> None:
    out = run(group(can_plan=False), ["a0"], {"a0": 8})
    assert out.choice == GroupChoice(None, {}, (), BOOK_FULL, 0)
    assert out.outcome.passed == [] and out.outcome.failed == {"a0": BOOK_FULL}
    assert out.planned_again is False


def test_a_planned_domain_that_still_holds_is_not_planned_again() -> None:
    out = run(group(planned=("clique", "a", "clique=a")), ["a0", "a1", "b0"], {"a0": 8, "a1": 8, "b0": 16})
    assert out.outcome.passed == ["a0", "a1"] and out.outcome.failed == {"b0": ELSEWHERE}
    assert out.planned_again is False


def test_a_planned_domain_of_one_that_still_holds_passes_its_node() -> None:
    out = run(group(planned=("clique", NO_LABEL, "node x")), ["a0", "x"], {"a0": 8, "x": 16})
    assert out.outcome.passed == ["x"] and out.outcome.failed == {"a0": ELSEWHERE}


def test_a_planned_domain_of_one_whose_node_took_the_label_is_planned_again() -> None:
    out = run(group(1, planned=("clique", NO_LABEL, "node a0")), ["a0"], {"a0": 8})
    assert out.choice.chosen is not None and out.choice.chosen.domain.name == "clique=a"
    assert out.planned_again is True


def test_a_planned_gang_member_is_answered_one_node_of_the_domain() -> None:
    out = run(group(planned=("clique", "a", "clique=a"), gang=True), ["a0", "a1"], {"a0": 8, "a1": 8})
    assert out.outcome.passed == ["a0"] and out.outcome.failed == {"a1": GANG_NODE}


def test_an_unplanned_gang_member_is_answered_one_node_of_the_domain() -> None:
    out = run(group(gang=True), ["a0", "a1"], {"a0": 8, "a1": 8})
    assert out.outcome.passed == ["a0"] and out.outcome.failed == {"a1": GANG_NODE}


TALLIES = Tallies({"a": 2, "b": 0}, {"a": 16, "b": 0}, {"a": 2, "b": 0}, {})


def test_with_tallies_every_candidate_outside_the_domain_fails_other_domain_unjudged() -> None:
    """b0 fails its own filter, but the tallied road never judges it: GroupInOtherDomain."""
    out = run(group(), ["a0", "a1", "b0"], {"a0": 8, "a1": 8}, tallied=lambda _: TALLIES)
    assert sorted(out.outcome.passed) == ["a0", "a1"] and out.outcome.failed == {"b0": ELSEWHERE}


def test_with_tallies_passes_on_assumed_data_hold_no_member() -> None:
    out = filter_member(
        group(), ["a0", "a1"], plain({"a0": 8, "a1": 8}, ["a0", "a1"]), summaries({}), lambda _: TALLIES
    )
    assert out.choice.chosen is not None and out.choice.chosen.domain.nodes == ()
    assert out.choice.placement == {}


def test_with_tallies_a_pass_without_a_summary_holds_no_member() -> None:
    tallies = Tallies({"a": 1}, {"a": 1}, {"a": 1}, {})
    g = GroupContext(REF, 1, (), 1, ("clique",), index)
    out = filter_member(g, ["a0"], plain({"a0": 1}), summaries({}), lambda _: tallies)
    assert out.choice.chosen is not None and out.choice.placement == {}


def test_with_tallies_a_plan_that_no_longer_holds_is_planned_again() -> None:
    out = run(group(planned=("clique", "b", "clique=b")), ["a0", "a1", "b0"], {"a0": 8, "a1": 8, "b0": 8},
              tallied=lambda _: TALLIES)  # fmt: skip
    assert out.choice.chosen is not None and out.choice.chosen.domain.value == "a"
    assert out.planned_again is True


def test_with_tallies_a_plan_no_domain_replaces_is_planned_again() -> None:
    out = run(group(3, planned=("clique", "b", "clique=b")), ["a0", "a1", "b0"], {"a0": 8, "a1": 8, "b0": 8},
              tallied=lambda _: TALLIES)  # fmt: skip
    assert out.choice.chosen is None and out.planned_again is True


def test_a_pass_without_a_summary_is_no_room() -> None:
    out = run(group(1), ["a0", "a1"], {"a0": 8, "a1": 8}, summary_idle={"a0": 8})
    assert out.choice.chosen is not None and (out.choice.chosen.idle, out.choice.chosen.nodes) == (8, 1)


def test_passes_on_assumed_data_beside_fresh_ones_are_no_room_and_fail_no_fresh_data() -> None:
    out = filter_member(group(1), ["a0", "a1"], plain({"a0": 8, "a1": 8}, ["a1"]), summaries({"a0": 8, "a1": 8}))
    assert out.choice.chosen is not None and out.choice.chosen.domain.nodes == ("a0",)
    assert out.choice.placement == {"a0": 1}
    assert out.outcome.failed["a1"] == reasons.NO_FRESH_GPU_DATA


def test_a_member_bound_where_no_level_is_carried_pins_the_group_to_any_nodes() -> None:
    g = GroupContext(REF, 2, ("a0",), 8, ("rack",), index)
    out = run(g, ["a1"], {"a1": 8})
    assert out.choice.chosen is not None and out.choice.chosen.domain.name == "any nodes"
    assert out.outcome.passed == ["a1"]


def test_a_member_bound_on_a_node_without_the_label_pins_the_group_to_that_node() -> None:
    out = run(group(3, bound=("x",)), ["a0", "a1", "x"], {"a0": 8, "a1": 8, "x": 16})
    assert out.choice.chosen is not None and out.choice.chosen.domain.name == "node x"
    assert out.outcome.passed == ["x"]
