"""Multi-pod groups through the scheduler verbs (SchedulerApi: filter, prioritize, explain, the pod
watch's bindings): one domain per group, the room held for members not yet bound, no partial
start the extender could foresee, single pods unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide.group_domains import NO_LABEL
from gpuextender.extender.model.pod_group import JOBSET, WORKLOAD, PodGroupSpec
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources, PodGroupLookup, no_pod_group
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import ExtenderArgs
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from gpuextender.extender.ui.explain_cli import render
from gpuextender.extender.ui.fleet_page import build_fleet
from tests.extender.builders import gpu, report

CLIQUE = "nvidia.com/gpu.clique"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gang_of_two(_source: str, _namespace: str, name: str) -> PodGroupSpec | None:
    """The PodGroups known: "gang", of 2 members."""
    return PodGroupSpec(2) if name == "gang" else None


class Cluster:
    """An extender's API over agents' reports, node labels and a bound-pod ledger."""

    def __init__(
        self,
        nodes: dict[str, tuple[str | None, int, int]],
        pod_groups: PodGroupLookup = no_pod_group,
        pending: Callable[[str], int | None] = lambda _key: None,
        **settings: Any,
    ) -> None:
        """nodes: name -> (clique or None, idle GPUs, busy GPUs); pod_groups: the PodGroups known;
        pending: a group's members that exist as unbound pods (None: not known)."""
        self.clock = Clock()
        self.state = GpuState(IdleRule())
        self.labels = {n: ({CLIQUE: c} if c is not None else {}) for n, (c, _, _) in nodes.items()}
        self.view = InventoryView(
            node_labels=self.labels, allocatable_gpus={n: i + b for n, (_, i, b) in nodes.items()}
        )
        self.nodes = list(nodes)
        for name, (_, idle, busy) in nodes.items():
            self.report(name, idle, busy)
        self.ledger = PodLedger(("nvidia.com/gpu",), self.clock)
        self.ledger.replace_all(POD_KIND, [])
        self.api = SchedulerApi(
            self.state,
            ExtenderMetrics(self.state),
            ApiSettings(DecisionPolicy(), **settings),
            inventory=lambda: self.view,
            clock=self.clock,
            sources=ClusterSources(ledger=self.ledger, pod_groups=pod_groups, pending_members=pending),
        )
        self.bound: dict[str, str] = {}

    def report(self, name: str, idle: int, busy: int) -> None:
        gpus = [gpu(i, 0, 1) for i in range(idle)] + [gpu(idle + i, 95, 60) for i in range(busy)]
        self.state.ingest(report(name, gpus), self.clock.now)

    def filter(self, pod: dict[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        return self.api.filter(ExtenderArgs(pod, names or self.nodes, None))

    def schedule(self, pod: dict[str, Any]) -> str | None:
        """filter, then prioritize's best of the passes, then bind (the pod watch sees it): the node."""
        answer = self.filter(pod)
        passed = answer["NodeNames"]
        if not passed:
            return None
        scores = dict((s["Host"], s["Score"]) for s in self.api.prioritize(ExtenderArgs(pod, passed, None)))
        best = max(passed, key=lambda n: (scores.get(n, 0), n))
        self.bind(pod, best)
        return best

    def bind(self, pod: dict[str, Any], node: str) -> None:
        bound = {**pod, "spec": {**pod["spec"], "nodeName": node}, "status": {"phase": "Pending"}}
        self.ledger.upsert(POD_KIND, bound)
        self.bound[pod["metadata"]["name"]] = node

    def clique_of(self, node: str) -> str | None:
        return self.labels[node].get(CLIQUE)


def failures(answer: dict[str, Any]) -> dict[str, str]:
    return {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}


def lws_pod(
    group: str, index: int, size: int, gpus: int = 8, *, namespace: str = "llm", **extra: str
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{group}-{index}",
            "namespace": namespace,
            "uid": f"uid-{namespace}-{group}-{index}",
            "labels": {"leaderworkerset.sigs.k8s.io/group-key": group},
            "annotations": {"leaderworkerset.sigs.k8s.io/size": str(size), **extra},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def single_pod(name: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "llm", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def fleet() -> dict[str, tuple[str | None, int, int]]:
    """Clique a: 2 idle 8-GPU nodes; clique b: 4 idle; clique c: 3 idle and 1 busy."""
    nodes: dict[str, tuple[str | None, int, int]] = {}
    for i in range(2):
        nodes[f"a{i}"] = ("a", 8, 0)
    for i in range(4):
        nodes[f"b{i}"] = ("b", 8, 0)
    for i in range(3):
        nodes[f"c{i}"] = ("c", 8, 0)
    nodes["c3"] = ("c", 0, 8)
    return nodes


def test_first_members_of_three_groups_go_to_three_cliques_that_hold_them_whole() -> None:
    """The issue's failure: every group's first member went to the same clique. With holds, each
    group's first member takes a domain that holds the whole group, the tightest first."""
    cluster = Cluster(fleet())
    groups = {"g2": 2, "g3": 3, "g4": 4}
    for name, size in groups.items():  # every first member before any second one (all created at once)
        assert cluster.schedule(lws_pod(name, 0, size)) is not None
    for name, size in groups.items():
        for index in range(1, size):
            assert cluster.schedule(lws_pod(name, index, size)) is not None, (name, index)
    cliques = {g: {cluster.clique_of(cluster.bound[f"{g}-{i}"]) for i in range(s)} for g, s in groups.items()}
    assert cliques == {"g2": {"a"}, "g3": {"c"}, "g4": {"b"}}
    assert cluster.api.groups.counts.placed_whole == 3 and len(cluster.api.groups) == 0
    assert not any(cluster.bound[f"g{s}-{i}"] == "c3" for s in (2, 3, 4) for i in range(s))  # the busy node


def test_a_group_no_domain_holds_waits_whole_with_the_best_domains_shortfall() -> None:
    cluster = Cluster(fleet())
    answer = cluster.filter(lws_pod("big", 0, 5))
    assert answer["NodeNames"] == []
    message = (
        "gpu-extender: no nvidia.com/gpu.clique domain holds 5 x 8 GPUs: "
        "best nvidia.com/gpu.clique=b has room for 4 (GroupDoesNotFit)"
    )
    # Every node that would pass alone fails with the shortfall, busy c3 with its own reason: never
    # the no-fit fallback (pass-all is the default policy), so no member starts.
    assert {n: r for n, r in failures(answer).items() if n != "c3"} == dict.fromkeys(
        [n for n in cluster.nodes if n != "c3"], message
    )
    assert "c3" in failures(answer) and cluster.api.groups.counts.no_domain == 1
    assert cluster.api.groups.plan("llm/leaderworkerset/big") is None  # nothing held for it


def test_a_single_pod_that_fits_nowhere_still_gets_the_fallback() -> None:
    cluster = Cluster({"n0": (None, 0, 8)})
    answer = cluster.filter(single_pod("s"))
    assert answer["NodeNames"] == ["n0"]  # pass-all, as before groups existed


def test_held_room_is_taken_for_single_pods_and_given_back_to_the_groups_members() -> None:
    cluster = Cluster({"a0": ("a", 8, 0), "a1": ("a", 8, 0), "b0": ("b", 8, 0)})
    first = cluster.filter(lws_pod("g", 0, 2))
    assert sorted(first["NodeNames"]) == ["a0", "a1"]
    # Both nodes are held for the group's 2 members (neither bound yet): a single pod goes to b0.
    single = cluster.filter(single_pod("s"))
    assert single["NodeNames"] == ["b0"]
    assert set(failures(single)) == {"a0", "a1"} and "GPUsTakenByBoundPods" in failures(single)["a0"]
    # The group's own second member still sees both nodes' room.
    assert sorted(cluster.filter(lws_pod("g", 1, 2))["NodeNames"]) == ["a0", "a1"]
    cluster.bind(lws_pod("g", 0, 2), "a0")
    assert cluster.api.groups.plan("llm/leaderworkerset/g").holds == {"a1": 1}  # type: ignore[union-attr]
    assert cluster.filter(lws_pod("g", 1, 2))["NodeNames"] == ["a1"]  # a0: its 8 GPUs are member 0's now
    cluster.bind(lws_pod("g", 1, 2), "a1")
    assert cluster.api.groups.plan("llm/leaderworkerset/g") is None
    assert cluster.api.groups.counts.placed_whole == 1


def test_later_members_go_only_to_the_groups_domain() -> None:
    cluster = Cluster(fleet())
    node = cluster.schedule(lws_pod("g", 0, 2))
    assert node is not None and cluster.clique_of(node) == "a"
    answer = cluster.filter(lws_pod("g", 1, 2))
    assert answer["NodeNames"] and {cluster.clique_of(n) for n in answer["NodeNames"]} == {"a"}
    elsewhere = "gpu-extender: group is in another domain (GroupInOtherDomain)"
    assert {n for n, r in failures(answer).items() if r == elsewhere} == {
        n for n in cluster.nodes if cluster.clique_of(n) != "a" and n != "c3"
    } | {"c3"}
    # prioritize gives a node outside the domain 0, whatever its GPUs
    scores = {
        s["Host"]: s["Score"] for s in cluster.api.prioritize(ExtenderArgs(lws_pod("g", 1, 2), cluster.nodes, None))
    }
    assert all(scores.get(n, 0) == 0 for n in cluster.nodes if cluster.clique_of(n) != "a")


def test_a_restarted_extender_finds_the_domain_from_the_bound_members() -> None:
    """No plan (another replica chose, or this one restarted): a bound member's node pins the domain."""
    cluster = Cluster(fleet())
    cluster.bind(lws_pod("g", 0, 3), "b1")  # bound by another replica's choice
    answer = cluster.filter(lws_pod("g", 1, 3))
    assert {cluster.clique_of(n) for n in answer["NodeNames"]} == {"b"}
    plan = cluster.api.groups.plan("llm/leaderworkerset/g")
    assert plan is not None and plan.value == "b" and sum(plan.holds.values()) == 2


def test_bound_members_in_a_domain_without_room_wait_there_rather_than_split() -> None:
    cluster = Cluster({"a0": ("a", 8, 0), "a1": ("a", 0, 8), "b0": ("b", 8, 0), "b1": ("b", 8, 0)})
    cluster.bind(lws_pod("g", 0, 3), "a0")  # a0's GPUs are member 0's; a1 is busy: 2 more fit nowhere in a
    answer = cluster.filter(lws_pod("g", 1, 3))
    assert answer["NodeNames"] == []
    assert "GroupDoesNotFit" in failures(answer)["b0"]


def test_nodes_without_the_label_are_domains_of_one() -> None:
    cluster = Cluster({"a0": ("a", 8, 0), "x": (None, 8, 0), "y": (None, 16, 0)})
    # 2 x 8: clique a holds one member, x one, y two: only y holds the group.
    answer = cluster.filter(lws_pod("g", 0, 2))
    assert answer["NodeNames"] == ["y"]
    plan = cluster.api.groups.plan("llm/leaderworkerset/g")
    assert plan is not None and plan.value == NO_LABEL and plan.domain_name == "node y" and plan.holds == {"y": 2}


def test_a_fleet_without_any_level_label_places_the_group_whole_anywhere() -> None:
    cluster = Cluster({"x": (None, 8, 0), "y": (None, 8, 0), "z": (None, 0, 8)})
    answer = cluster.filter(lws_pod("g", 0, 2))
    assert sorted(answer["NodeNames"]) == ["x", "y"]
    assert cluster.filter(lws_pod("h", 0, 2))["NodeNames"] == []  # the room is held for g


def test_the_groups_own_topology_key_replaces_the_levels() -> None:
    nodes = {"r0": ("a", 8, 0), "r1": ("b", 8, 0)}
    cluster = Cluster(nodes)
    cluster.labels["r0"]["rack"] = "one"
    cluster.labels["r1"]["rack"] = "one"
    pod = lws_pod("g", 0, 2, **{"leaderworkerset.sigs.k8s.io/exclusive-topology": "rack"})
    assert sorted(cluster.filter(pod)["NodeNames"]) == ["r0", "r1"]  # two cliques, one rack
    assert cluster.filter(lws_pod("h", 0, 2))["NodeNames"] == []  # by clique: no domain of 2


def test_groups_never_span_namespaces() -> None:
    cluster = Cluster(fleet())
    cluster.bind(lws_pod("g", 0, 2, namespace="other"), "b0")
    answer = cluster.filter(lws_pod("g", 0, 2))  # same group key, another namespace: its own group
    assert {cluster.clique_of(n) for n in answer["NodeNames"]} == {"a"}


def test_a_hold_expires_at_exactly_the_hold_time_without_progress() -> None:
    cluster = Cluster({"a0": ("a", 8, 0), "a1": ("a", 8, 0)}, group_hold_s=60.0)
    cluster.filter(lws_pod("g", 0, 2))
    book = cluster.api.groups
    cluster.clock.now += 59.999
    book.expire(cluster.clock.now)
    assert book.plan("llm/leaderworkerset/g") is not None
    cluster.clock.now += 0.001
    book.expire(cluster.clock.now)
    assert book.plan("llm/leaderworkerset/g") is None and book.counts.expired == 1
    explained = cluster.api.explain(ExtenderArgs(lws_pod("g", 0, 2), ["a0", "a1"], None))
    assert "expired after 60s with 2 of 2 members unbound" in " ".join(explained["group"]["notes"])


def test_a_filter_again_on_the_same_domain_does_not_extend_the_hold() -> None:
    cluster = Cluster({"a0": ("a", 8, 0), "a1": ("a", 8, 0)}, group_hold_s=60.0)
    cluster.filter(lws_pod("g", 0, 2))
    cluster.clock.now += 50
    cluster.filter(lws_pod("g", 0, 2))  # kube-scheduler retries the same member
    cluster.clock.now += 10
    cluster.api.groups.expire(cluster.clock.now)
    assert cluster.api.groups.plan("llm/leaderworkerset/g") is None


def test_a_bound_member_extends_the_hold() -> None:
    cluster = Cluster({"a0": ("a", 8, 0), "a1": ("a", 8, 0), "a2": ("a", 8, 0)}, group_hold_s=60.0)
    cluster.filter(lws_pod("g", 0, 3))
    cluster.clock.now += 50
    cluster.bind(lws_pod("g", 0, 3), "a0")
    cluster.clock.now += 59
    cluster.api.groups.expire(cluster.clock.now)
    assert cluster.api.groups.plan("llm/leaderworkerset/g") is not None


def test_an_unreadable_size_makes_the_pod_a_single_pod_and_explain_says_why() -> None:
    cluster = Cluster({"n0": (None, 0, 8)})
    pod = lws_pod("g", 0, 2)
    pod["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] = "-3"
    assert cluster.filter(pod)["NodeNames"] == ["n0"]  # the single pod's fallback
    explained = cluster.api.explain(ExtenderArgs(pod, ["n0"], None))
    assert explained["group"] == {
        "problem": "leaderworkerset group 'g': annotation leaderworkerset.sigs.k8s.io/size = '-3' is not a whole "
        "number: decided as a single pod"
    }


def test_explain_shows_the_groups_source_size_domain_rooms_and_hold() -> None:
    cluster = Cluster(fleet(), group_hold_s=120.0)
    cluster.filter(lws_pod("g", 0, 3))
    cluster.clock.now += 5  # (within --stale-after: the reports are still fresh)
    group = cluster.api.explain(ExtenderArgs(lws_pod("g", 1, 3), cluster.nodes, None))["group"]
    assert group["key"] == "llm/leaderworkerset/g" and group["source"] == "leaderworkerset"
    assert group["size"] == 3 and group["boundMembers"] == 0 and group["gpusPerMember"] == 8
    assert group["domain"] == "nvidia.com/gpu.clique=c" and group["holdExpiresInSeconds"] == 115.0
    assert group["held"] == {"c0": 1, "c1": 1, "c2": 1}
    rooms = {r["domain"]: r["members"] for r in group["rooms"]}
    assert rooms == {"nvidia.com/gpu.clique=c": 3}  # the planned domain alone is judged again


def test_unknown_is_never_room() -> None:
    """a1's agent never reported: alone it would pass on assumed data; for a group it holds nothing."""
    cluster = Cluster({"a0": ("a", 8, 0)})
    cluster.nodes.append("a1")
    cluster.labels["a1"] = {CLIQUE: "a"}
    answer = cluster.filter(lws_pod("g", 0, 2))
    assert answer["NodeNames"] == []
    assert "GroupDoesNotFit" in failures(answer)["a0"] and "has room for 1" in failures(answer)["a0"]
    assert cluster.filter(single_pod("s"))["NodeNames"] == ["a0"]


def test_a_domain_pinned_by_kueue_is_respected_and_ranked_inside() -> None:
    """Kueue's TAS sets a node selector: kube-scheduler then sends only that domain's nodes, and the
    group is never sent to wait for another."""
    cluster = Cluster(fleet())
    pinned = [n for n in cluster.nodes if cluster.clique_of(n) == "b"]
    answer = cluster.filter(kueue_pinned(lws_pod("g", 0, 2), "b"), pinned)
    assert sorted(answer["NodeNames"]) == pinned  # a (the tightest of all) was not offered
    assert cluster.filter(kueue_pinned(lws_pod("h", 0, 5), "b"), pinned)["NodeNames"] == []  # b cannot hold 5
    # The same by required node affinity, every term naming b alone.
    affinity = {"matchExpressions": [{"key": CLIQUE, "operator": "In", "values": ["b"]}]}
    pod = lws_pod("k", 0, 2)
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [affinity]}}
    }
    assert sorted(Cluster(fleet()).filter(pod, pinned)["NodeNames"]) == pinned
    # Unpinned, the same call waits for a, which strands less (issue 53: kube-scheduler-1.36 offers
    # one domain at a time).
    assert Cluster(fleet()).filter(lws_pod("m", 0, 2), pinned)["NodeNames"] == []


def kueue_pinned(pod: dict[str, Any], clique: str) -> dict[str, Any]:
    pod["spec"]["nodeSelector"] = {CLIQUE: clique}
    return pod


def test_a_namespace_at_its_bound_makes_its_new_group_wait_and_others_go_on() -> None:
    """--group-holds-per-namespace 1: llm's second group waits (GroupNamespaceFull, soft, in explain
    and the log); another namespace's group and llm's group in flight are placed as before."""
    cluster = Cluster(fleet(), groups_per_namespace=1)
    assert cluster.filter(lws_pod("g", 0, 2))["NodeNames"]
    answer = cluster.filter(lws_pod("h", 0, 2))
    assert answer["NodeNames"] == [] and "GroupNamespaceFull" in failures(answer)["b0"]
    assert "--group-holds-per-namespace" in failures(answer)["b0"]
    assert cluster.filter(lws_pod("h", 0, 2, namespace="other"))["NodeNames"]
    assert cluster.filter(lws_pod("g", 1, 2))["NodeNames"]
    counts = cluster.api.groups.counts
    assert (counts.refused_namespace, counts.refused_full, counts.no_domain) == (1, 0, 0)


def test_a_pending_pod_cannot_hold_again_for_members_that_never_came() -> None:
    """A group of 3 of which one pod exists: its hold expires, and that pod is told to wait
    (GroupAwaitsMembers, soft) instead of holding the domain again; a second member comes and the
    group is held again."""
    cluster = Cluster(fleet(), group_hold_s=60.0)
    assert cluster.filter(lws_pod("g", 0, 3))["NodeNames"]
    cluster.clock.now += 60.0
    for name, (_, idle, busy) in fleet().items():  # the agents report on
        cluster.report(name, idle, busy)
    answer = cluster.filter(lws_pod("g", 0, 3))
    assert answer["NodeNames"] == [] and "GroupAwaitsMembers" in failures(answer)["b0"]
    assert cluster.api.groups.plan("llm/leaderworkerset/g") is None
    assert cluster.filter(lws_pod("g", 1, 3))["NodeNames"]
    assert cluster.api.groups.plan("llm/leaderworkerset/g") is not None
    counts = cluster.api.groups.counts
    assert (counts.expired, counts.refused_awaiting, counts.no_domain) == (1, 1, 0)


def test_two_replicas_choose_the_same_domain_from_the_same_data() -> None:
    """Replica A plans at member 0; kube-scheduler sends member 1 to replica B before member 0 is
    bound: B, seeing the same agents and inventory, chooses the same domain."""
    a, b = Cluster(fleet()), Cluster(fleet())
    first = a.filter(lws_pod("g", 0, 3))
    second = b.filter(lws_pod("g", 1, 3))
    assert {a.clique_of(n) for n in first["NodeNames"]} == {b.clique_of(n) for n in second["NodeNames"]} == {"c"}


def test_a_full_book_makes_a_new_group_wait_and_a_planned_one_go_on() -> None:
    cluster = Cluster(fleet())
    book = cluster.api.groups
    book._max = 1  # (the bound itself is state/test_group_book.py's; here: what a member is told)
    assert cluster.filter(lws_pod("g", 0, 2))["NodeNames"]
    answer = cluster.filter(lws_pod("h", 0, 2))
    assert answer["NodeNames"] == [] and "GroupBookFull" in failures(answer)["b0"]
    assert cluster.filter(lws_pod("g", 1, 2))["NodeNames"]  # the group in flight is not refused
    counts = book.counts
    assert (counts.refused_full, counts.refused_namespace, counts.no_domain) == (1, 0, 0)


def test_a_workload_pod_group_gives_size_and_topology_key() -> None:
    nodes = {"r0": ("a", 8, 0), "r1": ("b", 8, 0), "r2": ("b", 8, 0)}
    specs = {("ns", "pg"): PodGroupSpec(2, "rack")}
    cluster = Cluster(nodes, pod_groups=lambda source, ns, name: specs.get((ns, name)) if source == WORKLOAD else None)
    for n, rack in (("r0", "one"), ("r1", "one"), ("r2", "two")):
        cluster.labels[n]["rack"] = rack
    pod = single_pod("w-0")
    pod["metadata"]["namespace"] = "ns"
    pod["spec"]["schedulingGroup"] = {"podGroupName": "pg"}
    # Rack one (by clique it would be b); a gang member is answered the one node its room is held on.
    answer = cluster.filter(pod)
    assert answer["NodeNames"] == ["r0"] and "GangMemberHeldElsewhere" in failures(answer)["r1"]
    group = cluster.api.explain(ExtenderArgs(pod, cluster.nodes, None))["group"]
    assert group["source"] == "workload" and group["size"] == 2 and group["levels"] == ["rack"]
    unknown = {**pod, "spec": {**pod["spec"], "schedulingGroup": {"podGroupName": "not-seen"}}}
    assert cluster.api.explain(ExtenderArgs(unknown, cluster.nodes, None))["group"] == {
        "problem": "workload group ns/not-seen: its PodGroup is not known (yet): a single pod"
    }
    specs[("ns", "basic")] = PodGroupSpec(None, "", "no gang policy (spec.schedulingPolicy.gang.minCount)")
    basic = {**pod, "spec": {**pod["spec"], "schedulingGroup": {"podGroupName": "basic"}}}
    assert cluster.api.explain(ExtenderArgs(basic, cluster.nodes, None))["group"] == {
        "problem": "workload group ns/basic: its PodGroup: no gang policy (spec.schedulingPolicy.gang.minCount): "
        "a single pod"
    }


def test_members_that_disagree_on_the_size_keep_the_first_and_explain_says_so() -> None:
    cluster = Cluster(fleet())
    cluster.filter(lws_pod("g", 0, 2))
    group = cluster.api.explain(ExtenderArgs(lws_pod("g", 1, 4), cluster.nodes, None))["group"]
    assert group["size"] == 2
    assert group["notes"] == ["members disagree on the group's size: 2 (kept, the first seen) and 4"]


def test_metrics_count_groups_held_placed_and_without_a_domain() -> None:
    cluster = Cluster(fleet())
    cluster.schedule(lws_pod("g", 0, 2))
    cluster.filter(lws_pod("big", 0, 9))

    def scraped() -> dict[str, float]:
        text = generate_latest(cluster.api.metrics.registry).decode()
        return {
            s.name: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name.startswith("gpu_extender_group")
        }

    before = scraped()
    assert before["gpu_extender_groups_held"] == 1 and before["gpu_extender_group_members_held"] == 1
    assert before["gpu_extender_group_no_domain_total"] == 1 and before["gpu_extender_groups_placed_whole_total"] == 0
    cluster.schedule(lws_pod("g", 1, 2))
    after = scraped()
    assert after["gpu_extender_groups_held"] == 0 and after["gpu_extender_groups_placed_whole_total"] == 1


def test_a_plan_of_this_replica_gives_way_to_members_bound_elsewhere() -> None:
    """This replica chose clique a at member 0; another replica's member 1 was bound in b: the
    group's next member goes to b, where a member already is, not to this replica's a."""
    cluster = Cluster(fleet())
    assert {cluster.clique_of(n) for n in cluster.filter(lws_pod("g", 0, 3))["NodeNames"]} == {"c"}
    cluster.bind(lws_pod("g", 1, 3), "b0")
    answer = cluster.filter(lws_pod("g", 0, 3))
    assert answer["NodeNames"] and {cluster.clique_of(n) for n in answer["NodeNames"]} == {"b"}
    plan = cluster.api.groups.plan("llm/leaderworkerset/g")
    assert plan is not None and plan.value == "b" and cluster.api.groups.holds_on("c0") == ()


def test_the_explain_command_shows_the_group() -> None:
    cluster = Cluster(fleet(), group_hold_s=120.0)
    cluster.filter(lws_pod("g", 0, 3))
    text = render(cluster.api.explain(ExtenderArgs(lws_pod("g", 1, 3), cluster.nodes, None)))
    assert "group llm/leaderworkerset/g (leaderworkerset): 3 members of 8 GPU(s), 0 bound; domains by" in text
    assert "domain nvidia.com/gpu.clique=c: room for 3 of the 3 members" in text
    assert "held for members not yet bound: c0 x1, c1 x1, c2 x1 (released in 120s)" in text
    waiting = render(cluster.api.explain(ExtenderArgs(lws_pod("big", 0, 9), cluster.nodes, None)))
    assert (
        "waits: no nvidia.com/gpu.clique domain holds 9 x 8 GPUs: best nvidia.com/gpu.clique=b has room for 4"
        in waiting
    )


def test_a_member_kube_scheduler_cannot_place_in_the_domain_plans_the_group_again() -> None:
    """Clique a was chosen; then a1 lacks CPU for the next member (kube-scheduler leaves it out of the
    candidates): a alone no longer holds the 2 members left, so the group moves to b whole."""
    cluster = Cluster({"a0": ("a", 8, 0), "a1": ("a", 8, 0), "b0": ("b", 8, 0), "b1": ("b", 8, 0), "b2": ("b", 8, 0)})
    assert sorted(cluster.filter(lws_pod("g", 0, 2))["NodeNames"]) == ["a0", "a1"]
    answer = cluster.filter(lws_pod("g", 1, 2), ["a0", "b0", "b1", "b2"])
    assert sorted(answer["NodeNames"]) == ["b0", "b1", "b2"]
    plan = cluster.api.groups.plan("llm/leaderworkerset/g")
    assert plan is not None and plan.value == "b" and cluster.api.groups.holds_on("a0") == ()
    assert "plannedBefore" in cluster.api.explain(ExtenderArgs(lws_pod("g", 1, 2), ["b0"], None))["group"]


def test_the_fleet_page_lists_domains_with_free_idle_gpus_and_groups_held() -> None:
    cluster = Cluster(fleet())
    cluster.filter(lws_pod("g", 0, 3))
    doc = orjson.loads(asyncio.run(build_fleet(cluster.api)))
    rows = {d["domain"]: d for d in doc["domains"]["domains"]}
    assert doc["domains"]["level"] == CLIQUE
    # (the test's agents read no kubelet: every idle GPU's holder is unknown, counted apart)
    assert (rows["c"]["freeIdleGpus"], rows["c"]["holderUnknownIdleGpus"]) == (0, 24) and rows["c"]["groupsHeld"] == [
        {"group": "llm/leaderworkerset/g", "membersHeld": 3}
    ]
    assert (rows["b"]["freeIdleGpus"], rows["b"]["holderUnknownIdleGpus"]) == (0, 32) and rows["b"]["groupsHeld"] == []


def test_a_hold_run_out_frees_its_room_for_the_next_single_pod() -> None:
    """No member of the group comes back: the next call of any pod releases the hold first."""
    cluster = Cluster({"a0": ("a", 8, 0), "a1": ("a", 8, 0)}, group_hold_s=5.0)
    cluster.filter(lws_pod("g", 0, 2))
    single = single_pod("s")
    cluster.clock.now += 4.999
    held = cluster.api.explain(ExtenderArgs(single, ["a0"], None))
    assert held["nodes"][0]["idleGpus"] == 0 and held["fallback"]  # only the no-fit fallback passes it
    cluster.clock.now += 0.001
    freed = cluster.api.explain(ExtenderArgs(single, ["a0"], None))
    assert freed["nodes"][0]["idleGpus"] == 8 and not freed["fallback"] and cluster.api.groups.counts.expired == 1


def test_a_deleted_pod_group_releases_its_hold() -> None:
    from gpuextender.extender.app import _pod_group_deleted

    specs = {("llm", "pg"): PodGroupSpec(2)}
    cluster = Cluster(fleet(), pod_groups=lambda source, ns, name: specs.get((ns, name)))
    pod = single_pod("w-0")
    pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "pg"}
    assert cluster.filter(pod)["NodeNames"]
    assert cluster.api.groups.plan("llm/coscheduling/pg") is not None
    _pod_group_deleted(cluster.api.groups, "coscheduling", "llm", "pg")
    assert cluster.api.groups.plan("llm/coscheduling/pg") is None
    assert cluster.api.groups.released("llm/coscheduling/pg") == "its PodGroup was deleted"


def test_a_jobset_job_with_exclusive_placement_lands_whole_in_one_domain_of_its_key() -> None:
    jobs = {("llm", "train-workers-0"): PodGroupSpec(3)}
    cluster = Cluster(fleet(), pod_groups=lambda source, ns, name: jobs.get((ns, name)) if source == JOBSET else None)
    pod = single_pod("train-workers-0-0")
    pod["metadata"]["labels"] = {
        "jobset.sigs.k8s.io/jobset-name": "train",
        "batch.kubernetes.io/job-name": "train-workers-0",
    }
    pod["metadata"]["annotations"] = {"alpha.jobset.sigs.k8s.io/exclusive-topology": CLIQUE}
    assert {cluster.clique_of(n) for n in cluster.filter(pod)["NodeNames"]} == {"c"}  # 3 x 8: c is the tightest
    assert cluster.api.groups.plan("llm/jobset/train-workers-0") is not None


def test_a_candidate_named_twice_is_answered_not_refused() -> None:
    cluster = Cluster(fleet())
    answer = cluster.filter(lws_pod("g", 0, 2), ["a0", "a0", "a1", "b0"])
    assert sorted(answer["NodeNames"]) == ["a0", "a0", "a1"] and set(failures(answer)) == {"b0"}
    answer = cluster.filter(lws_pod("g", 1, 2), ["a0", "a1", "a1", "b0", "b0"])  # the planned domain's road
    assert sorted(answer["NodeNames"]) == ["a0", "a1", "a1"] and set(failures(answer)) == {"b0"}


def workload_member(index: int) -> dict[str, Any]:
    pod = single_pod(f"job-{index}")
    pod["spec"]["schedulingGroup"] = {"podGroupName": "gang"}
    return pod


def test_a_gang_member_placed_but_not_bound_counts_as_placed() -> None:
    """kube-scheduler 1.36's gang scheduling places every member before Permit binds any: job-1,
    passed, is assumed on m0 and stays unbound; job-0's candidates are then m1 alone (kube-scheduler
    counts job-1 on m0). The clique holds the gang: job-0 passes m1 (the bug the real control plane
    found: it failed GroupDoesNotFit for ever)."""
    cluster = Cluster({"m0": ("only", 8, 0), "m1": ("only", 8, 0)}, pod_groups=gang_of_two)
    assert cluster.filter(workload_member(1))["NodeNames"] == ["m0"]  # one node: where its room is held
    assert cluster.filter(workload_member(0), ["m1"])["NodeNames"] == ["m1"]
    plan = cluster.api.groups.plan("llm/workload/gang")
    assert plan is not None and plan.passed == {"uid-job-1": "m0", "uid-job-0": "m1"}
    assert plan.holds == {"m0": 1, "m1": 1}  # both placed members keep their room until bound
    # job-1 retried (its cycle ended without a binding): not placed for itself, and m1 is job-0's.
    assert cluster.filter(workload_member(1), ["m1"])["NodeNames"] == []
    assert cluster.filter(workload_member(1), ["m0"])["NodeNames"] == ["m0"]
    explained = cluster.api.explain(ExtenderArgs(workload_member(1), ["m0"], None))
    assert explained["group"]["domain"] == "nvidia.com/gpu.clique=only"


def test_a_member_of_a_group_that_is_not_a_gang_is_not_counted_before_it_is_bound() -> None:
    """An LWS member is bound right after its cycle (the binding gate waits for it): a member that
    was only filtered is not placed, so m1 alone cannot hold the 2 members still to bind."""
    cluster = Cluster({"m0": ("only", 8, 0), "m1": ("only", 8, 0)})
    assert sorted(cluster.filter(lws_pod("g", 1, 2))["NodeNames"]) == ["m0", "m1"]
    assert cluster.filter(lws_pod("g", 0, 2), ["m1"])["NodeNames"] == []
    cluster.bind(lws_pod("g", 1, 2), "m0")
    assert cluster.filter(lws_pod("g", 0, 2), ["m1"])["NodeNames"] == ["m1"]


def test_a_failed_gang_member_is_no_longer_counted_as_placed() -> None:
    cluster = Cluster({"m0": ("only", 8, 0), "m1": ("only", 8, 0), "m2": ("only", 0, 8)}, pod_groups=gang_of_two)
    cluster.filter(workload_member(1))
    plan = cluster.api.groups.plan("llm/workload/gang")
    assert plan is not None and plan.passed == {"uid-job-1": "m0"}
    assert cluster.filter(workload_member(1), ["m2"])["NodeNames"] == []  # now offered only a busy node
    assert cluster.api.groups.plan("llm/workload/gang") is None  # released: nothing bound, no domain
    assert cluster.api.groups.released("llm/workload/gang").startswith("released: no nvidia.com/gpu.clique")


def test_two_gang_members_on_one_node_count_each_others_gpus() -> None:
    """Two 4-GPU members fit one 8-GPU node with 6 idle only once: the first is placed there (unbound),
    so the second sees 2 idle on it and goes to the other node (the real control plane put both on
    it before: a member on busy GPUs)."""
    cluster = Cluster({"m0": ("only", 6, 2), "m1": ("only", 8, 0)}, pod_groups=gang_of_two)
    first = workload_member(1)
    first["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
    second = workload_member(0)
    second["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
    assert cluster.filter(first)["NodeNames"] == ["m0"]  # the tightest node that holds one
    assert cluster.filter(second)["NodeNames"] == ["m1"]


def test_a_call_offering_another_domain_only_leaves_the_plan_held() -> None:
    """kube-scheduler 1.36's topology-aware gang scheduling tries each candidate domain in turn: a
    member filtered against a domain that cannot hold the gang fails there, and the plan for the
    domain that can stays held (released only when its own domain was offered and fell short)."""
    cluster = Cluster(
        {"a0": ("a", 8, 0), "a1": ("a", 8, 0), "b0": ("b", 8, 0), "b1": ("b", 0, 8)}, pod_groups=gang_of_two
    )
    assert cluster.filter(workload_member(0), ["a0", "a1"])["NodeNames"] == ["a0"]
    assert cluster.filter(workload_member(1), ["b0", "b1"])["NodeNames"] == []  # b holds one member
    plan = cluster.api.groups.plan("llm/workload/gang")
    assert plan is not None and plan.value == "a" and plan.passed == {"uid-job-0": "a0"}
    assert cluster.filter(workload_member(1), ["a0", "a1"])["NodeNames"] == ["a1"]


def test_a_gang_placed_whole_keeps_its_room_while_kube_scheduler_tries_the_other_domains() -> None:
    """kube-scheduler 1.36's topology-aware gang scheduling filters the whole gang in every candidate
    domain in one cycle, then binds a placement where every member passed. Here only clique a holds
    the gang (job-1 on a1, job-0 on a0); the filters that follow in clique b fail for both members,
    and the plan, its holds and its placed members stay in a. The real control plane showed the bug:
    job-0's filter in b moved the plan there, kube-scheduler bound the gang in a, and the next gang's
    member was passed a1 (5 idle GPUs, 4 of them job-1's) before the binding reached the watch."""
    sizes = {"gang": 2, "next": 2}
    cluster = Cluster(
        {"a0": ("a", 8, 0), "a1": ("a", 5, 3), "b0": ("b", 8, 0), "b1": ("b", 8, 0)},
        pod_groups=lambda source, ns, name: PodGroupSpec(sizes[name]) if name in sizes else None,
    )

    def member(group: str, index: int) -> dict[str, Any]:
        pod = single_pod(f"{group}-{index}", 4)
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
        return pod

    assert cluster.filter(member("gang", 1), ["a0", "a1"])["NodeNames"] == ["a1"]  # the tightest first
    assert cluster.filter(member("gang", 0), ["a0", "a1"])["NodeNames"] == ["a0"]  # placed whole in a
    assert cluster.filter(member("gang", 1), ["b0", "b1"])["NodeNames"] == []  # b: its room is in a
    assert cluster.filter(member("gang", 0), ["b0", "b1"])["NodeNames"] == []
    plan = cluster.api.groups.plan("llm/workload/gang")
    assert plan is not None and plan.value == "a"
    assert plan.passed == {"uid-gang-1": "a1", "uid-gang-0": "a0"} and plan.holds == {"a1": 1, "a0": 1}
    # kube-scheduler binds the gang in a; before the watch shows it, the next gang tries a (where
    # kube-scheduler counts 4 of 8 GPUs left on each node): a0 holds one 4-GPU member, a1 none.
    answer = cluster.filter(member("next", 0), ["a0", "a1"])
    assert answer["NodeNames"] == [] and set(failures(answer)) == {"a0", "a1"}
    cluster.bind(member("gang", 1), "a1")
    cluster.bind(member("gang", 0), "a0")
    assert cluster.api.groups.plan("llm/workload/gang") is None  # placed whole: its room is the ledger's
    assert cluster.filter(member("next", 0), ["a0", "a1"])["NodeNames"] == []
    assert cluster.filter(member("next", 0), ["b0", "b1"])["NodeNames"] == ["b0"]


def test_a_gang_placed_but_not_whole_gives_up_a_members_place_when_it_fails_in_another_domain() -> None:
    """The other side of the rule above: with one of its two members placed (in a), the gang is not
    placed whole, so that member failed in b gives its place up (kube-scheduler binds no part of it)."""
    cluster = Cluster(
        {"a0": ("a", 8, 0), "a1": ("a", 8, 0), "b0": ("b", 8, 0), "b1": ("b", 0, 8)}, pod_groups=gang_of_two
    )
    assert cluster.filter(workload_member(0), ["a0", "a1"])["NodeNames"] == ["a0"]
    plan = cluster.api.groups.plan("llm/workload/gang")
    assert plan is not None and plan.passed == {"uid-job-0": "a0"}
    assert cluster.filter(workload_member(0), ["b0", "b1"])["NodeNames"] == []  # b holds one member
    plan = cluster.api.groups.plan("llm/workload/gang")
    assert plan is not None and plan.value == "a" and plan.passed == {}
