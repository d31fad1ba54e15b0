"""Rules of a group member's filter (decide/group_member.py) that a one-line change would break
unseen (issue 52 item 0): passes on stale data hold no room, and bound members split across
domains pin none of them."""

from __future__ import annotations

from tests.extender.scheduler.test_groups import Cluster, failures, lws_pod

KEY = "llm/leaderworkerset/g"


def test_a_planned_clique_whose_agents_went_silent_gets_no_more_members() -> None:
    """Clique a was planned at member 0; then a's agents stop reporting (past --stale-after, 10 s)
    while b's go on. a's nodes would still pass member 1 on assumed data, but that is no room: the
    group plans again in b, and a's nodes fail NoFreshGPUData."""
    cluster = Cluster({"a0": ("a", 8, 0), "a1": ("a", 8, 0), "b0": ("b", 8, 0), "b1": ("b", 8, 0), "b2": ("b", 8, 0)})
    assert sorted(cluster.filter(lws_pod("g", 0, 2))["NodeNames"]) == ["a0", "a1"]
    cluster.clock.now += 11
    for node in ("b0", "b1", "b2"):
        cluster.report(node, 8, 0)
    answer = cluster.filter(lws_pod("g", 1, 2))
    assert sorted(answer["NodeNames"]) == ["b0", "b1", "b2"]
    assert "NoFreshGPUData" in failures(answer)["a0"] and "NoFreshGPUData" in failures(answer)["a1"]
    plan = cluster.api.groups.plan(KEY)
    assert plan is not None and plan.value == "b" and cluster.api.groups.holds_on("a0") == ()


def test_bound_members_split_across_cliques_pass_no_member_to_either() -> None:
    """Members 0 and 1 were bound in cliques a and b (two replicas chose apart): no one clique holds
    every bound member, so member 2 waits everywhere, though a and b each have room for the 2
    members left; it is never passed to a second clique to split the group further."""
    nodes: dict[str, tuple[str | None, int, int]] = {f"{c}{i}": (c, 8, 0) for c in ("a", "b") for i in range(3)}
    cluster = Cluster(nodes)
    cluster.bind(lws_pod("g", 0, 4), "a0")
    cluster.bind(lws_pod("g", 1, 4), "b0")
    answer = cluster.filter(lws_pod("g", 2, 4))
    assert answer["NodeNames"] == []
    assert all("GroupDoesNotFit" in failures(answer)[n] for n in ("a1", "a2", "b1", "b2"))
    assert cluster.api.groups.plan(KEY) is None


def test_bound_members_split_across_nodes_without_the_label_pass_no_member_to_either() -> None:
    """The same for domains of one (a0 carries the clique label, so x and y are a domain each, not
    "any nodes"): members 0 and 1 bound on unlabelled x and y, each with room left for the 2
    members still to place: member 2 waits on both."""
    cluster = Cluster({"a0": ("a", 8, 0), "x": (None, 24, 0), "y": (None, 24, 0)})
    cluster.bind(lws_pod("g", 0, 4), "x")
    cluster.bind(lws_pod("g", 1, 4), "y")
    answer = cluster.filter(lws_pod("g", 2, 4))
    assert answer["NodeNames"] == []
    assert all("GroupDoesNotFit" in failures(answer)[n] for n in ("x", "y"))
