"""Rules of the group book (state/group_book.py) that mutation testing found no test holding: every
refusal and domainless filter is counted, a plan keeps its source and choice time and so do its hold
entries, a preempting plan stays so in its domain, an empty node is not held, a new plan forgets the
last release, nominations are bounded, movable and ignored without a plan or a uid, a gang is placed
whole counting its bound members, a bound member is no longer nominated, a member bound with nothing
held keeps the plan, one group's release leaves another's hold on the same node, members on one
node are counted together, and placing a gang whole or expiring a hold is logged in full."""

from __future__ import annotations

import logging

import pytest

from gpuextender.extender.state.group_book import HOLD_KEY_PREFIX, GroupBook, GroupPlan
from tests.extender.state.test_group_book import Clock, book_with, member

DOMAIN = ("clique", "a", "clique=a")  # book_with's domain


def plan_of(book: GroupBook, key: str = "g") -> GroupPlan:
    plan = book.plan(key)
    assert plan is not None
    return plan


def test_every_refused_group_and_every_domainless_filter_is_counted() -> None:
    book = GroupBook(60.0, Clock(), max_groups=1)
    assert book.hold("g1", "s", 2, 8, ("c", "a", "c=a"), {"a0": 2}, "")
    assert not book.hold("g2", "s", 2, 8, ("c", "b", "c=b"), {"b0": 2}, "")
    assert not book.hold("g3", "s", 2, 8, ("c", "c", "c=c"), {"c0": 2}, "")
    book.count_no_domain()
    book.count_no_domain()
    assert book.counts.refused_full == 2 and book.counts.no_domain == 2


def test_a_plan_keeps_its_source_and_the_time_it_was_chosen() -> None:
    book, _, _ = book_with({"a0": 1})
    plan = plan_of(book)
    assert plan.source == "leaderworkerset" and plan.chosen_at == 100.0


def test_a_hold_entry_is_named_for_its_group_and_node_and_dated_at_the_choice() -> None:
    book, _, _ = book_with({"a0": 1})
    (entry,) = book.holds_on("a0")
    assert entry.uid == f"{HOLD_KEY_PREFIX}g/a0" and entry.node == "a0" and entry.seen_at == 100.0


def test_a_preempting_plan_stays_preempting_when_a_filter_chooses_its_domain_again() -> None:
    book, _, _ = book_with({"a0": 3})
    assert book.hold("g", "leaderworkerset", 3, 8, DOMAIN, {"a0": 3}, "why", preempting=True)
    assert book.hold("g", "leaderworkerset", 3, 8, DOMAIN, {"a0": 3}, "why")
    assert plan_of(book).preempting


def test_a_node_given_no_members_is_neither_held_nor_heard_of() -> None:
    book, _, changed = book_with({"a0": 1, "a1": 0})
    assert changed == ["a0"] and plan_of(book).holds == {"a0": 1}


def test_a_new_plan_forgets_the_groups_last_release_reason() -> None:
    book, _, _ = book_with({"a0": 1})
    book.release("g", "gone")
    assert book.released("g") == "gone"
    assert book.hold("g", "leaderworkerset", 3, 8, DOMAIN, {"a0": 1}, "why")
    assert book.released("g") == ""


def test_a_nomination_without_a_plan_or_a_uid_is_ignored() -> None:
    book = GroupBook(60.0, Clock())
    book.member_nominated("g", "u1", "a0")  # no plan
    assert book.nominated_on("g", "") == {}
    book, _, _ = book_with({"a0": 1})
    book.member_nominated("g", "", "a0")  # no uid
    assert book.nominated_on("g", "u1") == {}


def test_nominations_are_at_most_the_groups_size_and_a_nominated_member_may_move() -> None:
    book, _, _ = book_with({"a0": 3})  # a group of 3
    for uid in ("u1", "u2", "u3", "u4"):
        book.member_nominated("g", uid, "a0")
    assert book.nominated_on("g", "") == {"a0": 3}
    book.member_nominated("g", "u1", "a1")  # nominated again elsewhere: moved, not refused
    assert book.nominated_on("g", "") == {"a0": 2, "a1": 1}


def test_members_placed_on_one_node_are_counted_together() -> None:
    book, _, _ = book_with({"a0": 3})
    book.member_passed("g", "u1", "a0")
    book.member_passed("g", "u2", "a0")
    assert book.placed_on("g", "") == {"a0": 2}


def test_a_gang_is_placed_whole_when_its_placed_and_bound_members_make_its_size() -> None:
    book, _, _ = book_with({"a0": 1})  # a group of 3
    book.member_passed("g", "u3", "a0")
    assert book.placed_whole("g", 2) and not book.placed_whole("g", 1)


def test_a_bound_member_is_no_longer_counted_as_nominated() -> None:
    book, _, _ = book_with({"a0": 3})
    book.member_nominated("g", "u", "a0")
    book.member_bound(member("g", "a0", "u"), 1)
    assert book.nominated_on("g", "") == {}


def test_a_member_bound_when_nothing_is_held_keeps_the_plan_and_its_hold_lasts() -> None:
    book, clock, _ = book_with({"a0": 1})  # a group of 3, one member's room held
    book.member_bound(member("g", "a0", "u1"), 1)
    clock.now = 130.0
    book.member_bound(member("g", "a0", "u2"), 2)  # nothing left to take
    plan = plan_of(book)
    assert plan.holds == {} and plan.expires_at == 190.0


def test_releasing_one_group_leaves_another_groups_hold_on_the_same_node() -> None:
    book = GroupBook(60.0, Clock())
    assert book.hold("g1", "s", 2, 8, ("c", "a", "c=a"), {"a0": 1}, "")
    assert book.hold("g2", "s", 2, 8, ("c", "a", "c=a"), {"a0": 1}, "")
    book.release("g1", "gone")
    assert [entry.group for entry in book.holds_on("a0")] == ["g2"]


def test_placing_a_gang_whole_is_logged_with_its_domain_and_size(caplog: pytest.LogCaptureFixture) -> None:
    book, _, _ = book_with({"a0": 3})
    with caplog.at_level(logging.INFO, logger="gpu_extender.groups"):
        book.member_bound(member("g", "a0"), 3)
    assert [r.getMessage() for r in caplog.records] == ["group g placed whole in clique=a (3 members)"]


def test_an_expired_hold_is_logged_with_its_group_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    book, clock, _ = book_with({"a0": 3})
    with caplog.at_level(logging.WARNING, logger="gpu_extender.groups"):
        book.expire(clock.now + 60.0)
    assert [r.getMessage() for r in caplog.records] == [
        "group g: hold on clique=a expired after 60s with 3 of 3 members unbound"
    ]
