"""The group book's bound per namespace (issue 53 item 5, --group-holds-per-namespace): a namespace
holds at most `per_namespace` groups at once, exactly that many and not one more; its next group
waits (NAMESPACE_FULL, counted) while other namespaces' groups are held as before; a group already
held is never refused (a plan that moves is no new group); every way a plan ends gives its
namespace's place back; the bound on all groups comes first. And a group whose hold expired with
fewer members than its size (any user could hold a domain for ever from one pending pod naming a
group whose other members never come): the members that came wait (AWAITING_MEMBERS), a new
member, a bound one or the PodGroup's deletion ends the wait; bounded."""

from __future__ import annotations

from gpuextender.extender.model.pod_group import group_key, namespace_of
from gpuextender.extender.state.group_book import AWAITING_MEMBERS, BOOK_FULL, MAX_RELEASED, NAMESPACE_FULL, GroupBook
from gpuextender.extender.state.pod_ledger import BoundPod
from tests.extender.state.test_group_book import Clock

DOMAIN = ("c", "a", "c=a")


def key(namespace: str, name: str) -> str:
    return group_key("lws", namespace, name)


def hold(book: GroupBook, k: str, node: str = "a0") -> bool:
    return book.hold(k, "lws", 2, 8, DOMAIN, {node: 2}, "")


def test_a_namespace_holds_exactly_its_bound_and_its_next_group_waits() -> None:
    book = GroupBook(60.0, Clock(), per_namespace=2)
    assert hold(book, key("ml", "g1")) and book.wait_reason(key("ml", "g2")) == ""
    assert hold(book, key("ml", "g2"))
    assert book.held_in("ml") == 2 and book.wait_reason(key("ml", "g3")) == NAMESPACE_FULL
    assert not hold(book, key("ml", "g3"), "b0")
    assert book.plan(key("ml", "g3")) is None and book.holds_on("b0") == ()
    assert (book.counts.refused_namespace, book.counts.refused_full) == (1, 0)
    assert hold(book, key("other", "g3"))  # another namespace: as before
    assert book.held_in("other") == 1


def test_a_group_already_held_moves_in_a_full_namespace() -> None:
    book = GroupBook(60.0, Clock(), per_namespace=1)
    assert hold(book, key("ml", "g1"))
    assert book.wait_reason(key("ml", "g1")) == ""
    assert hold(book, key("ml", "g1"), "b0")  # replanned elsewhere: still one group
    assert book.held_in("ml") == 1 and book.holds_on("b0")[0].gpus == 16 and book.counts.refused_namespace == 0


def test_every_end_of_a_plan_gives_its_namespaces_place_back() -> None:
    clock = Clock()
    book = GroupBook(60.0, clock, per_namespace=1)
    ends = {
        "released": lambda k: book.release(k, "gone"),
        "deleted": book.deleted,
        "domain lost": lambda k: book.domain_lost(k, "no domain", members_there=False),
        "placed whole": lambda k: book.member_bound(BoundPod("u", "ml/p", "a0", 8, (), "", 0.0, group=k), 2),
        "expired": lambda _k: book.expire(clock.now + 60.0),
    }
    for name, end in ends.items():
        k = key("ml", name.replace(" ", "-"))
        assert hold(book, k), name
        assert book.wait_reason(key("ml", "next")) == NAMESPACE_FULL, name
        end(k)
        assert book.plan(k) is None and book.held_in("ml") == 0, name
        assert book._in_namespace == {}, name  # (a namespace with none held is not kept)


def test_a_namespace_that_keeps_one_of_two_counts_one() -> None:
    book = GroupBook(60.0, Clock(), per_namespace=2)
    assert hold(book, key("ml", "g1")) and hold(book, key("ml", "g2"))
    book.release(key("ml", "g1"), "gone")
    assert book.held_in("ml") == 1
    assert hold(book, key("ml", "g3"))
    assert not hold(book, key("ml", "g4"))


def test_the_bound_on_all_groups_comes_first() -> None:
    book = GroupBook(60.0, Clock(), max_groups=2, per_namespace=2)
    assert hold(book, key("a", "g1")) and hold(book, key("b", "g1"))
    assert book.wait_reason(key("a", "g2")) == BOOK_FULL == book.wait_reason(key("c", "g1"))
    assert not hold(book, key("a", "g2"))
    assert (book.counts.refused_full, book.counts.refused_namespace) == (1, 0)


def test_a_namespace_is_the_first_part_of_a_group_key_whatever_its_source() -> None:
    book = GroupBook(60.0, Clock(), per_namespace=1)
    assert hold(book, group_key("lws", "ml", "x"))
    assert book.wait_reason(group_key("coscheduling", "ml", "y")) == NAMESPACE_FULL
    assert book.wait_reason(group_key("lws", "ml-2", "x")) == ""
    assert namespace_of(group_key("jobset", "team-a", "job/with/slashes")) == "team-a"


# -- a hold that expired short of members ----------------------------------------------------------


def sized(book: GroupBook, k: str, size: int, member: str) -> bool:
    return book.hold(k, "lws", size, 8, DOMAIN, {"a0": size}, "", member=member)


def test_members_of_a_hold_that_expired_short_of_members_wait_and_a_new_member_does_not() -> None:
    clock = Clock()
    book = GroupBook(60.0, clock)
    g = key("ml", "g")
    assert sized(book, g, 3, "u1")
    book.member_seen(g, "u2")
    book.expire(clock.now + 60.0)
    assert book.released(g) == (
        "hold on c=a expired after 60s with 3 of 3 members unbound; 2 of 3 members came: held again when "
        "another member comes or one binds"
    )
    assert [book.wait_reason(g, m) for m in ("u1", "u2", "u3", "")] == [AWAITING_MEMBERS] * 2 + ["", ""]
    assert not sized(book, g, 3, "u1") and book.counts.refused_awaiting == 1 and book.plan(g) is None
    assert not sized(book, g, 3, "u2") and book.counts.refused_awaiting == 2  # each refusal counted
    assert sized(book, g, 3, "u3")  # a new member: held again, and no longer awaiting
    book.release(g, "gone")
    assert book.wait_reason(g, "u1") == ""


def test_a_hold_that_expired_with_every_member_come_is_planned_again_by_any() -> None:
    clock = Clock()
    book = GroupBook(60.0, clock)
    g = key("ml", "g")
    assert sized(book, g, 2, "u1")
    book.member_seen(g, "u2")  # size 2, 2 came: kube-scheduler could not bind them there
    book.expire(clock.now + 60.0)
    assert book.released(g) == "hold on c=a expired after 60s with 2 of 2 members unbound"
    assert book.wait_reason(g, "u1") == "" and sized(book, g, 2, "u1")


def test_members_seen_are_bounded_by_the_size_and_kept_by_a_replan() -> None:
    book = GroupBook(60.0, Clock())
    g = key("ml", "g")
    assert sized(book, g, 3, "u1")
    for uid in ("u2", "", "u3", "u4", "u5"):
        book.member_seen(g, uid)
    book.member_seen(key("ml", "none"), "u9")  # no plan: nothing kept
    assert sized(book, g, 3, "u6")  # a replan elsewhere: what came is kept
    plan = book.plan(g)
    assert plan is not None and plan.seen == {"u1", "u2", "u3"}
    assert book.plan(key("ml", "none")) is None


def test_a_bound_member_or_a_deleted_podgroup_ends_the_wait() -> None:
    clock = Clock()
    book = GroupBook(60.0, clock)
    g, h = key("ml", "g"), key("ml", "h")
    for k in (g, h):
        assert sized(book, k, 3, "u1")
    book.expire(clock.now + 60.0)
    assert book.wait_reason(g, "u1") == book.wait_reason(h, "u1") == AWAITING_MEMBERS
    book.member_bound(BoundPod("u2", "ml/p", "a0", 8, (), "", 0.0, group=g), 1)
    book.deleted(h)
    assert book.wait_reason(g, "u1") == book.wait_reason(h, "u1") == ""


def test_the_groups_awaiting_members_are_bounded_the_oldest_go_first() -> None:
    clock = Clock()
    book = GroupBook(60.0, clock, per_namespace=MAX_RELEASED + 1)
    for i in range(MAX_RELEASED + 1):
        assert sized(book, key("ml", f"g{i}"), 2, "u1")
    book.expire(clock.now + 60.0)
    assert book.wait_reason(key("ml", "g0"), "u1") == ""  # the oldest, forgotten
    assert book.wait_reason(key("ml", "g1"), "u1") == AWAITING_MEMBERS
    assert book.wait_reason(key("ml", f"g{MAX_RELEASED}"), "u1") == AWAITING_MEMBERS
