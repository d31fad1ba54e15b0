"""Two-level placement (issue 53 item 2): with `--group-topology-levels` of NVLink cliques inside
network blocks, a group that one clique holds takes one; a larger one takes one block, on the
fewest of its cliques that hold it, split between them as evenly as their room allows (16 + 16,
not 14 + 18); a group that names the block as its own label is placed the same way."""

from __future__ import annotations

from typing import Any

from gpuextender.extender.decide.group_domains import Domain, level_index, place
from gpuextender.extender.model.pod_group import PodGroupSpec
from tests.extender.scheduler.test_groups import CLIQUE, Cluster, lws_pod

BLOCK = "cloud.google.com/gce-topology-block"
KEY = "llm/leaderworkerset/g"


def two_level(**settings: Any) -> Cluster:
    """Block x: cliques x1 and x2 of 4 idle nodes of 8 GPUs; block y: clique y1 of 4 such nodes."""
    nodes: dict[str, tuple[str | None, int, int]] = {}
    for clique in ("x1", "x2", "y1"):
        for i in range(4):
            nodes[f"{clique}-{i}"] = (clique, 8, 0)
    cluster = Cluster(nodes, group_levels=(CLIQUE, BLOCK), **settings)
    for node in nodes:
        cluster.labels[node][BLOCK] = node[0]
    return cluster


def cliques_of(cluster: Cluster, holds: dict[str, int]) -> dict[str, int]:
    found: dict[str, int] = {}
    for node, members in holds.items():
        clique = cluster.clique_of(node) or ""
        found[clique] = found.get(clique, 0) + members
    return found


def test_a_group_one_clique_holds_takes_a_clique() -> None:
    cluster = two_level()
    assert cluster.filter(lws_pod("g", 0, 4))["NodeNames"]
    plan = cluster.api.groups.plan(KEY)
    assert plan is not None and plan.level == CLIQUE and len(cliques_of(cluster, plan.holds)) == 1


def test_a_group_larger_than_any_clique_takes_one_block_split_evenly() -> None:
    """6 members of 8 GPUs: no clique holds them (4 nodes each); block x does, 3 + 3 (tightest
    first would have been 4 + 2)."""
    cluster = two_level()
    assert sorted(cluster.filter(lws_pod("g", 0, 6))["NodeNames"]) == [f"x{c}-{i}" for c in (1, 2) for i in range(4)]
    plan = cluster.api.groups.plan(KEY)
    assert plan is not None and (plan.level, plan.value) == (BLOCK, "x")
    assert cliques_of(cluster, plan.holds) == {"x1": 3, "x2": 3}


def test_an_odd_count_splits_within_one_and_later_members_keep_the_split() -> None:
    cluster = two_level()
    assert cluster.filter(lws_pod("g", 0, 7))["NodeNames"]
    plan = cluster.api.groups.plan(KEY)
    assert plan is not None and sorted(cliques_of(cluster, plan.holds).values()) == [3, 4]
    cluster.bind(lws_pod("g", 0, 7), "x2-0")
    assert cluster.filter(lws_pod("g", 1, 7))["NodeNames"]  # planned again in its block: 6 left
    plan = cluster.api.groups.plan(KEY)
    # x1's 4 nodes and x2's 3 left: 3 + 3 (tightest first, by name, would be 4 + 2)
    assert plan is not None and cliques_of(cluster, plan.holds) == {"x1": 3, "x2": 3}


def test_a_group_that_names_the_block_may_take_one_clique_inside_it_or_the_block_split() -> None:
    def pod_group(_source: str, _namespace: str, name: str) -> PodGroupSpec | None:
        return {"small": PodGroupSpec(4, BLOCK), "big": PodGroupSpec(6, BLOCK)}.get(name)

    nodes: dict[str, tuple[str | None, int, int]] = {
        f"{c}-{i}": (c, 8, 0) for c in ("x1", "x2", "y1") for i in range(4)
    }
    cluster = Cluster(nodes, pod_group, group_levels=(CLIQUE, BLOCK))
    for node in nodes:
        cluster.labels[node][BLOCK] = node[0]
    for name, size in (("big", 6), ("small", 4)):
        pod = lws_pod(name, 0, size)
        pod["metadata"]["labels"] = {}
        pod["spec"]["schedulingGroup"] = {"podGroupName": name}
        assert cluster.filter(pod)["NodeNames"], name
    small = cluster.api.groups.plan("llm/workload/small")
    big = cluster.api.groups.plan("llm/workload/big")
    assert small is not None and small.level == CLIQUE
    assert big is not None and big.level == BLOCK and sorted(cliques_of(cluster, big.holds).values()) == [3, 3]


def test_place_takes_the_fewest_sub_domains_and_splits_as_evenly_as_their_room_allows() -> None:
    labels = {f"{c}-{i}": {"c": c} for c, n in (("a", 3), ("b", 1), ("d", 2)) for i in range(n)}
    labels["lone"] = {}
    within = level_index("c", labels)
    idle = dict.fromkeys(labels, 8)
    block = Domain("block", "x", tuple(labels))

    def split(members: int) -> dict[str, int]:
        out: dict[str, int] = {}
        for node, count in place(block, idle, members, 8, within).items():
            key = labels[node].get("c", node)
            out[key] = out.get(key, 0) + count
        return out

    assert split(3) == {"a": 3}  # one clique holds them
    assert split(4) == {"a": 2, "d": 2}  # the two roomiest, 2 + 2
    assert split(5) == {"a": 3, "d": 2}  # as even as d's room of 2 allows
    assert split(6) == {"a": 3, "d": 2, "lone": 1}  # a node without the label: a part of its own (its
    # name sorts before b's: equal rooms go by name)
    assert split(7) == {"a": 3, "d": 2, "b": 1, "lone": 1}
    assert split(9) == {"a": 3, "d": 2, "b": 1, "lone": 1}  # (never more than the rooms)


def test_a_preferred_topology_places_a_group_no_domain_holds_whole_across_domains() -> None:
    """--group-topology-policy preferred: 3 x 8 GPUs, cliques of 2 idle nodes: no clique holds the
    group, so it is held whole across them (2 + 1, the fewest cliques); required (the default) makes
    it wait; a group that names its own key stays required."""
    nodes: dict[str, tuple[str | None, int, int]] = {f"{c}{i}": (c, 8, 0) for c in ("a", "b") for i in range(2)}
    waits = Cluster(nodes).filter(lws_pod("g", 0, 3))
    assert waits["NodeNames"] == [] and "GroupDoesNotFit" in waits["FailedNodes"]["a0"]
    cluster = Cluster(nodes, group_preferred=True)
    assert sorted(cluster.filter(lws_pod("g", 0, 3))["NodeNames"]) == ["a0", "a1", "b0", "b1"]
    plan = cluster.api.groups.plan(KEY)
    assert plan is not None and plan.domain_name == "any nodes"
    assert sorted(cliques_of(cluster, plan.holds).values()) == [1, 2]
    own = lws_pod("own", 0, 3, **{"leaderworkerset.sigs.k8s.io/exclusive-topology": CLIQUE})
    assert Cluster(nodes, group_preferred=True).filter(own)["NodeNames"] == []
