"""kube-scheduler's preemption checked against what the GPUs do (issue 51, items 2-3;
decide/README.md, "Preemption").

kube-scheduler dry-runs preemption with its own plugins, which count `nvidia.com/gpu` as an
integer: they cannot tell that the GPUs an eviction frees are failing, or that GPUs they call free
are busy outside Kubernetes. With `preemptVerb` it asks the extender (ProcessPreemption) about its
candidates, node -> victims, and takes back the nodes and victims answered. Per candidate:

- the pod cannot use the node whatever is evicted (the extender's filter fails it unresolvably:
  class, broken or too few healthy GPUs; without fresh data, too few GPUs is not one of them: that
  is the allocatable less the bound pods, which evictions change): dropped;
- fresh GPU data: the GPUs the pod would have once the victims are gone = the node's free, idle,
  healthy GPUs (less bound pods and group holds, as filter counts them) + the healthy GPUs the
  victims hold (a bound pod the agent does not attribute yet gives back what it was counted for).
  Enough: kept with kube-scheduler's victims (its dry run found each of them necessary for what it
  checks: resources besides GPUs, ports, affinity). Not enough: the node's other GPU pods of lower
  priority are added, cheapest first (`cheapest_first`), then each added one that is not needed is
  left out again, and the PodDisruptionBudgets they would break are added to kube-scheduler's
  count; still not enough, or the budgets not known yet: dropped. A node that would fit with no victim is dropped too (a
  candidate must name at least one victim; the pod fits there at its next attempt);
- no fresh data (none, or stale under fail-open): unknown is never room, so such a node is kept as
  proposed only while no node with fresh data is kept; stale under fail-closed: dropped.

Never a victim of equal or higher priority than the pod; a candidate whose victims include one
(per the ledger) is dropped. Every node answered names at least one victim (kube-scheduler, 1.36
included, refuses the whole answer otherwise: "expected at least one victim pod on node"), so a
candidate proposed with none (kubernetes PR #135486 lets newer kube-scheduler send them; not seen
from kube-scheduler-1.36 in the suite) is answered only when the extender adds some. Pure:
every input is an argument.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import NamedTuple, Protocol

from gpuextender.extender.decide import preempt_claims, reasons
from gpuextender.extender.decide.reasons import Reason
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.state.freshness import is_fresh
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.pod_ledger import BoundPod

RUNNING = "Running"
_KEY_AND_UNITS = itemgetter(0, 1)  # ("namespace/pod", units) of a NodeSummary.pod_units entry
Violations = Callable[[Sequence[BoundPod], Sequence[BoundPod]], "int | None"]
Part = tuple[BoundPod, int, int]  # a pod and what evicting it frees: (pod, held, pending), Room.part
# What happened to each candidate (explain, the log line, gpu_extender_preemption_nodes_total).
KEPT, EXTENDED, DROPPED, AS_PROPOSED = "kept", "extended", "dropped", "as proposed"
ACTIONS = (KEPT, EXTENDED, DROPPED, AS_PROPOSED)


class Budgets(Protocol):
    """The PodDisruptionBudgets as the preempt verb reads them (state/disruption_budgets.py)."""

    @property
    def generation(self) -> int:
        """Changes whenever anything `violations` reads does: a plan that read the budgets is kept
        for the generation it read (`judge_table`)."""
        ...

    def violations(self, pods: Sequence[BoundPod], before: Sequence[BoundPod]) -> int | None:
        """How many of `pods` evicting after `before` would take a budget below zero; None: not known."""
        ...


# Proposal and NodePlan are NamedTuples, immutable as a frozen dataclass and built in C: a call
# makes one of each per candidate (500 at 5,000 nodes; a frozen dataclass costs ~1.3 µs each).
class Proposal(NamedTuple):
    """One candidate as kube-scheduler proposed it: its victims by pod UID."""

    node: str
    victims: tuple[str, ...]
    pdb_violations: int


class NodePlan(NamedTuple):
    node: str
    action: str  # one of ACTIONS
    victims: tuple[str, ...]  # the victims answered (UIDs); () when dropped
    pdb_violations: int
    why: str
    usable: int | None = None  # GPUs the pod would have once the victims are gone; None: not known
    added: tuple[str, ...] = ()  # victims the extender added (UIDs)
    proposed: tuple[str, ...] = ()  # kube-scheduler's victims (UIDs)

    @property
    def answered(self) -> bool:
        return self.action != DROPPED


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    nodes: tuple[NodePlan, ...]
    note: str = ""  # why the candidates were not judged (kube-scheduler's count decides), if so

    def answer(self) -> dict[str, tuple[tuple[str, ...], int]]:
        """node -> (victim UIDs, PDB violations), for every node kept."""
        return {n.node: (n.victims, n.pdb_violations) for n in self.nodes if n.answered}


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the plan reads of one node (scheduler/ gathers it)."""

    summary: NodeSummary | None  # what the decisions read (less bound pods and holds)
    reported: NodeSummary | None  # the agent's own
    pods: Collection[BoundPod]  # the ledger's pods bound there
    # The same pods by UID, where the caller has them: a victim is looked up there (a small dict)
    # rather than through plan's `bound`, which then only counts it on this node.
    by_uid: Mapping[str, BoundPod] | None = None
    # What each of those pods frees, where the caller keeps it between calls (victim_table): the
    # common candidate is then a lookup per victim.
    table: VictimTable | None = None


@dataclass(slots=True)
class VictimTable:
    """One node's pods as `judge_node` reads them, for a summary and a set of pods: what evicting
    each frees, so that judging a candidate is a dict lookup per victim and a sum (`judge_table`).
    Its fields are never reassigned; `judged` and `order` are caches of what it gives (below)."""

    read: NodeSummary  # the summary it was made from (what the decisions read)
    reported: NodeSummary | None  # the agent's own
    summary: NodeSummary  # `read` less the GPUs of claims another pod also uses (preempt_claims.freed_only)
    room: Room  # over `summary`
    parts: Mapping[str, tuple[int, int, int]]  # uid -> (priority, held, pending): Room.part
    every: tuple[int, int, int]  # every pod's: (the highest priority, held, pending); kube-scheduler's usual victims
    key: tuple[object, ...]  # room_key of `read` and `reported`: what it is made of besides the pods
    # The JUDGED_KEPT judgements used last: (the pod's priority, GPUs needed, the proposal, the
    # generation of the PodDisruptionBudgets it read or None where it read none, its plan). Pods of
    # one shape (a Deployment's replicas, a pod tried again) meet the same victims on a node: a tuple
    # compare instead of a judgement.
    judged: list[tuple[int, int, Proposal, int | None, NodePlan]] = field(default_factory=list)
    # Every pod with what it frees, in cheapest_first's order less its PodDisruptionBudget part; made
    # when a candidate first needs victims added (`_extended`).
    order: list[Part] | None = None


JUDGED_KEPT = 2  # judgements kept per table: two pod shapes preempting in turn still meet theirs


def victim_table(s: NodeSummary, reported: NodeSummary | None, pods: Collection[BoundPod]) -> VictimTable:
    """`judge_table`'s view of a node with fresh data (`s`: what the decisions read there)."""
    freed = preempt_claims.freed_only(s, pods) if any(b.claims for b in pods) else s
    room = Room(freed, reported)
    parts: dict[str, tuple[int, int, int]] = {}
    alike: dict[tuple[int, int, int], tuple[int, int, int]] = {}  # (one tuple for the pods that free alike)
    held = pending = 0
    for b in pods:
        h, q = room.part(b)
        part = (b.priority, h, q)
        parts[b.uid] = alike.setdefault(part, part)
        held, pending = held + h, pending + q
    top = max(p[0] for p in parts.values()) if parts else 0
    return VictimTable(s, reported, freed, room, parts, (top, held, pending), room_key(s, reported))


def room_key(s: NodeSummary, reported: NodeSummary | None) -> tuple[object, ...]:
    """Everything of a node's summaries a VictimTable is made of (`Room`, `victim_table`'s claims'
    part: preempt_claims.freed_only, and `_cost`): summaries of equal keys are judged alike over the
    same pods. Each report makes a new summary object (its `received_at`, at least every agent
    heartbeat), most of them reading alike: `rebased` keeps the table over them."""
    return (
        s.holder_pods if s.free_gpus is not None else None,
        s.pod_units,
        s.idle_gpus,
        s.bound_pod_units,
        s.healthy_gpus,
        None if reported is None else reported.idle_gpus,
    )


def rebased(t: VictimTable, s: NodeSummary, reported: NodeSummary | None) -> VictimTable | None:
    """`t` over the summaries `s` and `reported` of the same node and pods, where they read as the
    ones it was made from (`room_key`): what it holds, the judgements it keeps included, is then
    what would be made of them. None where they differ."""
    if room_key(s, reported) != t.key:
        return None
    # Over `s` itself where no claim is shared (freed_only gave `read` back), so that the summaries
    # it was made from are not held; else `s` less what freed_only took (the same pod_units).
    freed = s if t.summary is t.read else replace(s, pod_units=t.summary.pod_units)
    # (each field named: dataclasses.replace costs ~5x this, once per candidate read again)
    return VictimTable(s, reported, freed, t.room, t.parts, t.every, t.key, t.judged, t.order)


def plan(
    pod: PodRequest,
    proposals: Sequence[Proposal],
    verdicts: Mapping[str, Reason],
    facts: Callable[[str], NodeFacts],
    now: float,
    stale_after_s: float,
    stale_policy: str,
    bound: Callable[[str], BoundPod | None],
    violations: Violations = lambda _pods, _before: 0,
    budgets: int | None = None,
) -> PreemptionPlan:
    """`verdicts`: the pod's own filter failures over the proposed nodes, without the no-fit
    fallback; `bound(uid)`: the ledger's pod of that UID (a victim counts on the node it is bound to);
    `violations(pods, before)`: how many of `pods` evicting after `before` would take a
    PodDisruptionBudget below zero, None while the budgets are not known
    (state/disruption_budgets.py); `budgets`: the generation of what `violations` reads (Budgets),
    where the caller knows it (`judge_table`)."""
    if not pod.preempts:  # (kube-scheduler asks only for pods that may preempt)
        return PreemptionPlan(tuple(drop(p, "its preemptionPolicy is Never") for p in proposals))
    note = _not_judged(pod)
    if note:
        return PreemptionPlan(tuple(_as_proposed(p, note) for p in proposals), note)
    judged: list[NodePlan] = []
    unknown: list[tuple[Proposal, bool]] = []  # (proposal, stale)
    for p in proposals:
        f = facts(p.node)
        s = f.summary
        fresh = s is not None and is_fresh(s.received_at, now, stale_after_s)
        reason = verdicts.get(p.node)
        # Without fresh data, too few GPUs is the allocatable less the bound pods, which evictions
        # change: kube-scheduler's own count decides that.
        if reason is not None and reason.unresolvable and (fresh or reason is not reasons.INSUFFICIENT_GPUS):
            judged.append(drop(p, f"{reason.code}: no eviction makes the node usable for the pod"))
        elif s is None or not fresh:
            unknown.append((p, s is not None))
        elif pod.claims_read:  # DRA: kube-scheduler's victims or none (preempt_claims.py)
            c = preempt_claims.judge(pod, p.node, p.victims, s, bound)
            kept = NodePlan(p.node, KEPT, p.victims, p.pdb_violations, c.why, c.usable, (), p.victims)
            judged.append(kept if c.kept else drop(p, c.why, c.usable))
        elif (t := f.table) is not None and f.by_uid is not None and t.read is s and t.reported is f.reported:
            judged.append(judge_table(pod.priority, pod.gpus_needed, p, t, f.pods, f.by_uid, violations, budgets))
        else:
            s = preempt_claims.freed_only(s, f.pods)  # a claim another pod uses is not freed
            here = f.by_uid.get if f.by_uid is not None else bound
            judged.append(judge_node(pod.priority, pod.gpus_needed, p, s, f.reported, f.pods, here, violations))
    if not unknown:  # judged in the order proposed
        return PreemptionPlan(tuple(judged))
    fresh_kept = any(n.answered for n in judged)
    for p, stale in unknown:
        if stale and stale_policy == "fail-closed":
            judged.append(drop(p, f"{reasons.STALE_GPU_DATA.code}: no GPUs are known to be freed"))
        elif fresh_kept:
            judged.append(drop(p, f"{reasons.NO_FRESH_GPU_DATA.code}: nodes with fresh GPU data can take the pod"))
        else:
            judged.append(_as_proposed(p, "no fresh GPU data: kube-scheduler's count decides"))
    order = {p.node: i for i, p in enumerate(proposals)}
    return PreemptionPlan(tuple(sorted(judged, key=lambda n: order[n.node])))


def _not_judged(pod: PodRequest) -> str:
    if pod.gpus_needed <= 0:
        return "no whole GPUs asked for: kube-scheduler's count decides"
    return ""


def judge_node(
    mine: int,
    needed: int,
    p: Proposal,
    s: NodeSummary,
    reported: NodeSummary | None,
    pods: Collection[BoundPod],
    bound: Callable[[str], BoundPod | None],
    violations: Violations,
) -> NodePlan:
    """One candidate with fresh data, for a pod of priority `mine` that needs `needed` GPUs there
    (a group's preemption asks it for several members: preempt_group.py)."""
    node = p.node
    victims: list[BoundPod] = []
    for uid in dict.fromkeys(p.victims):  # each victim once (a UID sent twice frees its GPUs once)
        b = bound(uid)
        if b is not None and b.node == node:
            if b.priority >= mine:
                return drop(p, "a victim's priority is not below the pod's")
            victims.append(b)
    room = Room(s, reported)
    held, pending = room.tally(victims)
    usable = room.usable(held, pending)
    if usable >= needed:  # the common case: kube-scheduler's victims suffice
        return _kept(p, usable)
    return _extended(mine, needed, p, s, pods, victims, room, (held, pending), violations)


def judge_table(
    mine: int,
    needed: int,
    p: Proposal,
    t: VictimTable,
    pods: Collection[BoundPod],
    by_uid: Mapping[str, BoundPod],
    violations: Violations,
    budgets: int | None = None,
) -> NodePlan:
    """`judge_node` over a node's `victim_table` (`pods`, `by_uid`: the pods it was made from): the
    same answers, the victims' parts summed from the table, or the plan the table kept for the same
    pod shape and proposal (`VictimTable.judged`). `budgets`: the generation of the budgets that
    `violations` reads (Budgets.generation), where the caller knows it: a plan that read them (a
    candidate extended) is kept for that generation only; without it, such a plan is not kept."""
    judged = t.judged
    for i, (m, n, known, read, plan) in enumerate(judged):
        if m == mine and n == needed and known == p:  # (compared by value: no string hashed)
            if read is not None and read != budgets:  # the budgets it read have changed since
                del judged[i]
                break
            if i:
                judged.insert(0, judged.pop(i))  # the last used first
            return plan
    parts = t.parts
    # The node's pods among the victims, each once (one bound elsewhere, or no GPU pod, frees nothing
    # here); kube-scheduler often names every one (one set operation, in C, then the table's sums).
    here = parts.keys() & p.victims
    if here and len(here) == len(parts):
        top, held, pending = t.every
        if top >= mine:
            return _judged(t, mine, needed, p, drop(p, "a victim's priority is not below the pod's"))
    else:
        held = pending = 0
        for uid in here:
            priority, h, q = parts[uid]
            if priority >= mine:
                return _judged(t, mine, needed, p, drop(p, "a victim's priority is not below the pod's"))
            held += h
            pending += q
    usable = t.room.usable(held, pending)
    if usable >= needed:
        return _judged(t, mine, needed, p, _kept(p, usable))
    victims = [by_uid[uid] for uid in dict.fromkeys(p.victims) if uid in parts]
    plan = _extended(mine, needed, p, t.summary, pods, victims, t.room, (held, pending), violations, t)
    return plan if budgets is None else _judged(t, mine, needed, p, plan, budgets)


def _judged(
    t: VictimTable, mine: int, needed: int, p: Proposal, plan: NodePlan, budgets: int | None = None
) -> NodePlan:
    """`plan`, kept in `t` as the newest of its judgements (`budgets`: the generation it read, if any)."""
    t.judged.insert(0, (mine, needed, p, budgets, plan))
    del t.judged[JUDGED_KEPT:]
    return plan


def _kept(p: Proposal, usable: int) -> NodePlan:
    """kube-scheduler's victims leave `usable` GPUs, enough."""
    if not p.victims:
        return drop(p, f"fits without evictions ({usable} GPUs usable): no victim to name", usable)
    return NodePlan(p.node, KEPT, p.victims, p.pdb_violations, f"{usable} GPUs usable after", usable, (), p.victims)


def _extended(
    mine: int,
    needed: int,
    p: Proposal,
    s: NodeSummary,
    pods: Collection[BoundPod],
    victims: list[BoundPod],
    room: Room,
    tally: tuple[int, int],
    violations: Violations,
    table: VictimTable | None = None,
) -> NodePlan:
    """kube-scheduler's victims leave too few GPUs: the node's other lower-priority GPU pods added,
    cheapest first, then each one not needed left out again (`tally`: what the victims free;
    `table`: the VictimTable of `pods` over `room` and `s`, where there is one)."""
    if violations((), victims) is None:
        return drop(p, "PodDisruptionBudgets not known yet: no victim added", room.usable(*tally))
    chosen = set(p.victims)
    # Room.usable reads sums: each pod's part is counted once, and adding a pod, or leaving one
    # out again, is an addition, not another pass over every victim.
    others: list[Part] = []
    held, pending = tally
    every_held, every_pending = tally  # (with every one of `others`)
    for o in ((b, *room.part(b)) for b in pods) if table is None else _table_order(table, pods):
        b = o[0]
        if b.uid not in chosen and b.priority < mine and (o[1] or o[2]):  # (what evicting it gives back)
            others.append(o)
            every_held, every_pending = every_held + o[1], every_pending + o[2]
    usable = room.usable(every_held, every_pending)
    if usable < needed:  # (the order they would be added in does not matter then)
        return drop(p, f"evicting every lower-priority GPU pod leaves {usable} of {needed} GPUs usable", usable)
    if table is None:
        ordered = cheapest_first(others, s, lambda b: bool(violations((b,), victims)))
    else:  # in cheapest_first's order already but for the budgets: the pods they protect go last
        ordered = []
        shielded: list[Part] = []
        for o in others:
            (shielded if violations((o[0],), victims) else ordered).append(o)
        ordered += shielded
    added: list[Part] = []
    for o in ordered:
        added.append(o)
        held, pending = held + o[1], pending + o[2]
        if room.usable(held, pending) >= needed:
            break
    for a in reversed(added[:-1]):  # the dearest first: each one not needed stays
        _, h, q = a
        if room.usable(held - h, pending - q) >= needed:
            added = [x for x in added if x is not a]
            held, pending = held - h, pending - q
    usable = room.usable(held, pending)
    pods_added = [b for b, _, _ in added]
    extra = tuple(b.uid for b in pods_added)
    return NodePlan(
        p.node,
        EXTENDED,
        p.victims + extra,
        p.pdb_violations + (violations(pods_added, victims) or 0),
        f"{len(added)} more lower-priority GPU pod(s): {usable} GPUs usable after",
        usable,
        extra,
        p.victims,
    )


def cheapest_first(
    parts: Iterable[Part], s: NodeSummary, protected: Callable[[BoundPod], bool] = lambda _b: False
) -> list[Part]:
    """Victims (each `(pod, held, pending)`: Room.part) in the order the extender adds them: pods no
    PodDisruptionBudget protects first (kube-scheduler picks the candidate with the fewest
    violations first), then lowest priority (its own order); within a priority, pods whose GPUs the
    agent reports idle (fewest busy GPUs first), then the shortest-running (latest start; not
    started yet first), then by UID."""
    cost = _cost(s)
    return sorted(parts, key=lambda part: (protected(part[0]), *cost(part)))


def _cost(s: NodeSummary) -> Callable[[Part], tuple[int, int, float, str]]:
    """cheapest_first's order after the budgets: unique per pod (the UID last)."""
    held = {key: (n, idle) for key, n, idle in s.pod_units}

    def cost(part: Part) -> tuple[int, int, float, str]:
        b = part[0]
        n, idle = held.get(b.key, (0, 0))
        return (b.priority, n - idle, -(b.started or float("inf")), b.uid)

    return cost


def _table_order(t: VictimTable, pods: Collection[BoundPod]) -> list[Part]:
    """`t`'s pods (`pods`: those it was made from) with their parts, in `_cost`'s order; made once."""
    if t.order is None:
        parts = t.parts
        t.order = sorted(((b, parts[b.uid][1], parts[b.uid][2]) for b in pods), key=_cost(t.summary))
    return t.order


class Room:
    """The GPUs a pod would have on one node (fresh data) once some of its pods are gone."""

    __slots__ = ("_bound_units", "_healthy", "_holders", "_raw", "_units")

    def __init__(self, s: NodeSummary, reported: NodeSummary | None) -> None:
        # Allocation known: the pods the agent attributes, and what each holds on healthy GPUs.
        self._holders = s.holder_pods if s.free_gpus is not None else None
        self._units = dict(map(_KEY_AND_UNITS, s.pod_units)) if self._holders is not None else {}
        # What the node offers before the cap at zero (bound pods may take more than it has idle).
        self._raw = s.idle_gpus if s.idle_gpus > 0 or reported is None else reported.idle_gpus - s.bound_pod_units
        self._bound_units = s.bound_pod_units
        self._healthy = s.healthy_gpus

    def part(self, b: BoundPod) -> tuple[int, int]:
        """(held, pending) of `b` alone, `tally`'s terms; their sum is what evicting it gives back: the
        healthy GPUs it holds where the agent attributes it (a failing GPU is never freed), else what
        it was counted for as a bound pod."""
        if self._holders is not None:
            if b.key in self._holders:
                return self._units.get(b.key, 0), 0
            return 0, b.gpus
        return (b.gpus, 0) if b.phase == RUNNING else (0, b.gpus)

    def tally(self, gone: Iterable[BoundPod]) -> tuple[int, int]:
        """(held, pending) of `gone`: the units they hold where the agent attributes them (or, allocation
        unknown, running), and what the others were counted for as bound pods; `usable` reads the sums.
        (`part` summed, in one loop: it runs for every candidate.)"""
        held = pending = 0
        holders = self._holders
        if holders is not None:
            units = self._units
            for b in gone:
                if b.key in holders:
                    held += units.get(b.key, 0)
                else:
                    pending += b.gpus
        else:
            for b in gone:
                if b.phase == RUNNING:
                    held += b.gpus
                else:
                    pending += b.gpus
        return held, pending

    def usable(self, held: int, pending: int) -> int:
        """The GPUs usable once pods of that `tally` are evicted: min(max(0, raw + min(pending, bound
        units)) + held, healthy), without the three calls (it runs several times per candidate)."""
        offered = self._raw + (pending if pending < self._bound_units else self._bound_units)
        usable = (offered if offered > 0 else 0) + held
        return usable if usable < self._healthy else self._healthy


def drop(p: Proposal, why: str, usable: int | None = None) -> NodePlan:
    """`p` dropped: answered with no victim (`usable`: the GPUs known usable there, if judged)."""
    return NodePlan(p.node, DROPPED, (), 0, why, usable, (), p.victims)


def _as_proposed(p: Proposal, why: str) -> NodePlan:
    if not p.victims:  # (kubernetes PR #135486) answered without a victim, kube-scheduler refuses the whole answer
        return drop(p, "no victim to name")
    return NodePlan(p.node, AS_PROPOSED, p.victims, p.pdb_violations, why, None, (), p.victims)
