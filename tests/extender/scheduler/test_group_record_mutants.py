"""What a member's filter and preempt call leave in the group book and the log
(scheduler/group_record.py), edges that mutation testing found unheld: the no-domain line (with and
without a reason), the plan's source and why (GPUs left over, domains considered, "any nodes"), the
"chosen" line logged once per domain with the pod, a gang's placed members added to the holds, a
gang member answered no node, and the warning when the book is full."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from gpuextender.extender.decide.decision import Decision
from gpuextender.extender.decide.filter_outcome import FilterOutcome
from gpuextender.extender.decide.group_domains import ANY, Domain, GroupChoice, LevelIndex, Room
from gpuextender.extender.decide.group_member import GroupContext, MemberOutcome
from gpuextender.extender.decide.preempt_group import GroupPreemption
from gpuextender.extender.decide.preempt_victims import PreemptionPlan
from gpuextender.extender.decide.reasons import Reason
from gpuextender.extender.model.pod_group import LWS, GroupRef
from gpuextender.extender.scheduler.group_record import record_group, record_group_preemption
from gpuextender.extender.state.group_book import GroupBook

KEY = "llm/leaderworkerset/g"
REF = GroupRef(KEY, LWS, "llm", "g", 2)
POD = "llm/g-0"
SHORT = Reason("GroupDoesNotFit", "no clique domain holds 2 x 8 GPUs: best clique=a has room for 1", unresolvable=False)
A = Room(Domain("clique", "a", ("a0", "a1")), 3, 20, 2)


def book(max_groups: int = 10) -> GroupBook:
    return GroupBook(60.0, lambda: 0.0, max_groups)


def decision(
    choice: GroupChoice,
    per_member: int = 8,
    placed_on: dict[str, int] | None = None,
    gang: bool = False,
    passed: tuple[str, ...] = (),
) -> Decision:
    """A member's decision as record_group reads it: its group, its outcome, its pod, its answer."""
    no_labels = LevelIndex({}, {})
    group = GroupContext(REF, 2, (), per_member, ("clique",), lambda _: no_labels, placed_on=placed_on or {}, gang=gang)
    member = MemberOutcome(FilterOutcome(list(passed)), choice, False)
    d: Decision = SimpleNamespace(  # type: ignore[assignment]
        group=group, member=member, pod=SimpleNamespace(ref=POD, uid="uid-0"), answered=FilterOutcome(list(passed))
    )
    return d


def chosen(room: Room = A, placement: dict[str, int] | None = None, considered: int = 3) -> GroupChoice:
    return GroupChoice(room, placement if placement is not None else {"a0": 1, "a1": 1}, (room,), None, considered)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str, object]]:
    return [
        (r.levelno, r.getMessage(), getattr(r, "pod", None)) for r in caplog.records if r.name == "gpu_extender.groups"
    ]


def test_a_member_no_domain_holds_logs_the_shortfall_with_the_pod(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gpu_extender.groups")
    record_group(book(), decision(GroupChoice(None, {}, (), SHORT, 0)), "uid-0")
    assert lines(caplog) == [(logging.INFO, f"group {KEY} (leaderworkerset, 2 members): {SHORT.sentence}", POD)]


def test_a_member_no_domain_holds_without_a_reason_logs_no_domain(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gpu_extender.groups")
    record_group(book(), decision(GroupChoice(None, {}, (), None, 0)), "uid-0")
    assert [m for _, m, _ in lines(caplog)] == [f"group {KEY} (leaderworkerset, 2 members): no domain"]


def test_the_plan_says_its_source_the_gpus_left_over_and_the_domains_considered() -> None:
    b = book()
    record_group(b, decision(chosen()), "uid-0")
    plan = b.plan(KEY)
    assert plan is not None and plan.source == LWS
    assert plan.why == (
        "room for 3 of the 2 members to place, 4 free idle GPUs left over there; "
        "3 domain(s) of clique considered, the least stranding chosen"
    )


def test_the_plan_of_members_without_whole_gpus_on_any_nodes_leaves_every_idle_gpu_over() -> None:
    b = book()
    room = Room(Domain(ANY, ANY, ("x",)), 2, 5, 1)
    record_group(b, decision(chosen(room, {"x": 2}, 1), per_member=0), "uid-0")
    plan = b.plan(KEY)
    assert plan is not None and plan.why == (
        "room for 2 of the 2 members to place, 5 free idle GPUs left over there; "
        "1 domain(s) of any nodes considered, the least stranding chosen"
    )


def test_the_chosen_domain_is_logged_with_the_pod_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gpu_extender.groups")
    b = book()
    record_group(b, decision(chosen()), "uid-0")
    record_group(b, decision(chosen()), "uid-1")  # the same domain again: nothing new to say
    plan = b.plan(KEY)
    assert plan is not None
    assert lines(caplog) == [(logging.INFO, f"group {KEY} (leaderworkerset, 2 members): clique=a: {plan.why}", POD)]


def test_a_gangs_placed_members_add_to_the_room_held() -> None:
    b = book()
    record_group(b, decision(chosen(placement={"a0": 1}), placed_on={"a0": 1, "a1": 1}), "uid-0")
    plan = b.plan(KEY)
    assert plan is not None and plan.holds == {"a0": 2, "a1": 1}


def test_a_gang_member_answered_no_node_is_not_counted_placed() -> None:
    b = book()
    record_group(b, decision(chosen(), gang=True), "uid-0")
    plan = b.plan(KEY)
    assert plan is not None and plan.passed == {}
    record_group(b, decision(chosen(), gang=True, passed=("a1",)), "uid-0")
    assert plan.passed == {"uid-0": "a1"}


def test_a_full_book_logs_that_the_group_is_not_held(caplog: pytest.LogCaptureFixture) -> None:
    b = book(max_groups=1)
    assert b.hold("other", LWS, 2, 8, ("clique", "b", "clique=b"), {"b0": 1}, "")
    caplog.set_level(logging.INFO, "gpu_extender.groups")
    record_group(b, decision(chosen()), "uid-0")
    grouped = GroupPreemption(PreemptionPlan((), "victims"), ("clique", "a", "clique=a"), {"a0": 1})
    record_group_preemption(b, decision(chosen()), grouped)
    warning = (logging.WARNING, f"group {KEY}: not held, 1 groups are in flight", None)
    assert b.plan(KEY) is None and lines(caplog) == [warning, warning]


def test_every_member_that_asks_is_seen_whether_or_not_a_domain_was_chosen() -> None:
    b = book()
    assert b.hold(KEY, LWS, 3, 8, ("clique", "a", "clique=a"), {"a0": 3}, "", member="uid-a")
    record_group(b, decision(GroupChoice(None, {}, (), None, 0)), "uid-0")
    plan = b.plan(KEY)
    assert plan is not None and plan.seen == {"uid-a", "uid-0"}


def test_a_preempt_calls_hold_sees_its_member() -> None:
    b = book()
    grouped = GroupPreemption(PreemptionPlan((), "victims"), ("clique", "a", "clique=a"), {"a0": 1})
    record_group_preemption(b, decision(chosen()), grouped)
    plan = b.plan(KEY)
    assert plan is not None and plan.seen == {"uid-0"}


def test_a_namespace_at_its_bound_logs_that_the_group_is_not_held(caplog: pytest.LogCaptureFixture) -> None:
    b = GroupBook(60.0, lambda: 100.0, per_namespace=1)
    assert b.hold("llm/leaderworkerset/other", LWS, 2, 8, ("clique", "b", "clique=b"), {"b0": 1}, "")
    caplog.set_level(logging.INFO, "gpu_extender.groups")
    record_group(b, decision(chosen()), "uid-0")
    grouped = GroupPreemption(PreemptionPlan((), "victims"), ("clique", "a", "clique=a"), {"a0": 1})
    record_group_preemption(b, decision(chosen()), grouped)
    warning = (
        logging.WARNING,
        f"group {KEY}: not held, its namespace has 1 groups held (--group-holds-per-namespace)",
        None,
    )
    assert b.plan(KEY) is None and lines(caplog) == [warning, warning]
    assert b.counts.refused_namespace == 2


def test_a_preempt_calls_domain_is_held_with_the_nominated_members_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gpu_extender.groups")
    b = book()
    grouped = GroupPreemption(PreemptionPlan((), "2 victims on a0"), ("clique", "a", "clique=a"), {"a0": 1})
    d = decision(chosen(), placed_on={"a0": 1, "a1": 1})
    record_group_preemption(b, d, grouped)
    record_group_preemption(b, d, grouped)  # the same domain again: nothing new to say
    plan = b.plan(KEY)
    assert plan is not None and plan.preempting
    assert (plan.source, plan.why, plan.holds) == (LWS, "2 victims on a0", {"a0": 2, "a1": 1})
    assert lines(caplog) == [(logging.INFO, f"group {KEY} (leaderworkerset, 2 members): 2 victims on a0", POD)]
