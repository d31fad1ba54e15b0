"""Issue 51, item 4 through the preempt verb: a group member's preempt call keeps only the nodes of
one domain, the one whose cheapest eviction set makes room for every member not yet placed; the
domain is held for the group, its later members preempt inside it, and members kube-scheduler
nominated after their preemption count as placed (decide/preempt_group.py)."""

from __future__ import annotations

from typing import Any

from gpuextender.extender.decide import preempt_group
from gpuextender.extender.decide.group_domains import level_index
from gpuextender.extender.decide.group_member import GroupContext
from gpuextender.extender.decide.preempt_victims import AS_PROPOSED, DROPPED, KEPT
from gpuextender.extender.model.pod_group import GroupRef
from gpuextender.extender.scheduler.wire import ExtenderArgs
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.pod_ledger import POD_KIND
from tests.extender.scheduler.test_groups import CLIQUE, failures, lws_pod
from tests.extender.scheduler.test_preempt_verb import HIGH, LOW, Fleet, Gpu, uid

CLIQUES = {"a0": "a", "a1": "a", "b0": "b", "b1": "b", "d0": "d", "d1": "d"}
GROUP = "llm/leaderworkerset/g"


def full(node: str, states: tuple[str, ...] = ("idle",) * 8) -> list[Gpu]:
    """8 GPUs held by two 4-GPU pods, `<node>-0` (GPUs 0-3) and `<node>-4` (4-7)."""
    return [(state, f"{node}-{0 if i < 4 else 4}") for i, state in enumerate(states)]


def grouped(priorities: dict[str, int], states: dict[str, tuple[str, ...]] | None = None, **policy: Any) -> Fleet:
    """The 6 nodes in cliques a, b, d of 2, every GPU held by 4-GPU pods of the clique's priority."""
    f = Fleet({n: full(n, (states or {}).get(n, ("idle",) * 8)) for n in CLIQUES}, DecisionPolicy(**policy))
    f.view = InventoryView(
        node_labels={n: {CLIQUE: c} for n, c in CLIQUES.items()}, allocatable_gpus=dict.fromkeys(CLIQUES, 8)
    )
    for node, clique in CLIQUES.items():
        for half in (0, 4):
            f.bind(f"{node}-{half}", node, 4, priorities[clique])
    return f


def member(index: int, nominated: str = "") -> dict[str, Any]:
    p = lws_pod("g", index, 2)
    p["spec"]["priority"] = HIGH
    if nominated:
        p["status"] = {"nominatedNodeName": nominated}
    return p


def proposals(*nodes: str) -> dict[str, list[str]]:
    """kube-scheduler's candidates for an 8-GPU member: both pods of each node."""
    return {n: [uid(f"{n}-0"), uid(f"{n}-4")] for n in nodes}


def answered(answer: dict[str, Any]) -> dict[str, list[str]]:
    return {n: sorted(p["UID"] for p in v["Pods"]) for n, v in answer["NodeNameToMetaVictims"].items()}


def last_call(f: Fleet, pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["node"]: c for c in f.explain(pod)["preemption"]["lastCall"]["candidates"]}


def evict(f: Fleet, node: str) -> None:
    """The node's victims are gone: out of the ledger and of the kubelet's allocation."""
    for half in (0, 4):
        f.ledger.delete(POD_KIND, {"metadata": {"uid": uid(f"{node}-{half}")}})
    f.report(node, [("idle", None)] * 8)


def test_the_first_member_keeps_only_the_cheapest_domain_and_holds_it_for_the_group() -> None:
    f = grouped({"a": 50, "b": LOW, "d": 50}, no_fit_policy="reject")
    answer = f.preempt(member(0), proposals(*CLIQUES))
    assert answered(answer) == {n: sorted(proposals(n)[n]) for n in ("b0", "b1")}  # 4 pods, 16 GPUs
    calls = last_call(f, member(0))
    for node in ("a0", "a1", "d0", "d1"):
        assert calls[node]["action"] == DROPPED and f"{GROUP} preempts in {CLIQUE}=b" in calls[node]["why"]
    assert calls["b0"]["action"] == KEPT and "1 member(s) here" in calls["b0"]["why"]
    plan = f.api.groups.plan(GROUP)
    assert plan is not None and plan.domain_name == f"{CLIQUE}=b" and plan.preempting
    assert plan.holds == {"b0": 1, "b1": 1}
    # The hold is the group's: a single 8-GPU pod of the same priority finds b's GPUs taken once the victims go.
    evict(f, "b0")
    single = f.api.filter(
        ExtenderArgs({**member(9), "metadata": {"name": "s", "namespace": "llm", "uid": "s"}}, ["b0"], None)
    )
    assert single["NodeNames"] in ([], None), single


def test_equal_costs_go_to_the_smaller_name_and_a_dearer_domain_never_wins() -> None:
    f = grouped({"a": LOW, "b": LOW, "d": LOW})
    assert set(answered(f.preempt(member(0), proposals("d0", "d1", "b0", "b1")))) == {"b0", "b1"}
    g = grouped({"a": 60, "b": 50, "d": LOW})  # the cheapest victims' priority decides first
    assert set(answered(g.preempt(member(0), proposals(*CLIQUES)))) == {"d0", "d1"}


def test_a_later_member_preempts_inside_the_planned_domain_while_the_first_ones_victims_leave() -> None:
    f = grouped({"a": 50, "b": LOW, "d": LOW})
    f.preempt(member(0), proposals(*CLIQUES))  # b chosen (as cheap as d, the smaller name); b0's pods go
    # Member 1: b0 is no candidate (member 0 is nominated there), its victims are still leaving.
    answer = f.preempt(member(1), proposals("a0", "a1", "b1", "d0", "d1"))
    assert answered(answer) == {"b1": sorted(proposals("b1")["b1"])}
    assert "a0" not in answered(answer) and f.api.groups.plan(GROUP).domain_name == f"{CLIQUE}=b"
    # Once they are gone, b0 fits a member now: still b1 alone is answered.
    evict(f, "b0")
    assert answered(f.preempt(member(1), proposals("a0", "a1", "b1", "d0", "d1"))) == {
        "b1": sorted(proposals("b1")["b1"])
    }


def test_a_filter_that_finds_the_preempted_domain_short_keeps_it() -> None:
    f = grouped({"a": 50, "b": LOW, "d": LOW})
    f.preempt(member(0), proposals(*CLIQUES))
    evict(f, "b0")
    answer = f.api.filter(ExtenderArgs(member(0), ["b0"], None))
    assert answer["NodeNames"] in ([], None) and "GroupDoesNotFit" in failures(answer)["b0"], answer
    assert "b0" in answer["FailedNodes"]  # soft: kube-scheduler may preempt for it
    plan = f.api.groups.plan(GROUP)
    assert plan is not None and plan.domain_name == f"{CLIQUE}=b"  # not released


def test_members_nominated_after_their_preemption_count_as_placed() -> None:
    f = grouped({"a": 50, "b": LOW, "d": LOW})
    f.preempt(member(0), proposals(*CLIQUES))
    f.preempt(member(1), proposals("a0", "a1", "b1", "d0", "d1"))
    evict(f, "b0")
    evict(f, "b1")
    # kube-scheduler offers each member only its nominated node (the other's holds the other).
    first = f.api.filter(ExtenderArgs(member(0, nominated="b0"), ["b0"], None))
    assert "GroupDoesNotFit" in failures(first)["b0"]  # member 1's nomination is not known yet
    second = f.api.filter(ExtenderArgs(member(1, nominated="b1"), ["b1"], None))
    assert second["NodeNames"] == ["b1"], second
    again = f.api.filter(ExtenderArgs(member(0, nominated="b0"), ["b0"], None))
    assert again["NodeNames"] == ["b0"], again
    # A member no longer nominated is not counted.
    f.api.filter(ExtenderArgs(member(1), ["b1"], None))
    assert "GroupDoesNotFit" in failures(f.api.filter(ExtenderArgs(member(0, nominated="b0"), ["b0"], None)))["b0"]


def test_busy_or_failing_gpus_never_count_as_freed_for_the_group() -> None:
    busy = ("busy",) * 4 + ("idle",) * 4
    failing = ("failing",) * 2 + ("idle",) * 6
    # Clique a has the cheapest victims, but its GPUs cannot hold two 8-GPU members.
    f = grouped({"a": LOW, "b": 50, "d": 60}, {"a0": busy, "a1": failing})
    assert set(answered(f.preempt(member(0), proposals(*CLIQUES)))) == {"b0", "b1"}


def test_no_domain_that_evictions_can_make_hold_the_group_drops_every_candidate() -> None:
    f = grouped({"a": LOW, "b": HIGH, "d": HIGH + 1})  # only a's pods are below the members
    f.view = InventoryView(
        node_labels={n: {CLIQUE: "x" if n == "a0" else c} for n, c in CLIQUES.items()},
        allocatable_gpus=dict.fromkeys(CLIQUES, 8),
    )
    answer = f.preempt(member(0), proposals(*CLIQUES))
    assert answered(answer) == {}
    calls = last_call(f, member(0))
    assert all(c["action"] == DROPPED for c in calls.values())
    assert "the group waits whole" in calls["a1"]["why"] and f.api.groups.plan(GROUP) is None


def test_a_bound_member_pins_the_domain() -> None:
    f = grouped({"a": LOW, "b": LOW, "d": 50})
    evict(f, "d0")
    f.bind("g-0", "d0", 8, HIGH)  # member 0 bound in d (by another replica, or before a restart)
    f.ledger.upsert(
        "Pod", {**member(0), "spec": {**member(0)["spec"], "nodeName": "d0"}, "status": {"phase": "Running"}}
    )
    assert answered(f.preempt(member(1), proposals("a0", "a1", "b0", "b1", "d1"))) == {
        "d1": sorted(proposals("d1")["d1"])
    }


def test_without_fresh_data_the_single_pod_rules_decide() -> None:
    f = grouped({"a": LOW, "b": LOW, "d": LOW}, stale_after_s=5.0)
    f.clock.now += 6.0
    answer = f.preempt(member(0), proposals("a0", "b0"))
    assert answered(answer) == {n: sorted(proposals(n)[n]) for n in ("a0", "b0")}
    assert {c["action"] for c in last_call(f, member(0)).values()} == {AS_PROPOSED}


def test_neighbours_are_the_candidates_domains_other_nodes_at_most_the_bound() -> None:
    labels = {f"n{i}": {CLIQUE: "big"} for i in range(6)}
    index = level_index(CLIQUE, labels)
    ref = GroupRef(GROUP, "leaderworkerset", "llm", "g", 2)
    group = GroupContext(ref, 2, (), 8, (CLIQUE,), lambda _level: index)
    assert preempt_group.neighbours(group, ["n0"], limit=5) == ["n1", "n2", "n3", "n4", "n5"]
    assert preempt_group.neighbours(group, ["n0"], limit=4) == ["n1", "n2", "n3", "n4"]
    assert preempt_group.neighbours(group, ["n0", "n9"], limit=6) == ["n1", "n2", "n3", "n4", "n5"]
