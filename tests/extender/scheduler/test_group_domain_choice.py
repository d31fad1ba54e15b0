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

from gpuextender.extender.model.pod_group import PodGroupSpec
from gpuextender.extender.observe.groups import GroupsCollector
from tests.extender.scheduler.test_groups import Cluster, failures, lws_pod, single_pod

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
