"""Issue 51, item 7: what the preempt verb reads of a node, kept between calls (scheduler/preempt_facts.py),
is used again only while it is exactly what would be made now: a change of the node's pods (the
ledger's per-node version), a new summary or reported summary, or a claim another pod comes to share
each make it again; its table is made at the second read unchanged; at most `limit` nodes are kept.
And a candidate judged over the kept table (`judge_table`) is answered as `judge_node` answers it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from gpuextender.extender.decide.preempt_victims import NodeFacts, Proposal, judge_node, judge_table, victim_table
from gpuextender.extender.scheduler.preempt_facts import DEFAULT_LIMIT, PreemptFacts
from gpuextender.extender.scheduler.wire import PREEMPT_MAX_CANDIDATES
from gpuextender.extender.state.pod_ledger import POD_KIND, BoundPod, PodLedger
from tests.extender.scheduler.test_preempt_claims import NS, bound, summary
from tests.extender.scheduler.test_preempt_verb import HIGH, LOW
from tests.extender.scheduler.test_preempt_verb import pod as batch_pod


def pod(name: str, gpus: int, priority: int, **kwargs: Any) -> dict[str, Any]:
    """A bound GPU pod of the namespace `summary`'s holders are in."""
    obj = batch_pod(name, gpus, priority, **kwargs)
    obj["metadata"]["namespace"] = NS
    return obj


def ledger_of(*objects: dict[str, Any]) -> PodLedger:
    ledger = PodLedger(("nvidia.com/gpu",), lambda: 0.0)
    ledger.replace_all(POD_KIND, list(objects))
    return ledger


def twice(kept: PreemptFacts, node: str, s: Any, reported: Any = None) -> NodeFacts:
    """The facts of a node read a second time unchanged: with their table."""
    kept.facts(node, s, reported)
    return kept.facts(node, s, reported)


def test_a_nodes_table_is_made_the_second_time_it_is_read_unchanged() -> None:
    ledger = ledger_of(pod("a", 1, LOW, node="n"))
    kept, s = PreemptFacts(ledger), summary("iiii", holders={0: "a"})
    first = kept.facts("n", s, None)
    assert first.table is None and first.by_uid is not None  # judged as without the cache
    second = kept.facts("n", s, None)
    assert second.table is not None and kept.facts("n", s, None) is second
    ledger.upsert(POD_KIND, pod("c", 1, LOW, node="n"))
    assert kept.facts("n", s, None).table is None and kept.facts("n", s, None).table is not None


def test_facts_are_kept_while_the_summary_and_the_nodes_pods_are_the_same() -> None:
    ledger = ledger_of(pod("a", 1, LOW, node="n"), pod("b", 1, LOW, node="m"))
    kept, s = PreemptFacts(ledger), summary("iiii", holders={0: "a"})
    first = twice(kept, "n", s)
    assert kept.facts("n", s, None) is first and first.table is not None
    assert set(first.table.parts) == {"uid-a"}
    ledger.upsert(POD_KIND, pod("c", 1, LOW, node="m"))  # another node's pods
    assert kept.facts("n", s, None) is first
    assert kept.lookup(lambda _n: s, lambda _n: None)("n") is first


@pytest.mark.parametrize(
    "change",
    [
        lambda ledger: ledger.upsert(POD_KIND, pod("c", 2, LOW, node="n")),  # a pod comes
        lambda ledger: ledger.upsert(POD_KIND, pod("a", 1, HIGH, node="n")),  # a pod changes
        lambda ledger: ledger.delete(POD_KIND, pod("a", 1, LOW, node="n")),  # a pod goes
        lambda ledger: ledger.forget("uid-a"),  # a binding that failed
        lambda ledger: ledger.replace_all(POD_KIND, [pod("a", 2, LOW, node="n")]),  # a relist
    ],
)
def test_a_change_of_the_nodes_pods_makes_its_facts_again(change: Any) -> None:
    ledger = ledger_of(pod("a", 1, LOW, node="n"))
    kept, s = PreemptFacts(ledger), summary("iiii", holders={0: "a"})
    before = twice(kept, "n", s)
    change(ledger)
    assert kept.facts("n", s, None) is not before
    after = kept.facts("n", s, None)
    assert after is not before and after.table is not None
    made = victim_table(s, None, list(ledger.pods_on("n")))
    assert (after.table.parts, after.table.summary) == (made.parts, made.summary)
    assert kept.facts("n", s, None) is after


def test_a_new_summary_or_reported_summary_makes_the_facts_again() -> None:
    ledger = ledger_of(pod("a", 1, LOW, node="n"))
    kept, s, reported = PreemptFacts(ledger), summary("iiii", holders={0: "a"}), summary("iiii")
    first = twice(kept, "n", s, reported)
    again = summary("iiii", holders={0: "a"})  # the same content, another report
    assert again == s and kept.facts("n", again, reported) is not first
    second = twice(kept, "n", again, reported)
    assert kept.facts("n", again, summary("iiii")) is not second
    assert kept.facts("n", None, None).table is None  # no data: nothing to judge with


def test_a_claim_another_pod_comes_to_share_makes_the_table_again() -> None:
    """`holder` holds GPUs 2-3 through claim batch/pair: alone, evicting it frees them; once `twin`
    uses the same claim, nothing."""
    ledger = ledger_of(bound("holder", "n", LOW, "pair"))
    kept, s = PreemptFacts(ledger), summary("iiii", holders={2: "holder", 3: "holder"})
    alone = twice(kept, "n", s).table
    assert alone is not None and alone.parts["uid-holder"] == (LOW, 2, 0) and alone.summary is s
    ledger.upsert(POD_KIND, bound("twin", "n", LOW, "pair"))
    shared = twice(kept, "n", s).table
    assert shared is not None and shared.parts["uid-holder"] == (LOW, 0, 0) and shared.summary is not s
    assert f"{NS}/holder" not in {key for key, _, _ in shared.summary.pod_units}


def test_facts_kept_without_a_table_get_one_when_a_table_is_asked_for() -> None:
    """A group's call (preempt_group.py judges each node itself) keeps facts without a table."""
    ledger = ledger_of(pod("a", 1, LOW, node="n"))
    kept, s = PreemptFacts(ledger), summary("iiii", holders={0: "a"})
    bare = kept.facts("n", s, None, table=False)
    assert bare.table is None and kept.facts("n", s, None, table=False) is bare
    full = kept.facts("n", s, None)
    assert full.table is not None and kept.facts("n", s, None, table=False) is full


@pytest.mark.parametrize("limit", [1, 3])
def test_at_most_limit_nodes_are_kept_the_oldest_first_to_go(limit: int) -> None:
    nodes = [f"n{i}" for i in range(limit + 1)]
    ledger = ledger_of(*(pod(f"p{i}", 1, LOW, node=n) for i, n in enumerate(nodes)))
    kept, s = PreemptFacts(ledger, limit=limit), summary("iiii")
    first = {n: twice(kept, n, s) for n in nodes[:limit]}  # exactly at the bound: all kept
    assert len(kept) == limit and all(kept.facts(n, s, None) is f for n, f in first.items())
    kept.facts(nodes[limit], s, None)  # one past it: the oldest goes
    assert len(kept) == limit
    assert all(kept.facts(n, s, None) is first[n] for n in nodes[1:limit])
    assert kept.facts(nodes[0], s, None) is not first[nodes[0]]
    assert DEFAULT_LIMIT == PREEMPT_MAX_CANDIDATES  # one call's candidates all kept


def test_a_node_made_again_is_the_newest_kept() -> None:
    ledger = ledger_of(pod("a", 1, LOW, node="a"), pod("b", 1, LOW, node="b"))
    kept, s = PreemptFacts(ledger, limit=2), summary("iiii")
    kept.facts("a", s, None, table=False)
    b = kept.facts("b", s, None, table=False)
    assert kept.facts("b", s, None, table=False) is b
    a = kept.facts("a", summary("iiii"), None, table=False)  # `a` made again: `b` is now the oldest
    kept.facts("c", s, None, table=False)
    assert len(kept) == 2 and kept.facts("b", s, None, table=False) is not b
    assert kept.facts("a", a.summary, None, table=False) is not a  # (`b` again pushed `a` out)


def facts_without_table(ledger: PodLedger, node: str, s: Any) -> NodeFacts:
    here = ledger.on_node(node)
    return NodeFacts(s, None, here.values(), here)


EVERY = ("uid-a", "uid-b", "uid-c", "uid-d", "uid-high", "uid-pending")  # every pod on the node


@pytest.mark.parametrize("mine", [HIGH, 2 * HIGH])
@pytest.mark.parametrize("protected", [(), ("uid-b",), ("uid-pending", "uid-c")])
@pytest.mark.parametrize("needed", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize(
    "victims",
    [
        (),
        ("uid-a",),
        ("uid-a", "uid-a"),
        ("uid-a", "uid-cpu"),
        ("uid-a", "uid-b"),
        ("uid-high",),
        ("uid-elsewhere",),
        (*EVERY[:-2], "uid-pending", "uid-cpu"),
        ("uid-cpu", *reversed(EVERY), "uid-a"),
    ],
)
def test_a_candidate_is_answered_over_the_table_as_judge_node_answers_it(
    needed: int, victims: tuple[str, ...], protected: tuple[str, ...], mine: int
) -> None:
    """GPUs: 0 busy held by `a`, 1 idle held by `b`, 2-3 held by `c` (2 GPUs), 4 failing held by `d`, 5
    held by `high`, 6 busy outside Kubernetes, 7 idle; `pending` bound but not attributed yet. The pods
    of `protected` each break a PodDisruptionBudget (the cheapest are the others); the preemptor's
    priority `mine` (above `high`'s or not)."""
    ledger, s = mixed_node()

    def violations(pods: Sequence[BoundPod], _before: Sequence[BoundPod]) -> int:
        return sum(b.uid in protected for b in pods)

    p = Proposal("n", victims, 1)
    f = twice(PreemptFacts(ledger), "n", s)
    assert f.table is not None and f.by_uid is not None
    over_table = judge_table(mine, needed, p, f.table, f.pods, f.by_uid, violations)
    plain = facts_without_table(ledger, "n", s)
    assert over_table == judge_node(mine, needed, p, s, None, plain.pods, ledger.lookup(), violations)


# -- the judgements a table keeps (VictimTable.judged) ----------------------------------------------


def mixed_node() -> tuple[PodLedger, Any]:
    """Node n of test_a_candidate_is_answered_over_the_table_as_judge_node_answers_it (and a pod
    bound elsewhere)."""
    ledger = ledger_of(
        pod("a", 1, LOW, node="n", started="2026-12-07T01:00:00Z"),
        pod("b", 1, LOW, node="n", started="2026-12-07T02:00:00Z"),
        pod("c", 2, LOW + 5, node="n"),
        pod("d", 1, LOW, node="n"),
        pod("high", 1, HIGH, node="n"),
        pod("pending", 1, LOW, node="n"),
        pod("elsewhere", 1, LOW, node="m"),
    )
    return ledger, summary("biiifbbi", holders={0: "a", 1: "b", 2: "c", 3: "c", 4: "d", 5: "high"})


def no_budgets(_pods: Sequence[BoundPod], _before: Sequence[BoundPod]) -> int:
    return 0


def copied(p: Proposal) -> Proposal:
    """`p` in new string objects, as the next call's body parses it."""
    return Proposal("".join(p.node), tuple("".join(list(u)) for u in p.victims), p.pdb_violations)


SHAPES = [  # (victims, PDB violations, the preemptor's priority, GPUs needed)
    (v, pdb, mine, needed)
    for v in [("uid-a",), ("uid-a", "uid-b"), ("uid-high",), EVERY, ("uid-cpu", *EVERY)]
    for pdb in (0, 1)
    for mine in (HIGH, 2 * HIGH)
    for needed in (1, 2, 3, 5, 8)
]


def test_a_table_judges_a_candidate_after_one_that_differs_in_one_thing_as_judge_node_does() -> None:
    """Each shape and proposal, then each that differs from it in one thing only (so the table has
    kept the first's judgement), over one table: judge_node's answer each time."""
    ledger, s = mixed_node()
    plain = facts_without_table(ledger, "n", s)
    checked = 0
    for first in SHAPES:
        for then in SHAPES:
            if sum(a != b for a, b in zip(first, then, strict=True)) != 1:
                continue
            f = twice(PreemptFacts(ledger), "n", s)
            assert f.table is not None and f.by_uid is not None
            for victims, pdb, mine, needed in (first, then):
                p = Proposal("n", victims, pdb)
                want = judge_node(mine, needed, p, s, None, plain.pods, ledger.lookup(), no_budgets)
                assert judge_table(mine, needed, copied(p), f.table, f.pods, f.by_uid, no_budgets) == want
            checked += 1
    assert checked == len(SHAPES) * (4 + 1 + 1 + 4)


def test_a_table_answers_the_same_shape_and_proposal_with_the_plan_it_kept() -> None:
    ledger, s = mixed_node()
    f = twice(PreemptFacts(ledger), "n", s)
    assert f.table is not None and f.by_uid is not None
    p = Proposal("n", ("uid-a", "uid-b"), 0)
    first = judge_table(2 * HIGH, 2, p, f.table, f.pods, f.by_uid, no_budgets)
    assert first.action == "kept"
    assert judge_table(2 * HIGH, 2, copied(p), f.table, f.pods, f.by_uid, no_budgets) is first
    for mine, needed, q in [(HIGH + 1, 2, p), (2 * HIGH, 1, p), (2 * HIGH, 2, p._replace(pdb_violations=1))]:
        assert judge_table(mine, needed, q, f.table, f.pods, f.by_uid, no_budgets) is not first
        assert judge_table(2 * HIGH, 2, p, f.table, f.pods, f.by_uid, no_budgets) is first  # still kept


def test_a_table_keeps_the_two_judgements_used_last() -> None:
    """JUDGED_KEPT = 2: a shape used before the last two is judged again (an equal plan, made anew)."""
    ledger, s = mixed_node()
    f = twice(PreemptFacts(ledger), "n", s)
    assert f.table is not None and f.by_uid is not None
    t, p = f.table, Proposal("n", ("uid-a", "uid-b"), 0)

    def judged(needed: int) -> Any:
        return judge_table(2 * HIGH, needed, p, t, f.pods, f.by_uid, no_budgets)

    one, two = judged(1), judged(2)
    assert judged(1) is one and judged(2) is two  # two shapes in turn: each meets its own
    three = judged(3)
    assert judged(2) is two  # the two used last: 3 and 2
    again = judged(1)  # 1 was used before the last two
    assert again == one and again is not one
    assert judged(2) is two and judged(1) is again and judged(2) is two  # 1 used before 2 ...
    assert judged(5) is not three
    assert judged(2) is two  # ... so 5 takes 1's place


def test_a_candidate_extended_is_judged_again_each_call_without_the_budgets_generation() -> None:
    """What is added reads the PodDisruptionBudgets, which change without the node: where the caller
    cannot say which budgets `violations` reads (no generation), such a plan is never kept."""
    ledger, s = mixed_node()
    f = twice(PreemptFacts(ledger), "n", s)
    assert f.table is not None and f.by_uid is not None
    plain = facts_without_table(ledger, "n", s)
    p = Proposal("n", ("uid-a",), 0)
    for protected in [(), ("uid-b",), ()]:

        def violations(pods: Sequence[BoundPod], _before: Sequence[BoundPod], shield: Any = protected) -> int:
            return sum(b.uid in shield for b in pods)

        got = judge_table(2 * HIGH, 3, p, f.table, f.pods, f.by_uid, violations)
        assert got == judge_node(2 * HIGH, 3, p, s, None, plain.pods, ledger.lookup(), violations)
        assert got.action == "extended" and got.added == (("uid-c",) if protected else ("uid-b",))


def protecting(protected: tuple[str, ...]) -> Any:
    def violations(pods: Sequence[BoundPod], _before: Sequence[BoundPod]) -> int:
        return sum(b.uid in protected for b in pods)

    return violations


def test_a_candidate_extended_is_kept_for_the_budgets_generation_it_read() -> None:
    """The same shape and proposal meets the plan kept while the generation is the one it read; a
    new generation judges it again (the budgets say another pod now), in the kept one's place."""
    ledger, s = mixed_node()
    f = twice(PreemptFacts(ledger), "n", s)
    assert f.table is not None and f.by_uid is not None
    t, p = f.table, Proposal("n", ("uid-a",), 0)
    first = judge_table(2 * HIGH, 3, p, t, f.pods, f.by_uid, protecting(()), 7)
    assert first.action == "extended" and first.added == ("uid-b",)
    # Same generation: the kept plan (what `violations` would say now is not read).
    assert judge_table(2 * HIGH, 3, copied(p), t, f.pods, f.by_uid, protecting(("uid-b",)), 7) is first
    again = judge_table(2 * HIGH, 3, p, t, f.pods, f.by_uid, protecting(("uid-b",)), 8)
    assert again.action == "extended" and again.added == ("uid-c",)
    assert [(j[3], j[4]) for j in t.judged] == [(8, again)]  # (the stale one gone, not kept beside)
    # Without a generation it is judged again; nothing is kept for it (not even the plan of 8).
    unknown = judge_table(2 * HIGH, 3, p, t, f.pods, f.by_uid, protecting(()), None)
    assert unknown.added == ("uid-b",) and t.judged == []
    made = judge_table(2 * HIGH, 3, p, t, f.pods, f.by_uid, protecting(("uid-b",)), 8)
    assert made == again and made is not again


def test_a_plan_that_read_no_budget_is_kept_whatever_their_generation() -> None:
    ledger, s = mixed_node()
    f = twice(PreemptFacts(ledger), "n", s)
    assert f.table is not None and f.by_uid is not None
    p = Proposal("n", ("uid-a", "uid-b"), 0)
    first = judge_table(2 * HIGH, 2, p, f.table, f.pods, f.by_uid, no_budgets, 1)
    assert first.action == "kept" and f.table.judged[0][3] is None
    for generation in (2, None):
        assert judge_table(2 * HIGH, 2, p, f.table, f.pods, f.by_uid, no_budgets, generation) is first


def test_the_budgets_not_known_yet_is_judged_again_at_the_next_generation() -> None:
    """Unlisted budgets drop the candidate (no victim added), kept for that generation only: once
    listed (a new generation), the same proposal is extended."""
    ledger, s = mixed_node()
    f = twice(PreemptFacts(ledger), "n", s)
    assert f.table is not None and f.by_uid is not None
    p = Proposal("n", ("uid-a",), 0)

    def unknown(_pods: Sequence[BoundPod], _before: Sequence[BoundPod]) -> int | None:
        return None

    dropped = judge_table(2 * HIGH, 3, p, f.table, f.pods, f.by_uid, unknown, 0)
    assert dropped.action == "dropped" and "not known yet" in dropped.why
    assert judge_table(2 * HIGH, 3, p, f.table, f.pods, f.by_uid, no_budgets, 0) is dropped
    assert judge_table(2 * HIGH, 3, p, f.table, f.pods, f.by_uid, no_budgets, 1).action == "extended"
