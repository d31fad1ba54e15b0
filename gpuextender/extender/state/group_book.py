"""Multi-pod groups in flight: the domain each group was given and the room held for its members
not yet bound (decide/README.md, "Multi-pod groups").

A plan is made at a member's filter (decide/group_domains.py chooses; scheduler/decision_inputs.py
records it here). Its holds are GPUs on the domain's nodes that every other pod and group reads as
taken, the bound-pod ledger's rule: they enter the nodes' offered summaries as ledger-like entries
(`pods_on`), so the fit index, DRA and explain see them without a rule of their own. A member
bound to a node (the pod watch or the bind verb) turns one member's hold there into the ledger's
own entry; when every member is bound the plan is done. Every release of a hold is decided here,
its reason kept for explain (the group's next filter plans again): a plan no member made progress
on for `hold_s` (no member bound) (`expire`); one whose domain no longer holds the group, with no
member there (`domain_lost`, from scheduler/group_record.py); one whose PodGroup was deleted
(`deleted`, from the PodGroup watch: app.py).

Bounded: at most MAX_GROUPS plans, and `per_namespace` of one namespace (a new group past either is
told to wait: `wait_reason`), and MAX_RELEASED reasons.
Not pure (a clock), but no I/O: everything runs on the event loop.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gpuextender.extender.model.pod_group import namespace_of
from gpuextender.extender.settings import DEFAULT_GROUPS_PER_NAMESPACE, MAX_GROUPS
from gpuextender.extender.state.pod_ledger import BoundPod

log = logging.getLogger("gpu_extender.groups")

MAX_RELEASED = 1_024  # release reasons kept for explain, the newest
MISSING_SWEEP_S = 1.0  # how often the holds are checked for members that do not exist as pods
MAX_AVOIDED = 16  # domains per group kube-scheduler proved infeasible for it, the newest
BOOK_FULL = "book full"  # (GroupBook.wait_reason)
NAMESPACE_FULL = "namespace full"
AWAITING_MEMBERS = "awaiting members"
HOLD_KEY_PREFIX = "group-hold/"  # the namespace/name its ledger-like entries carry: no pod is named so


@dataclass(slots=True)
class GroupPlan:
    key: str  # model/pod_group.GroupRef.key
    source: str
    size: int
    per_member: int  # GPUs (or replicas) per member
    level: str  # the domain: the label key ("" any nodes) ...
    value: str  # ... and its value (decide/group_domains.NO_LABEL: one node)
    domain_name: str
    holds: dict[str, int]  # node -> members held there (not yet bound)
    chosen_at: float
    expires_at: float
    why: str  # how the domain was chosen, for explain
    # Gang members (uid -> the one node the filter answered) placed and not yet bound.
    passed: dict[str, str] = field(default_factory=dict)
    # Chosen by a member's preempt call (decide/preempt_group.py): the domain holds the group only
    # once its victims are gone, so a filter that finds it short does not release it; it ends when
    # its hold does, or a filter moves the group to a domain that holds it now.
    preempting: bool = False
    # Members kube-scheduler nominated to a node after their preemption (uid -> node; the pod's
    # status.nominatedNodeName), not bound yet: kube-scheduler offers each only its own node, so a
    # member's filter counts the others' there as placed, as a gang's (placed_on).
    nominated: dict[str, str] = field(default_factory=dict)
    # The members (pod UIDs) that asked while the plan held, at most `size`: a hold that expires
    # with fewer was held for members that never came (`GroupBook.wait_reason`).
    seen: set[str] = field(default_factory=set)
    # (member uid, domain name): where a member failed GroupWaitsForDomain since the plan's domain
    # was last offered (at most `size` x MAX_AVOIDED): one offered the same domain again means
    # kube-scheduler went round its domains without the plan's (decide/group_member.py).
    refused: set[tuple[str, str]] = field(default_factory=set)

    def held_members(self) -> int:
        return sum(self.holds.values())


@dataclass(slots=True)
class GroupCounts:
    placed_whole: int = 0  # every member bound while the plan held
    no_domain: int = 0  # filters of a member that no domain could hold
    expired: int = 0  # plans released after hold_s without progress
    # New groups' members told to wait (a filter each; a hold refused): MAX_GROUPS plans in flight, or
    # their namespace's `per_namespace`.
    refused_full: int = 0
    refused_namespace: int = 0
    refused_awaiting: int = 0  # ... or members seen when its hold expired short of members (AWAITING_MEMBERS)
    members_missing: int = 0  # holds released: fewer members existed as pods than the group's size
    waited_for_domain: int = 0  # member filters failed in the one domain offered: the group's is another
    domains_given_up: int = 0  # domains kube-scheduler went round without (`avoid`)


class GroupBook:
    def __init__(
        self,
        hold_s: float,
        clock: Callable[[], float],
        max_groups: int = MAX_GROUPS,
        per_namespace: int = DEFAULT_GROUPS_PER_NAMESPACE,
    ) -> None:
        self.hold_s = hold_s
        self._clock = clock
        self._max = max_groups
        self.per_namespace = per_namespace
        self._plans: dict[str, GroupPlan] = {}
        self._in_namespace: dict[str, int] = {}  # namespace -> its plans
        # Groups whose hold expired with fewer members seen than their size -> those members: none of
        # them makes the group held again, a new member or a bound one does (at most MAX_RELEASED).
        self._awaiting: OrderedDict[str, frozenset[str]] = OrderedDict()
        # Groups -> domains kube-scheduler never offered over a round of its domains (at most
        # MAX_RELEASED groups, MAX_AVOIDED domains each): not preferred for the group again.
        self._avoided: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        # Composites (a disaggregated InferenceService, "namespace/name") -> role -> its group's key,
        # the newest MAX_RELEASED: each role's members look up the other's domain.
        self._roles: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._role_of: dict[str, str] = {}  # group key -> "<role> of <composite>" (the same entries)
        self._holds_on: dict[str, dict[str, tuple[BoundPod, ...]]] = {}  # node -> group key -> entries
        self._released: OrderedDict[str, str] = OrderedDict()
        self._listeners: list[Callable[[str], None]] = []
        self._next_expiry = float("inf")
        self._next_missing_sweep = float("-inf")
        self.counts = GroupCounts()

    # -- what the decisions read -----------------------------------------------

    def plan(self, key: str) -> GroupPlan | None:
        return self._plans.get(key)

    def released(self, key: str) -> str:
        """Why the group's last plan was released ("" if none was)."""
        return self._released.get(key, "")

    def holds_on(self, node: str) -> tuple[BoundPod, ...]:
        """The node's hold entries of every group (ledger-like: pending, never a pod's holder)."""
        by_group = self._holds_on.get(node)
        if not by_group:
            return ()
        return tuple(e for entries in by_group.values() for e in entries)

    def own_units(self, key: str) -> Mapping[str, int]:
        """Node -> the GPUs group `key` holds there (given back to its own members)."""
        plan = self._plans.get(key)
        if plan is None:
            return {}
        return {node: n * plan.per_member for node, n in plan.holds.items() if n}

    def __len__(self) -> int:
        return len(self._plans)

    def plans(self) -> Iterable[GroupPlan]:
        return self._plans.values()

    @property
    def full(self) -> bool:
        return len(self._plans) >= self._max

    def held_in(self, namespace: str) -> int:
        """The groups of `namespace` held now."""
        return self._in_namespace.get(namespace, 0)

    def wait_reason(self, key: str, member: str = "") -> str:
        """Why group `key` would not be held now for `member` (a pod UID): AWAITING_MEMBERS (its last
        hold expired with fewer members than its size, and this member was one of them: any user
        could otherwise hold a domain for ever from one pending pod that names a group whose other
        members never come), BOOK_FULL (the most groups in all are held), NAMESPACE_FULL (its
        namespace's most are), or "" (it would be; a group with a plan always is: a plan that
        moves is no new group)."""
        if key in self._plans:
            return ""
        if member in self._awaiting.get(key, ()):  # ("" never is: no member without a UID is seen)
            return AWAITING_MEMBERS
        if len(self._plans) >= self._max:
            return BOOK_FULL
        if self.held_in(namespace_of(key)) >= self.per_namespace:
            return NAMESPACE_FULL
        return ""

    def avoided(self, key: str) -> frozenset[str]:
        """The domains never to prefer for group `key` again (`avoid`)."""
        return frozenset(self._avoided.get(key, ()))

    def refused_for(self, key: str, uid: str) -> frozenset[str]:
        """The domains member `uid` of group `key` failed GroupWaitsForDomain in since the plan's
        domain was last offered."""
        plan = self._plans.get(key)
        if plan is None:
            return frozenset()
        return frozenset(domain for member, domain in plan.refused if member == uid)

    def role_seen(self, composite: str, role: str, key: str) -> None:
        """Group `key` is role `role` of composite `composite`."""
        roles = self._roles.pop(composite, {})
        before = roles.get(role)
        if before is not None and before != key:
            self._role_of.pop(before, None)
        roles[role] = key
        self._roles[composite] = roles
        self._role_of[key] = f"{role} of {composite}"
        while len(self._roles) > MAX_RELEASED:
            oldest, gone = self._roles.popitem(last=False)
            for r, k in gone.items():
                if self._role_of.get(k) == f"{r} of {oldest}":  # (not since seen in another)
                    del self._role_of[k]

    def role_of(self, key: str) -> str:
        """ "<role> of <composite>" for a group seen as a composite's role, else "" (a lookup: the
        fleet page asks it for every plan)."""
        return self._role_of.get(key, "")

    def partners(self, composite: str, role: str) -> list[str]:
        """The group keys of the composite's other roles seen."""
        return [key for r, key in self._roles.get(composite, {}).items() if r != role]

    def on_change(self, listener: Callable[[str], None]) -> None:
        """`listener(node)` whenever the holds on `node` change."""
        self._listeners.append(listener)

    # -- what the verbs and the pod watch write --------------------------------

    def hold(
        self,
        key: str,
        source: str,
        size: int,
        per_member: int,
        domain: tuple[str, str, str],
        placement: Mapping[str, int],
        why: str,
        preempting: bool = False,
        member: str = "",
    ) -> bool:
        """Give group `key` the domain (level, value, name) and hold `placement` (node -> members),
        for `member` (the pod UID that asked). Replaces the group's earlier plan (`preempting`: chosen
        by a preempt call; a plan in the same domain stays so). False, holding nothing, when a new
        group must wait (`wait_reason`)."""
        now = self._clock()
        self.expire(now)
        if wait := self.wait_reason(key, member):
            self.count_wait(wait)
            return False
        before = self._plans.pop(key, None)
        if before is None:
            namespace = namespace_of(key)
            self._in_namespace[namespace] = self._in_namespace.get(namespace, 0) + 1
        level, value, name = domain
        plan = GroupPlan(key, source, size, per_member, level, value, name, {}, now, now + self.hold_s, why)
        plan.preempting = preempting
        if before is not None:
            plan.nominated = before.nominated  # (what the pods say, whatever the domain)
            if before.domain_name == name:  # the same domain again: its hold does not start over
                plan.chosen_at, plan.expires_at = before.chosen_at, before.expires_at
                plan.passed = before.passed
                plan.preempting = preempting or before.preempting
                plan.refused = before.refused
            plan.holds = before.holds  # only what differs changes (and is heard of)
            plan.seen = before.seen
        self._plans[key] = plan
        self._set_holds(plan, {n: m for n, m in placement.items() if m > 0})
        self._next_expiry = min(self._next_expiry, plan.expires_at)
        self._released.pop(key, None)
        self._awaiting.pop(key, None)
        self.member_seen(key, member)
        return True

    def member_seen(self, key: str, uid: str) -> None:
        """Member `uid` of group `key` asked (a filter or a preempt call) while its plan held."""
        plan = self._plans.get(key)
        if plan is not None and uid and len(plan.seen) < plan.size:  # bounded: `size` tell all
            plan.seen.add(uid)

    def member_refused(self, key: str, uid: str, domain: str) -> None:
        """Member `uid` of group `key` failed GroupWaitsForDomain in `domain`, the call's one."""
        self.counts.waited_for_domain += 1
        plan = self._plans.get(key)
        if plan is not None and uid and len(plan.refused) < plan.size * MAX_AVOIDED:  # bounded
            plan.refused.add((uid, domain))

    def domain_offered(self, key: str) -> None:
        """A call offered group `key`'s plan's domain: kube-scheduler's round of domains reaches it."""
        plan = self._plans.get(key)
        if plan is not None:
            plan.refused.clear()

    def avoid(self, key: str, domain: str) -> None:
        """kube-scheduler went round its domains for group `key` without `domain` (its own filters,
        CPU, memory, affinity, leave every node there out): never prefer it for the group again, and
        release a plan there (no member is bound or placed there: group_member.py asks so)."""
        self.counts.domains_given_up += 1
        names = (*(d for d in self._avoided.pop(key, ()) if d != domain), domain)
        self._avoided[key] = names[-MAX_AVOIDED:]
        while len(self._avoided) > MAX_RELEASED:
            self._avoided.popitem(last=False)
        plan = self._plans.get(key)
        if plan is not None and plan.domain_name == domain:
            why = f"released: kube-scheduler tried the group's other domains, never {domain} (its own filters)"
            log.info("group %s: %s", key, why)
            self._release(plan, why)

    def member_passed(self, key: str, uid: str, node: str) -> None:
        """A filter placed gang member `uid` of group `key` on `node` ("": failed it)."""
        plan = self._plans.get(key)
        if plan is None or not uid:
            return
        if node:
            if uid in plan.passed or len(plan.passed) < plan.size:  # bounded: at most `size` to place
                plan.passed[uid] = node
        else:
            plan.passed.pop(uid, None)

    def member_nominated(self, key: str, uid: str, node: str) -> None:
        """Member `uid` of group `key` is nominated to `node` ("": to none), as its pod says."""
        plan = self._plans.get(key)
        if plan is None or not uid:
            return
        if not node:
            plan.nominated.pop(uid, None)
        elif uid in plan.nominated or len(plan.nominated) < plan.size:  # bounded: at most `size`
            plan.nominated[uid] = node

    def nominated_on(self, key: str, uid: str) -> dict[str, int]:
        """Node -> members of group `key` nominated there and not yet bound, `uid` left out."""
        plan = self._plans.get(key)
        return _counted(plan.nominated, uid) if plan is not None else {}

    def placed_whole(self, key: str, bound: int) -> bool:
        """Whether every member of gang `key` not among the `bound` ones is placed (kube-scheduler has
        a whole placement of the gang in the plan's domain, which it may be binding now)."""
        plan = self._plans.get(key)
        return plan is not None and bool(plan.passed) and len(plan.passed) + bound >= plan.size

    def placed_on(self, key: str, uid: str) -> dict[str, int]:
        """Node -> gang members of group `key` placed there and not yet bound, `uid` left out."""
        plan = self._plans.get(key)
        return _counted(plan.passed, uid) if plan is not None else {}

    def member_bound(self, pod: BoundPod, bound: int) -> None:
        """A member of `pod.group` is bound to `pod.node` (`bound` members are now): its hold
        becomes the ledger's entry; with every member bound, the plan is done. A group awaiting its
        members may be held again."""
        self._awaiting.pop(pod.group, None)
        plan = self._plans.get(pod.group)
        if plan is None:
            return
        plan.passed.pop(pod.uid, None)
        plan.nominated.pop(pod.uid, None)
        if bound >= plan.size:
            self._avoided.pop(pod.group, None)
            self.counts.placed_whole += 1
            log.info("group %s placed whole in %s (%d members)", plan.key, plan.domain_name, plan.size)
            self._drop(plan)
            return
        holds = dict(plan.holds)
        node = pod.node if holds.get(pod.node) else max(holds, key=lambda n: (holds[n], n), default=None)
        if node is not None:
            holds[node] -= 1
        plan.expires_at = self._clock() + self.hold_s  # progress: the hold lasts
        self._next_expiry = min(self._next_expiry, plan.expires_at)
        self._set_holds(plan, {n: m for n, m in holds.items() if m > 0})

    def release_missing(self, existing: Callable[[str], int | None], grace_s: float) -> None:
        """Release each hold that began `grace_s` ago or more while fewer of its group's members than
        its size exist as pods (`existing(key)`: unbound and bound ones, None: not known;
        state/pending_members.py): its members seen wait (AWAITING_MEMBERS) until another comes or
        one binds. Looks at most once per MISSING_SWEEP_S (every plan is read)."""
        now = self._clock()
        if now < self._next_missing_sweep:
            return
        self._next_missing_sweep = now + MISSING_SWEEP_S
        for plan in [p for p in self._plans.values() if now - p.chosen_at >= grace_s]:
            count = existing(plan.key)
            if count is None or count >= plan.size:
                continue
            self.counts.members_missing += 1
            why = (
                f"released: {count} of its {plan.size} members exist as pods {grace_s:g}s after its hold began; "
                "held again when another member comes or one binds"
            )
            log.warning("group %s: %s", plan.key, why)
            self._awaiting[plan.key] = frozenset(plan.seen)
            while len(self._awaiting) > MAX_RELEASED:
                self._awaiting.popitem(last=False)
            self._release(plan, why)

    def domain_lost(self, key: str, reason: str, *, members_there: bool) -> None:
        """A member of group `key` planned again and found no domain that holds the group (`reason`):
        a hold where its own domain no longer holds it only blocks others, so it is released,
        unless a member is bound or placed there (`members_there`) or a preempt call chose the
        domain (it holds the group once its victims are gone)."""
        plan = self._plans.get(key)
        if plan is not None and not members_there and not plan.preempting:
            self._release(plan, f"released: {reason}")

    def deleted(self, key: str) -> None:
        """The PodGroup of group `key` was deleted: its hold goes with it (and what it awaited)."""
        self._awaiting.pop(key, None)
        self._avoided.pop(key, None)
        self.release(key, "its PodGroup was deleted")

    def release(self, key: str, why: str) -> None:
        """Release group `key`'s plan and hold, for `why` (kept for explain)."""
        plan = self._plans.get(key)
        if plan is not None:
            self._release(plan, why)

    def _release(self, plan: GroupPlan, why: str) -> None:
        self._drop(plan)
        self._remember(plan.key, why)

    def expire(self, now: float) -> None:
        """Release the plans whose hold ran out (cheap until the earliest one does)."""
        if now < self._next_expiry:
            return
        late = [p for p in self._plans.values() if p.expires_at <= now]
        for plan in late:
            self.counts.expired += 1
            why = (
                f"hold on {plan.domain_name} expired after {self.hold_s:g}s with {plan.held_members()} of "
                f"{plan.size} members unbound"
            )
            if plan.seen and len(plan.seen) < plan.size:  # held for members that never came
                why += (
                    f"; {len(plan.seen)} of {plan.size} members came: held again when another member comes or one binds"
                )
                self._awaiting[plan.key] = frozenset(plan.seen)
                while len(self._awaiting) > MAX_RELEASED:
                    self._awaiting.popitem(last=False)
            log.warning("group %s: %s", plan.key, why)
            self._release(plan, why)
        self._next_expiry = min((p.expires_at for p in self._plans.values()), default=float("inf"))

    def count_no_domain(self) -> None:
        self.counts.no_domain += 1

    def count_wait(self, wait: str) -> None:
        """A new group was told to wait (`wait_reason`)."""
        if wait == BOOK_FULL:
            self.counts.refused_full += 1
        elif wait == NAMESPACE_FULL:
            self.counts.refused_namespace += 1
        else:
            self.counts.refused_awaiting += 1

    # -- internals -----------------------------------------------------------

    def _drop(self, plan: GroupPlan) -> None:
        self._set_holds(plan, {})
        del self._plans[plan.key]
        namespace = namespace_of(plan.key)
        left = self._in_namespace[namespace] - 1
        if left:
            self._in_namespace[namespace] = left
        else:
            del self._in_namespace[namespace]

    def _remember(self, key: str, why: str) -> None:
        self._released[key] = why
        self._released.move_to_end(key)
        while len(self._released) > MAX_RELEASED:
            self._released.popitem(last=False)

    def _set_holds(self, plan: GroupPlan, holds: dict[str, int]) -> None:
        changed = {n for n in plan.holds.keys() | holds.keys() if plan.holds.get(n) != holds.get(n)}
        plan.holds = holds
        for node in changed:
            by_group = self._holds_on.setdefault(node, {})
            members = holds.get(node, 0)
            if members:
                entry = BoundPod(
                    uid=f"{HOLD_KEY_PREFIX}{plan.key}/{node}",
                    key=f"{HOLD_KEY_PREFIX}{plan.key}",
                    node=node,
                    gpus=members * plan.per_member,
                    mig=(),
                    phase="",
                    seen_at=plan.chosen_at,
                    group=plan.key,
                )
                by_group[plan.key] = (entry,)
            else:
                by_group.pop(plan.key, None)
                if not by_group:
                    del self._holds_on[node]
        for node in sorted(changed):
            for listener in self._listeners:
                listener(node)


def _counted(members: Mapping[str, str], left_out: str) -> dict[str, int]:
    """Node -> how many of `members` (uid -> node) are there, `left_out` not counted."""
    counts: dict[str, int] = {}
    for member, node in members.items():
        if member != left_out:
            counts[node] = counts.get(node, 0) + 1
    return counts
