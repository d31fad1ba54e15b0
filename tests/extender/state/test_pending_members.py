"""The members of multi-pod groups that exist as unbound pods (state/pending_members.py), and the
holds released when a group's members do not all exist as pods --group-members-grace after its hold
began (state/group_book.GroupBook.release_missing; issue 53 item 5)."""

from __future__ import annotations

from typing import Any

from gpuextender.extender.state.group_book import AWAITING_MEMBERS, MISSING_SWEEP_S, GroupBook
from gpuextender.extender.state.pending_members import PendingMembers
from tests.extender.state.test_group_book import Clock

GROUP = "llm/leaderworkerset/g"


def member(uid: str, group: str = "g", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": uid,
            "namespace": "llm",
            "uid": uid,
            "labels": {"leaderworkerset.sigs.k8s.io/group-key": group},
            "annotations": {"leaderworkerset.sigs.k8s.io/size": "3"},
        },
        "spec": {"containers": [], **spec},
    }


def test_nothing_is_known_before_the_first_list() -> None:
    pending = PendingMembers()
    pending.upsert("Pod", member("u1"))
    assert pending.count(GROUP) is None
    pending.replace_all("Pod", [member("u1"), member("u2")])
    assert pending.count(GROUP) == 2 and pending.count("llm/leaderworkerset/other") == 0


def test_members_come_and_go_as_the_watch_says() -> None:
    pending = PendingMembers()
    pending.replace_all("Pod", [member("u1")])
    pending.upsert("Pod", member("u2"))
    pending.upsert("Pod", member("u2"))  # (again: counted once)
    assert pending.count(GROUP) == 2
    pending.delete("Pod", member("u1"))  # bound (it left the selector) or deleted
    assert pending.count(GROUP) == 1
    pending.upsert("Pod", member("u2", nodeName="n1"))  # bound, seen before it left the selector
    assert pending.count(GROUP) == 0 and len(pending) == 0
    being_deleted = member("u3")
    being_deleted["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    pending.upsert("Pod", being_deleted)
    assert pending.count(GROUP) == 0


def test_a_member_that_moves_to_another_group_counts_there_only() -> None:
    pending = PendingMembers()
    pending.replace_all("Pod", [member("u1")])
    pending.upsert("Pod", member("u1", group="h"))
    assert pending.count(GROUP) == 0 and pending.count("llm/leaderworkerset/h") == 1
    no_group = member("u1")
    del no_group["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-key"]
    pending.upsert("Pod", no_group)
    assert pending.count("llm/leaderworkerset/h") == 0
    pending.delete("Pod", {"metadata": {}})  # (no UID: nothing)
    pending.upsert("Pod", {"metadata": {"uid": ""}})


def test_at_the_bound_every_member_is_kept_and_past_it_counts_are_unknown_until_a_relist() -> None:
    pending = PendingMembers(max_pods=2)
    pending.replace_all("Pod", [member("u1"), member("u2")])
    assert pending.count(GROUP) == 2
    pending.upsert("Pod", member("u2"))  # (one already kept: no new one)
    assert pending.count(GROUP) == 2
    pending.upsert("Pod", member("u3"))
    assert pending.count(GROUP) is None
    pending.delete("Pod", member("u1"))
    assert pending.count(GROUP) is None  # (u3 is missing from every count until the next list)
    pending.replace_all("Pod", [member("u2"), member("u3")])
    assert pending.count(GROUP) == 2


# -- the holds released (GroupBook.release_missing) ------------------------------------------------


GRACE = 60.0


def held(clock: Clock, size: int = 3) -> GroupBook:
    book = GroupBook(300.0, clock)
    assert book.hold(GROUP, "leaderworkerset", size, 8, ("c", "a", "c=a"), {"a0": size}, "", member="u1")
    return book


def test_a_hold_is_released_at_exactly_the_grace_when_members_are_missing_not_before() -> None:
    clock = Clock()
    book = held(clock)
    clock.now += GRACE - 0.5
    book.release_missing(lambda _key: 1, GRACE)
    assert book.plan(GROUP) is not None
    clock.now += 0.5 + MISSING_SWEEP_S  # (past the last sweep's pause)
    book.release_missing(lambda _key: 1, GRACE)
    assert book.plan(GROUP) is None and book.holds_on("a0") == ()
    assert "1 of its 3 members exist as pods 60s after its hold began" in book.released(GROUP)
    assert book.counts.members_missing == 1
    assert book.wait_reason(GROUP, "u1") == AWAITING_MEMBERS and book.wait_reason(GROUP, "u2") == ""


def test_at_exactly_the_grace_a_hold_is_looked_at() -> None:
    clock = Clock()
    book = held(clock)
    clock.now += GRACE
    book.release_missing(lambda _key: 2, GRACE)
    assert book.plan(GROUP) is None


def test_a_group_whose_members_all_exist_or_are_not_known_keeps_its_hold() -> None:
    clock = Clock()
    book = held(clock)
    clock.now += GRACE
    book.release_missing(lambda _key: 3, GRACE)
    clock.now += MISSING_SWEEP_S
    book.release_missing(lambda _key: None, GRACE)
    assert book.plan(GROUP) is not None and book.counts.members_missing == 0


def test_the_holds_are_looked_at_once_per_sweep_pause_at_most() -> None:
    clock = Clock()
    book = held(clock)
    clock.now += GRACE
    asked: list[str] = []

    def existing(key: str) -> int:
        asked.append(key)
        return 3

    book.release_missing(existing, GRACE)
    clock.now += MISSING_SWEEP_S - 0.01
    book.release_missing(existing, GRACE)
    assert asked == [GROUP]
    clock.now += 0.01
    book.release_missing(existing, GRACE)
    assert asked == [GROUP, GROUP]
