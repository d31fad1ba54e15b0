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
    ledger = ledger_of(
        pod("a", 1, LOW, node="n", started="2026-12-07T01:00:00Z"),
        pod("b", 1, LOW, node="n", started="2026-12-07T02:00:00Z"),
        pod("c", 2, LOW + 5, node="n"),
        pod("d", 1, LOW, node="n"),
        pod("high", 1, HIGH, node="n"),
        pod("pending", 1, LOW, node="n"),
        pod("elsewhere", 1, LOW, node="m"),
    )

    def violations(pods: Sequence[BoundPod], _before: Sequence[BoundPod]) -> int:
        return sum(b.uid in protected for b in pods)

    s = summary("biiifbbi", holders={0: "a", 1: "b", 2: "c", 3: "c", 4: "d", 5: "high"})
    p = Proposal("n", victims, 1)
    f = twice(PreemptFacts(ledger), "n", s)
    assert f.table is not None and f.by_uid is not None
    over_table = judge_table(mine, needed, p, f.table, f.pods, f.by_uid, violations)
    plain = facts_without_table(ledger, "n", s)
    assert over_table == judge_node(mine, needed, p, s, None, plain.pods, ledger.lookup(), violations)
