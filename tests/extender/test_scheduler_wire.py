"""kube-scheduler's extender JSON: parsing both modes, and answers in Go's field casing."""

from __future__ import annotations

import json

import pytest

from extender import reasons
from extender.bad_request import BadRequest
from extender.decision import FilterOutcome
from extender.scheduler_wire import filter_result, parse_extender_args, prioritize_result
from tests.harness import fixture_bytes

GPU = ("nvidia.com/gpu",)


def test_names_mode_fixture() -> None:
    args = parse_extender_args(fixture_bytes("filter-request-nodecache-true.json"))
    assert args.nodes is None
    assert args.node_names == ["gpu-node-2", "gpu-node-3", "gpu-node-1"]
    assert args.pod["metadata"]["name"] == "gpu-b1"
    assert args.candidate_names() == ["gpu-node-2", "gpu-node-3", "gpu-node-1"]
    inventory = {"gpu-node-2": 8}
    assert args.allocatable(GPU, inventory) is inventory


def test_nodes_mode_fixture_reads_allocatable_from_the_node_objects() -> None:
    args = parse_extender_args(fixture_bytes("filter-request-nodecache-false.json"))
    assert args.node_names is None and args.nodes_metadata == {}
    assert args.candidate_names() == ["gpu-node-1", "gpu-node-3", "gpu-node-2"]
    assert args.allocatable(GPU, {"gpu-node-1": 99}) == {"gpu-node-1": 8, "gpu-node-2": 8, "gpu-node-3": 8}
    assert args.allocatable(("amd.com/gpu",), {}) == {"gpu-node-1": 0, "gpu-node-2": 0, "gpu-node-3": 0}


def test_keys_are_case_insensitive() -> None:
    args = parse_extender_args(b'{"pod": {}, "nodenames": ["a"], "NODES": null}')
    assert args.node_names == ["a"] and args.nodes is None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{", "malformed_json"),
        (b"null", "wrong_type"),
        (b'{"NodeNames": []}', "missing_pod"),
        (b'{"Pod": [], "NodeNames": []}', "wrong_type"),
        (b'{"Pod": {}}', "missing_nodes"),
        (b'{"Pod": {}, "NodeNames": [""]}', "wrong_type"),
        (b'{"Pod": {}, "Nodes": []}', "wrong_type"),
        (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": 3}}]}}', "wrong_type"),
        (b'{"Pod": {}, "NodeNames": [], "nodeNames": []}', "duplicate_key"),
    ],
)
def test_refused_bodies(body: bytes, code: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_extender_args(body)
    assert info.value.code == code


def test_bad_allocatable_quantity_is_a_bad_request() -> None:
    args = parse_extender_args(json.dumps({"Pod": {}, "Nodes": {"items": [
        {"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "many"}}}]}}).encode())  # fmt: skip
    with pytest.raises(BadRequest) as info:
        args.allocatable(GPU, {})
    assert info.value.code == "bad_quantity"


def outcome() -> FilterOutcome:
    return FilterOutcome(passed=["b"], failed={"a": reasons.INSUFFICIENT_IDLE_GPUS, "c": reasons.NVML_UNAVAILABLE})


def test_filter_result_names_mode() -> None:
    args = parse_extender_args(b'{"Pod": {}, "NodeNames": ["a", "b", "c"], "Nodes": null}')
    assert filter_result(args, outcome()) == {
        "NodeNames": ["b"],
        "FailedNodes": {"a": "gpu-extender: too few idle GPUs (InsufficientIdleGPUs)"},
        "FailedAndUnresolvableNodes": {"c": "gpu-extender: node agent cannot read NVML (NvmlUnavailable)"},
        "Error": "",
    }


def test_filter_result_nodes_mode_echoes_node_objects() -> None:
    items = [{"metadata": {"name": n}, "status": {"x": n}} for n in "abc"]
    args = parse_extender_args(json.dumps({"Pod": {}, "Nodes": {"metadata": {"resourceVersion": "7"},
                                                                "items": items}, "NodeNames": None}).encode())  # fmt: skip
    result = filter_result(args, outcome())
    assert "NodeNames" not in result  # a non-null NodeNames would be read instead of Nodes
    assert result["Nodes"] == {"metadata": {"resourceVersion": "7"}, "items": [items[1]]}


def test_prioritize_full_and_compact() -> None:
    ranked = [("a", 7), ("b", 3), ("c", 10), ("d", 3)]
    assert prioritize_result(ranked, compact=False) == [
        {"Host": "a", "Score": 7}, {"Host": "b", "Score": 3}, {"Host": "c", "Score": 10}, {"Host": "d", "Score": 3}
    ]  # fmt: skip
    # Same differences between nodes (what kube-scheduler compares), zeros left out.
    assert prioritize_result(ranked, compact=True) == [{"Host": "a", "Score": 4}, {"Host": "c", "Score": 7}]
    assert prioritize_result([("a", 5), ("b", 5)], compact=True) == []
    assert prioritize_result([], compact=True) == []
