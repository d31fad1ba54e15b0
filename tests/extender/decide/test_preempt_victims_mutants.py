"""Rules of decide/preempt_victims.py that mutation testing found no test holding: a pod that never
preempts drops every candidate saying why; a node's victim table is made over the agent's own
summary and is the one `plan` judges over (it keeps the judgement) while it matches the node's
facts. Each test fails on a one-line change."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.preempt_victims import (
    AS_PROPOSED,
    DROPPED,
    EXTENDED,
    KEPT,
    NodeFacts,
    NodePlan,
    PreemptionPlan,
    Proposal,
    Room,
    cheapest_first,
    judge_node,
    judge_table,
    plan,
    victim_table,
)
from gpuextender.extender.model.dra import ClaimRead
from gpuextender.extender.model.ome.pod_intent import PodIdentity
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.state.pod_ledger import BoundPod
from tests.extender.scheduler.test_preempt_claims import NOW, STALE_AFTER, summary
from tests.extender.scheduler.test_preempt_facts import EVERY, mixed_node, no_budgets
from tests.extender.scheduler.test_preempt_verb import HIGH, LOW


def pod(gpus: int, priority: int = HIGH, preempts: bool = True, claims: bool = False) -> PodRequest:
    read = (ClaimRead("ml/c", "allocated"),) if claims else ()
    identity = PodIdentity("ns", "", "", "", "", "")
    return PodRequest("ns/p", gpus, identity, "spread", "", claims_read=read, priority=priority, preempts=preempts)


def bound(name: str, gpus: int = 1, priority: int = LOW, node: str = "n", phase: str = "Running") -> BoundPod:
    return BoundPod(f"uid-{name}", f"ml/{name}", node, gpus, (), phase, 0.0, priority=priority)


def test_a_pod_that_never_preempts_drops_every_candidate_saying_why() -> None:
    def facts(_node: str) -> NodeFacts:
        raise AssertionError("no node is read")

    got = plan(pod(1, preempts=False), [Proposal("n", ("uid-a",), 1)], {}, facts, NOW, STALE_AFTER, "", lambda _: None)
    why = "its preemptionPolicy is Never"
    assert got == PreemptionPlan((NodePlan("n", DROPPED, (), 0, why, None, (), ("uid-a",)),))


def test_a_table_counts_what_the_node_offers_from_the_agents_own_summary() -> None:
    """No GPU idle once 3 bound pods not attributed yet are taken off, where the agent reports 2 idle:
    evicting one of them (1 GPU) leaves 2 - 3 + 1 = 0 usable, not 1, so a 1-GPU pod needs more."""
    reported = summary("iibb")
    s = replace(reported, idle_gpus=0, free_gpus=0, bound_pod_units=3)
    pods = [bound("a"), bound("b"), bound("c")]
    p = Proposal("n", ("uid-a",), 0)
    by_uid = {b.uid: b for b in pods}
    t = victim_table(s, reported, pods)
    want = judge_node(HIGH, 1, p, s, reported, pods, by_uid.get, no_budgets)
    assert judge_table(HIGH, 1, p, t, pods, by_uid, no_budgets) == want
    assert want.usable == 1 and want.victims == ("uid-a", "uid-b")


def test_plan_judges_over_the_nodes_table_while_it_matches_the_facts() -> None:
    """The table made for the node's summary and reported summary is the one judged over: it keeps
    the judgement (`VictimTable.judged`)."""
    ledger, s = mixed_node()
    here = ledger.on_node("n")
    reported = replace(s)
    t = victim_table(s, reported, here.values())
    facts = NodeFacts(s, reported, here.values(), here, t)
    got = plan(pod(1), [Proposal("n", ("uid-a",), 0)], {}, lambda _n: facts, NOW, STALE_AFTER, "", ledger.lookup())
    assert [n.action for n in got.nodes] == [KEPT]
    assert [j[4] for j in t.judged] == list(got.nodes)
    assert [j[3] for j in t.judged] == [None]  # (read no PodDisruptionBudget)


def violations_of(protected: Sequence[str]) -> Any:
    def violations(pods: Sequence[BoundPod], _before: Sequence[BoundPod]) -> int:
        return sum(b.uid in protected for b in pods)

    return violations


def no_ledger(uid: str) -> BoundPod | None:
    raise AssertionError(f"{uid} looked up in the ledger")


def starved_node() -> tuple[Any, Any, list[BoundPod]]:
    """(summary, the agent's own, pods): 4 healthy GPUs, 2 idle by the agent, none once the 3 bound
    1-GPU pods not attributed yet are taken off (test_a_table_counts_what_the_node_offers_...)."""
    reported = summary("iibb")
    return replace(reported, idle_gpus=0, free_gpus=0, bound_pod_units=3), reported, [bound(n) for n in "abc"]


def test_plan_without_a_table_counts_what_the_node_offers_from_the_agents_own_summary() -> None:
    s, reported, pods = starved_node()
    facts = NodeFacts(s, reported, pods, {b.uid: b for b in pods})
    got = plan(pod(1), [Proposal("n", ("uid-a",), 0)], {}, lambda _n: facts, NOW, STALE_AFTER, "", no_ledger)
    assert [(n.action, n.victims, n.usable) for n in got.nodes] == [(EXTENDED, ("uid-a", "uid-b"), 1)]


def test_plan_looks_victims_up_among_the_nodes_pods_where_given_else_in_the_ledger() -> None:
    s, reported, pods = starved_node()
    ledger = {b.uid: b for b in pods}
    p = [Proposal("n", ("uid-a", "uid-b"), 0)]
    given = NodeFacts(s, reported, pods, ledger)  # the ledger is never asked
    assert plan(pod(1), p, {}, lambda _n: given, NOW, STALE_AFTER, "", no_ledger).nodes[0].action == KEPT
    asked = NodeFacts(s, reported, pods)  # no pods by UID: the ledger's
    assert plan(pod(1), p, {}, lambda _n: asked, NOW, STALE_AFTER, "", ledger.get).nodes[0].action == KEPT


def test_a_claim_pods_candidate_is_kept_as_proposed_or_dropped_with_the_gpus_usable() -> None:
    """2 GPUs idle on n, 1 on m: a 2-GPU claim pod keeps n with kube-scheduler's victims and count."""
    on = {"n": summary("iibb"), "m": summary("ibbb")}

    def facts(node: str) -> NodeFacts:
        return NodeFacts(on[node], None, ())

    proposals = [Proposal("n", ("uid-a",), 1), Proposal("m", ("uid-b",), 0)]
    got = plan(pod(2, claims=True), proposals, {}, facts, NOW, STALE_AFTER, "", lambda _: None)
    kept_why = "2 GPUs usable free in DRA: kube-scheduler's victims, none added"
    dropped_why = (
        "1 of 2 GPUs usable (the others claimed, tainted, busy or failing), and kube-scheduler frees no claim "
        "for a claim pod"
    )
    assert got == PreemptionPlan(
        (
            NodePlan("n", KEPT, ("uid-a",), 1, kept_why, 2, (), ("uid-a",)),
            NodePlan("m", DROPPED, (), 0, dropped_why, 1, (), ("uid-b",)),
        )
    )


STALE = NOW + STALE_AFTER + 1  # `now` at which summary()'s data is stale


def test_a_node_without_fresh_data_that_no_eviction_makes_usable_is_dropped() -> None:
    """Stale data under fail-open: too few healthy GPUs is unresolvable whatever the data's age."""
    facts = NodeFacts(summary("ffbb"), None, ())
    verdicts = {"n": reasons.INSUFFICIENT_HEALTHY_GPUS}
    got = plan(pod(3), [Proposal("n", ("uid-a",), 0)], verdicts, lambda _n: facts, STALE, STALE_AFTER, "", no_ledger)
    why = "InsufficientHealthyGPUs: no eviction makes the node usable for the pod"
    assert got.nodes == (NodePlan("n", DROPPED, (), 0, why, None, (), ("uid-a",)),)


def test_nodes_without_fresh_data_say_why_they_are_dropped_or_kept_as_proposed() -> None:
    facts = NodeFacts(summary("iibb"), None, ())
    p = [Proposal("n", ("uid-a",), 2)]
    closed = plan(pod(3), p, {}, lambda _n: facts, STALE, STALE_AFTER, "fail-closed", no_ledger)
    assert closed.nodes == (
        NodePlan("n", DROPPED, (), 0, "StaleGPUData: no GPUs are known to be freed", None, (), ("uid-a",)),
    )
    opened = plan(pod(3), p, {}, lambda _n: facts, STALE, STALE_AFTER, "fail-open", no_ledger)
    why = "no fresh GPU data: kube-scheduler's count decides"
    assert opened == PreemptionPlan((NodePlan("n", AS_PROPOSED, ("uid-a",), 2, why, None, (), ("uid-a",)),))


def test_pods_not_judged_keep_kube_schedulers_candidates_saying_why() -> None:
    got = plan(pod(0), [Proposal("n", ("uid-a",), 1)], {}, no_facts, NOW, STALE_AFTER, "", no_ledger)
    note = "no whole GPUs asked for: kube-scheduler's count decides"
    assert got == PreemptionPlan((NodePlan("n", AS_PROPOSED, ("uid-a",), 1, note, None, (), ("uid-a",)),), note)


def no_facts(node: str) -> NodeFacts:
    raise AssertionError(f"{node} read")


def test_candidates_with_and_without_fresh_data_are_answered_in_the_order_proposed() -> None:
    """n (fresh, kept), then a (stale, dropped while n is kept): n first, as kube-scheduler sent them."""
    s, reported, pods = starved_node()
    on = {
        "n": NodeFacts(s, reported, pods, {x.uid: x for x in pods}),
        "a": NodeFacts(replace(s, received_at=0.0), None, ()),
    }
    p = [Proposal("n", ("uid-a", "uid-b"), 0), Proposal("a", ("uid-c",), 0)]
    got = plan(pod(1), p, {}, on.__getitem__, NOW, STALE_AFTER, "fail-open", no_ledger)
    assert [(n.node, n.action) for n in got.nodes] == [("n", KEPT), ("a", DROPPED)]


def test_a_table_sums_what_several_victims_not_attributed_yet_give_back() -> None:
    """Evicting a and b (1 GPU each, not every pod of the node): 2 - 3 + 2 = 1 usable, enough."""
    s, reported, pods = starved_node()
    t = victim_table(s, reported, pods)
    got = judge_table(HIGH, 1, Proposal("n", ("uid-a", "uid-b"), 0), t, pods, {b.uid: b for b in pods}, no_budgets)
    assert (got.action, got.usable) == (KEPT, 1)


def test_a_candidate_that_fits_without_evictions_is_dropped_with_the_gpus_usable() -> None:
    s = summary("iibb")
    got = judge_node(HIGH, 2, Proposal("n", (), 0), s, None, (), no_ledger, no_budgets)
    assert got == NodePlan("n", DROPPED, (), 0, "fits without evictions (2 GPUs usable): no victim to name", 2)


def table_of_mixed_node() -> tuple[Any, Any, Any]:
    ledger, s = mixed_node()
    here = ledger.on_node("n")
    return victim_table(s, None, here.values()), here.values(), here


@pytest.mark.parametrize("victims", [("uid-high",), EVERY])
def test_a_table_answers_a_victim_above_the_pod_with_the_plan_it_kept(victims: tuple[str, ...]) -> None:
    """A higher-priority victim among some of the node's pods, or among all of them (`every`)."""
    t, pods, by_uid = table_of_mixed_node()
    p = Proposal("n", victims, 0)
    first = judge_table(HIGH, 2, p, t, pods, by_uid, no_budgets)
    assert first.action == DROPPED
    assert judge_table(HIGH, 2, Proposal("n", victims, 0), t, pods, by_uid, no_budgets) is first


def test_a_table_keeps_the_newest_judgement_with_the_one_before_it() -> None:
    """Three shapes judged in turn: the second is still kept after the third (the first is not)."""
    t, pods, by_uid = table_of_mixed_node()
    p = Proposal("n", ("uid-a", "uid-b"), 0)
    judge_table(2 * HIGH, 1, p, t, pods, by_uid, no_budgets)
    two = judge_table(2 * HIGH, 2, p, t, pods, by_uid, no_budgets)
    judge_table(2 * HIGH, 3, p, t, pods, by_uid, no_budgets)
    assert judge_table(2 * HIGH, 2, p, t, pods, by_uid, no_budgets) is two


def test_a_table_orders_the_nodes_pods_once_when_victims_are_first_added() -> None:
    t, pods, by_uid = table_of_mixed_node()
    assert t.order is None
    got = judge_table(2 * HIGH, 3, Proposal("n", ("uid-a",), 0), t, pods, by_uid, no_budgets)
    assert got.action == EXTENDED
    assert t.order is not None and {o[0].uid for o in t.order} == set(by_uid)


def test_victims_are_added_after_kube_schedulers_as_the_budgets_count_them() -> None:
    """One budget over a and b allows one disruption: with kube-scheduler's a evicted, b would break
    it, so c goes instead (`violations` reads what is evicted before)."""
    t, pods, by_uid = table_of_mixed_node()
    ledger, s = mixed_node()

    def violations(added: Sequence[BoundPod], before: Sequence[BoundPod]) -> int:
        covered = sum(b.uid in ("uid-a", "uid-b") for b in before)
        return max(0, covered + sum(b.uid in ("uid-a", "uid-b") for b in added) - 1) - max(0, covered - 1)

    p = Proposal("n", ("uid-a",), 0)
    for got in (
        judge_table(2 * HIGH, 3, p, t, pods, by_uid, violations),
        judge_node(2 * HIGH, 3, p, s, None, pods, ledger.lookup(), violations),
    ):
        assert (got.action, got.added, got.pdb_violations, got.proposed) == (EXTENDED, ("uid-c",), 0, ("uid-a",))


def test_a_candidate_kept_as_proposed_says_how_many_gpus_are_usable() -> None:
    s, reported, pods = starved_node()
    got = judge_node(
        HIGH, 1, Proposal("n", ("uid-a", "uid-b"), 1), s, reported, pods, no_ledger_needed(pods), no_budgets
    )
    assert got == NodePlan("n", KEPT, ("uid-a", "uid-b"), 1, "1 GPUs usable after", 1, (), ("uid-a", "uid-b"))


def no_ledger_needed(pods: Sequence[BoundPod]) -> Any:
    return {b.uid: b for b in pods}.get


def test_no_victim_is_added_while_the_budgets_are_not_known() -> None:
    s, reported, pods = starved_node()

    def unknown(_pods: Sequence[BoundPod], _before: Sequence[BoundPod]) -> int | None:
        return None

    p = Proposal("n", ("uid-a",), 0)
    got = judge_node(HIGH, 1, p, s, reported, pods, no_ledger_needed(pods), unknown)
    assert got == NodePlan("n", DROPPED, (), 0, "PodDisruptionBudgets not known yet: no victim added", 0, (), p.victims)


def held_by(holders: dict[int, str]) -> tuple[Any, list[BoundPod]]:
    """8 busy GPUs, `holders`: position -> pod (a bound 1-GPU... pod of LOW priority)."""
    s = summary("bbbbbbbb", holders=holders)
    names = dict.fromkeys(holders.values())
    return s, [bound(n, gpus=list(holders.values()).count(n)) for n in names]


def test_every_added_pod_not_needed_is_left_out_again_the_dearest_first() -> None:
    """x and y hold 1 busy GPU each, z 2 (cheapest first: x, y, z): 3 needed, all three added, then y
    is not needed (x and z give 3), x is."""
    s, pods = held_by({0: "x", 1: "y", 2: "z", 3: "z"})
    got = judge_node(HIGH, 3, Proposal("n", (), 0), s, None, pods, no_ledger, no_budgets)
    why = "2 more lower-priority GPU pod(s): 3 GPUs usable after"
    assert got == NodePlan("n", EXTENDED, ("uid-x", "uid-z"), 0, why, 3, ("uid-x", "uid-z"), ())


def test_a_pod_not_attributed_yet_left_out_again_gives_back_nothing() -> None:
    """a (bound, not attributed yet: 1 GPU) then z (holding 2 idle GPUs): z alone gives the 2 needed."""
    reported = summary("iiiibbbb", holders={0: "z", 1: "z"})
    s = replace(reported, idle_gpus=0, free_gpus=0, bound_pod_units=2)
    pods = [bound("a"), bound("z", gpus=2)]
    got = judge_node(HIGH, 2, Proposal("n", (), 0), s, reported, pods, no_ledger, no_budgets)
    assert (got.action, got.victims, got.usable) == (EXTENDED, ("uid-z",), 2)


def test_pods_not_attributed_yet_are_each_needed_where_their_gpus_are() -> None:
    """Three bound pods not attributed yet, 1 GPU each, on a node that offers -1: 2 needed takes all three."""
    s, reported, pods = starved_node()
    got = judge_node(HIGH, 2, Proposal("n", (), 0), s, reported, pods, no_ledger, no_budgets)
    assert (got.action, got.victims, got.usable) == (EXTENDED, ("uid-a", "uid-b", "uid-c"), 2)


def test_pods_not_attributed_yet_count_as_idle_gpus_among_the_cheapest() -> None:
    """m holds an idle GPU (0 busy); a and z are bound, not attributed yet: 0 busy too, by UID."""
    s = summary("ibbb", holders={0: "m"})
    parts = [(bound(n), 1, 0) for n in "zma"]
    assert [b.uid for b, _, _ in cheapest_first(parts, s)] == ["uid-a", "uid-m", "uid-z"]


def unknown_allocation(reported_idle: int | None) -> tuple[Room, dict[str, BoundPod]]:
    """8 busy GPUs, allocation unknown; 2 GPUs taken off idle for bound pods (the agent reports
    `reported_idle` idle, if it is passed): r (2 GPUs) and s running, q and w pending."""
    s = replace(summary("bbbbbbbb"), free_gpus=None, bound_pod_units=2)
    reported = replace(s, idle_gpus=reported_idle) if reported_idle is not None else None
    pods = [bound("r", gpus=2), bound("s"), bound("q", phase="Pending"), bound("w", phase="Pending")]
    return Room(s, reported), {b.uid[4:]: b for b in pods}


@pytest.mark.parametrize(
    ("reported_idle", "usable"),
    [
        (None, {"r": 2, "q": 1, "rs": 3, "qw": 2, "rq": 3}),
        (1, {"r": 2, "q": 0, "rs": 3, "qw": 1, "rq": 2}),  # 1 - 2: one GPU given back to the bound pods first
    ],
)
def test_without_allocation_a_running_victim_frees_its_gpus_a_pending_one_what_it_was_counted_for(
    reported_idle: int | None, usable: dict[str, int]
) -> None:
    room, pods = unknown_allocation(reported_idle)
    for victims, want in usable.items():
        gone = [pods[v] for v in victims]
        parts = [room.part(b) for b in gone]
        assert room.usable(*room.tally(gone)) == want, victims
        assert room.usable(sum(h for h, _ in parts), sum(q for _, q in parts)) == want, victims


def test_evicted_gpus_are_counted_among_the_healthy_only_with_allocation_known() -> None:
    """Allocation unknown: a running pod (listed as holding, which the agent cannot say then) gives
    back what it asked for, as a running bound pod."""
    s = replace(summary("bbbbbbbb"), free_gpus=None, holder_pods=frozenset({"ml/r"}))
    assert Room(s, None).usable(*Room(s, None).tally([bound("r", gpus=2)])) == 2
    assert Room(s, None).part(bound("r", gpus=2)) == (2, 0)


def test_a_node_offers_what_the_decisions_read_where_they_read_idle_gpus() -> None:
    """1 idle GPU read (the agent's 4 less 3 held for a group): evicting nothing offers 1, not 4."""
    reported = summary("iiiibbbb")
    s = replace(reported, idle_gpus=1, free_gpus=1)
    assert Room(s, reported).usable(0, 0) == 1


def test_gpus_counted_for_a_pod_not_attributed_yet_never_exceed_the_healthy_ones() -> None:
    """h holds both healthy GPUs (2 failing), p is bound and counted for 1 more: at most 2 usable."""
    s = replace(summary("bbff", holders={0: "h", 1: "h"}), bound_pod_units=1)
    room = Room(s, None)
    assert room.usable(*room.tally([bound("h", gpus=2), bound("p")])) == 2


def test_a_candidate_kept_as_proposed_without_a_victim_is_dropped() -> None:
    """kube-scheduler refuses an answer naming a node without victims (kubernetes PR #135486)."""
    got = plan(
        pod(1), [Proposal("n", (), 0)], {}, lambda _n: NodeFacts(None, None, ()), NOW, STALE_AFTER, "", no_ledger
    )
    assert got.nodes == (NodePlan("n", DROPPED, (), 0, "no victim to name"),)
