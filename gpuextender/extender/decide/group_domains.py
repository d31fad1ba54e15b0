"""The domain for a multi-pod group: one NVLink clique (or network block, rack, ...) that holds
every member still to place, on free, idle, healthy GPUs (decide/README.md, "Multi-pod groups").

Pure: the caller gives the nodes that already pass the member's own filter (fresh data only:
unknown is never room), their free idle GPUs as that filter read them (the group's own holds
given back), each node's labels, and the levels to try. A node without a level's label is a
domain of one. A level that no candidate node of the call carries is skipped (the fleet is not organised by
it); where none is carried, the passing nodes are one domain ("any nodes"): a fleet without
clique labels places a group whole, wherever it fits.

The choice, per level in order (the first level where a domain holds the group wins):
- a domain's room is the members its passing nodes hold, each node idle // per-member GPUs;
- among the domains with room for every remaining member, the one that leaves the fewest idle
  GPUs of its passing nodes unused (least capacity stranded: a tight domain is not broken open for
  a group a larger one could take), then the one whose idle GPUs are the least concentrated (the
  sum of each passing node's idle GPUs squared: nodes with many idle GPUs are kept for larger
  members), then the fewest nodes, then the smaller name: every replica that sees the same state
  chooses the same domain;
- the members are placed on the domain's nodes tightest first (fewest idle GPUs that still hold
  one), which is where the group's holds go.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import floordiv, mul
from typing import Protocol

from gpuextender.extender.decide.reasons import Reason

NO_LABEL = "\0node"  # the "value" of a domain of one: a node without the level's label
ANY = ""  # the level of one domain of every passing node, where no level's label is carried
MAX_ROOMS = 10  # domains a choice keeps for explain and the shortfall, the best first


@dataclass(frozen=True, slots=True)
class LevelIndex:
    """One label's values over the inventory's nodes, both ways (built once per inventory version)."""

    value_of: Mapping[str, str]  # node -> its value of the label (nodes without it are absent)
    nodes_of: Mapping[str, frozenset[str]]  # value -> the nodes that carry it


def level_index(level: str, node_labels: Mapping[str, Mapping[str, str]]) -> LevelIndex:
    value_of = {node: value for node, labels in node_labels.items() if (value := labels.get(level)) is not None}
    nodes_of: dict[str, set[str]] = {}
    for node, value in value_of.items():
        nodes_of.setdefault(value, set()).add(node)
    return LevelIndex(value_of, {value: frozenset(nodes) for value, nodes in nodes_of.items()})


Levels = Callable[[str], LevelIndex]  # a level's index (ANY: never asked)


@dataclass(frozen=True, slots=True)
class Domain:
    level: str  # the node label key
    value: str  # its value; NO_LABEL for a node without it (then `nodes` is that one node)
    nodes: tuple[str, ...]  # its passing nodes, in no particular order

    @property
    def name(self) -> str:
        """How explain and the reasons name it."""
        if self.level == ANY:
            return "any nodes"
        return f"node {self.nodes[0]}" if self.value == NO_LABEL else f"{self.level}={self.value}"


@dataclass(frozen=True, slots=True)
class Room:
    domain: Domain  # (its `nodes` may be left empty where only the chosen domain's are needed)
    members: int  # members it can hold
    idle: int  # free idle GPUs of its passing nodes
    nodes: int  # its passing nodes
    square: int = 0  # each passing node's free idle GPUs squared, summed: how concentrated they are


@dataclass(frozen=True, slots=True)
class GroupChoice:
    """A domain and the members it takes per node, or why none holds the group."""

    chosen: Room | None
    placement: Mapping[str, int] = field(default_factory=dict)  # node -> members placed there
    rooms: tuple[Room, ...] = ()  # the best MAX_ROOMS domains at the deciding level, best first
    reason: Reason | None = None  # set when `chosen` is None
    considered: int = 0  # domains at the deciding level


def domains(level: str, nodes: Iterable[str], levels: Levels) -> list[Domain]:
    """`nodes` grouped by their value of `level` (labelled domains, then a domain of one per node
    without the label). Per domain in C where it can be: a first member's filter groups thousands of
    passing nodes (a set intersection per domain, not a Python step per node)."""
    # A real set: a dict's keys view would be copied whole by every `&` below.
    present = nodes if isinstance(nodes, set | frozenset) else set(nodes)
    if level == ANY:
        return [Domain(ANY, ANY, tuple(present))] if present else []
    index = levels(level)
    if len(present) < len(index.nodes_of):  # a few nodes (a planned domain's): by their own values
        by_value: dict[str, list[str]] = {}
        for node in present:
            value = index.value_of.get(node)
            if value is not None:
                by_value.setdefault(value, []).append(node)
        found = [Domain(level, value, tuple(nodes)) for value, nodes in by_value.items()]
    else:
        found = [
            Domain(level, value, tuple(inside))
            for value, members in index.nodes_of.items()
            if (inside := present & members)
        ]
    found.extend(Domain(level, NO_LABEL, (node,)) for node in sorted(present - index.value_of.keys()))
    return found


def room(domain: Domain, idle: Mapping[str, int], per_member: int) -> Room:
    held = list(map(idle.__getitem__, domain.nodes))
    square = sum(map(mul, held, held))
    if per_member <= 0:  # members that ask for no whole GPU (MIG devices): one per passing node
        return Room(domain, len(held), sum(held), len(held), square)
    return Room(domain, sum(map(floordiv, held, repeat(per_member))), sum(held), len(held), square)


def choose(
    members: int,
    per_member: int,
    idle: Mapping[str, int],
    levels: Sequence[str],
    index: Levels,
    candidates: Sequence[str],
    only: Callable[[Domain], bool] | None = None,
    below: str = "",
) -> GroupChoice:
    """The domain for `members` >= 1 members of `per_member` GPUs among the nodes of `idle` (the
    nodes passing a member's filter, with their free idle GPUs), out of the call's `candidates`.
    `only(domain)`: the domains allowed (where bound members already are); None: all. `below`: the
    level under `levels[0]` (placement: the members split evenly over its domains)."""
    nodes = idle.keys()
    rooms: list[Room] = []
    carried = [level for level in levels if level == ANY or not index(level).value_of.keys().isdisjoint(candidates)]
    for level in carried or [ANY]:
        found = [room(d, idle, per_member) for d in domains(level, nodes, index)]
        if only is not None:
            found = [r for r in found if only(r.domain)]
        found.sort(key=lambda r: _preference(r, members, per_member))
        if found and found[0].members >= members:
            best = found[0]
            within = _within(level, levels, below, index)
            return GroupChoice(
                best, place(best.domain, idle, members, per_member, within), tuple(found[:MAX_ROOMS]), None, len(found)
            )
        if not rooms or (found and found[0].members > rooms[0].members):
            rooms = found  # the level that came closest names the shortfall
    reason = shortfall(members, per_member, levels, rooms)
    return GroupChoice(None, {}, tuple(rooms[:MAX_ROOMS]), reason, len(rooms))


def _preference(r: Room, members: int, per_member: int) -> Preference:
    """Holding domains first, the least stranded; then, among those that do not hold the group,
    the one with the most room (named in the shortfall)."""
    return preference(r.members, r.idle, r.nodes, r.domain.name, members, per_member, r.square)


Preference = tuple[int, int, int, int, str]


def preference(
    room: int, idle: int, nodes: int, name: str, members: int, per_member: int, square: int = 0
) -> Preference:
    """The order of domains (module docstring): a domain's room, idle GPUs, passing nodes, name and
    its nodes' idle GPUs squared and summed (`square`)."""
    if room >= members:
        return (0, idle - members * max(per_member, 0), square, nodes, name)
    return (1, -room, 0, nodes, name)


class Tallied(Protocol):
    """Per domain of one label, over a call's candidates that pass on fresh data (fit_index.DomainRooms)."""

    room: dict[str, int]
    idle: dict[str, int]
    nodes: dict[str, int]
    square: dict[str, int]
    unlabelled: dict[str, int]


def choose_tallied(
    members: int,
    per_member: int,
    levels: Sequence[str],
    index: Levels,
    candidates: Sequence[str],
    tallied: Callable[[str], Tallied | None],
    passed: Callable[[str, str, bool], Iterable[str]],
    idle_of: Callable[[str], int],
    skip: Collection[str] = (),
) -> GroupChoice | None:
    """`choose`'s answer from rooms tallied per domain as reports arrive (fit_index.py), not from a
    pass over the passing nodes: a first member's filter at thousands of candidates.
    `passed(level, value, single)`: the domain's passing nodes (`single`: a domain of one, the node
    `value`), asked of the chosen domain only; `idle_of(node)` for them. None where it cannot
    answer (any nodes, members of no whole GPU, a level not tallied): take `choose`
    (tests/extender/decide/test_group_domains.py holds the two equal). `skip`: names of domains
    left out (kube-scheduler's own filters proved them infeasible for the group)."""
    if per_member <= 0:
        return None
    carried = [level for level in levels if level == ANY or not index(level).value_of.keys().isdisjoint(candidates)]
    if not carried or ANY in carried:
        return None
    best: list[_Row] = []
    best_level = carried[0]
    pref = preference
    for level in carried:
        t = tallied(level)
        if t is None:
            return None
        found: list[_Row] = [
            (pref(room, idle, n, f"{level}={value}", members, per_member, sq), level, value, room, idle, n, False, sq)
            for value, n in t.nodes.items()
            if n > 0
            for room, idle, sq in ((t.room[value], t.idle[value], t.square[value]),)
        ]
        found += [
            (pref(r, idle, 1, f"node {node}", members, per_member, sq), level, node, r, idle, 1, True, sq)
            for node, idle in t.unlabelled.items()
            for r, sq in ((idle // per_member, idle * idle),)
        ]
        if skip:
            found = [row for row in found if row[0][-1] not in skip]
        found.sort()
        if found and found[0][3] >= members:
            _, _, value, room, idle, n, single, square = found[0]
            nodes = tuple(passed(level, value, single))
            chosen = Room(Domain(level, NO_LABEL if single else value, nodes), room, idle, n, square)
            idle_map = {node: idle_of(node) for node in nodes}
            rooms = tuple(_room_of(row) for row in found[:MAX_ROOMS])
            within = _within(level, levels, "", index)
            placement = place(chosen.domain, idle_map, members, per_member, within)
            return GroupChoice(chosen, placement, rooms, None, len(found))
        if not best or (found and found[0][3] > best[0][3]):
            best, best_level = found, level
    rooms = tuple(_room_of(row) for row in best[:MAX_ROOMS])
    return GroupChoice(None, {}, rooms, shortfall(members, per_member, [best_level], rooms), len(best))


def _within(level: str, levels: Sequence[str], below: str, index: Levels) -> LevelIndex | None:
    """The level under `level` in `levels` (`below` for the first), as an index; None for none."""
    at = levels.index(level) if level in levels else -1
    under = levels[at - 1] if at > 0 else below if at == 0 else ""
    return index(under) if under else None


# A tallied domain: (its preference, level, value or the node of a domain of one, room, idle GPUs,
# passing nodes, whether it is a domain of one, its nodes' idle GPUs squared and summed).
_Row = tuple[Preference, str, str, int, int, int, bool, int]


def _room_of(row: _Row) -> Room:
    """A tallied domain as a Room (its nodes not listed: only the chosen one's are needed)."""
    _, level, value, room, idle, n, single, square = row
    if single:
        return Room(Domain(level, NO_LABEL, (value,)), room, idle, n, square)
    return Room(Domain(level, value, ()), room, idle, n, square)


def place(
    domain: Domain, idle: Mapping[str, int], members: int, per_member: int, within: LevelIndex | None = None
) -> dict[str, int]:
    """`members` on the domain's nodes, tightest first (fewest idle GPUs, then name). `within`: the
    level below the domain's (a block's cliques): the members go to the fewest of its sub-domains
    that hold them, split between those as evenly as their room allows (16 + 16, not 14 + 18:
    each sub-domain waits on the slowest), then tightest first inside each."""
    if within is None:
        return _tightest(domain.nodes, idle, members, per_member)
    parts: dict[str, list[str]] = {}
    for node in domain.nodes:  # (a node without the lower label is a part of its own)
        parts.setdefault(within.value_of.get(node, NO_LABEL + node), []).append(node)
    rooms = {part: sum(_fits(idle[n], per_member) for n in nodes) for part, nodes in parts.items()}
    order = sorted(rooms, key=lambda part: (-rooms[part], part))  # the roomiest first
    chosen, held = [], 0
    for part in order:
        if held >= members:
            break
        chosen.append(part)
        held += rooms[part]
    shares = dict.fromkeys(chosen, 0)
    left = min(members, held)  # (the domain holds them: never fewer, but never a loop without end)
    while left > 0:  # one member each in turn: as even as the rooms allow
        for part in chosen:
            if left > 0 and shares[part] < rooms[part]:
                shares[part] += 1
                left -= 1
    placement: dict[str, int] = {}
    for part in chosen:
        placement.update(_tightest(parts[part], idle, shares[part], per_member))
    return placement


def _fits(idle: int, per_member: int) -> int:
    return 1 if per_member <= 0 else idle // per_member


def _tightest(nodes: Iterable[str], idle: Mapping[str, int], members: int, per_member: int) -> dict[str, int]:
    placement: dict[str, int] = {}
    left = members
    for node in sorted(nodes, key=lambda n: (idle[n], n)):
        if left <= 0:
            break
        take = min(_fits(idle[node], per_member), left)
        if take > 0:
            placement[node] = take
            left -= take
    return placement


def shortfall(members: int, per_member: int, levels: Sequence[str], rooms: Sequence[Room]) -> Reason:
    """The same message for every node of the call (kube-scheduler counts equal messages together)."""
    level = rooms[0].domain.level if rooms else (levels[0] if levels else ANY)
    level = level or "node set"
    asked = f"{members} x {per_member} GPUs" if per_member > 0 else f"{members} members"
    best = f"best {rooms[0].domain.name} has room for {rooms[0].members}" if rooms else "no node fits a member"
    return Reason("GroupDoesNotFit", f"no {level} domain holds {asked}: {best}", unresolvable=False)


# For a node outside the group's domain: one short message for thousands of nodes per call (a
# member's answer lists every candidate outside its domain; explain names the domain).
ELSEWHERE = Reason("GroupInOtherDomain", "group is in another domain", unresolvable=True)
