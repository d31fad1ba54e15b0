"""Disaggregated serving as one unit (issue 53 item 3): OME's engine and decoder of one
InferenceService (pods labelled `ome.io/inferenceservice` and `component: engine|decoder`), each a
LeaderWorkerSet group, land each whole in a clique, both in one block (the level above the clique
in `--group-topology-levels`): once one role is planned or bound, the other chooses only among that
block's nodes (`OtherRoleInAnotherBlock` elsewhere); with one role alone, it is a plain group."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from gpuextender.extender.scheduler.wire import ExtenderArgs
from gpuextender.extender.ui.explain_cli import render
from gpuextender.extender.ui.fleet_page import build_fleet
from tests.extender.scheduler.test_groups import CLIQUE, Cluster, failures, lws_pod

BLOCK = "cloud.google.com/gce-topology-block"
ELSEWHERE = "OtherRoleInAnotherBlock"


def fleet(**settings: Any) -> Cluster:
    """Block x: clique x1 (2 idle nodes of 8 GPUs) and x2 (2 nodes of 4 idle: a 2 x 4 group fills it
    exactly); block y: clique y1 (2 idle nodes) and y2 (2 nodes of 6 idle)."""
    nodes = {
        "x1-0": ("x1", 8, 0),
        "x1-1": ("x1", 8, 0),
        "x2-0": ("x2", 4, 4),
        "x2-1": ("x2", 4, 4),
        "y1-0": ("y1", 8, 0),
        "y1-1": ("y1", 8, 0),
        "y2-0": ("y2", 6, 2),
        "y2-1": ("y2", 6, 2),
    }
    cluster = Cluster(nodes, group_levels=(CLIQUE, BLOCK), **settings)
    for node in nodes:
        cluster.labels[node][BLOCK] = node[0]
    return cluster


def role(component: str, index: int, gpus: int, isvc: str = "llama") -> dict[str, Any]:
    pod = lws_pod(f"{isvc}-{component}", index, 2, gpus)
    pod["metadata"]["labels"] |= {"ome.io/inferenceservice": isvc, "component": component}
    return pod


def block_of(cluster: Cluster, key: str) -> set[str]:
    plan = cluster.api.groups.plan(key)
    assert plan is not None, key
    return {node[0] for node in plan.holds}


def engine_in_y() -> Cluster:
    cluster = fleet()
    cluster.bind(role("engine", 0, 8), "y1-0")  # (bound where another replica, or an operator, put it)
    assert cluster.filter(role("engine", 1, 8))["NodeNames"] == ["y1-1"]
    return cluster


def test_the_second_role_lands_in_the_block_of_the_first() -> None:
    """The decoder (2 x 4) alone would fill x2 exactly; with its engine in y it takes y2."""
    assert sorted(fleet().filter(role("decoder", 0, 4))["NodeNames"]) == ["x2-0", "x2-1"]  # (alone)
    cluster = engine_in_y()
    answer = cluster.filter(role("decoder", 0, 4))
    assert sorted(answer["NodeNames"]) == ["y2-0", "y2-1"]
    assert all(ELSEWHERE in failures(answer)[n] for n in ("x1-0", "x1-1", "x2-0", "x2-1"))
    assert set(answer["FailedAndUnresolvableNodes"]) >= {"x1-0", "x2-1"}  # (evicting there cannot help)
    assert block_of(cluster, "llm/leaderworkerset/llama-decoder") == {"y"}


def test_a_role_that_its_others_block_cannot_hold_waits_whole_with_the_reason() -> None:
    """A 2 x 8 decoder: y holds one member (y2 has 6 idle GPUs per node), x1 would hold both: it
    waits rather than leave its engine's block."""
    cluster = engine_in_y()
    answer = cluster.filter(role("decoder", 0, 8))
    assert answer["NodeNames"] == []
    reasons = failures(answer)
    assert ELSEWHERE in reasons["x1-0"] and "InsufficientIdleGPUs" in reasons["y2-0"]
    explained = cluster.api.explain(ExtenderArgs(role("decoder", 0, 8), cluster.nodes, None))
    composite = explained["group"]["composite"]
    assert composite == {"inferenceService": "llm/llama", "role": "decoder", "otherRoleIn": f"{BLOCK}=y"}
    assert f"decoder of InferenceService llm/llama: placed in the block of its other role, {BLOCK}=y" in render(
        explained
    )


def test_a_role_alone_and_another_inference_service_are_plain_groups() -> None:
    cluster = fleet()
    assert cluster.filter(role("engine", 0, 8))["NodeNames"]  # llama's engine in x
    other = cluster.filter(role("decoder", 0, 8, isvc="mistral"))  # mistral's decoder: no engine yet
    assert other["NodeNames"] and block_of(cluster, "llm/leaderworkerset/mistral-decoder") == {"y"}
    explained = cluster.api.explain(ExtenderArgs(role("decoder", 0, 8, isvc="mistral"), cluster.nodes, None))
    assert explained["group"]["composite"]["otherRoleIn"] is None
    assert "its other role is not placed yet" in render(explained)
    plain = cluster.api.explain(ExtenderArgs(lws_pod("g", 0, 2), cluster.nodes, None))
    assert plain["group"]["composite"] is None


def test_with_one_level_only_the_roles_are_plain_groups() -> None:
    cluster = Cluster({"a0": ("a", 8, 0), "a1": ("a", 8, 0), "b0": ("b", 8, 0), "b1": ("b", 8, 0)})
    assert sorted(cluster.filter(role("engine", 0, 8))["NodeNames"]) == ["a0", "a1"]
    assert sorted(cluster.filter(role("decoder", 0, 8))["NodeNames"]) == ["b0", "b1"]


def test_a_component_label_without_an_inference_service_is_no_composite() -> None:
    """`component: engine` is a common label: without `ome.io/inferenceservice` the pods are two
    plain groups (the decoder fills x2, away from the engine's y)."""
    cluster = fleet()
    engine = lws_pod("e", 0, 2, 8)
    engine["metadata"]["labels"]["component"] = "engine"
    assert sorted(cluster.filter(engine, ["y1-0", "y1-1"])["NodeNames"]) == ["y1-0", "y1-1"]  # held in y
    decoder = lws_pod("d", 0, 2, 4)
    decoder["metadata"]["labels"]["component"] = "decoder"
    assert sorted(cluster.filter(decoder)["NodeNames"]) == ["x2-0", "x2-1"]


def test_the_fleet_page_names_each_role_of_the_inference_service_beside_its_hold() -> None:
    cluster = engine_in_y()
    assert cluster.filter(role("decoder", 0, 4))["NodeNames"]
    doc = orjson.loads(asyncio.run(build_fleet(cluster.api)))
    held = {d["domain"]: d["groupsHeld"] for d in doc["domains"]["domains"]}
    assert held["y2"] == [{"group": "llm/leaderworkerset/llama-decoder, decoder of llm/llama", "membersHeld": 2}]
    assert held["y1"] == [{"group": "llm/leaderworkerset/llama-engine, engine of llm/llama", "membersHeld": 1}]


def rbg(role_name: str, index: int, gpus: int, name: str = "ds") -> dict[str, Any]:
    """A pod of a RoleBasedGroup's role (sgl-project/rbg's labels), its role a LeaderWorkerSet group."""
    pod = lws_pod(f"{name}-{role_name}", index, 2, gpus)
    pod["metadata"]["labels"] |= {
        "rolebasedgroup.workloads.x-k8s.io/name": name,
        "rolebasedgroup.workloads.x-k8s.io/role": role_name,
    }
    return pod


def test_the_roles_of_a_role_based_group_are_one_unit_too() -> None:
    """rbg's prefill and decode roles: with prefill in y, decode takes y2 (alone it fills x2)."""
    cluster = fleet()
    cluster.bind(rbg("prefill", 0, 8), "y1-0")
    assert cluster.filter(rbg("prefill", 1, 8))["NodeNames"] == ["y1-1"]
    assert sorted(cluster.filter(rbg("decode", 0, 4))["NodeNames"]) == ["y2-0", "y2-1"]
    explained = cluster.api.explain(ExtenderArgs(rbg("decode", 0, 4), cluster.nodes, None))
    assert explained["group"]["composite"] == {
        "inferenceService": "llm/rbg/ds",
        "role": "decode",
        "otherRoleIn": f"{BLOCK}=y",
    }
    other = rbg("decode", 0, 4, name="other")  # another RoleBasedGroup: a plain group
    assert sorted(fleet().filter(other)["NodeNames"]) == ["x2-0", "x2-1"]
    fresh = fleet()
    fresh.bind(rbg("prefill", 0, 8), "y1-0")
    assert fresh.filter(rbg("prefill", 1, 8))["NodeNames"] == ["y1-1"]
    bad = rbg("decode", 0, 4)
    bad["metadata"]["labels"]["rolebasedgroup.workloads.x-k8s.io/role"] = ""  # (no role: no unit)
    assert sorted(fresh.filter(bad)["NodeNames"]) == ["x2-0", "x2-1"]
