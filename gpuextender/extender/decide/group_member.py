"""A multi-pod group member's filter: its own verdict per node (the single-pod rules, without the
no-fit fallback), then the group's domain (decide/README.md, "Multi-pod groups").

- The group has a plan (a domain chosen at an earlier member, by this replica): only the domain's
  candidates are judged; the others fail GroupInOtherDomain. If the domain still holds every
  member not yet bound, its passing nodes pass. Else the group plans again over every candidate.
- Planning (group_domains.choose): among the domains of the nodes that pass on fresh data (unknown
  is never room), the one that holds every remaining member and strands the least. Where members
  are bound already, only their domain. Its passing nodes pass; every other passing node fails
  GroupInOtherDomain. No domain holds them: every node fails, the passing ones with the shortfall
  (GroupDoesNotFit), so no member starts while the group cannot be whole.
- A call that offers one domain alone (kube-scheduler-1.36's topology-aware gang scheduling) while
  the plan's domain, or a better one among every domain the fit index knows, is another: every
  node fails GroupWaitsForDomain, until kube-scheduler goes round its domains without the plan's,
  which the group then gives up (`MemberOutcome.avoid`). Not for a pod its own spec pins.
- A role of a disaggregated InferenceService whose other role is placed: only that one's block.
  A ComputeDomain's group: a clique no other ComputeDomain uses first (`second_choice`).

Pure: the caller gives the member's plain filter as a function of the candidates, and a
`GroupContext` of what is known of the group.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter

from gpuextender.extender.decide import group_domains, reasons
from gpuextender.extender.decide.filter_outcome import FilterOutcome
from gpuextender.extender.decide.group_domains import ANY, NO_LABEL, Domain, GroupChoice, Levels, Tallied
from gpuextender.extender.decide.reasons import Reason
from gpuextender.extender.decide.whole_gpus import SummaryLookup
from gpuextender.extender.model.pod_group import GroupRef
from gpuextender.extender.state import group_book

_IDLE = attrgetter("idle_gpus")
# A gang member is answered the one node where its room is held (GroupContext.placed_on).
GANG_NODE = Reason(
    "GangMemberHeldElsewhere",
    "the gang's room for this member is held on another node of its domain",
    unresolvable=True,
)
# Soft: the group waits until plans in flight end (settings.MAX_GROUPS).
BOOK_FULL = Reason("GroupBookFull", "too many multi-pod groups in flight: the group waits", unresolvable=False)
# Soft: the group waits until one of its namespace's groups ends (--group-holds-per-namespace).
NAMESPACE_FULL = Reason(
    "GroupNamespaceFull",
    "its namespace has the most multi-pod groups held at once (--group-holds-per-namespace): the group waits",
    unresolvable=False,
)
# Soft: its last hold expired with members that never came, this pod among those that did; a new
# member, or one bound, lets the group be held again.
AWAITING_MEMBERS = Reason(
    "GroupAwaitsMembers",
    "the group's last hold expired with members that never came: it is held again when another member "
    "comes or one binds",
    unresolvable=False,
)
# A call that offers one domain alone (kube-scheduler-1.36's topology-aware gang scheduling tries
# each candidate domain so) while the group's domain, stranding less, is another: the member fails
# there, and kube-scheduler tries the others. Unresolvable: evicting pods here cannot help.
WAITS_FOR_DOMAIN = Reason(
    "GroupWaitsForDomain",
    "the group's domain is another one, which strands fewer GPUs: kube-scheduler is to try it",
    unresolvable=True,
)
# A role of a disaggregated InferenceService on a node outside the block of its other role: the two
# exchange KV caches, which each switch layer between them slows.
COMPOSITE_ELSEWHERE = Reason(
    "OtherRoleInAnotherBlock",
    "the other role of its InferenceService (prefill or decode) is in another block",
    unresolvable=True,
)
# Why a new group waits, by the group book's word (state/group_book.GroupBook.wait_reason).
WAITS = {
    group_book.BOOK_FULL: BOOK_FULL,
    group_book.NAMESPACE_FULL: NAMESPACE_FULL,
    group_book.AWAITING_MEMBERS: AWAITING_MEMBERS,
}


@dataclass(frozen=True, slots=True)
class GroupContext:
    ref: GroupRef
    size: int  # members that make the group whole
    bound: tuple[str, ...]  # nodes of the members already bound (one entry per member)
    per_member: int  # GPUs (or replicas) the member asks for
    levels: tuple[str, ...]  # label keys to try, in order (the group's own key alone, where it names one)
    index: Levels  # a level's values over the inventory's nodes (group_domains.level_index)
    planned: tuple[str, str, str] | None = None  # (level, value, name) of the domain an earlier member got
    notes: tuple[str, ...] = ()  # what explain says besides (a size disagreement, a released hold)
    can_plan: bool = True  # False: a group without a plan waits, for the book's `wait` (WAITS)
    wait: str = ""
    # For explain: the members held per node, when the hold ends, how the domain was chosen.
    held: Mapping[str, int] = field(default_factory=dict)
    expires_in: float | None = None
    why: str = ""
    # A gang's (model/pod_group.GANG_SOURCES) members its scheduler has placed, bound only once the
    # whole gang is: node -> how many, this pod never among them. A gang member is answered one node
    # (where its room is held), so the extender knows where each placed member is. Any other
    # group's: its members kube-scheduler nominated after their preemption (state/group_book.py).
    placed_on: Mapping[str, int] = field(default_factory=dict)
    gang: bool = False
    # Domains kube-scheduler proved infeasible for the group (never offered it over a whole cycle of
    # its domains): never preferred to the call's own again.
    avoided: frozenset[str] = frozenset()
    # Domains this member failed GroupWaitsForDomain in since the plan's domain was last offered:
    # one offered again means kube-scheduler went round its domains without the plan's.
    refused: frozenset[str] = frozenset()
    # The pod's own spec pins it to a domain of its levels or to a node (Kueue's topology-aware
    # scheduling writes a nodeSelector so): the call's domain is its only one, never waited out.
    pinned: bool = False
    # Domains to take only where no other holds the group (decide/compute_domains.shared_by_another:
    # another ComputeDomain's IMEX daemons there); None: every domain alike.
    second_choice: Callable[[Domain], bool] | None = None
    # A role of a disaggregated InferenceService (model/ome/pod_intent.py): `composite` its
    # "namespace/name", `role` engine or decoder; `within`: the nodes of the block (the level above
    # the group's first) where its other role is planned or bound, named `other_block`; None: no
    # other role placed yet, or no level above.
    composite: str = ""
    role: str = ""
    within: frozenset[str] | None = None
    other_block: str = ""

    @property
    def remaining(self) -> int:
        """Members still to place, this one included (at least 1: a pod past the size follows)."""
        return max(1, self.size - len(self.bound) - sum(self.placed_on.values()))


@dataclass(slots=True)
class MemberOutcome:
    outcome: FilterOutcome
    choice: GroupChoice  # what to hold (chosen) or why nothing holds the group (reason)
    planned_again: bool  # an earlier plan's domain was among the candidates and no longer held the group
    offered: bool = False  # the plan's domain was among the candidates
    refused_in: str = ""  # the call's one domain, failed GroupWaitsForDomain (the group's is another)
    avoid: str = ""  # a domain kube-scheduler proved infeasible for the group (GroupContext.avoided)


@dataclass(frozen=True, slots=True)
class FleetRooms:
    """The fit index's rooms over every node it knows, not only a call's candidates (a member whose
    filter is the index's road): `rooms(level)` per domain, `nodes(level, value, single)` the
    domain's fresh fits."""

    rooms: Callable[[str], Tallied | None]
    nodes: Callable[[str, str, bool], Sequence[str]]


def one_domain(level: str, names: Sequence[str], index: Levels) -> str | None:
    """The name of the one domain of `level` every candidate is in, or None (candidates of several
    domains, one without the label, or none): a call that offers one domain alone."""
    if level == ANY or not names:
        return None
    value_of = index(level).value_of
    first = value_of.get(names[0])
    if first is None:
        return None
    for n in names:  # (returns at the first other value: a call of many domains costs a few lookups)
        if value_of.get(n) != first:
            return None
    return f"{level}={first}"


def domain_nodes(level: str, value: str, name: str, names: Sequence[str], index: Levels) -> list[str]:
    """The candidates of `names` in the domain (level, value, name), in request order."""
    if level == ANY:
        return list(names)
    if value == NO_LABEL:
        single = name.removeprefix("node ")
        return [n for n in names if n == single]
    members = index(level).nodes_of.get(value, frozenset())
    return list(filter(members.__contains__, names))


def filter_member(
    group: GroupContext,
    names: Sequence[str],
    plain: Callable[[Sequence[str]], FilterOutcome],
    summary: SummaryLookup,
    tallied: Callable[[str], Tallied | None] | None = None,
    fleet: FleetRooms | None = None,
) -> MemberOutcome:
    """`plain(names)`: the member's own filter over `names` (no fallback); `summary`: what it read;
    `tallied(level)`: the rooms per domain the fit index keeps, where `plain` is its road (a
    class-neutral pod of whole GPUs read in the agents' own summaries), and `fleet` the same over
    every node the index knows. A role of a composite whose other role is placed chooses only
    among the nodes of that one's block (`GroupContext.within`)."""
    within = group.within
    if within is None:
        return _filter_member(group, names, plain, summary, tallied, fleet)
    inside = [n for n in names if n in within]
    out = _filter_member(group, inside, plain, summary)  # (the index's rooms count every candidate)
    out.outcome.failed.update((n, COMPOSITE_ELSEWHERE) for n in names if n not in within)
    return out


def _filter_member(
    group: GroupContext,
    names: Sequence[str],
    plain: Callable[[Sequence[str]], FilterOutcome],
    summary: SummaryLookup,
    tallied: Callable[[str], Tallied | None] | None = None,
    fleet: FleetRooms | None = None,
) -> MemberOutcome:
    planned = group.planned
    pins = (*group.bound, *group.placed_on)  # members bound, or placed by a gang's scheduler
    tried = False
    avoid = ""
    if planned is not None:
        level, value, name = planned
        inside = domain_nodes(level, value, name, names, group.index)
        tried = bool(inside)
        if not inside and not pins and not group.pinned:
            one = one_domain(level, names, group.index)
            if one is not None and one not in group.refused:
                # The plan's domain holds the group and kube-scheduler is trying another alone.
                choice = GroupChoice(None, {}, (), WAITS_FOR_DOMAIN, 0)
                return MemberOutcome(_refused(plain(names)), choice, False, refused_in=one)
            if one is not None:  # a whole round of domains without the plan's: infeasible for kube-scheduler
                avoid = name
        base = plain(inside)
        idle = _fresh_idle(base, summary)
        below = group.levels[group.levels.index(level) - 1] if level in group.levels[1:] else ""
        choice = group_domains.choose(
            group.remaining, group.per_member, idle, (level,), group.index, inside, _named(name), below
        )
        if choice.chosen is not None:
            return MemberOutcome(_answer(base, choice, names, group.gang), choice, False, offered=True)
    if tallied is not None and not pins and (planned is not None or group.can_plan):
        # The domain from the index's rooms; then only its candidates are judged: every other
        # candidate fails GroupInOtherDomain, as for a planned member (no pass over thousands).
        judged: dict[str, FilterOutcome] = {}

        def domain_passes(level: str, value: str, single: bool) -> Sequence[str]:
            inside = [n for n in names if n == value] if single else domain_nodes(level, value, "", names, group.index)
            outcome = judged["domain"] = plain(inside)
            return () if outcome.assumed else outcome.passed

        idle_of = partial(_idle_of, summary)
        quick = group_domains.choose_tallied(
            group.remaining, group.per_member, group.levels, group.index, names, tallied, domain_passes, idle_of
        )
        skip = group.avoided | {avoid} if avoid else group.avoided
        better = _better_elsewhere(group, names, quick, fleet, idle_of, skip)
        if better is not None:
            return MemberOutcome(_refused(plain(names)), better[0], tried, tried, better[1], avoid)
        if quick is not None and quick.chosen is not None:
            return MemberOutcome(_answer(judged["domain"], quick, names, group.gang), quick, tried, tried, "", avoid)
        if quick is not None:  # no domain holds the group: every node's own verdict, for the reasons
            return MemberOutcome(_answer(plain(names), quick, (), group.gang), quick, tried, tried, "", avoid)
    base = plain(names)
    if planned is None and not group.can_plan:
        choice = GroupChoice(None, {}, (), WAITS.get(group.wait, BOOK_FULL), 0)
        return MemberOutcome(_answer(base, choice, []), choice, False)
    idle = _fresh_idle(base, summary)
    only = _holding_bound(pins, group.index) if pins else None
    picked: GroupChoice | None = None
    if (second := group.second_choice) is not None:  # first among the domains not second choices
        first = (lambda d: not second(d)) if only is None else (lambda d: only(d) and not second(d))
        picked = group_domains.choose(group.remaining, group.per_member, idle, group.levels, group.index, names, first)
    if picked is None or picked.chosen is None:
        picked = group_domains.choose(group.remaining, group.per_member, idle, group.levels, group.index, names, only)
    return MemberOutcome(_answer(base, picked, (), group.gang), picked, tried, tried, "", avoid)


def _better_elsewhere(
    group: GroupContext,
    names: Sequence[str],
    quick: GroupChoice | None,
    fleet: FleetRooms | None,
    idle_of: Callable[[str], int],
    skip: frozenset[str],
) -> tuple[GroupChoice, str] | None:
    """Where the call offers one domain alone: the domain among every one the index knows that
    holds the group stranding strictly less than the call's (or where the call's holds it not),
    with the call's domain's name; None where the call's is as good, or the call offers several
    (kube-scheduler's own filters left the others out: they are infeasible)."""
    level = group.levels[0] if group.levels else ANY
    if fleet is None or group.pinned:
        return None
    one = one_domain(level, names, group.index)
    if one is None:
        return None
    best = group_domains.choose_tallied(
        group.remaining, group.per_member, (level,), group.index, names, fleet.rooms, fleet.nodes, idle_of, skip
    )
    if best is None or best.chosen is None or best.chosen.domain.name == one:
        return None
    here = quick.chosen if quick is not None else None
    members, per_member = group.remaining, group.per_member
    if here is not None and _rank(best.chosen, members, per_member) >= _rank(here, members, per_member):
        return None  # as good (a name decides a tie): not worth a round of kube-scheduler's
    return best, one


def _rank(r: group_domains.Room, members: int, per_member: int) -> tuple[int, ...]:
    return group_domains.preference(r.members, r.idle, r.nodes, "", members, per_member, r.square)[:-1]


def _refused(base: FilterOutcome) -> FilterOutcome:
    """Every candidate fails: those the member itself fails keep their reason, the others
    GroupWaitsForDomain."""
    failed = dict.fromkeys(base.passed, WAITS_FOR_DOMAIN)
    failed.update(base.failed)
    failed.update(dict.fromkeys(base.assumed, reasons.NO_FRESH_GPU_DATA))
    return FilterOutcome([], failed)


def _idle_of(summary: SummaryLookup, node: str) -> int:
    s = summary(node)
    return s.idle_gpus if s is not None else 0


def _fresh_idle(base: FilterOutcome, summary: SummaryLookup) -> dict[str, int]:
    """The nodes that pass on fresh data, with their free idle GPUs (assumed passes hold no room)."""
    if not base.assumed:  # every pass is a fresh fit, with its summary: in C
        summaries = list(map(summary, base.passed))
        if None not in summaries:
            return dict(zip(base.passed, map(_IDLE, summaries), strict=True))
    assumed = set(base.assumed)
    idle: dict[str, int] = {}
    for n in base.passed:
        s = summary(n)
        if n not in assumed and s is not None:
            idle[n] = s.idle_gpus
    return idle


def _answer(base: FilterOutcome, choice: GroupChoice, names: Sequence[str], gang: bool = False) -> FilterOutcome:
    """The outcome: `base`'s passes in the chosen domain pass (a gang member: only the first node
    of the placement, where its room is held); every other candidate of `names` (or, with none
    given, of `base`'s passes) fails GroupInOtherDomain, the rest keep `base`'s reasons. In C but
    for the domain's own nodes: a first member's filter has thousands of passes."""
    chosen = choice.chosen
    if chosen is None:
        assert choice.reason is not None
        failed = dict(base.failed)
        failed.update(dict.fromkeys(base.passed, choice.reason))
        return FilterOutcome([], failed)
    members = frozenset(chosen.domain.nodes)
    if gang:
        members = frozenset(list(choice.placement)[:1])
    failed = dict.fromkeys(names or base.passed, group_domains.ELSEWHERE)
    passed = list(filter(members.__contains__, base.passed))
    for n in passed:
        failed.pop(n, None)  # (a name sent twice passes twice)
    failed.update(base.failed)
    if gang:  # the domain's other nodes: the gang's room for this member is held on the one passed
        failed.update(dict.fromkeys([n for n in chosen.domain.nodes if n not in members], GANG_NODE))
    # (A pass on assumed data is never in a domain's room: there is none while a fresh node fits.)
    failed.update(dict.fromkeys(base.assumed, reasons.NO_FRESH_GPU_DATA))
    return FilterOutcome(passed, failed)


def _named(name: str) -> Callable[[Domain], bool]:
    return lambda d: d.name == name


def _holding_bound(bound: Sequence[str], index: Levels) -> Callable[[Domain], bool]:
    """Only a domain that holds every bound member's node (by label: a bound node need not pass)."""

    def holds(d: Domain) -> bool:
        if d.level == ANY:
            return True
        if d.value == NO_LABEL:
            return all(n == d.nodes[0] for n in bound)
        value_of = index(d.level).value_of
        return all(value_of.get(n) == d.value for n in bound)

    return holds
