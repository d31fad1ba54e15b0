"""A group's domain chosen among every domain the extender knows, not only the ones a call offers
(issue 53 item 1): kube-scheduler-1.36's topology-aware gang scheduling offers the extender one
domain at a time, so a member fails (GroupWaitsForDomain) in a domain that strands more than
another that holds the group, whose room is held for it meanwhile; kube-scheduler going round its
domains without that one (its own filters: CPU, memory, affinity) makes the group give it up.

The fleet of the real control plane's failure: clique "a" of 4 nodes with exactly 4 idle GPUs each
(4 busy outside Kubernetes), clique "b" of 4 whole idle nodes of 8 GPUs. A 4 x 4 group belongs in
a (0 GPUs stranded), which leaves b whole for a 4 x 8 group."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.decide.group_domains import choose, level_index
from gpuextender.extender.model.pod_group import PodGroupSpec
from gpuextender.extender.observe.groups import GroupsCollector
from gpuextender.extender.scheduler.wire import ExtenderArgs
from gpuextender.extender.ui.explain_cli import render
from tests.extender.scheduler.test_groups import CLIQUE, Cluster, failures, lws_pod, single_pod

A = [f"a{i}" for i in range(4)]
B = [f"b{i}" for i in range(4)]
KEY = "llm/leaderworkerset/small"
WAITS = "GroupWaitsForDomain"


def fleet() -> Cluster:
    return Cluster({**{n: ("a", 4, 4) for n in A}, **{n: ("b", 8, 0) for n in B}})


def small(index: int) -> dict[str, Any]:
    return lws_pod("small", index, 4, gpus=4)


def test_a_member_offered_the_whole_clique_alone_waits_for_the_tight_one_whose_room_is_held() -> None:
    cluster = fleet()
    answer = cluster.filter(small(0), B)
    assert answer["NodeNames"] == []
    assert set(answer["FailedAndUnresolvableNodes"]) == set(B)  # (evicting there cannot help)
    assert all(WAITS in reason for reason in failures(answer).values())
    plan = cluster.api.groups.plan(KEY)
    assert plan is not None and plan.value == "a" and plan.holds == dict.fromkeys(A, 1)
    assert "kube-scheduler offered nvidia.com/gpu.clique=b alone" in plan.why
    # kube-scheduler tries a next: the member passes there; b stays whole.
    assert sorted(cluster.filter(small(0), A)["NodeNames"]) == A
    assert cluster.api.groups.holds_on("b0") == ()


def test_every_member_lands_in_the_tight_clique_and_the_big_group_keeps_the_whole_one() -> None:
    """Members offered b first each time (the order that failed on the real control plane)."""
    cluster = fleet()
    for i in range(4):
        assert cluster.filter(small(i), B)["NodeNames"] == []
        passed = cluster.filter(small(i), A)["NodeNames"]
        assert passed, i
        node = next(n for n in A if n in passed and n not in cluster.bound.values())
        cluster.bind(small(i), node)
    assert sorted(cluster.bound.values()) == A
    for i in range(4):
        big = lws_pod("big", i, 4, gpus=8)
        passed = cluster.filter(big, B)["NodeNames"]
        node = next(n for n in B if n in passed and n not in cluster.bound.values())
        cluster.bind(big, node)
    assert sorted(n for n in cluster.bound.values() if n.startswith("b")) == B


def test_a_call_offering_several_domains_chooses_among_them_as_before() -> None:
    """kube-scheduler offers every node it finds feasible at once (no topology-aware gang
    scheduling): a domain it leaves out is infeasible for the pod, so the call's best is taken."""
    cluster = fleet()
    assert sorted(cluster.filter(small(0), A + B)["NodeNames"]) == A
    cluster2 = fleet()
    answer = cluster2.filter(small(0), [*B, "a0"])  # a0 alone of a: a no longer holds the group
    assert sorted(answer["NodeNames"]) == B
    plan = cluster2.api.groups.plan(KEY)
    assert plan is not None and plan.value == "b"


def test_the_same_domain_offered_again_without_the_plans_means_the_plans_is_infeasible() -> None:
    """kube-scheduler's own filters (CPU, say) leave every node of a out: it offers b, then b again
    a cycle later. The second time the group gives a up, plans in b and is never sent to a again."""
    cluster = fleet()
    assert cluster.filter(small(0), B)["NodeNames"] == []
    assert cluster.api.groups.refused_for(KEY, "uid-llm-small-0") == {"nvidia.com/gpu.clique=b"}
    answer = cluster.filter(small(0), B)
    assert sorted(answer["NodeNames"]) == B
    plan = cluster.api.groups.plan(KEY)
    assert plan is not None and plan.value == "b"
    assert cluster.api.groups.avoided(KEY) == {"nvidia.com/gpu.clique=a"}
    # A member first offered b alone is no longer refused there for a.
    assert sorted(cluster.filter(small(1), B)["NodeNames"]) == B
    scraped = {m.name: m.samples[0].value for m in GroupsCollector(cluster.api.groups).collect()}
    assert scraped["gpu_extender_group_waits_for_domain"] == 1
    assert scraped["gpu_extender_group_domains_given_up"] == 1


def test_the_plans_domain_offered_in_between_starts_the_round_again() -> None:
    """b, then a (the plan's domain: offered), then b: one round each time, nothing given up."""
    cluster = fleet()
    assert cluster.filter(small(0), B)["NodeNames"] == []
    assert cluster.filter(small(0), A)["NodeNames"]
    assert cluster.api.groups.refused_for(KEY, "uid-llm-small-0") == frozenset()
    assert cluster.filter(small(0), B)["NodeNames"] == []
    assert cluster.api.groups.avoided(KEY) == frozenset()
    plan = cluster.api.groups.plan(KEY)
    assert plan is not None and plan.value == "a"


def test_another_members_refusal_does_not_count_for_this_one() -> None:
    cluster = fleet()
    assert cluster.filter(small(0), B)["NodeNames"] == []
    assert cluster.filter(small(1), B)["NodeNames"] == []  # its own first: refused, not given up
    assert cluster.api.groups.avoided(KEY) == frozenset()


def test_a_domain_as_good_as_the_offered_one_is_not_waited_for() -> None:
    """Two cliques alike: the one offered is taken (a name alone is not worth a round)."""
    cluster = Cluster({**{f"c{i}": ("c", 8, 0) for i in range(2)}, **{f"d{i}": ("d", 8, 0) for i in range(2)}})
    answer = cluster.filter(lws_pod("g", 0, 2), ["d0", "d1"])
    assert sorted(answer["NodeNames"]) == ["d0", "d1"]


def test_a_domain_that_cannot_hold_the_group_is_waited_out_for_one_that_can() -> None:
    """The call's one clique holds 1 of 2 members; another holds both: wait for it."""
    cluster = Cluster({"c0": ("c", 8, 0), "c1": ("c", 0, 8), "d0": ("d", 8, 0), "d1": ("d", 8, 0)})
    answer = cluster.filter(lws_pod("g", 0, 2), ["c0", "c1"])
    assert answer["NodeNames"] == [] and WAITS in failures(answer)["c0"]
    plan = cluster.api.groups.plan("llm/leaderworkerset/g")
    assert plan is not None and plan.value == "d"


def test_single_pods_and_a_member_with_bound_members_are_not_sent_elsewhere() -> None:
    cluster = fleet()
    assert sorted(cluster.filter(single_pod("s", 4), B)["NodeNames"]) == B
    cluster.bind(small(0), "b0")  # bound in b (another scheduler's choice): the group stays there
    assert sorted(cluster.filter(small(1), B)["NodeNames"]) == ["b0", "b1", "b2", "b3"]


def test_a_gang_of_the_workload_api_waits_for_its_domain_too() -> None:
    def gang(_source: str, _namespace: str, name: str) -> PodGroupSpec | None:
        return PodGroupSpec(4) if name == "gang" else None

    cluster = Cluster({**{n: ("a", 4, 4) for n in A}, **{n: ("b", 8, 0) for n in B}}, pod_groups=gang)
    member = single_pod("job-0", 4)
    member["spec"]["schedulingGroup"] = {"podGroupName": "gang"}
    assert cluster.filter(member, B)["NodeNames"] == []
    passed = cluster.filter(member, A)["NodeNames"]
    assert len(passed) == 1 and passed[0] in A  # a gang member: the one node its room is held on


def test_a_member_pinned_to_its_node_or_domain_is_never_sent_to_wait() -> None:
    """A nodeSelector on kubernetes.io/hostname (or the domain label) pins the pod: the one domain
    offered is its only one."""
    assert fleet().filter(small(0), B)["NodeNames"] == []  # unpinned: a strands less, it waits
    pod = small(0)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "b0"}
    assert fleet().filter(pod, B)["NodeNames"]


def test_a_pinned_member_of_a_group_planned_elsewhere_moves_the_plan_to_its_domain() -> None:
    """Member 0 (unpinned) planned the group in a; member 1 is pinned to b: it is not sent to wait
    for a but planned in b, the only domain it may use."""
    cluster = fleet()
    assert cluster.filter(small(0), A)["NodeNames"]
    pod = small(1)
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.clique": "b"}
    assert sorted(cluster.filter(pod, B)["NodeNames"]) == B
    plan = cluster.api.groups.plan(KEY)
    assert plan is not None and plan.value == "b"


# -- single pods keep whole domains whole -------------------------------------------------------------


def open_and_whole() -> Cluster:
    """Clique o broken open (o1 has 2 GPUs busy), clique w whole (2 idle nodes of 8)."""
    return Cluster(
        {"o0": ("o", 8, 0), "o1": ("o", 6, 2), "w0": ("w", 8, 0), "w1": ("w", 8, 0)},
        shortlist=1,
        compact_priorities=False,
    )


@pytest.mark.parametrize("strategy", ["spread", "binpack"])
def test_a_single_pod_ranks_a_broken_open_cliques_nodes_above_a_whole_ones(strategy: str) -> None:
    cluster = open_and_whole()
    pod = single_pod("s", 1)
    pod["metadata"]["annotations"] = {"gpu-extender.io/node-strategy": strategy}
    scores = dict((s["Host"], s["Score"]) for s in cluster.api.prioritize(ExtenderArgs(pod, cluster.nodes, None)))
    assert min(scores["o0"], scores["o1"]) > max(scores["w0"], scores["w1"]), scores
    # spread still spreads inside the open clique (o0, the emptier, first); binpack packs (o1).
    assert (scores["o0"] > scores["o1"]) == (strategy == "spread")
    # The shortlist (1 here) keeps the open clique's best.
    assert cluster.filter(pod)["NodeNames"] == (["o0"] if strategy == "spread" else ["o1"])


def test_single_pods_arriving_with_a_group_leave_the_whole_clique_for_it() -> None:
    cluster = open_and_whole()
    for i in range(6):
        assert cluster.schedule(single_pod(f"s{i}", 1)) in ("o0", "o1"), i
    assert cluster.filter(lws_pod("pair", 0, 2))["NodeNames"]  # (the shortlist of 1 names one of them)
    plan = cluster.api.groups.plan("llm/leaderworkerset/pair")
    assert plan is not None and plan.holds == {"w0": 1, "w1": 1}


def test_with_only_whole_cliques_a_single_pod_is_ranked_as_before() -> None:
    cluster = Cluster({"w0": ("w", 8, 0), "v0": ("v", 8, 0), "x": (None, 6, 2)}, compact_priorities=False)
    pod = single_pod("s", 1)
    scores = dict((s["Host"], s["Score"]) for s in cluster.api.prioritize(ExtenderArgs(pod, ["w0", "v0"], None)))
    assert scores == {"w0": 10, "v0": 10}
    # A node without the label is no whole domain: it ranks with the open ones.
    scores = dict((s["Host"], s["Score"]) for s in cluster.api.prioritize(ExtenderArgs(pod, ["w0", "x"], None)))
    assert scores["x"] > scores["w0"]


def test_the_shortlist_fills_up_with_whole_domains_nodes_after_the_open_ones() -> None:
    cluster = Cluster(
        {"o0": ("o", 8, 0), "o1": ("o", 6, 2), "w0": ("w", 8, 0), "w1": ("w", 8, 0)},
        shortlist=3,
        compact_priorities=False,
    )
    answer = cluster.filter(single_pod("s", 1))["NodeNames"]
    assert len(answer) == 3 and {"o0", "o1"} <= set(answer)


def test_a_groups_member_is_not_ranked_by_whole_domains() -> None:
    """A group of its own label (LWS exclusive-topology "zone", carried by no node: its domain is
    any nodes) spans cliques o and w: its members rank by the node strategy alone (spread: the
    whole clique's emptier nodes), the group's domain being its own rule."""
    cluster = Cluster({"o0": ("o", 6, 2), "w0": ("w", 8, 0)}, shortlist=1)
    member = lws_pod("z", 0, 2, gpus=1, **{"leaderworkerset.sigs.k8s.io/exclusive-topology": "zone"})
    assert cluster.filter(member)["NodeNames"] == ["w0"]
    assert cluster.filter(single_pod("s", 1))["NodeNames"] == ["o0"]  # (a single pod: the open clique)


def test_explain_names_the_whole_domains_nodes_ranked_last() -> None:
    cluster = open_and_whole()
    answer = cluster.api.explain(ExtenderArgs(single_pod("s", 1), cluster.nodes, None))
    assert answer["inWholeDomains"] == ["w0", "w1"]
    parts = {n["node"]: n["scoreParts"]["inWholeDomain"] for n in answer["nodes"]}
    assert parts == {"o0": False, "o1": False, "w0": True, "w1": True}
    assert "ranked last, their domain whole (every GPU idle) and kept for multi-pod groups: w0, w1" in render(answer)
    member = cluster.api.explain(ExtenderArgs(lws_pod("g", 0, 2), cluster.nodes, None))
    assert member["inWholeDomains"] == [] and member["nodes"][0]["scoreParts"]["inWholeDomain"] is None
    many = Cluster({**{f"w{i}": ("w", 8, 0) for i in range(7)}, "o0": ("o", 6, 2)})
    text = render(many.api.explain(ExtenderArgs(single_pod("s", 1), many.nodes, None)))
    assert "kept for multi-pod groups: w0, w1, w2, w3, w4 and 2 more" in text


# -- the least concentrated of equally tight domains; members where their room is held -------------


def test_of_two_domains_a_group_fills_exactly_the_one_whose_idle_gpus_are_spread_thin() -> None:
    """A 4 x 4 group strands nothing in w (2 nodes of 8 idle) nor in t (4 nodes of 4): it takes t,
    the one that cannot hold 8-GPU members, so that a 2 x 8 group still has w (fewer nodes used to
    decide it, and w came first)."""
    cluster = Cluster({"w0": ("w", 8, 0), "w1": ("w", 8, 0), **{f"t{i}": ("t", 4, 4) for i in range(4)}})
    assert sorted(cluster.filter(lws_pod("g", 0, 4, gpus=4))["NodeNames"]) == [f"t{i}" for i in range(4)]
    assert sorted(cluster.filter(lws_pod("h", 0, 2))["NodeNames"]) == ["w0", "w1"]
    # The same choice node by node (group_domains.choose: the road of a pod the index does not judge).
    idle = {"w0": 8, "w1": 8, **{f"t{i}": 4 for i in range(4)}}
    index = level_index(CLIQUE, cluster.labels)
    choice = choose(4, 4, idle, (CLIQUE,), lambda _level: index, list(idle))
    assert choice.chosen is not None and choice.chosen.domain.name == f"{CLIQUE}=t"
    assert (choice.chosen.square, choice.rooms[1].square) == (4 * 16, 2 * 64)


def test_a_members_nodes_holding_its_groups_room_rank_first() -> None:
    """Clique c: c0 with 6 idle GPUs, c1 and c2 with 8. A 3 x 4 group's room is held on the tightest
    nodes (c0: 1, then c1: 2), so c2 stays whole; kube-scheduler binds a member (not a gang's) on any
    passing node of the domain, so prioritize ranks the held nodes first, spread or not."""
    cluster = Cluster({"c0": ("c", 6, 2), "c1": ("c", 8, 0), "c2": ("c", 8, 0)}, compact_priorities=False)
    pod = lws_pod("g", 0, 3, gpus=4)
    assert sorted(cluster.filter(pod)["NodeNames"]) == ["c0", "c1", "c2"]
    plan = cluster.api.groups.plan("llm/leaderworkerset/g")
    assert plan is not None and plan.holds == {"c0": 1, "c1": 2}
    scores = {s["Host"]: s["Score"] for s in cluster.api.prioritize(ExtenderArgs(pod, ["c0", "c1", "c2"], None))}
    assert min(scores["c0"], scores["c1"]) > scores["c2"] > 0


# -- room held only for members that exist as pods (issue 53 item 5) ---------------------------------


def test_a_groups_room_is_released_when_its_members_do_not_all_exist_a_grace_after() -> None:
    """A group of 4 of which one pod exists: its room is held at its filter; --group-members-grace
    (here 30 s) later, at any call, it is released (explain says why) and that pod waits,
    GroupAwaitsMembers, until another member comes."""
    existing = {"llm/leaderworkerset/small": 1}
    cluster = Cluster(
        {**{n: ("a", 4, 4) for n in A}, **{n: ("b", 8, 0) for n in B}},
        pending=existing.get,
        group_members_grace_s=30.0,
    )
    assert cluster.filter(small(0), A)["NodeNames"]
    cluster.clock.now += 30.0
    for node in A:  # (the agents report on)
        cluster.report(node, 4, 4)
    cluster.filter(single_pod("other", 1))  # (any call looks)
    assert cluster.api.groups.plan(KEY) is None and cluster.api.groups.holds_on("a0") == ()
    answer = cluster.filter(small(0), A)
    assert answer["NodeNames"] == [] and "GroupAwaitsMembers" in failures(answer)["a0"]
    existing[KEY] = 4  # the other three are created
    assert cluster.filter(small(1), A)["NodeNames"]
    assert cluster.api.groups.plan(KEY) is not None


def test_a_namespace_naming_1000_groups_that_never_complete_holds_at_most_its_cap() -> None:
    """Issue 53's done-when: a namespace creates one pod each of 1,000 groups of 4 (the others never
    come); it holds at most --group-holds-per-namespace (100) of them, the other 900 wait
    (GroupNamespaceFull), and another namespace's 4 x 8 group is placed as before."""
    nodes: dict[str, tuple[str | None, int, int]] = {f"c{c}-n{i}": (f"c{c}", 8, 0) for c in range(30) for i in range(4)}
    cluster = Cluster(nodes)
    waited = 0
    for g in range(1000):
        answer = cluster.filter(lws_pod(f"spam-{g}", 0, 4, gpus=1, namespace="spam"))
        waited += not answer["NodeNames"] and any("GroupNamespaceFull" in r for r in failures(answer).values())
    book = cluster.api.groups
    assert book.held_in("spam") == 100 and waited == 900 and book.counts.refused_namespace == 900
    assert len(cluster.filter(lws_pod("big", 0, 4, gpus=8, namespace="llm"))["NodeNames"]) == 4
    plan = book.plan("llm/leaderworkerset/big")
    assert plan is not None and sum(plan.holds.values()) == 4
