"""Issue 51, item 7: what the preempt verb reads of a node, kept between calls (scheduler/preempt_facts.py),
is used again only while it is what would be made now: a change of the node's pods (the ledger's
per-node version) or a claim another pod comes to share make it again; a new summary or reported
summary makes new facts, over the same table where they read alike (room_key); its table is made at
the second read unchanged; at most `limit` nodes are kept.
And a candidate judged over the kept table (`judge_table`) is answered as `judge_node` answers it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

import pytest

from gpuextender.extender.decide.preempt_victims import (
    NodeFacts,
    Proposal,
    judge_node,
    judge_table,
    rebased,
    room_key,
    victim_table,
)
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


def test_a_new_summary_or_reported_summary_makes_new_facts_over_it() -> None:
    ledger = ledger_of(pod("a", 1, LOW, node="n"))
    kept, s, reported = PreemptFacts(ledger), summary("iiii", holders={0: "a"}), summary("iiii")
    first = twice(kept, "n", s, reported)
    again = summary("iiii", holders={0: "a"})  # the same content, another report
    assert again == s and again is not s
    second = kept.facts("n", again, reported)
    assert second is not first and second.summary is again and second.reported is reported
    other = summary("iiii")
    third = kept.facts("n", again, other)
    assert third is not second and third.summary is again and third.reported is other
    assert kept.facts("n", None, None).table is None  # no data: nothing to judge with


# -- a table over a node's next report (room_key, rebased) ------------------------------------------


def reported_again(s: Any, **changed: Any) -> Any:
    """The node's next report: a new summary object (received later), `changed` as given."""
    return replace(s, received_at=s.received_at + 3.0, **changed)


def judged_once() -> tuple[Any, PreemptFacts, NodeFacts, Proposal, Any]:
    """mixed_node's facts with their table, and one plan it keeps: (summary, kept, facts, proposal, plan)."""
    ledger, s = mixed_node()
    kept = PreemptFacts(ledger)
    f = twice(kept, "n", s)
    assert f.table is not None
    p = Proposal("n", ("uid-a", "uid-b"), 0)
    return s, kept, f, p, judge_table(2 * HIGH, 2, p, f.table, f.pods, f.by_uid, no_budgets)


def test_a_table_is_kept_over_a_report_that_reads_alike() -> None:
    """A heartbeat makes a new summary (its received_at) that reads as the last: the node's table,
    and the judgements it keeps, go on over it; the facts carry the new summary (its freshness)."""
    s, kept, f, p, plan = judged_once()
    beat = reported_again(s)
    g = kept.facts("n", beat, None)
    assert g is not f and g.summary is beat and g.table is not None and g.table.read is beat
    assert (g.table.parts, g.table.room, g.table.judged, g.pods) == (
        f.table.parts,
        f.table.room,
        f.table.judged,
        f.pods,
    )
    assert g.table.judged is f.table.judged and g.table.parts is f.table.parts  # (kept, not made again)
    assert not holds(g, s)
    assert judge_table(2 * HIGH, 2, p, g.table, g.pods, g.by_uid, no_budgets) is plan
    assert kept.facts("n", beat, None) is g


def test_facts_without_a_table_read_again_alike_make_it() -> None:
    """A node read once (no table), then over its next report reading alike: read again, its table
    made then, as for the same summary read twice."""
    ledger, s = mixed_node()
    kept = PreemptFacts(ledger)
    assert kept.facts("n", s, None).table is None
    g = kept.facts("n", reported_again(s), None)
    assert g.table is not None and g.table.read is g.summary
    h = kept.facts("n", reported_again(g.summary, idle_gpus=s.idle_gpus + 1), None)  # reads otherwise
    assert h.table is None


def changed_fields(s: Any) -> list[tuple[str, Any]]:
    """Each field of NodeSummary with another value than in `s` (a value of its type)."""
    out = []
    for f in fields(s):
        value = getattr(s, f.name)
        if f.name in ("node", "received_at"):
            continue
        if isinstance(value, bool):
            other: Any = not value
        elif isinstance(value, int):
            other = value + 1
        elif isinstance(value, float):
            other = value + 1.5
        elif isinstance(value, str):
            other = value + "x"
        elif isinstance(value, frozenset):
            other = frozenset(sorted(value)[1:]) if value else frozenset({f"{NS}/a"})
        elif isinstance(value, tuple):
            other = value[1:] if value else ((f"{NS}/a", 1, 1),) if f.name == "pod_units" else (1,)
        elif value is None and f.name == "free_gpus":
            other = 0
        else:  # (None or an object: none of the decisions' counts)
            other = None
        if other != value:
            out.append((f.name, other))
    return out


@pytest.mark.parametrize("reported", [False, True])
def test_summaries_of_one_room_key_are_judged_alike_and_of_another_key_not_kept_alike(reported: bool) -> None:
    """room_key holds what a table reads: each field of the summary changed alone, either the key
    changes (and the table is made again over the new report) or every candidate is judged over the
    new summary as over the old (judge_node, every shape and proposal). A field a table comes to
    read, left out of the key, fails here."""
    ledger, s = mixed_node()
    base = reported_again(s) if reported else None
    plain = facts_without_table(ledger, "n", s)
    checked = {"key": 0, "alike": 0}
    for name, other in changed_fields(s):
        for side in ("summary", "reported") if reported else ("summary",):
            new_s = replace(s, **{name: other}) if side == "summary" else s
            new_r = replace(base, **{name: other}) if side == "reported" else base
            if room_key(new_s, new_r) != room_key(s, base):
                kept = PreemptFacts(ledger)
                t = twice(kept, "n", s, base).table
                g = kept.facts("n", new_s, new_r)
                assert t is not None and g.table is None, name  # read otherwise: judged as a first read
                checked["key"] += 1
                continue
            for victims, pdb, mine, needed in SHAPES:
                p = Proposal("n", victims, pdb)
                old = judge_node(mine, needed, p, s, base, plain.pods, ledger.lookup(), no_budgets)
                new = judge_node(mine, needed, p, new_s, new_r, plain.pods, ledger.lookup(), no_budgets)
                assert new == old, (name, side, p)
            checked["alike"] += 1
    # (holder_pods, pod_units, idle_gpus, bound_pod_units, healthy_gpus; the agent's own idle_gpus)
    assert checked["key"] == (6 if reported else 5) and checked["alike"] >= 20, checked
    assert room_key(replace(s, free_gpus=None), base) != room_key(s, base)  # allocation unknown


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


def test_the_agents_own_idle_count_is_read_where_bound_pods_took_every_idle_gpu() -> None:
    """Bound pods not attributed yet took every idle GPU off (`summary`'s idle_gpus 0): what evicting
    frees is counted from the agent's own idle_gpus (Room), so a report changing only that is read
    otherwise, and the table is made again over it."""
    ledger, own = mixed_node()
    s = replace(own, idle_gpus=0, free_gpus=0, bound_pod_units=3)
    kept = PreemptFacts(ledger)
    f = twice(kept, "n", s, own)
    more = reported_again(own, idle_gpus=own.idle_gpus + 3)
    g = kept.facts("n", reported_again(s), more)
    assert f.table is not None and g.table is None
    p = Proposal("n", ("uid-a",), 0)
    plain = facts_without_table(ledger, "n", s)
    before = judge_node(2 * HIGH, 1, p, s, own, plain.pods, ledger.lookup(), no_budgets)
    after = judge_node(2 * HIGH, 1, p, s, more, plain.pods, ledger.lookup(), no_budgets)
    assert before.usable != after.usable


# -- following the node's reports (PreemptFacts.summary_changed) -------------------------------------


def holds(f: NodeFacts, obj: Any) -> bool:
    """Whether `f` still holds `obj` (a summary it read), through itself or its table."""
    held = [f.summary, f.reported]
    if f.table is not None:
        held += [f.table.read, f.table.reported, f.table.summary]
    return any(x is obj for x in held)


def entry(kept: PreemptFacts, node: str) -> Any:
    return kept._entries.get(node)


def test_a_report_that_reads_alike_moves_the_nodes_facts_onto_it_and_lets_the_old_go() -> None:
    s, kept, f, p, plan = judged_once()
    beat = reported_again(s)
    kept.summary_changed("n", beat, None)
    g = entry(kept, "n")[3]
    assert entry(kept, "n")[:2] == (beat, None) and entry(kept, "n")[0] is beat
    assert g.summary is beat and g.table is not None and g.table.judged is f.table.judged
    assert not holds(g, s)  # (freed with the report that replaced it)
    assert kept.facts("n", beat, None) is g  # the next call: read as the same report
    assert judge_table(2 * HIGH, 2, p, g.table, g.pods, g.by_uid, no_budgets) is plan
    kept.summary_changed("n", beat, None)  # (the same summaries again: nothing to do)
    assert entry(kept, "n")[3] is g


def test_a_report_read_once_that_reads_alike_keeps_it_read_once() -> None:
    ledger, s = mixed_node()
    kept = PreemptFacts(ledger)
    first = kept.facts("n", s, None)
    beat = reported_again(s)
    kept.summary_changed("n", beat, None)
    moved = entry(kept, "n")[3]
    assert moved.table is None and moved.summary is beat and not holds(moved, s)
    assert kept.facts("n", beat, None).table is not None  # read again: its table made now
    assert first.table is None


@pytest.mark.parametrize(
    "change",
    [
        lambda ledger, s: (ledger, reported_again(s, idle_gpus=s.idle_gpus + 1)),  # reads otherwise
        lambda ledger, s: (ledger, None),  # the node's data gone
        lambda ledger, s: (ledger.upsert(POD_KIND, pod("z", 1, LOW, node="n")), reported_again(s)),  # its pods
    ],
)
@pytest.mark.parametrize("tables", [True, False])
def test_a_report_that_reads_otherwise_lets_the_nodes_facts_go(change: Any, tables: bool) -> None:
    ledger, s = mixed_node()
    kept = PreemptFacts(ledger)
    f = twice(kept, "n", s) if tables else kept.facts("n", s, None)
    assert (f.table is not None) == tables
    _, new = change(ledger, s)
    kept.summary_changed("n", new, None)
    assert entry(kept, "n") is None
    kept.summary_changed("m", new, None)  # (a node not kept: nothing)
    assert len(kept) == 0


def test_facts_kept_without_a_summary_go_at_the_nodes_first_report() -> None:
    ledger, s = mixed_node()
    kept = PreemptFacts(ledger)
    kept.facts("n", None, None)
    kept.summary_changed("n", s, None)
    assert entry(kept, "n") is None


def test_a_table_over_a_shared_claim_keeps_what_it_frees_over_the_next_report() -> None:
    """`holder` and `twin` share claim batch/pair (GPUs 2-3): the table's summary is the report less
    their GPUs (preempt_claims.freed_only); over the next report, the same count, the old report not held."""
    ledger = ledger_of(bound("holder", "n", LOW, "pair"), bound("twin", "n", LOW, "pair"))
    kept, s = PreemptFacts(ledger), summary("iiii", holders={2: "holder", 3: "holder"})
    t = twice(kept, "n", s).table
    assert t is not None and t.summary is not s
    beat = reported_again(s)
    kept.summary_changed("n", beat, None)
    g = entry(kept, "n")[3]
    assert g.table is not None and not holds(g, s) and not holds(g, t.summary)
    assert g.table.summary == replace(t.summary, received_at=beat.received_at)
    made = victim_table(beat, None, g.pods)
    assert (g.table.summary, g.table.parts, g.table.key) == (made.summary, made.parts, made.key)


def test_facts_no_call_reads_follow_one_report_and_go_at_the_next() -> None:
    """Once no preempt call proposes the node, its facts follow one report more, then go: a node
    no call reads costs nothing on its later reports."""
    ledger, s = mixed_node()
    kept = PreemptFacts(ledger)
    twice(kept, "n", s)
    one = reported_again(s)
    kept.summary_changed("n", one, None)
    assert entry(kept, "n")[0] is one
    two = reported_again(one)
    kept.summary_changed("n", two, None)  # not read since the last report: it goes
    assert entry(kept, "n") is None


def test_facts_read_between_reports_follow_every_report() -> None:
    ledger, s = mixed_node()
    kept = PreemptFacts(ledger)
    f = twice(kept, "n", s)
    for _ in range(3):
        beat = reported_again(f.summary)
        kept.summary_changed("n", beat, None)
        f = kept.facts("n", beat, None)  # a call reads it: it follows the next report too
        assert f.summary is beat and f.table is not None and entry(kept, "n")[3] is f
    assert entry(kept, "n")[4] is False


def test_a_rebased_table_is_the_table_made_over_the_new_report_and_shares_what_it_kept() -> None:
    """rebased(t, ...) over a report that reads alike: every field what victim_table makes of the new
    summaries (the new ones themselves, no copy), its caches the same objects; every shape and
    proposal judged over it as over a table made anew."""
    ledger, own = mixed_node()
    here = ledger.on_node("n")
    t = victim_table(own, own, here.values())
    p = Proposal("n", ("uid-a",), 0)
    judge_table(2 * HIGH, 3, p, t, here.values(), here, no_budgets, 1)  # (an extended one: its order made)
    assert t.order is not None and t.judged
    s, r = reported_again(own), reported_again(own)
    got = rebased(t, s, r)
    made = victim_table(s, r, here.values())
    assert got is not None and got.read is s and got.reported is r and got.summary is s
    assert (got.parts, got.every, got.key) == (made.parts, made.every, made.key)
    assert got.judged is t.judged and got.order is t.order and got.room is t.room
    for victims, pdb, mine, needed in SHAPES:
        q = Proposal("n", victims, pdb)
        want = judge_table(mine, needed, q, made, here.values(), here, no_budgets)
        assert judge_table(mine, needed, q, got, here.values(), here, no_budgets) == want
    assert rebased(t, reported_again(own, healthy_gpus=own.healthy_gpus - 1), r) is None
