"""Rules of decide/preempt_group.py that mutation testing found no test holding, called directly
(plan_group, neighbours) over nodes of 8 GPUs whose pods are bound ledger pods: which pods the
single-pod rules leave to kube-scheduler; what each candidate, the domain and the placement are when
members of 2 GPUs share nodes, idle nodes hold members free, a plan's domain is kept and bound
members pin one; the costs that order the domains; what every dropped candidate says. Each test
fails on a one-line change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.group_domains import ANY, NO_LABEL, level_index
from gpuextender.extender.decide.group_member import GroupContext
from gpuextender.extender.decide.preempt_group import GroupPreemption, neighbours, plan_group
from gpuextender.extender.decide.preempt_victims import (
    DROPPED,
    EXTENDED,
    KEPT,
    NodeFacts,
    NodePlan,
    PreemptionPlan,
    Proposal,
)
from gpuextender.extender.model.dra import ClaimRead
from gpuextender.extender.model.ome.pod_intent import PodIdentity
from gpuextender.extender.model.pod_group import GroupRef
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.state.pod_ledger import BoundPod
from tests.extender.scheduler.test_preempt_claims import NOW, STALE_AFTER, summary

HIGH, LOW = 1000, 10
KEY = "ml/leaderworkerset/g"
CLIQUE, RACK = "clique", "rack"


def member(gpus: int = 2, preempts: bool = True, claims: bool = False) -> PodRequest:
    read = (ClaimRead("ml/c", "allocated"),) if claims else ()
    identity = PodIdentity("ml", "", "", "", "", "")
    return PodRequest("ml/g-0", gpus, identity, "spread", "", claims_read=read, priority=HIGH, preempts=preempts)


def no_budgets(_pods: Sequence[BoundPod], _before: Sequence[BoundPod]) -> int:
    return 0


class World:
    """Nodes of 8 GPUs (`layout`: one letter per GPU, i idle / b busy / f failing, or a pod's name in
    upper case: the pod holds that GPU, busy), their pods bound with `priority` (LOW unless named),
    and labels per level."""

    def __init__(
        self,
        layout: Mapping[str, str],
        labels: Mapping[str, Mapping[str, str]] | None = None,
        priority: Mapping[str, int] | None = None,
        stale: Sequence[str] = (),
    ) -> None:
        self.summaries: dict[str, Any] = {}
        self.reported: dict[str, Any] = {}  # the agent's own summary, where it differs
        self.pods: dict[str, BoundPod] = {}
        self.on: dict[str, dict[str, BoundPod]] = {}
        for node, letters in layout.items():
            holders = {i: c.lower() for i, c in enumerate(letters) if c.isupper()}
            states = "".join("b" if c.isupper() else c for c in letters)
            s = replace(summary(states, holders=holders), node=node)
            self.summaries[node] = replace(s, received_at=0.0) if node in stale else s
            here = self.on.setdefault(node, {})
            for name in dict.fromkeys(holders.values()):
                b = BoundPod(
                    f"uid-{name}",
                    f"ml/{name}",
                    node,
                    list(holders.values()).count(name),
                    (),
                    "Running",
                    0.0,
                    priority=(priority or {}).get(name, LOW),
                )
                self.pods[b.uid] = here[b.uid] = b
        self.indexes = {
            level: level_index(level, {n: {level: v} for n, v in values.items()})
            for level, values in (labels or {}).items()
        }

    def facts(self, node: str) -> NodeFacts:
        here = self.on.get(node, {})
        return NodeFacts(self.summaries.get(node), self.reported.get(node), here.values(), here)

    def group(self, per: int = 2, size: int = 2, levels: tuple[str, ...] = (CLIQUE,), **more: Any) -> GroupContext:
        ref = GroupRef(KEY, "leaderworkerset", "ml", "g", size)
        return GroupContext(ref, size, more.pop("bound", ()), per, levels, self.indexes.__getitem__, **more)

    def plan(
        self,
        group: GroupContext,
        proposals: Sequence[Proposal],
        passing: Sequence[str] = (),
        verdicts: Mapping[str, reasons.Reason] | None = None,
        pod: PodRequest | None = None,
    ) -> GroupPreemption | None:
        return plan_group(
            pod or member(group.per_member),
            group,
            proposals,
            verdicts or {},
            passing,
            self.facts,
            NOW,
            STALE_AFTER,
            self.pods.get,
            no_budgets,
        )


def proposal(node: str, *victims: str, pdb: int = 0) -> Proposal:
    return Proposal(node, tuple(f"uid-{v}" for v in victims), pdb)


def kept(node: str, victims: tuple[str, ...], why: str, usable: int, added: tuple[str, ...] = ()) -> NodePlan:
    uids = tuple(f"uid-{v}" for v in victims)
    extra = tuple(f"uid-{v}" for v in added)
    return NodePlan(node, EXTENDED if added else KEPT, uids + extra, 0, why, usable, extra, uids)


def dropped(node: str, victims: tuple[str, ...], why: str, usable: int | None = None) -> NodePlan:
    return NodePlan(node, DROPPED, (), 0, why, usable, (), tuple(f"uid-{v}" for v in victims))


def preempts_in(name: str) -> str:
    return f"group {KEY} preempts in {name}"


def here(members: int, why: str) -> str:
    return f"group {KEY}, {members} member(s) here: {why}"


def note(name: str, pods: int, gpus: int, evicted: int, remaining: int) -> str:
    return (
        f"group {KEY}: preempts in {name}: {pods} pod(s), {gpus} GPU(s) evicted make room for {evicted} of its "
        f"{remaining} member(s) to place ({remaining - evicted} on free GPUs)"
    )


def test_members_share_a_candidate_and_an_idle_node_of_the_domain_holds_one_free() -> None:
    """4 members of 2 GPUs: a1 (passing, 2 idle GPUs) holds one free, a0's evictions the other three;
    b0's victims are dearer."""
    w = World(
        {"a0": "AABBCCDD", "a1": "iibbbbbb", "b0": "EEFFGGHH"},
        labels={CLIQUE: {"a0": "a", "a1": "a", "b0": "b"}},
        priority=dict.fromkeys("efgh", LOW + 5),
    )
    got = w.plan(w.group(size=4), [proposal("b0", "e"), proposal("a0", "a")], passing=["a1"])
    assert got == GroupPreemption(
        PreemptionPlan(
            (
                dropped("b0", ("e",), preempts_in("clique=a"), 2),
                kept("a0", ("a",), here(3, "2 more lower-priority GPU pod(s): 6 GPUs usable after"), 6, ("b", "c")),
            ),
            note("clique=a", 3, 6, 3, 4),
        ),
        (CLIQUE, "a", "clique=a"),
        {"a1": 1, "a0": 3},
    )


def test_each_next_member_goes_where_it_costs_least_across_the_domains_candidates() -> None:
    """a0's first victim is the cheapest (LOW), its next ones dear (LOW + 10); a1's all LOW + 1: one
    member on a0, two on a1."""
    w = World(
        {"a0": "AABBCCDD", "a1": "EEFFGGHH"},
        labels={CLIQUE: {"a0": "a", "a1": "a"}},
        priority={**dict.fromkeys("bcd", LOW + 10), **dict.fromkeys("efgh", LOW + 1)},
    )
    got = w.plan(w.group(size=3), [proposal("a1", "e"), proposal("a0", "a")])
    assert got == GroupPreemption(
        PreemptionPlan(
            (
                kept("a1", ("e",), here(2, "1 more lower-priority GPU pod(s): 4 GPUs usable after"), 4, ("f",)),
                kept("a0", ("a",), here(1, "2 GPUs usable after"), 2),
            ),
            note("clique=a", 3, 6, 3, 3),
        ),
        (CLIQUE, "a", "clique=a"),
        {"a0": 1, "a1": 2},
    )


def test_the_planned_domain_is_kept_with_the_room_an_earlier_members_victims_leave() -> None:
    """b planned: b1's 2 members held (1 of them nominated: placed), its victims leaving; b0 evicts
    for the other member although a0's victims are cheaper."""
    w = World(
        {"a0": "AABBCCDD", "b0": "EEFFGGHH", "b1": "bbbbbbbb"},
        labels={CLIQUE: {"a0": "a", "b0": "b", "b1": "b"}},
        priority=dict.fromkeys("efgh", LOW + 1),
    )
    group = w.group(size=3, planned=(CLIQUE, "b", "clique=b"), held={"b1": 2}, placed_on={"b1": 1})
    got = w.plan(group, [proposal("a0", "a"), proposal("b0", "e")])
    assert got == GroupPreemption(
        PreemptionPlan(
            (
                dropped("a0", ("a",), preempts_in("clique=b")),
                kept("b0", ("e",), here(1, "2 GPUs usable after"), 2),
            ),
            note("clique=b", 1, 2, 1, 2),
        ),
        (CLIQUE, "b", "clique=b"),
        {"b1": 1, "b0": 1},
    )


def test_no_domain_evictions_can_make_hold_the_group_drops_every_candidate_saying_so() -> None:
    w = World(
        {"a0": "AABBCCDD", "b0": "EEFFGGHH"},
        labels={CLIQUE: {"a0": "a", "b0": "b"}},
        priority=dict.fromkeys("abcdefgh", HIGH),
    )
    got = w.plan(w.group(), [proposal("a0", "a"), proposal("b0", "e"), proposal("s0", "x")])
    why = (
        f"group {KEY}: no clique domain can be made to hold its 2 member(s) of 2 GPU(s) by evicting "
        "lower-priority pods: the group waits whole"
    )
    assert got == GroupPreemption(
        PreemptionPlan(tuple(dropped(n, (v,), why) for n, v in [("a0", "a"), ("b0", "e"), ("s0", "x")]), why),
        None,
        {},
    )


def test_a_node_proposed_again_stale_ones_and_those_no_eviction_makes_usable_are_answered_once() -> None:
    """s0 stale (first), a0 twice (its first proposal counts), a1 failing the member unresolvably."""
    w = World(
        {"a0": "AABBCCDD", "a1": "EEFFGGHH", "s0": "iiiiiiii"},
        labels={CLIQUE: {"a0": "a", "a1": "a", "s0": "a"}},
        stale=["s0"],
    )
    proposals = [proposal("s0", "x"), proposal("a0", "a"), proposal("a0", "b"), proposal("a1", "e")]
    got = w.plan(w.group(), proposals, verdicts={"a1": reasons.INSUFFICIENT_HEALTHY_GPUS})
    assert got == GroupPreemption(
        PreemptionPlan(
            (
                dropped("s0", ("x",), f"no fresh GPU data: {preempts_in('clique=a')}"),
                kept("a0", ("a",), here(2, "1 more lower-priority GPU pod(s): 4 GPUs usable after"), 4, ("b",)),
                dropped("a1", ("e",), "InsufficientHealthyGPUs: no eviction makes the node usable for the pod"),
            ),
            note("clique=a", 2, 4, 2, 2),
        ),
        (CLIQUE, "a", "clique=a"),
        {"a0": 2},
    )


def test_candidates_no_eviction_makes_usable_are_all_dropped_with_no_domain() -> None:
    w = World({"a0": "AABBCCDD", "a1": "EEFFGGHH"}, labels={CLIQUE: {"a0": "a", "a1": "a"}})
    verdicts = {"a0": reasons.NVML_UNAVAILABLE, "a1": reasons.INSUFFICIENT_HEALTHY_GPUS}
    got = w.plan(w.group(), [proposal("a0", "a"), proposal("a1", "e")], verdicts=verdicts)
    unusable = "no eviction makes the node usable for the pod"
    assert got == GroupPreemption(
        PreemptionPlan(
            (
                dropped("a0", ("a",), f"NvmlUnavailable: {unusable}"),
                dropped("a1", ("e",), f"InsufficientHealthyGPUs: {unusable}"),
            )
        ),
        None,
        {},
    )


def test_a_bound_member_pins_its_domain_over_cheaper_victims_elsewhere() -> None:
    w = World(
        {"a0": "AABBCCDD", "a1": "bbbbbbbb", "b0": "EEFFGGHH"},
        labels={CLIQUE: {"a0": "a", "a1": "a", "b0": "b"}},
        priority=dict.fromkeys("abcd", LOW + 1),
    )
    got = w.plan(w.group(size=3, bound=("a1",)), [proposal("b0", "e"), proposal("a0", "a")])
    assert got is not None and got.domain == (CLIQUE, "a", "clique=a") and got.placement == {"a0": 2}
    assert got.plan.nodes[0] == dropped("b0", ("e",), preempts_in("clique=a"))


@pytest.mark.parametrize(("levels", "domain"), [((CLIQUE, RACK), (RACK, "r", "rack=r")), ((), (ANY, ANY, "any nodes"))])
def test_a_group_no_clique_holds_preempts_at_the_next_level_or_on_any_nodes(
    levels: tuple[str, ...], domain: tuple[str, str, str]
) -> None:
    """6 members of 2 GPUs: 4 on a0, 2 on b0 (the cheapest steps are equal: the smaller node first)."""
    w = World(
        {"a0": "AABBCCDD", "b0": "EEFFGGHH"}, labels={CLIQUE: {"a0": "a", "b0": "b"}, RACK: {"a0": "r", "b0": "r"}}
    )
    got = w.plan(w.group(size=6, levels=levels), [proposal("b0", "e"), proposal("a0", "a")])
    assert got == GroupPreemption(
        PreemptionPlan(
            (
                kept("b0", ("e",), here(2, "1 more lower-priority GPU pod(s): 4 GPUs usable after"), 4, ("f",)),
                kept(
                    "a0", ("a",), here(4, "3 more lower-priority GPU pod(s): 8 GPUs usable after"), 8, ("b", "c", "d")
                ),
            ),
            note(domain[2], 6, 12, 6, 6),
        ),
        domain,
        {"a0": 4, "b0": 2},
    )


@pytest.mark.parametrize(
    "case",
    [
        {"per": 0},
        {"pod": member(preempts=False)},
        {"pod": member(claims=True)},
        {"stale": True},
    ],
)
def test_the_single_pod_rules_decide_for_a_pod_the_group_rules_cannot_judge(case: dict[str, Any]) -> None:
    """No GPUs per member, a pod that never preempts or gets its GPUs through claims, or no candidate
    with fresh data."""
    w = World({"a0": "AABBCCDD"}, labels={CLIQUE: {"a0": "a"}}, stale=["a0"] if case.get("stale") else [])
    group = w.group(per=case.get("per", 2))
    assert w.plan(group, [proposal("a0", "a")], pod=case.get("pod", member())) is None


def test_members_of_one_gpu_are_placed_by_the_group_rules() -> None:
    w = World({"a0": "AbCCDDDD"}, labels={CLIQUE: {"a0": "a"}})
    got = w.plan(w.group(per=1, size=2), [proposal("a0", "a")])
    assert got is not None and got.placement == {"a0": 2}
    assert got.plan.nodes == (
        kept("a0", ("a",), here(2, "1 more lower-priority GPU pod(s): 3 GPUs usable after"), 3, ("c",)),
    )


def test_a_candidate_with_cheaper_neighbours_says_they_make_room_for_the_group() -> None:
    w = World({"a0": "AABBCCDD", "a1": "EEFFGGHH"}, labels={CLIQUE: {"a0": "a", "a1": "a"}}, priority={"e": LOW + 1})
    got = w.plan(w.group(size=2), [proposal("a1", "e"), proposal("a0", "a")])
    assert got is not None and got.placement == {"a0": 2}
    why = f"group {KEY}: clique=a's cheaper candidates make room for it"
    assert got.plan.nodes[0] == dropped("a1", ("e",), why, 2)


def test_a_candidate_counts_what_it_offers_from_the_agents_own_summary() -> None:
    """a0: 2 GPUs idle by the agent, none once 3 bound pods not attributed yet (p, q, r) are taken
    off: evicting p gives 2 - 3 + 1 = 0, so q goes too for a member of 1 GPU."""
    w = World({"a0": "iibbbbbb"}, labels={CLIQUE: {"a0": "a"}})
    w.reported["a0"] = w.summaries["a0"]
    w.summaries["a0"] = replace(w.summaries["a0"], idle_gpus=0, free_gpus=0, bound_pod_units=3)
    for name in "pqr":
        b = BoundPod(f"uid-{name}", f"ml/{name}", "a0", 1, (), "Pending", 0.0, priority=LOW)
        w.pods[b.uid] = w.on["a0"][b.uid] = b
    got = w.plan(w.group(per=1, size=1), [proposal("a0", "p")])
    assert got is not None and got.plan.nodes[0].victims == ("uid-p", "uid-q")


def test_a_candidate_whose_victims_the_ledger_does_not_know_costs_no_priority() -> None:
    """a0 has the GPUs already (kube-scheduler named a CPU pod); b0's victim has priority -1: a0's
    domain costs less."""
    w = World({"a0": "iiiibbbb", "b0": "EEFFGGHH"}, labels={CLIQUE: {"a0": "a", "b0": "b"}}, priority={"e": -1})
    got = w.plan(w.group(size=1), [proposal("b0", "e"), proposal("a0", "cpu")])
    assert got is not None and got.domain == (CLIQUE, "a", "clique=a")
    assert got.plan.nodes[1] == kept("a0", ("cpu",), here(1, "4 GPUs usable after"), 4)


def test_a_candidate_passing_now_holds_members_only_through_its_evictions() -> None:
    """a0 (4 idle GPUs, proposed) is among the passing nodes: its room is judged as a candidate's."""
    w = World({"a0": "iiiiAABB"}, labels={CLIQUE: {"a0": "a"}})
    got = w.plan(w.group(size=2), [proposal("a0", "a")], passing=["a0"])
    assert got is not None and got.placement == {"a0": 2}
    assert got.plan.note == note("clique=a", 1, 2, 2, 2)


def test_a_passing_node_without_fresh_data_holds_no_member() -> None:
    w = World({"a0": "AABBCCDD", "a1": "iiiiiiii"}, labels={CLIQUE: {"a0": "a", "a1": "a"}}, stale=["a1"])
    got = w.plan(w.group(size=2), [proposal("a0", "a")], passing=["a1", "a2"])
    assert got is not None and got.placement == {"a0": 2}


def test_a_planned_domain_of_one_unlabelled_node_is_kept() -> None:
    w = World({"a0": "AABBCCDD", "b0": "EEFFGGHH"}, labels={CLIQUE: {}}, priority=dict.fromkeys("abcd", LOW + 1))
    group = w.group(size=2, planned=(CLIQUE, NO_LABEL, "node a0"))
    got = w.plan(group, [proposal("b0", "e"), proposal("a0", "a")])
    assert got is not None and got.domain == (CLIQUE, NO_LABEL, "node a0") and got.placement == {"a0": 2}


def test_a_level_no_node_carries_is_skipped_for_the_next() -> None:
    """No node carries the clique label: rack=r holds the group, not a domain of one node."""
    w = World({"a0": "AABBCCDD", "b0": "EEFFGGHH"}, labels={CLIQUE: {}, RACK: {"a0": "r", "b0": "r"}})
    got = w.plan(w.group(size=2, levels=(CLIQUE, RACK)), [proposal("b0", "e"), proposal("a0", "a")])
    assert got is not None and got.domain == (RACK, "r", "rack=r")


def test_an_unlabelled_candidate_is_a_domain_of_its_own() -> None:
    w = World(
        {"a0": "AABBCCDD", "b0": "EEFFGGHH"}, labels={CLIQUE: {"a0": "a"}}, priority=dict.fromkeys("abcd", LOW + 1)
    )
    got = w.plan(w.group(size=2), [proposal("a0", "a"), proposal("b0", "e")])
    assert got is not None and got.domain == (CLIQUE, NO_LABEL, "node b0") and got.placement == {"b0": 2}
    assert got.plan.nodes[0] == dropped("a0", ("a",), preempts_in("node b0"), 2)


# -- neighbours ------------------------------------------------------------------------------------


def two_levels() -> GroupContext:
    """Cliques a (a0-a3) and b (b0-b3), and "" (e0, e1: an empty label value); racks r (a0, x0)."""
    cliques = {**{f"a{i}": "a" for i in range(4)}, **{f"b{i}": "b" for i in range(4)}, "e0": "", "e1": ""}
    w = World({}, labels={CLIQUE: cliques, RACK: {"a0": "r", "x0": "r"}})
    return w.group(levels=(CLIQUE, RACK))


def test_neighbours_are_the_other_nodes_of_the_candidates_domains_at_every_level() -> None:
    assert neighbours(two_levels(), ["a0"]) == ["a1", "a2", "a3", "x0"]


@pytest.mark.parametrize(
    ("planned", "found"),
    [
        ((CLIQUE, "", "clique="), ["e0", "e1"]),  # an empty label value is a domain too
        ((CLIQUE, "gone", "clique=gone"), []),  # no node carries it any more
        ((CLIQUE, NO_LABEL, "node z"), []),
        ((ANY, ANY, "any nodes"), []),
    ],
)
def test_neighbours_include_the_planned_domains_nodes(planned: tuple[str, str, str], found: list[str]) -> None:
    group = replace(two_levels(), levels=(RACK,), planned=planned)
    assert neighbours(group, ["x0"]) == sorted(["a0", *found])


def test_neighbours_stop_at_the_limit_past_the_candidates_only() -> None:
    """Candidates p0 (clique p: p1, z1, z2 besides) and q0 (clique q: q1, z3, z4), limit 2: both
    cliques are read whichever comes first (after one: 4 nodes, not more than 2 + 2 yet), and the two
    smallest names are p1 and q1."""
    cliques = {"p0": "p", "p1": "p", "z1": "p", "z2": "p", "q0": "q", "q1": "q", "z3": "q", "z4": "q"}
    group = World({}, labels={CLIQUE: cliques}).group()
    assert neighbours(group, ["p0", "q0"], limit=2) == ["p1", "q1"]


def test_a_bound_member_on_an_unlabelled_node_pins_that_node() -> None:
    w = World({"a0": "AABBCCDD", "b0": "EEFFGGHH"}, labels={CLIQUE: {"a0": "a"}}, priority=dict.fromkeys("ef", LOW + 1))
    got = w.plan(w.group(size=2, bound=("b0",)), [proposal("a0", "a"), proposal("b0", "e")])
    assert got is not None and got.domain == (CLIQUE, NO_LABEL, "node b0") and got.placement == {"b0": 1}


def test_the_planned_domains_leaving_room_is_taken_in_name_order_while_members_remain() -> None:
    """b planned; held: b1 2 members, b2 1 (nominated there: placed), b3 1, b5 1; 3 members remain:
    b1 and b3 hold them, b2 has no room left and b5 is not needed; b0's evictions are not either."""
    w = World({"b0": "EEFFGGHH"}, labels={CLIQUE: {"b0": "b"}})
    held = {"b5": 1, "b3": 1, "b2": 1, "b1": 2}
    group = w.group(size=4, planned=(CLIQUE, "b", "clique=b"), held=held, placed_on={"b2": 1})
    got = w.plan(group, [proposal("b0", "e")])
    assert got == GroupPreemption(
        PreemptionPlan(
            (dropped("b0", ("e",), f"group {KEY}: clique=b's cheaper candidates make room for it"),),
            note("clique=b", 0, 0, 0, 3),
        ),
        (CLIQUE, "b", "clique=b"),
        {"b1": 2, "b3": 1},
    )


def test_idle_nodes_hold_members_free_the_tightest_first() -> None:
    """Passing nodes of clique a with 2, 4, 6 and 8 idle GPUs (the tightest named last): 2 members of
    2 GPUs go to the 2- and 4-GPU ones, no other node is used. (A sort key made constant still passes
    where the set of nodes happens to come in that order: ~1 run in 56.)"""
    idle = {"z2": 2, "y4": 4, "x6": 6, "w8": 8, "v8": 8, "u8": 8, "t8": 8, "s8": 8}
    layout = {n: "i" * k + "b" * (8 - k) for n, k in idle.items()}
    w = World({**layout, "a0": "AABBCCDD"}, labels={CLIQUE: dict.fromkeys([*idle, "a0"], "a")})
    got = w.plan(w.group(size=2), [proposal("a0", "a")], passing=list(idle))
    assert got is not None and got.placement == {"z2": 1, "y4": 1}
    assert got.plan.note == note("clique=a", 0, 0, 0, 2)


def test_an_idle_nodes_odd_gpu_holds_no_member() -> None:
    """x has 5 idle GPUs: 2 members of 2 GPUs there, the third through a0's evictions."""
    w = World({"x": "iiiiibbb", "a0": "AABBCCDD"}, labels={CLIQUE: {"x": "a", "a0": "a"}})
    got = w.plan(w.group(size=3), [proposal("a0", "a")], passing=["x"])
    assert got is not None and got.placement == {"x": 2, "a0": 1}


# -- the costs and preferences that order the domains -----------------------------------------------


def chosen(w: World, size: int, proposals: Sequence[Proposal], passing: Sequence[str] = ()) -> Any:
    got = w.plan(w.group(size=size), proposals, passing=passing)
    assert got is not None and got.domain is not None
    return got.domain[1], got.placement


def test_a_next_member_that_breaks_no_more_budgets_costs_none() -> None:
    """a0 and a1 each break one budget for a member (kube-scheduler's count); a0's second member
    breaks none more: both members on a0."""
    w = World({"a0": "AABBCCDD", "a1": "EEFFGGHH"}, labels={CLIQUE: {"a0": "a", "a1": "a"}})
    assert chosen(w, 2, [proposal("a0", "a", pdb=1), proposal("a1", "e", pdb=1)]) == ("a", {"a0": 2})


def test_a_next_member_costs_the_victims_it_adds() -> None:
    """b0's second member needs 2 more victims (b and c, 1 GPU each), c0's first 1: one on each."""
    w = World({"b0": "AABCDDDD", "c0": "EEFFGGHH"}, labels={CLIQUE: {"b0": "x", "c0": "x"}})
    assert chosen(w, 2, [proposal("b0", "a"), proposal("c0", "e")]) == ("x", {"b0": 1, "c0": 1})


def test_the_domain_breaking_fewer_budgets_wins_over_fewer_victims() -> None:
    """a: two candidates, one victim each, no budget; b: one candidate, two victims, one budget."""
    w = World(
        {"a0": "AAbbbbbb", "a1": "CCbbbbbb", "b0": "EEFFbbbb"}, labels={CLIQUE: {"a0": "a", "a1": "a", "b0": "b"}}
    )
    assert chosen(w, 2, [proposal("b0", "e", pdb=1), proposal("a0", "a"), proposal("a1", "c")])[0] == "a"


def test_the_domain_of_the_lower_highest_victim_priority_wins_below_zero_too() -> None:
    """a's victim has priority -5 (4 GPUs), b's -1 (2 GPUs): a, though it evicts more GPUs."""
    w = World(
        {"a0": "AAAAbbbb", "b0": "EEbbbbbb"}, labels={CLIQUE: {"a0": "a", "b0": "b"}}, priority={"a": -5, "e": -1}
    )
    assert chosen(w, 1, [proposal("b0", "e"), proposal("a0", "a")]) == ("a", {"a0": 1})


def test_at_equal_cost_the_domain_stranding_fewer_gpus_wins() -> None:
    """Both evict one 2-GPU pod for one member and hold two on an idle node: d's idle node strands one
    GPU (5 idle), p's none."""
    w = World(
        {"d0": "AAbbbbbb", "d1": "iiiiibbb", "p0": "CCbbbbbb", "p1": "iiiibbbb"},
        labels={CLIQUE: {"d0": "d", "d1": "d", "p0": "p", "p1": "p"}},
    )
    assert chosen(w, 3, [proposal("d0", "a"), proposal("p0", "c")], passing=["d1", "p1"]) == ("p", {"p1": 2, "p0": 1})


def test_at_equal_cost_the_gpus_a_second_members_evictions_strand_count() -> None:
    """Two members on one node each: p0's evictions leave 5 GPUs (1 stranded), d0's 4."""
    w = World({"d0": "AABBbbbb", "p0": "CCDDibbb"}, labels={CLIQUE: {"d0": "d", "p0": "p"}})
    assert chosen(w, 2, [proposal("p0", "c"), proposal("d0", "a")]) == ("d", {"d0": 2})


def test_at_equal_cost_candidates_not_needed_strand_nothing() -> None:
    """a0 strands 2 of its 4 idle GPUs, b0 none; b's three candidates are not needed (cheaper: none)."""
    w = World(
        {"a0": "iiiibbbb", "b0": "iibbbbbb", "b1": "AAbbbbbb", "b2": "CCbbbbbb", "b3": "EEbbbbbb"},
        labels={CLIQUE: {"a0": "a", "b0": "b", "b1": "b", "b2": "b", "b3": "b"}},
    )
    proposals = [proposal("b1", "a"), proposal("b2", "c"), proposal("b3", "e")]
    assert chosen(w, 1, proposals, passing=["a0", "b0"]) == ("b", {"b0": 1})


def test_at_equal_cost_and_stranding_the_domain_on_fewer_nodes_wins() -> None:
    w = World(
        {"a1": "iibbbbbb", "a2": "iibbbbbb", "b1": "iiiibbbb", "c0": "AABBCCDD"},
        labels={CLIQUE: {"a1": "a", "a2": "a", "b1": "b", "c0": "c"}},
    )
    assert chosen(w, 2, [proposal("c0", "a")], passing=["a1", "a2", "b1"]) == ("b", {"b1": 2})


def test_a_planned_domain_of_any_nodes_is_kept() -> None:
    w = World({"a0": "AABBCCDD", "b0": "EEFFGGHH"}, priority=dict.fromkeys("abcd", LOW + 1))
    group = w.group(size=2, levels=(), planned=(ANY, ANY, "any nodes"))
    got = w.plan(group, [proposal("b0", "e"), proposal("a0", "a")])
    assert got is not None and got.domain == (ANY, ANY, "any nodes") and got.placement == {"b0": 2}


def test_at_equal_cost_the_gpus_one_members_evictions_strand_count() -> None:
    """d0's eviction leaves 3 GPUs for a member of 2, p0's 2: p, though d is the smaller name."""
    w = World({"d0": "AAibbbbb", "p0": "CCbbbbbb"}, labels={CLIQUE: {"d0": "d", "p0": "p"}})
    assert chosen(w, 1, [proposal("d0", "a"), proposal("p0", "c")]) == ("p", {"p0": 1})


def test_at_equal_cost_the_gpus_left_for_every_member_on_a_node_count() -> None:
    """d0 holds both members (its evictions leave 5 GPUs), p0 and p1 one each (2 GPUs each): p."""
    w = World(
        {"d0": "CCDDibbb", "p0": "AAbbbbbb", "p1": "BBbbbbbb"}, labels={CLIQUE: {"d0": "d", "p0": "p", "p1": "p"}}
    )
    proposals = [proposal("d0", "c"), proposal("p0", "a"), proposal("p1", "b")]
    assert chosen(w, 2, proposals) == ("p", {"p0": 1, "p1": 1})


def test_a_planned_domain_no_node_carries_any_more_is_chosen_again() -> None:
    w = World({"a0": "AABBCCDD"}, labels={CLIQUE: {"a0": "a"}})
    got = w.plan(w.group(planned=(CLIQUE, "gone", "clique=gone")), [proposal("a0", "a")])
    assert got is not None and got.domain == (CLIQUE, "a", "clique=a")


def test_a_bound_member_pins_nothing_for_a_group_of_any_nodes() -> None:
    w = World({"a0": "AABBCCDD"})
    got = w.plan(w.group(levels=(), bound=("z9",)), [proposal("a0", "a")])
    assert got is not None and got.domain == (ANY, ANY, "any nodes") and got.placement == {"a0": 1}


@pytest.mark.parametrize(("levels", "named"), [((CLIQUE, RACK), "clique, rack"), ((), "any-nodes")])
def test_a_group_that_waits_whole_names_the_levels_tried(levels: tuple[str, ...], named: str) -> None:
    w = World({"a0": "AABBCCDD"}, labels={CLIQUE: {"a0": "a"}, RACK: {"a0": "r"}}, priority=dict.fromkeys("abcd", HIGH))
    got = w.plan(w.group(levels=levels), [proposal("a0", "a")])
    assert got is not None and got.plan.note.startswith(f"group {KEY}: no {named} domain can be made")
