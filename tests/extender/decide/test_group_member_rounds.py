"""decide/group_member.filter_member's rounds of domains, as a pure function over a real fit index
(issue 53 item 1): a member whose plan's domain kube-scheduler went round without gives it up,
and the domain it then prefers among every one known is never that one again in the same call."""

from __future__ import annotations

from collections.abc import Sequence

from gpuextender.extender.decide.filter_outcome import FilterOutcome
from gpuextender.extender.decide.fit_index import FitIndex
from gpuextender.extender.decide.group_domains import LevelIndex, Tallied, level_index
from gpuextender.extender.decide.group_member import (
    WAITS_FOR_DOMAIN,
    FleetRooms,
    GroupContext,
    MemberOutcome,
    filter_member,
)
from gpuextender.extender.model.pod_group import GroupRef
from tests.extender.decide.test_fit_index import NOW, STALE_AFTER, fitting

C = "clique"
# a: exactly 4 idle GPUs per node (the tight one); b: whole idle nodes; d: whole too, one more node.
NODES = {**{f"a{i}": ("a", 4) for i in range(4)}, **{f"b{i}": ("b", 8) for i in range(4)}}
NODES |= {f"d{i}": ("d", 8) for i in range(5)}
SUMMARIES = {n: fitting(n, idle=idle) for n, (_, idle) in NODES.items()}
LABELS = level_index(C, {n: {C: c} for n, (c, _) in NODES.items()})
INDEX = FitIndex(SUMMARIES)


def levels(_level: str) -> LevelIndex:
    return LABELS


def every_pass(names: Sequence[str]) -> FilterOutcome:
    return FilterOutcome(list(names), {})


def group(
    planned: tuple[str, str, str] | None = None,
    refused: frozenset[str] = frozenset(),
    avoided: frozenset[str] = frozenset(),
) -> GroupContext:
    ref = GroupRef("ml/lws/g", "leaderworkerset", "ml", "g", 4)
    return GroupContext(ref, 4, (), 4, (C,), levels, planned, avoided=avoided, refused=refused)


def member(g: GroupContext, names: list[str]) -> MemberOutcome:
    def tallied(level: str) -> Tallied | None:
        return INDEX.domain_rooms(4, level, LABELS.value_of, names, NOW, STALE_AFTER)

    def fleet_rooms(level: str) -> Tallied | None:
        return INDEX.domain_rooms(4, level, LABELS.value_of, None, NOW, STALE_AFTER)

    def fleet_nodes(level: str, value: str, single: bool) -> list[str]:
        nodes = (value,) if single else LABELS.nodes_of.get(value, frozenset())
        return list(INDEX.domain_fits(4, nodes, NOW, STALE_AFTER) or ())

    return filter_member(g, names, every_pass, SUMMARIES.get, tallied, FleetRooms(fleet_rooms, fleet_nodes))


B = [f"b{i}" for i in range(4)]


def test_first_offered_a_whole_clique_alone_the_member_waits_for_the_tight_one() -> None:
    out = member(group(), B)
    assert out.refused_in == f"{C}=b" and out.choice.chosen is not None
    assert out.choice.chosen.domain.name == f"{C}=a" and out.avoid == ""
    assert out.outcome.passed == [] and set(out.outcome.failed.values()) == {WAITS_FOR_DOMAIN}


def test_given_up_the_plans_domain_is_not_preferred_again_in_the_same_call() -> None:
    """Planned in a, refused in b before, offered b again: a is given up, and b (the best of what
    is left: d strands as much and has more nodes) is taken, not a again."""
    out = member(group(planned=(C, "a", f"{C}=a"), refused=frozenset({f"{C}=b"})), B)
    assert out.avoid == f"{C}=a" and out.refused_in == ""
    assert out.choice.chosen is not None and out.choice.chosen.domain.name == f"{C}=b"
    assert sorted(out.outcome.passed) == B


def test_a_domain_given_up_earlier_is_never_waited_for() -> None:
    out = member(group(avoided=frozenset({f"{C}=a"})), B)
    assert out.refused_in == "" and sorted(out.outcome.passed) == B
