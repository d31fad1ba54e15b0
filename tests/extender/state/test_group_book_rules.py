"""Rules of the group book (state/group_book.py) that a one-line change would break unseen (issue
52 item 0): a new plan never pushes back an earlier plan's expiry, and a member bound to a node
shrinks that node's hold (elsewhere in the domain: the largest hold)."""

from __future__ import annotations

from gpuextender.extender.state.group_book import GroupBook
from tests.extender.state.test_group_book import Clock, member


def test_a_later_plan_does_not_push_back_an_earlier_plans_expiry() -> None:
    clock = Clock()  # t = 100
    book = GroupBook(60.0, clock)
    assert book.hold("g1", "s", 2, 8, ("c", "a", "c=a"), {"a0": 2}, "")
    clock.now = 130.0
    assert book.hold("g2", "s", 2, 8, ("c", "b", "c=b"), {"b0": 2}, "")
    book.expire(160.0)
    assert book.plan("g1") is None and book.holds_on("a0") == ()
    assert book.released("g1") == "hold on c=a expired after 60s with 2 of 2 members unbound"
    assert book.plan("g2") is not None
    book.expire(190.0)
    assert book.plan("g2") is None and book.counts.expired == 2


def holding(placement: dict[str, int]) -> GroupBook:
    book = GroupBook(60.0, Clock())
    assert book.hold("g", "s", 5, 8, ("c", "a", "c=a"), placement, "")
    return book


def gpus_held(book: GroupBook, node: str) -> int:
    return sum(entry.gpus for entry in book.holds_on(node))


def test_a_member_bound_to_a_held_node_shrinks_that_nodes_hold_not_a_larger_one() -> None:
    book = holding({"a0": 1, "a1": 3})
    book.member_bound(member("g", "a0"), 1)
    assert book.plan("g").holds == {"a1": 3}  # type: ignore[union-attr]
    assert book.holds_on("a0") == () and gpus_held(book, "a1") == 24


def test_a_member_bound_where_nothing_is_held_shrinks_the_largest_hold() -> None:
    book = holding({"a0": 1, "a1": 3, "a2": 2})
    book.member_bound(member("g", "a9"), 1)  # bound in the domain, where none of its room was held
    assert book.plan("g").holds == {"a0": 1, "a1": 2, "a2": 2}  # type: ignore[union-attr]
    assert gpus_held(book, "a0") == 8 and gpus_held(book, "a1") == 16 and gpus_held(book, "a2") == 16
