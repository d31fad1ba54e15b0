"""Issue 51, items 2-3 through the preempt verb (SchedulerApi.answer_preempt over real agent reports
with the kubelet's allocation, a real bound-pod ledger and the real route on loopback): each of
kube-scheduler's candidates is kept, extended with the cheapest lower-priority GPU pods, or dropped,
by what the GPUs do; never a victim of equal or higher priority; explain and the metrics say which."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import generate_latest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide.preempt_victims import AS_PROPOSED, DROPPED, EXTENDED, KEPT, Budgets, Proposal
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import NO_BUDGETS, ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi, build_app
from gpuextender.extender.scheduler.wire import PREEMPT_MAX_CANDIDATES, ExtenderArgs, PreemptionArgs
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.disruption_budgets import DisruptionBudgets
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from gpuextender.extender.ui.explain_cli import render
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report, serve
from tests.extender.scheduler.test_groups import Clock

NS = "batch"
HIGH, LOW = 1000, 10
# A GPU as its agent reports it: idle or busy by the readings, failing (XID 79: unhealthy), and the
# pod of NS holding it (the kubelet's allocation), if any.
Gpu = tuple[str, str | None]


class Fleet:
    """Nodes of 8 GPUs with the kubelet's allocation; their holders are bound pods in the ledger."""

    def __init__(
        self, nodes: dict[str, list[Gpu]], policy: DecisionPolicy | None = None, budgets: Budgets = NO_BUDGETS
    ) -> None:
        self.clock = Clock()
        self.state = GpuState(IdleRule())
        self.view = InventoryView(node_labels={n: {} for n in nodes}, allocatable_gpus={n: 8 for n in nodes})
        self.ledger = PodLedger(("nvidia.com/gpu",), self.clock)
        self.ledger.replace_all(POD_KIND, [])
        self.api = SchedulerApi(
            self.state,
            ExtenderMetrics(self.state),
            ApiSettings(policy or DecisionPolicy()),
            inventory=lambda: self.view,
            clock=self.clock,
            sources=ClusterSources(ledger=self.ledger, budgets=budgets),
        )
        self.nodes = nodes
        for name, gpus in nodes.items():
            self.report(name, gpus)

    def report(self, name: str, gpus: list[Gpu]) -> None:
        samples = []
        for i, (state, holder) in enumerate(gpus):
            g = gpu(i, 95 if state == "busy" else 0, 60 if state == "busy" else 1, healthy=state != "failing")
            if holder is not None:
                g.holders.add(
                    namespace=NS, pod=holder, container="main", resource_name="nvidia.com/gpu", device_id=g.uuid
                )
            samples.append(g)
        r = report(name, samples)
        r.allocation_source = pb.ALLOCATION_KUBELET
        self.state.ingest(r, self.clock.now)

    def bind(self, name: str, node: str, gpus: int, priority: int, started: str = "2026-12-07T01:00:00Z") -> str:
        """A bound pod of `priority` (running since `started`); returns its UID."""
        self.ledger.upsert(POD_KIND, pod(name, gpus, priority, node=node, started=started))
        return uid(name)

    def holders(self, priority: int = LOW) -> None:
        """Each holder in the reports is a bound, running 1-GPU pod of `priority`."""
        for node, gpus in self.nodes.items():
            for _, holder in gpus:
                if holder is not None:
                    self.bind(holder, node, 1, priority)

    def preempt(self, preemptor: dict[str, Any], proposals: dict[str, list[str]]) -> dict[str, Any]:
        args = PreemptionArgs(preemptor, [Proposal(n, tuple(v), 0) for n, v in proposals.items()])
        answer, record = self.api.answer_preempt(args)
        record()
        return answer

    def explain(self, preemptor: dict[str, Any]) -> dict[str, Any]:
        return self.api.explain(ExtenderArgs(preemptor, list(self.nodes), None))


def uid(name: str) -> str:
    return f"uid-{name}"


def pod(
    name: str,
    gpus: int,
    priority: int,
    *,
    node: str | None = None,
    started: str | None = None,
    policy: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priority": priority,
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
    }
    if node is not None:
        spec["nodeName"] = node
    if policy is not None:
        spec["preemptionPolicy"] = policy
    status = {"phase": "Running", "startTime": started} if node is not None else {}
    return {"metadata": {"name": name, "namespace": NS, "uid": uid(name)}, "spec": spec, "status": status}


def victims(answer: dict[str, Any]) -> dict[str, list[str]]:
    return {n: [p["UID"] for p in v["Pods"]] for n, v in answer["NodeNameToMetaVictims"].items()}


def held(node: str, states: str) -> list[Gpu]:
    """One GPU per letter: i idle, b busy, f failing; upper case: held by `<node>-<index>`."""
    names = {"i": "idle", "b": "busy", "f": "failing"}
    return [(names[c.lower()], f"{node}-{i}" if c.isupper() else None) for i, c in enumerate(states)]


def issue_fleet() -> Fleet:
    """The issue's fleet: `busy` has GPUs 0-3 busy outside Kubernetes and 4-7 held; `failing` has GPUs
    0-1 failing (XID 79), all 8 held; `good` has all 8 held (running work: busy)."""
    fleet = Fleet(
        {"busy": held("busy", "bbbbBBBB"), "failing": held("failing", "FFBBBBBB"), "good": held("good", "BBBBBBBB")}
    )
    fleet.holders()
    return fleet


def test_the_cheapest_victims_on_bad_gpus_are_dropped_before_anything_is_evicted() -> None:
    """kube-scheduler's cheapest 8-GPU candidates are `failing` (its 8 pods: 6 healthy GPUs come back)
    and `busy` (its 4 pods: 4 GPUs); neither can give 8, so only `good` is answered."""
    fleet = issue_fleet()
    answer = fleet.preempt(
        pod("important", 8, HIGH),
        {
            "failing": [uid(f"failing-{i}") for i in range(8)],
            "busy": [uid(f"busy-{i}") for i in range(4, 8)],
            "good": [uid(f"good-{i}") for i in range(8)],
        },
    )
    assert victims(answer) == {"good": [uid(f"good-{i}") for i in range(8)]}
    last = fleet.explain(pod("important", 8, HIGH))["preemption"]["lastCall"]
    by_node = {c["node"]: c for c in last["candidates"]}
    assert {n: c["action"] for n, c in by_node.items()} == {"failing": DROPPED, "busy": DROPPED, "good": KEPT}
    assert by_node["busy"]["gpusUsableAfter"] == 4
    assert by_node["good"]["victims"] == [f"{NS}/good-{i}" for i in range(8)]  # by name where the ledger knows them
    assert by_node["failing"]["why"] == "InsufficientHealthyGPUs: no eviction makes the node usable for the pod"
    assert by_node["busy"]["why"] == "evicting every lower-priority GPU pod leaves 4 of 8 GPUs usable"
    text = render(fleet.explain(pod("important", 8, HIGH)))
    assert "failing: dropped" in text and "good: kept" in text


def test_victims_that_free_too_few_usable_gpus_are_extended_with_the_nodes_other_lower_priority_pods() -> None:
    """kube-scheduler counts GPUs 0-1 of `hidden` free (no pod holds them) and proposes 2 victims for a
    4-GPU pod; GPU 0 is busy outside Kubernetes, so one more lower-priority pod is added, and no more."""
    fleet = Fleet({"hidden": held("hidden", "biBBBBBB")})
    fleet.holders()
    answer = fleet.preempt(pod("p", 4, HIGH), {"hidden": [uid("hidden-2"), uid("hidden-3")]})
    (extended,) = victims(answer).values()
    assert extended[:2] == [uid("hidden-2"), uid("hidden-3")] and len(extended) == 3
    (plan,) = fleet.explain(pod("p", 4, HIGH))["preemption"]["lastCall"]["candidates"]
    assert plan["action"] == EXTENDED and plan["gpusUsableAfter"] == 4 and len(plan["added"]) == 1


def test_enough_after_the_victims_keeps_them_unchanged_and_a_fit_without_victims_is_not_answered() -> None:
    fleet = Fleet({"n": held("n", "iiBBBBBB"), "free": held("free", "iiiiBBBB")})
    fleet.holders()
    answer = fleet.preempt(pod("p", 4, HIGH), {"n": [uid("n-2"), uid("n-3")], "free": []})
    assert victims(answer) == {"n": [uid("n-2"), uid("n-3")]}
    plans = {c["node"]: c for c in fleet.explain(pod("p", 4, HIGH))["preemption"]["lastCall"]["candidates"]}
    assert plans["free"]["action"] == DROPPED and "no victim to name" in plans["free"]["why"]


def test_exactly_enough_is_enough_and_one_short_is_not() -> None:
    """A 3-GPU pod: 1 idle + 2 victims' GPUs = 3 keeps; a 4-GPU pod with the same victims and no
    other lower-priority pod is dropped (3 < 4)."""
    fleet = Fleet({"n": held("n", "iBBbbbbb")})
    fleet.holders()
    assert victims(fleet.preempt(pod("three", 3, HIGH), {"n": [uid("n-1"), uid("n-2")]})) == {
        "n": [uid("n-1"), uid("n-2")]
    }
    assert victims(fleet.preempt(pod("four", 4, HIGH), {"n": [uid("n-1"), uid("n-2")]})) == {}


def test_added_victims_are_the_cheapest_lower_priority_first_then_idle_then_shortest_running() -> None:
    """Needing one more GPU, the extender adds, of the node's other pods: the lowest priority; among
    equals the one whose GPU is idle; among those the latest started. Never one of equal priority."""
    fleet = Fleet(
        {"n": [("busy", "kept")] + [("busy", f"p{i}") for i in range(1, 5)] + [("idle", f"p{i}") for i in range(5, 8)]}
    )
    fleet.bind("kept", "n", 1, LOW)
    fleet.bind("p1", "n", 1, HIGH)  # equal to the preemptor: never
    fleet.bind("p2", "n", 1, LOW + 1, "2026-12-07T04:00:00Z")  # busy
    fleet.bind("p3", "n", 1, LOW + 1, "2026-12-07T05:00:00Z")  # busy, newer
    fleet.bind("p4", "n", 1, LOW + 2, "2026-12-07T05:30:00Z")  # a higher priority than p2..p7
    fleet.bind("p5", "n", 1, LOW + 1, "2026-12-07T02:00:00Z")  # idle
    fleet.bind("p6", "n", 1, LOW + 1, "2026-12-07T03:00:00Z")  # idle, newer: the cheapest
    fleet.bind("p7", "n", 1, LOW + 1)  # idle, oldest

    def added(gpus: int) -> list[str]:
        answer = fleet.preempt(pod("p", gpus, HIGH), {"n": [uid("kept")]})
        return victims(answer).get("n", [])[1:]

    assert added(2) == [uid("p6")]
    assert added(3) == [uid("p6"), uid("p5")]
    assert added(5) == [uid("p6"), uid("p5"), uid("p7"), uid("p3")]
    assert added(7) == [uid("p6"), uid("p5"), uid("p7"), uid("p3"), uid("p2"), uid("p4")]
    assert added(8) == []  # p1 (equal priority) would be needed: dropped


def test_a_victim_of_equal_or_higher_priority_drops_the_node() -> None:
    fleet = Fleet({"n": held("n", "BBBBBBBB")})
    fleet.bind("n-0", "n", 1, HIGH)
    for i in range(1, 8):
        fleet.bind(f"n-{i}", "n", 1, LOW)
    assert victims(fleet.preempt(pod("p", 2, HIGH), {"n": [uid("n-0"), uid("n-1")]})) == {}
    assert victims(fleet.preempt(pod("p", 2, HIGH + 1), {"n": [uid("n-0"), uid("n-1")]})) == {
        "n": [uid("n-0"), uid("n-1")]
    }


def test_a_bound_pod_the_agent_does_not_attribute_yet_gives_back_what_it_was_counted_for() -> None:
    """`n`'s agent reports 8 idle, unheld GPUs; 6 are taken by bound pods not started yet (pending):
    evicting the two 3-GPU ones gives back 6."""
    fleet = Fleet({"n": held("n", "iiiiiiii")})
    fleet.bind("a", "n", 3, LOW)
    fleet.bind("b", "n", 3, LOW)
    assert victims(fleet.preempt(pod("p", 5, HIGH), {"n": [uid("a")]})) == {"n": [uid("a")]}  # 2 + 3
    assert victims(fleet.preempt(pod("p", 6, HIGH), {"n": [uid("a")]})) == {"n": [uid("a"), uid("b")]}


@pytest.mark.parametrize(("stale_policy", "action"), [("fail-open", AS_PROPOSED), ("fail-closed", DROPPED)])
def test_without_fresh_data_a_candidate_is_kept_as_proposed_only_while_no_fresh_one_is(
    stale_policy: str, action: str
) -> None:
    policy = DecisionPolicy(stale_after_s=10.0, stale_policy=stale_policy)
    fleet = Fleet({"old": held("old", "BBBBBBBB"), "good": held("good", "BBBBBBBB")}, policy)
    fleet.holders()
    fleet.clock.now += 10.0
    fleet.report("good", held("good", "BBBBBBBB"))  # fresh; `old` is exactly 10 s old: still fresh
    both = {"old": [uid("old-0")], "good": [uid("good-0")]}
    assert set(victims(fleet.preempt(pod("p", 1, HIGH), both))) == {"old", "good"}
    fleet.clock.now += 0.001  # `old` past 10 s: stale; a fresh candidate is kept, so it is dropped
    fleet.report("good", held("good", "BBBBBBBB"))
    assert set(victims(fleet.preempt(pod("p", 1, HIGH), both))) == {"good"}
    alone = fleet.preempt(pod("p", 1, HIGH), {"old": [uid("old-0")]})
    (plan,) = fleet.explain(pod("p", 1, HIGH))["preemption"]["lastCall"]["candidates"]
    assert plan["action"] == action and set(victims(alone)) == ({"old"} if action == AS_PROPOSED else set())


def test_pods_the_extender_does_not_judge_keep_kube_schedulers_candidates() -> None:
    fleet = issue_fleet()
    proposals = {"failing": [uid("failing-0")]}
    mig_only = pod("mig", 0, HIGH)
    mig_only["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
    assert victims(fleet.preempt(mig_only, proposals)) == proposals
    assert (
        fleet.explain(mig_only)["preemption"]["lastCall"]["note"]
        == "no whole GPUs asked for: kube-scheduler's count decides"
    )
    assert victims(fleet.preempt(pod("never", 8, HIGH, policy="Never"), proposals)) == {}


def test_metrics_count_each_candidates_fate_and_the_victims_added() -> None:
    """`hidden` needs 1 more victim; `failing` 3 more (its failing GPUs' holder gives back nothing, so
    it is never added); `lost` has too few healthy GPUs whatever is evicted."""
    fleet = Fleet(
        {"hidden": held("hidden", "biBBBBBB"), "failing": held("failing", "FFBBBBBB"), "lost": held("lost", "FFFFFBBB")}
    )
    fleet.holders()
    answer = fleet.preempt(
        pod("p", 4, HIGH),
        {"hidden": [uid("hidden-2"), uid("hidden-3")], "failing": [uid("failing-2")], "lost": [uid("lost-5")]},
    )
    assert sorted(victims(answer)["failing"]) == sorted(uid(f"failing-{i}") for i in range(2, 6))
    text = generate_latest(fleet.api.metrics.registry).decode()
    assert 'gpu_extender_preemption_nodes_total{action="extended"} 2.0' in text
    assert 'gpu_extender_preemption_nodes_total{action="dropped"} 1.0' in text
    assert 'gpu_extender_preemption_nodes_total{action="kept"}' not in text
    assert "gpu_extender_preemption_victims_added_total 4.0" in text


def test_the_route_answers_kube_schedulers_json_on_loopback() -> None:
    fleet = issue_fleet()
    body = orjson.dumps(
        {
            "Pod": pod("important", 8, HIGH),
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {
                "busy": {"Pods": [{"UID": uid(f"busy-{i}")} for i in range(4, 8)], "NumPDBViolations": 0},
                "good": {"Pods": [{"UID": uid(f"good-{i}")} for i in range(8)], "NumPDBViolations": 1},
            },
        }
    )

    async def check(client: TestClient[Any, Any]) -> None:
        response = await client.post("/preempt", data=body)
        assert response.status == 200
        answer = await response.json()
        assert answer == {
            "NodeNameToMetaVictims": {
                "good": {"Pods": [{"UID": uid(f"good-{i}")} for i in range(8)], "NumPDBViolations": 1}
            }
        }
        refused = await client.post("/preempt", data=b'{"Pod": {}}')
        assert refused.status == 400 and (await refused.json())["reason"] == "missing_nodes"

    serve(build_app(fleet.api), check)
    text = generate_latest(fleet.api.metrics.registry).decode()
    assert 'gpu_extender_requests_total{code="200",verb="preempt"} 1.0' in text


def test_a_candidate_without_victims_is_never_answered_even_when_not_judged() -> None:
    """Newer kube-scheduler may propose nodes with no victim (kubernetes PR #135486); answered so, it refuses
    the whole answer ("expected at least one victim pod on node")."""
    fleet = issue_fleet()
    mig_only = pod("mig", 0, HIGH)
    mig_only["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
    assert victims(fleet.preempt(mig_only, {"good": [], "failing": [uid("failing-0")]})) == {
        "failing": [uid("failing-0")]
    }


TRAIN_BUDGET = {  # no disruption allowed to the pods labelled app=train
    "metadata": {"name": "train", "namespace": NS},
    "spec": {"selector": {"matchLabels": {"app": "train"}}},
    "status": {"disruptionsAllowed": 0},
}


def budgeted_fleet(budgets: DisruptionBudgets) -> Fleet:
    """Node n: n-0 (kube-scheduler's victim) and p1 (priority LOW - 5, labelled app=train), p2 and p3
    (LOW) hold GPUs 0-3, all busy; GPUs 4-7 busy outside Kubernetes."""
    fleet = Fleet({"n": held("n", "BBBBbbbb")}, budgets=budgets)
    fleet.bind("n-0", "n", 1, LOW)
    for name, priority in (("p1", LOW - 5), ("p2", LOW), ("p3", LOW)):
        fleet.ledger.upsert(POD_KIND, pod(name, 1, priority, node="n", started="2026-12-07T01:00:00Z"))
    fleet.report("n", [("busy", "n-0"), ("busy", "p1"), ("busy", "p2"), ("busy", "p3")] + [("busy", None)] * 4)
    protected = pod("p1", 1, LOW - 5, node="n", started="2026-12-07T01:00:00Z")
    protected["metadata"]["labels"] = {"app": "train"}
    fleet.ledger.upsert(POD_KIND, protected)
    return fleet


def test_added_victims_prefer_pods_no_budget_protects_and_count_the_budgets_they_break() -> None:
    """kube-scheduler proposes n-0; 2 more GPUs are needed. p1 is the cheapest by priority but a
    PodDisruptionBudget allowing no disruption covers it: p2 and p3 (unprotected) go first. Needing
    all three, the answer counts p1's violation on top of kube-scheduler's own count."""
    budgets = DisruptionBudgets()
    fleet = budgeted_fleet(budgets)
    proposals = {"n": [uid("n-0")]}
    # The budgets not listed yet: unknown is never "none broken": no victim is added.
    assert victims(fleet.preempt(pod("p", 3, HIGH), proposals)) == {}
    budgets.replace_all("PodDisruptionBudget", [TRAIN_BUDGET])
    answer = fleet.preempt(pod("p", 3, HIGH), proposals)
    assert victims(answer) == {"n": [uid("n-0"), uid("p2"), uid("p3")]}
    assert answer["NodeNameToMetaVictims"]["n"]["NumPDBViolations"] == 0
    answer = fleet.preempt(pod("p", 4, HIGH), proposals)
    assert sorted(victims(answer)["n"]) == sorted([uid("n-0"), uid("p1"), uid("p2"), uid("p3")])
    assert answer["NodeNameToMetaVictims"]["n"]["NumPDBViolations"] == 1


def test_a_change_of_the_budgets_is_read_by_the_next_call_though_the_node_is_unchanged() -> None:
    """The node's plan is kept between calls for the budgets' generation it read (judge_table): the
    same call again meets it, and a budget deleted (nothing else changed) is read at the next call."""
    budgets = DisruptionBudgets()
    budgets.replace_all("PodDisruptionBudget", [TRAIN_BUDGET])
    fleet = budgeted_fleet(budgets)
    proposals = {"n": [uid("n-0")]}
    plans = []
    for _ in range(3):  # (the node's table is made at its second read: the third meets the kept plan)
        assert victims(fleet.preempt(pod("p", 2, HIGH), proposals)) == {"n": [uid("n-0"), uid("p2")]}
        found = fleet.api.preemptions.latest(uid("p"), fleet.clock())
        assert found is not None
        plans.append(found.plan.nodes[0])
    assert plans[2] is plans[1] and plans[1] is not plans[0] and plans[0].action == EXTENDED
    budgets.delete("PodDisruptionBudget", TRAIN_BUDGET)
    assert victims(fleet.preempt(pod("p", 2, HIGH), proposals)) == {"n": [uid("n-0"), uid("p1")]}


def test_the_facts_kept_of_a_node_follow_its_reports() -> None:
    """SchedulerApi hands each node's new summaries to the preempt verb's kept facts (preempt_facts.py):
    a report reading alike moves them onto it; one reading otherwise lets them go."""
    fleet = Fleet({"n": held("n", "iiiiBBBB")})
    fleet.holders()
    proposals = {"n": [uid("n-4"), uid("n-5")]}
    for _ in range(2):
        assert victims(fleet.preempt(pod("p", 6, HIGH), proposals)) == {"n": [uid("n-4"), uid("n-5")]}
    kept = fleet.api._preempt_facts
    assert kept is not None and kept._entries["n"][3].table is not None
    fleet.report("n", fleet.nodes["n"])  # the next report, the same readings
    moved = kept._entries["n"]
    assert moved[0] is fleet.state.summary("n") and moved[1] is fleet.state.reported("n")
    assert moved[3].table is not None and moved[3].table.read is moved[0]
    fleet.report("n", held("n", "iiibBBBB"))  # GPU 3 busy now (outside Kubernetes)
    assert "n" not in kept._entries
    assert victims(fleet.preempt(pod("p", 6, HIGH), proposals)) == {"n": [uid("n-4"), uid("n-5"), uid("n-6")]}


@pytest.mark.parametrize(("max_candidates", "bound"), [(25_000, PREEMPT_MAX_CANDIDATES), (40, 40)])
def test_the_route_takes_the_lower_of_max_candidates_and_the_preempt_bound(max_candidates: int, bound: int) -> None:
    fleet = issue_fleet()
    fleet.api.settings = replace(fleet.api.settings, max_candidates=max_candidates)

    def body(n: int) -> bytes:
        victims = {f"x{i}": {"Pods": [{"UID": f"u{i}"}], "NumPDBViolations": 0} for i in range(n)}
        return orjson.dumps({"Pod": pod("p", 8, HIGH), "NodeNameToVictims": None, "NodeNameToMetaVictims": victims})

    async def check(client: TestClient[Any, Any]) -> None:
        at = await client.post("/preempt", data=body(bound))
        assert at.status == 200, await at.text()
        past = await client.post("/preempt", data=body(bound + 1))
        assert past.status == 400 and (await past.json())["reason"] == "too_many_nodes"

    serve(build_app(fleet.api), check)


def test_a_victim_named_twice_frees_its_gpus_once() -> None:
    fleet = Fleet({"n": held("n", "iBBBBBBB")})
    fleet.holders()
    answer = fleet.preempt(pod("p", 3, HIGH), {"n": [uid("n-1"), uid("n-1")]})
    (plan,) = fleet.explain(pod("p", 3, HIGH))["preemption"]["lastCall"]["candidates"]
    assert plan["action"] == EXTENDED and plan["gpusUsableAfter"] == 3, plan  # 1 idle + n-1 + one added
    assert set(victims(answer)["n"]) == {uid("n-1"), uid("n-2")}
