"""What a group member's filter leaves in the group book (state/group_book.py): the domain it
chose and the room held there, before any later call is read, so the next pod of any group
already reads that room as taken."""

from __future__ import annotations

import logging

from gpuextender.extender.decide import group_member
from gpuextender.extender.decide.decision import Decision
from gpuextender.extender.decide.group_member import WAITS_FOR_DOMAIN
from gpuextender.extender.decide.preempt_group import GroupPreemption
from gpuextender.extender.model.pod_group import namespace_of
from gpuextender.extender.state.group_book import NAMESPACE_FULL, GroupBook

log = logging.getLogger("gpu_extender.groups")

# The member's answers that say a new group waits (group_member.WAITS), and the book's word for each.
WAIT_OF = {reason: wait for wait, reason in group_member.WAITS.items()}


def record_group(book: GroupBook, d: Decision, uid: str) -> None:
    group = d.group
    if group is None:
        return
    member = d.member
    choice, key = member.choice, group.ref.key
    chosen = choice.chosen
    book.member_seen(key, uid)
    if group.composite:  # its other role's members look this one's domain up
        book.role_seen(group.composite, group.role, key)
    if member.offered:
        book.domain_offered(key)
    if member.avoid:
        book.avoid(key, member.avoid)
    if member.refused_in and chosen is None:  # the plan's domain is elsewhere: it stays
        book.member_refused(key, uid, member.refused_in)
        if not book.placed_whole(key, len(group.bound)):  # (as any failed gang member: below)
            book.member_passed(key, uid, "")
        log.info(
            "group %s (%s, %d members): %s offered alone, the group's domain is another: %s",
            key,
            group.ref.source,
            group.size,
            member.refused_in,
            WAITS_FOR_DOMAIN.sentence,
            extra={"pod": d.pod.ref},
        )
        return
    if chosen is None:
        wait = WAIT_OF.get(choice.reason) if choice.reason is not None else None
        if wait is not None:  # a new group told to wait, not one no domain holds
            book.count_wait(wait)
        else:
            book.count_no_domain()
        reason = choice.reason.sentence if choice.reason is not None else "no domain"
        # kube-scheduler-1.36's topology-aware gang scheduling filters the gang in every candidate
        # domain in one cycle and binds a placement where every member passed: a member failed in
        # another domain (the plan's not offered) keeps its place while the gang is placed whole, or
        # its room would be free to the next pods before the watch shows the binding.
        if d.member.planned_again or not book.placed_whole(key, len(group.bound)):
            book.member_passed(key, uid, "")
        # Only where this call offered the plan's domain (not a scheduler trying another domain
        # for a gang, or a candidate subset) is the domain lost; the book decides the release.
        if d.member.planned_again:
            book.domain_lost(key, reason, members_there=bool(group.bound or group.placed_on))
        log.info("group %s (%s, %d members): %s", key, group.ref.source, group.size, reason, extra={"pod": d.pod.ref})
        return
    domain = chosen.domain
    left_over = chosen.idle - group.remaining * max(group.per_member, 0)
    why = (
        f"room for {chosen.members} of the {group.remaining} members to place, "
        f"{left_over} free idle GPUs left over there; {choice.considered} domain(s) of {domain.level or 'any nodes'} "
        "considered, the least stranding chosen"
    )
    if member.refused_in:
        why += f" among every one known (kube-scheduler offered {member.refused_in} alone)"
    before = book.plan(key)
    holds = dict(choice.placement)
    for node, members in group.placed_on.items():  # a gang's placed members keep their room until bound
        holds[node] = holds.get(node, 0) + members
    if book.hold(
        key,
        group.ref.source,
        group.size,
        group.per_member,
        (domain.level, domain.value, domain.name),
        holds,
        why,
        member=uid,
    ):
        if member.refused_in:
            book.member_refused(key, uid, member.refused_in)
        if before is None or before.domain_name != domain.name:
            log.info(
                "group %s (%s, %d members): %s: %s",
                key,
                group.ref.source,
                group.size,
                domain.name,
                why,
                extra={"pod": d.pod.ref},
            )
        if group.gang:
            book.member_passed(key, uid, d.answered.passed[0] if d.answered.passed else "")
    else:
        _not_held(book, key)


def _not_held(book: GroupBook, key: str) -> None:
    if book.wait_reason(key) == NAMESPACE_FULL:
        held = book.held_in(namespace_of(key))
        log.warning("group %s: not held, its namespace has %d groups held (--group-holds-per-namespace)", key, held)
    else:
        log.warning("group %s: not held, %d groups are in flight", key, len(book))


def record_group_preemption(book: GroupBook, d: Decision, grouped: GroupPreemption) -> None:
    """The domain a member's preempt call chose, held for the group before the answer leaves: the
    victims' GPUs are the group's once they go, and its later members preempt inside it."""
    group = d.group
    if group is None or grouped.domain is None:
        return
    key = group.ref.key
    before = book.plan(key)
    holds = dict(grouped.placement)
    for node, members in group.placed_on.items():  # members nominated there keep their room until bound
        holds[node] = holds.get(node, 0) + members
    source, size, per_member = group.ref.source, group.size, group.per_member
    if book.hold(key, source, size, per_member, grouped.domain, holds, grouped.plan.note, True, d.pod.uid):
        if before is None or before.domain_name != grouped.domain[2]:
            log.info(
                "group %s (%s, %d members): %s",
                key,
                group.ref.source,
                group.size,
                grouped.plan.note,
                extra={"pod": d.pod.ref},
            )
    else:
        _not_held(book, key)
