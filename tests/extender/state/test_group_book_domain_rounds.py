"""What the group book keeps of kube-scheduler's rounds of domains (issue 53 item 1,
decide/group_member.py): where each member failed GroupWaitsForDomain since the plan's domain was
last offered (cleared when it is, kept while the plan stays in its domain, bounded at size x
MAX_AVOIDED), and the domains a group gave up (at most MAX_AVOIDED each, the newest; at most
MAX_RELEASED groups; a plan there released; forgotten once the group is placed whole or deleted)."""

from __future__ import annotations

from gpuextender.extender.model.pod_group import group_key
from gpuextender.extender.state.group_book import MAX_AVOIDED, MAX_RELEASED, GroupBook
from gpuextender.extender.state.pod_ledger import BoundPod
from tests.extender.state.test_group_book import Clock

G = group_key("lws", "ml", "g")
A = ("c", "a", "c=a")
B = ("c", "b", "c=b")


def held(book: GroupBook, domain: tuple[str, str, str] = A, size: int = 2, key: str = G) -> GroupBook:
    assert book.hold(key, "lws", size, 8, domain, {f"{domain[1]}0": size}, "")
    return book


def test_refusals_are_per_member_and_cleared_when_the_plans_domain_is_offered() -> None:
    book = held(GroupBook(60.0, Clock()))
    book.member_refused(G, "u0", "c=b")
    book.member_refused(G, "u0", "c=d")
    book.member_refused(G, "u1", "c=b")
    assert book.refused_for(G, "u0") == {"c=b", "c=d"} and book.refused_for(G, "u1") == {"c=b"}
    assert book.refused_for(G, "u2") == frozenset() and book.counts.waited_for_domain == 3
    book.domain_offered(G)
    assert book.refused_for(G, "u0") == frozenset() and book.refused_for(G, "u1") == frozenset()


def test_refusals_stay_while_the_plan_stays_in_its_domain_and_go_when_it_moves() -> None:
    book = held(GroupBook(60.0, Clock()))
    book.member_refused(G, "u0", "c=b")
    held(book)  # the same domain again
    assert book.refused_for(G, "u0") == {"c=b"}
    held(book, B)
    assert book.refused_for(G, "u0") == frozenset()


def test_without_a_plan_nothing_is_kept_but_the_count() -> None:
    book = GroupBook(60.0, Clock())
    book.member_refused(G, "u0", "c=b")
    book.domain_offered(G)  # (nothing to clear)
    assert book.refused_for(G, "u0") == frozenset() and book.counts.waited_for_domain == 1


def test_refusals_kept_are_bounded_at_size_times_max_avoided() -> None:
    book = held(GroupBook(60.0, Clock()), size=2)
    for i in range(2 * MAX_AVOIDED):
        book.member_refused(G, "u0", f"c=x{i}")
    assert len(book.refused_for(G, "u0")) == 2 * MAX_AVOIDED
    book.member_refused(G, "u0", "c=one-more")
    assert "c=one-more" not in book.refused_for(G, "u0")
    book.member_refused(G, "", "c=x0")  # (no UID: nothing kept)


def test_a_domain_given_up_releases_a_plan_there_and_is_remembered() -> None:
    book = held(GroupBook(60.0, Clock()))
    book.avoid(G, "c=b")  # not the plan's domain: the plan stays
    assert book.plan(G) is not None and book.avoided(G) == {"c=b"}
    book.avoid(G, "c=a")
    assert book.plan(G) is None and book.holds_on("a0") == ()
    assert "never c=a" in book.released(G)
    assert book.avoided(G) == {"c=a", "c=b"} and book.counts.domains_given_up == 2


def test_domains_given_up_are_bounded_per_group_the_newest_kept() -> None:
    book = GroupBook(60.0, Clock())
    for i in range(MAX_AVOIDED):
        book.avoid(G, f"c=x{i}")
    assert len(book.avoided(G)) == MAX_AVOIDED
    book.avoid(G, "c=x0")  # again: the newest now, nothing dropped
    assert len(book.avoided(G)) == MAX_AVOIDED
    book.avoid(G, "c=new")
    assert len(book.avoided(G)) == MAX_AVOIDED and "c=x1" not in book.avoided(G) and "c=x0" in book.avoided(G)


def test_groups_with_domains_given_up_are_bounded_the_oldest_forgotten() -> None:
    book = GroupBook(60.0, Clock())
    keys = [group_key("lws", "ml", f"g{i}") for i in range(MAX_RELEASED + 1)]
    for k in keys[:MAX_RELEASED]:
        book.avoid(k, "c=a")
    assert book.avoided(keys[0]) == {"c=a"}
    book.avoid(keys[MAX_RELEASED], "c=a")
    assert book.avoided(keys[0]) == frozenset() and book.avoided(keys[1]) == {"c=a"}


def member(uid: str, node: str) -> BoundPod:
    return BoundPod(uid=uid, key=f"ml/{uid}", node=node, gpus=8, mig=(), phase="Running", seen_at=0.0, group=G)


def test_a_group_placed_whole_or_deleted_forgets_what_it_gave_up() -> None:
    book = held(GroupBook(60.0, Clock()))
    book.avoid(G, "c=b")
    book.member_bound(member("u0", "a0"), 1)
    assert book.avoided(G) == {"c=b"}  # not whole yet
    book.member_bound(member("u1", "a0"), 2)
    assert book.avoided(G) == frozenset()
    book.avoid(G, "c=b")
    book.deleted(G)
    assert book.avoided(G) == frozenset()


def test_a_groups_role_is_looked_up_and_forgotten_with_its_composite() -> None:
    book = GroupBook(60.0, Clock())
    book.role_seen("llm/llama", "engine", "k-engine")
    book.role_seen("llm/llama", "decoder", "k-decoder")
    assert book.role_of("k-engine") == "engine of llm/llama" and book.role_of("other") == ""
    assert book.partners("llm/llama", "engine") == ["k-decoder"]
    book.role_seen("llm/llama", "engine", "k-engine-2")  # the role's group replaced
    assert book.role_of("k-engine") == "" and book.role_of("k-engine-2") == "engine of llm/llama"
    for i in range(MAX_RELEASED):  # the oldest composite goes past the bound
        book.role_seen(f"llm/s{i}", "engine", f"k{i}")
    assert book.role_of("k-engine-2") == "" and book.role_of("k0") == "engine of llm/s0"
