"""The group book (state/group_book.py): holds as ledger-like entries, members binding, expiry at
exactly the hold time, and its bounds."""

from __future__ import annotations

from gpuextender.extender.state.group_book import HOLD_KEY_PREFIX, MAX_RELEASED, GroupBook
from gpuextender.extender.state.pod_ledger import BoundPod


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def member(group: str, node: str, uid: str = "u") -> BoundPod:
    return BoundPod(uid, f"ns/{uid}", node, 8, (), "Pending", 0.0, group=group)


def book_with(
    placement: dict[str, int], hold_s: float = 60.0, max_groups: int = 10
) -> tuple[GroupBook, Clock, list[str]]:
    clock = Clock()
    book = GroupBook(hold_s, clock, max_groups)
    changed: list[str] = []
    book.on_change(changed.append)
    assert book.hold("g", "leaderworkerset", 3, 8, ("clique", "a", "clique=a"), placement, "why")
    return book, clock, changed


def test_holds_are_pending_entries_on_their_nodes_and_the_groups_own_units() -> None:
    book, _, changed = book_with({"a0": 2, "a1": 1})
    assert sorted(changed) == ["a0", "a1"]
    (entry,) = book.holds_on("a0")
    assert entry.gpus == 16 and entry.key == f"{HOLD_KEY_PREFIX}g" and entry.phase == "" and entry.group == "g"
    assert book.holds_on("b0") == ()
    assert book.own_units("g") == {"a0": 16, "a1": 8} and book.own_units("other") == {}


def test_a_bound_member_takes_its_nodes_hold_or_else_the_largest_one() -> None:
    book, _, changed = book_with({"a0": 2, "a1": 1})
    changed.clear()
    book.member_bound(member("g", "a1"), 1)
    assert book.plan("g").holds == {"a0": 2} and changed == ["a1"]  # type: ignore[union-attr]
    book.member_bound(member("g", "a9", "u2"), 2)  # bound where nothing was held: the largest hold shrinks
    assert book.plan("g").holds == {"a0": 1}  # type: ignore[union-attr]
    book.member_bound(member("g", "a0", "u3"), 3)
    assert book.plan("g") is None and book.counts.placed_whole == 1 and book.holds_on("a0") == ()


def test_expiry_at_exactly_the_hold_time() -> None:
    book, clock, _ = book_with({"a0": 3})
    book.expire(clock.now + 59.999)
    assert book.plan("g") is not None
    book.expire(clock.now + 60.0)
    assert book.plan("g") is None and book.counts.expired == 1
    assert book.released("g") == "hold on clique=a expired after 60s with 3 of 3 members unbound"


def test_a_new_group_past_the_bound_is_refused_and_a_replan_is_not() -> None:
    clock = Clock()
    book = GroupBook(60.0, clock, max_groups=2)
    assert book.hold("g1", "s", 2, 8, ("c", "a", "c=a"), {"a0": 2}, "")
    assert not book.full
    assert book.hold("g2", "s", 2, 8, ("c", "b", "c=b"), {"b0": 2}, "")
    assert book.full
    assert not book.hold("g3", "s", 2, 8, ("c", "c", "c=c"), {"c0": 2}, "")
    assert book.counts.refused_full == 1 and book.plan("g3") is None and book.holds_on("c0") == ()
    assert book.hold("g2", "s", 2, 8, ("c", "b", "c=b"), {"b1": 2}, "")  # g2 again: replaced
    assert book.holds_on("b0") == () and book.holds_on("b1")[0].gpus == 16


def test_released_reasons_are_bounded_the_oldest_go_first() -> None:
    clock = Clock()
    book = GroupBook(60.0, clock, max_groups=MAX_RELEASED + 10)
    for i in range(MAX_RELEASED + 1):
        book.hold(f"g{i}", "s", 2, 8, ("c", "a", "c=a"), {}, "")
        book.release(f"g{i}", f"why {i}")
    assert book.released("g0") == "" and book.released("g1") == "why 1"
    assert book.released(f"g{MAX_RELEASED}") == f"why {MAX_RELEASED}"


def test_holding_the_same_domain_again_keeps_the_expiry_another_domain_starts_it() -> None:
    book, clock, _ = book_with({"a0": 3})
    clock.now += 30
    book.hold("g", "leaderworkerset", 3, 8, ("clique", "a", "clique=a"), {"a0": 3}, "why")
    assert book.plan("g").expires_at == 160.0  # type: ignore[union-attr]
    book.hold("g", "leaderworkerset", 3, 8, ("clique", "b", "clique=b"), {"b0": 3}, "why")
    assert book.plan("g").expires_at == 190.0 and book.holds_on("a0") == ()  # type: ignore[union-attr]


def test_holding_the_same_placement_again_changes_no_node() -> None:
    book, _, changed = book_with({"a0": 2, "a1": 1})
    changed.clear()
    assert book.hold("g", "leaderworkerset", 3, 8, ("clique", "a", "clique=a"), {"a0": 2, "a1": 1}, "why")
    assert changed == []
    assert book.hold("g", "leaderworkerset", 3, 8, ("clique", "a", "clique=a"), {"a0": 3}, "why")
    assert sorted(changed) == ["a0", "a1"] and book.holds_on("a1") == () and book.holds_on("a0")[0].gpus == 24


def test_members_passed_are_kept_until_bound_or_failed_and_at_most_the_groups_size() -> None:
    book, _, _ = book_with({"a0": 3})  # a group of 3
    for uid in ("u1", "u2", "u3", "u4"):
        book.member_passed("g", uid, "a0")
    assert book.plan("g").passed == {"u1": "a0", "u2": "a0", "u3": "a0"}  # type: ignore[union-attr]
    book.member_passed("g", "u1", "a1")  # placed again elsewhere: moved, not refused
    assert book.placed_on("g", "u3") == {"a1": 1, "a0": 1}
    book.member_passed("g", "u2", "")
    book.member_bound(member("g", "a0", "u1"), 1)
    assert book.plan("g").passed == {"u3": "a0"}  # type: ignore[union-attr]
    book.member_passed("other", "u9", "a0")  # no plan: nothing kept
    assert book.plan("other") is None and book.placed_on("other", "") == {}
