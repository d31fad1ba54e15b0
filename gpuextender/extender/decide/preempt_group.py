"""A multi-pod group's preemption: one domain for every member not yet placed (issue 51, item 4;
decide/README.md, "Preemption").

kube-scheduler preempts pod by pod: each member asks for the victims that make room for itself,
wherever they are cheapest, and a second member's clique affinity is met by no bound member yet, so
members of one group evict in different domains, no domain then holds the group, and they evict
again. Here a member's preempt call keeps only the nodes of one domain: the one whose cheapest
eviction set makes room for every member not yet placed.

Per domain (the group's levels in order, as group_domains.choose: the first level where a domain
can be made to hold the group wins; only domains holding the bound members' nodes):
- its nodes that pass the member's filter now (fresh data) hold idle // per-member members, free;
- each candidate kube-scheduler proposed there holds more members once victims go: the victims for
  m members on a node are what preempt_victims.judge_node picks for m x per-member GPUs (the
  single-pod rules: kube-scheduler's victims, then the cheapest lower-priority GPU pods; never a
  failing or busy GPU counted as freed, never a victim of equal or higher priority);
- the members not held free are added one at a time where the next one costs least (PodDisruption-
  Budget violations, then the highest victim priority, victims, victim GPUs: kube-scheduler's own
  order of candidates);
- the domain's cost is the sum; the cheapest domain wins, then issue 34's rules (least stranded,
  fewest nodes, the smaller name), so every replica that sees the same state chooses the same.

A domain an earlier member chose (the group's plan) is kept while evictions can still make it hold
the group: every later member preempts inside it. The answer keeps the chosen candidates, each
with the victims for its members; every other candidate is dropped with the reason, and where no
domain can be made to hold the group, every candidate is (the group waits whole). A candidate
without fresh data is never room. Pure: every input is an argument.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from gpuextender.extender.decide import preempt_claims
from gpuextender.extender.decide.group_domains import ANY, NO_LABEL
from gpuextender.extender.decide.group_member import GroupContext
from gpuextender.extender.decide.preempt_victims import (
    NodeFacts,
    NodePlan,
    PreemptionPlan,
    Proposal,
    Violations,
    drop,
    judge_node,
)
from gpuextender.extender.decide.reasons import Reason
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.state.freshness import is_fresh
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.pod_ledger import BoundPod

MAX_NEIGHBOURS = 5_000  # nodes a preempt call judges besides kube-scheduler's candidates (their domains')
Cost = tuple[int, int, int, int]  # (PDB violations, highest victim priority, victims, victim GPUs)
NOTHING: Cost = (0, -(2**31), 0, 0)


@dataclass(frozen=True, slots=True)
class GroupPreemption:
    plan: PreemptionPlan
    domain: tuple[str, str, str] | None  # (level, value, name) chosen; None: no domain can hold the group
    placement: Mapping[str, int]  # node -> members the domain holds there (the group's hold); why: plan.note


@dataclass(slots=True)
class _Node:
    """A candidate with fresh data: its plans for 1, 2, ... members (computed as they are asked)."""

    proposal: Proposal
    facts: NodeFacts
    summary: NodeSummary  # less the GPUs of claims another pod also uses (preempt_claims.freed_only)
    plans: list[NodePlan]  # plans[m - 1]: the plan for m members
    cap: int  # members its healthy GPUs could ever hold


@dataclass(frozen=True, slots=True)
class _Choice:
    level: str
    value: str
    name: str
    cost: Cost
    preference: tuple[int, int, str]  # (stranded GPUs, nodes, name)
    taken: Mapping[str, int]  # candidate -> members that need its evictions
    free: Mapping[str, int]  # node passing now -> members it holds without evictions
    inside: frozenset[str]  # the domain's nodes among the call's


def neighbours(group: GroupContext, names: Sequence[str], limit: int = MAX_NEIGHBOURS) -> list[str]:
    """The other nodes of the candidates' domains (and of the group's planned one), at most `limit`,
    sorted: a domain's nodes where the member fits now are no candidates of kube-scheduler's (a node
    that needs no victim is not proposed), yet they hold members."""
    given = set(names)
    found: set[str] = set()
    levels = [lv for lv in group.levels if lv != ANY]
    if group.planned is not None and group.planned[0] != ANY and group.planned[1] != NO_LABEL:
        found.update(group.index(group.planned[0]).nodes_of.get(group.planned[1], ()))
    for level in levels:
        index = group.index(level)
        for value in {v for n in names if (v := index.value_of.get(n)) is not None}:
            found.update(index.nodes_of.get(value, ()))
            if len(found) > limit + len(given):
                break
    return sorted(found - given)[:limit]


def plan_group(
    pod: PodRequest,
    group: GroupContext,
    proposals: Sequence[Proposal],
    verdicts: Mapping[str, Reason],
    passing: Collection[str],
    facts: Callable[[str], NodeFacts],
    now: float,
    stale_after_s: float,
    bound: Callable[[str], BoundPod | None],
    violations: Violations,
) -> GroupPreemption | None:
    """`passing`: the nodes (the candidates and their domains' other nodes) where the member fits
    now, on its own verdicts without the fallback; `verdicts`: its failures there. None: the
    single-pod rules decide (preempt_victims.plan): no candidate has fresh data, so nothing is
    known of any domain's room, or the member gets GPUs through claims (no victim is ever added
    for one: preempt_claims.py)."""
    per = group.per_member
    if per <= 0 or not pod.preempts or pod.claims_read:  # (claim pods: kube-scheduler's victims or none)
        return None
    nodes: dict[str, _Node] = {}
    unknown: list[Proposal] = []
    dropped: dict[str, NodePlan] = {}
    for p in proposals:
        if p.node in nodes or p.node in dropped:
            continue
        f = facts(p.node)
        s = f.summary
        if s is None or not is_fresh(s.received_at, now, stale_after_s):
            unknown.append(p)
            continue
        reason = verdicts.get(p.node)
        if reason is not None and reason.unresolvable:
            dropped[p.node] = drop(p, f"{reason.code}: no eviction makes the node usable for the pod")
            continue
        nodes[p.node] = _Node(p, f, preempt_claims.freed_only(s, f.pods), [], s.healthy_gpus // per)
    if not nodes:
        if unknown:
            return None
        return GroupPreemption(PreemptionPlan(tuple(_ordered(proposals, dropped))), None, {})
    idle: dict[str, int] = {}  # nodes passing now, not proposed -> their free idle GPUs
    for node in passing:
        s = facts(node).summary
        if node not in nodes and s is not None and is_fresh(s.received_at, now, stale_after_s):
            idle[node] = s.idle_gpus

    def judge(n: _Node, members: int) -> NodePlan | None:
        """The node's plan for `members` members (None: it cannot hold that many)."""
        while len(n.plans) < members:
            if len(n.plans) >= n.cap or (n.plans and not n.plans[-1].answered):
                return None
            f, m = n.facts, len(n.plans) + 1
            n.plans.append(
                judge_node(pod.priority, m * per, n.proposal, n.summary, f.reported, f.pods, bound, violations)
            )
        found = n.plans[members - 1]
        return found if found.answered else None

    def cost(plan: NodePlan | None) -> Cost:
        if plan is None:
            return NOTHING
        victims = [b for uid in dict.fromkeys(plan.victims) if (b := bound(uid)) is not None]
        top = max((b.priority for b in victims), default=NOTHING[1])
        return (plan.pdb_violations, top, len(plan.victims), sum(b.gpus for b in victims))

    choice = _choose(group, nodes, idle, judge, cost)
    if choice is None:
        why = (
            f"group {group.ref.key}: no {_levels(group)} domain can be made to hold its {group.remaining} member(s) "
            f"of {per} GPU(s) by evicting lower-priority pods: the group waits whole"
        )
        for n in nodes.values():
            dropped[n.proposal.node] = drop(n.proposal, why)
        for p in unknown:
            dropped[p.node] = drop(p, why)
        return GroupPreemption(PreemptionPlan(tuple(_ordered(proposals, dropped)), why), None, {})
    evicted = sum(choice.taken.values())
    summary = (
        f"group {group.ref.key}: preempts in {choice.name}: {choice.cost[2]} pod(s), {choice.cost[3]} GPU(s) "
        f"evicted make room for {evicted} of its {group.remaining} member(s) to place "
        f"({group.remaining - evicted} on free GPUs)"
    )
    answered: dict[str, NodePlan] = dict(dropped)
    for node, n in nodes.items():
        members = choice.taken.get(node, 0)
        found = judge(n, members) if members else None
        if found is None:
            why = f"group {group.ref.key} preempts in {choice.name}"
            if node in choice.inside:
                why = f"group {group.ref.key}: {choice.name}'s cheaper candidates make room for it"
            answered[node] = drop(n.proposal, why, _usable(n))
        else:
            answered[node] = found._replace(why=f"group {group.ref.key}, {members} member(s) here: {found.why}")
    for p in unknown:
        answered[p.node] = drop(p, f"no fresh GPU data: group {group.ref.key} preempts in {choice.name}")
    placement = dict(choice.free)
    for node, members in choice.taken.items():
        placement[node] = placement.get(node, 0) + members
    plan = PreemptionPlan(tuple(_ordered(proposals, answered)), summary)
    return GroupPreemption(plan, (choice.level, choice.value, choice.name), placement)


def _choose(
    group: GroupContext,
    nodes: Mapping[str, _Node],
    idle: Mapping[str, int],
    judge: Callable[[_Node, int], NodePlan | None],
    cost: Callable[[NodePlan | None], Cost],
) -> _Choice | None:
    everywhere = set(nodes) | set(idle)
    planned = group.planned
    if planned is not None:  # an earlier member's domain, while evictions can still make it hold the group
        level, value, name = planned
        # Its held nodes that are neither candidates nor fit now: an earlier member's victims are
        # leaving them (kube-scheduler proposes no node a member is nominated to): their room is the group's.
        # (Less the members nominated there, which `remaining` counts placed already.)
        leaving = {n: m - group.placed_on.get(n, 0) for n, m in group.held.items() if n not in everywhere}
        inside = _members(group, level, value, name, everywhere)
        kept = _domain_choice(level, value, name, inside, group, nodes, idle, judge, cost, leaving)
        if kept is not None:
            return kept
    levels = [lv for lv in group.levels if lv != ANY and not group.index(lv).value_of.keys().isdisjoint(everywhere)]
    for level in levels or [ANY]:
        by_value: dict[str, list[str]] = {}
        value_of = group.index(level).value_of if level != ANY else {}
        for node in everywhere:
            carried = ANY if level == ANY else value_of.get(node)
            by_value.setdefault(NO_LABEL + node if carried is None else carried, []).append(node)
        best: _Choice | None = None
        for value, members in by_value.items():
            single = value.startswith(NO_LABEL)
            name = "any nodes" if level == ANY else (f"node {members[0]}" if single else f"{level}={value}")
            if not _holds_bound(group, level, NO_LABEL if single else value, members):
                continue
            found = _domain_choice(level, NO_LABEL if single else value, name, members, group, nodes, idle, judge, cost)
            if found is not None and (best is None or (found.cost, found.preference) < (best.cost, best.preference)):
                best = found
        if best is not None:
            return best
    return None


def _domain_choice(
    level: str,
    value: str,
    name: str,
    members: Sequence[str],
    group: GroupContext,
    nodes: Mapping[str, _Node],
    idle: Mapping[str, int],
    judge: Callable[[_Node, int], NodePlan | None],
    cost: Callable[[NodePlan | None], Cost],
    leaving: Mapping[str, int] | None = None,
) -> _Choice | None:
    """The cheapest eviction set inside one domain that holds every member to place, or None.
    `leaving`: nodes of the domain whose room for members an earlier eviction is freeing."""
    need, per = group.remaining, group.per_member
    held: dict[str, int] = {}  # node passing now -> members placed there, tightest first (as the filter places)
    for node, room in sorted((leaving or {}).items()):
        if need > 0 and room > 0:
            held[node] = min(room, need)
            need -= held[node]
    for node in sorted((n for n in members if idle.get(n, 0) >= per), key=lambda n: (idle[n], n)):
        if need <= 0:
            break
        held[node] = min(idle[node] // per, need)
        need -= held[node]
    taken: dict[str, int] = {}
    steps: list[tuple[Cost, str, int]] = []
    for node in members:
        n = nodes.get(node)
        if n is not None and need > 0:
            first = judge(n, 1)
            if first is not None:
                steps.append((cost(first), node, 1))
    heapq.heapify(steps)
    while need > 0 and steps:  # one more member where it costs least
        _, node, m = heapq.heappop(steps)
        taken[node] = m
        need -= 1
        n = nodes[node]
        if need > 0:
            more = judge(n, m + 1)
            if more is not None:
                before, after = cost(judge(n, m)), cost(more)
                step = (after[0] - before[0], after[1], after[2] - before[2], after[3] - before[3])
                heapq.heappush(steps, (step, node, m + 1))
    if need > 0:
        return None
    pdb = victims = gpus = 0
    top = NOTHING[1]
    usable = sum(idle.get(n, 0) for n in members)  # the idle GPUs of the domain's passing nodes ...
    for node, m in taken.items():
        c = cost(judge(nodes[node], m))
        pdb, top, victims, gpus = pdb + c[0], max(top, c[1]), victims + c[2], gpus + c[3]
        usable += _usable(nodes[node], m) or 0  # ... and those the evictions make usable
    stranded = usable - group.remaining * per
    used = len(taken) + len(held)
    return _Choice(
        level, value, name, (pdb, top, victims, gpus), (stranded, used, name), taken, held, frozenset(members)
    )


def _members(group: GroupContext, level: str, value: str, name: str, everywhere: Collection[str]) -> list[str]:
    """The nodes of `everywhere` in the domain (level, value, name)."""
    if level == ANY:
        return list(everywhere)
    if value == NO_LABEL:
        single = name.removeprefix("node ")
        return [single] if single in everywhere else []
    inside = group.index(level).nodes_of.get(value, frozenset())
    return [n for n in everywhere if n in inside]


def _holds_bound(group: GroupContext, level: str, value: str, members: Sequence[str]) -> bool:
    """Only a domain that holds every bound (or nominated) member's node (by label: such a node need
    not pass)."""
    pins = (*group.bound, *group.placed_on)
    if not pins or level == ANY:
        return True
    if value == NO_LABEL:
        return all(n == members[0] for n in pins)
    value_of = group.index(level).value_of
    return all(value_of.get(n) == value for n in pins)


def _levels(group: GroupContext) -> str:
    return ", ".join(group.levels) or "any-nodes"


def _usable(n: _Node, members: int = 1) -> int | None:
    return n.plans[members - 1].usable if len(n.plans) >= members else None


def _ordered(proposals: Sequence[Proposal], plans: Mapping[str, NodePlan]) -> list[NodePlan]:
    """One plan per proposed node, in kube-scheduler's order."""
    seen: set[str] = set()
    out: list[NodePlan] = []
    for p in proposals:
        if p.node not in seen and p.node in plans:
            seen.add(p.node)
            out.append(plans[p.node])
    return out
