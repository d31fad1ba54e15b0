"""kube-scheduler's extender JSON: parsing both modes, and answers in Go's field casing."""

from __future__ import annotations

import json

import orjson
import pytest

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.filter_outcome import FilterOutcome
from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.scheduler.wire import filter_result, parse_extender_args, prioritize_result
from gpuextender.extender.settings import MAX_CANDIDATES
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
        (b'{"Pod": {}, "NodeNames": ["a", ""]}', "wrong_type"),
        (b'{"Pod": {}, "NodeNames": ["a", 1]}', "wrong_type"),
        (b'{"Pod": {}, "NodeNames": "a"}', "wrong_type"),
        (b'{"Pod": {}, "Nodes": []}', "wrong_type"),
        (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": 3}}]}}', "wrong_type"),
        (b'{"Pod": {}, "NodeNames": [], "nodeNames": []}', "duplicate_key"),
    ],
)
def test_refused_bodies(body: bytes, code: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_extender_args(body)
    assert info.value.code == code


def test_bad_allocatable_quantity_is_a_bad_request() -> None:
    args = parse_extender_args(
        json.dumps(
            {
                "Pod": {},
                "Nodes": {
                    "items": [{"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "many"}}}]
                },
            }
        ).encode()
    )
    with pytest.raises(InvalidInput) as info:
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


def test_filter_result_keeps_the_outcomes_order_in_both_maps() -> None:
    args = parse_extender_args(b'{"Pod": {}, "NodeNames": ["a", "b", "c", "d", "e"]}')
    mixed = FilterOutcome(
        passed=["b"],
        failed={
            "e": reasons.INSUFFICIENT_IDLE_GPUS,
            "d": reasons.NVML_UNAVAILABLE,
            "a": reasons.STALE_GPU_DATA,
            "c": reasons.NVML_UNAVAILABLE,
        },
    )
    answer = filter_result(args, mixed)
    assert list(answer["FailedNodes"].items()) == [
        ("e", reasons.INSUFFICIENT_IDLE_GPUS.message),
        ("a", reasons.STALE_GPU_DATA.message),
    ]
    assert list(answer["FailedAndUnresolvableNodes"]) == ["d", "c"]
    assert set(answer["FailedAndUnresolvableNodes"].values()) == {reasons.NVML_UNAVAILABLE.message}


@pytest.mark.parametrize("hard", [2, 3])
def test_filter_result_when_half_or_most_failures_are_unresolvable(hard: int) -> None:
    """Half of them: the unresolvable ones are moved out; more than half: the soft ones are. Same maps,
    in the outcome's order."""
    names = ["e", "d", "a", "c"]
    failed = {n: reasons.NVML_UNAVAILABLE if i < hard else reasons.STALE_GPU_DATA for i, n in enumerate(names)}
    answer = filter_result(
        parse_extender_args(b'{"Pod": {}, "NodeNames": ["e", "d", "a", "c"]}'), FilterOutcome([], failed)
    )
    assert list(answer["FailedAndUnresolvableNodes"]) == names[:hard]
    assert list(answer["FailedNodes"]) == names[hard:]
    assert set(answer["FailedNodes"].values()) == {reasons.STALE_GPU_DATA.message}


def test_filter_result_nodes_mode_echoes_node_objects() -> None:
    items = [{"metadata": {"name": n}, "status": {"x": n}} for n in "abc"]
    args = parse_extender_args(
        json.dumps(
            {"Pod": {}, "Nodes": {"metadata": {"resourceVersion": "7"}, "items": items}, "NodeNames": None}
        ).encode()
    )
    result = filter_result(args, outcome())
    assert "NodeNames" not in result  # a non-null NodeNames would be read instead of Nodes
    assert result["Nodes"] == {"metadata": {"resourceVersion": "7"}, "items": [items[1]]}


def test_prioritize_full_and_compact() -> None:
    ranked = [("a", 7), ("b", 3), ("c", 10), ("d", 3)]
    assert prioritize_result(ranked, compact=False) == [
        {"Host": "a", "Score": 7},
        {"Host": "b", "Score": 3},
        {"Host": "c", "Score": 10},
        {"Host": "d", "Score": 3},
    ]
    # Same differences between nodes (what kube-scheduler compares), zeros left out.
    assert prioritize_result(ranked, compact=True) == [{"Host": "a", "Score": 4}, {"Host": "c", "Score": 7}]
    assert prioritize_result([("a", 5), ("b", 5)], compact=True) == []
    assert prioritize_result([], compact=True) == []


# -- bounds (issue 8), each tested on both sides of its value ------------------------------------


def _names_body(count: int) -> bytes:
    return orjson.dumps({"Pod": {}, "NodeNames": [f"n{i}" for i in range(count)], "Nodes": None})


def _nodes_body(count: int, node: dict | None = None) -> bytes:
    items = [node or {"metadata": {"name": f"n{i}"}} for i in range(count)]
    # json, not orjson: the test bodies nest deeper than orjson writes.
    return json.dumps({"Pod": {}, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}).encode()


@pytest.mark.parametrize("build", [_names_body, _nodes_body], ids=["NodeNames", "Nodes.items"])
def test_candidate_nodes_are_bounded(build) -> None:
    assert len(parse_extender_args(build(MAX_CANDIDATES)).candidate_names()) == MAX_CANDIDATES == 25_000
    with pytest.raises(InvalidInput) as info:
        parse_extender_args(build(MAX_CANDIDATES + 1))
    assert info.value.code == "too_many_nodes" and "--max-candidates" in info.value.message
    assert len(parse_extender_args(build(3), max_candidates=3).candidate_names()) == 3
    with pytest.raises(InvalidInput):
        parse_extender_args(build(4), max_candidates=3)


def test_json_objects_and_arrays_are_counted_before_parsing() -> None:
    body = b'{"Pod": {"x": [[], {}]}, "NodeNames": ["a"]}'  # 6 of '{' and '['
    assert parse_extender_args(body, max_containers=6).node_names == ["a"]
    with pytest.raises(InvalidInput) as info:
        parse_extender_args(body, max_containers=5)
    assert info.value.code == "too_complex"
    with pytest.raises(InvalidInput) as info:  # counted before parsing: even broken JSON
        parse_extender_args(b"[" * 100, max_containers=99)
    assert info.value.code == "too_complex"
    with pytest.raises(InvalidInput) as info:  # as long as the bound: not counted, and within it
        parse_extender_args(b"[" * 99, max_containers=99)
    assert info.value.code == "malformed_json"


def _deep(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_nodes_too_deep_to_echo_are_refused_at_parse_not_with_a_500() -> None:
    """orjson reads 1,024 levels but writes 254. The answer puts a Node at level 4 (answer,
    Nodes, items, Node): 250 more levels inside it encode, 251 do not."""
    fits = parse_extender_args(_nodes_body(1, {"metadata": {"name": "n"}, "x": _deep(250)}))
    answer = filter_result(fits, FilterOutcome(passed=["n"], failed={}))
    assert orjson.loads(orjson.dumps(answer))["Nodes"]["items"][0]["metadata"] == {"name": "n"}
    with pytest.raises(InvalidInput) as info:
        parse_extender_args(_nodes_body(1, {"metadata": {"name": "n"}, "x": _deep(251)}))
    assert info.value.code == "too_deep"
    # Nodes.metadata is echoed at level 3 (answer, Nodes, metadata): 252 levels encode, 253 do not.
    metadata = [json.dumps({"Pod": {}, "Nodes": {"metadata": _deep(n), "items": []}}).encode() for n in (252, 253)]
    assert parse_extender_args(metadata[0]).nodes == []
    with pytest.raises(InvalidInput):
        parse_extender_args(metadata[1])


def _allocatable(*values: object) -> dict:
    names = ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
    node = {"metadata": {"name": "n"}, "status": {"allocatable": dict(zip(names, values, strict=False))}}
    return parse_extender_args(_nodes_body(1, node)).allocatable(names, {})


def test_node_allocatable_is_bounded_at_2_31() -> None:
    assert _allocatable("2147483648") == {"n": 2**31}
    assert _allocatable("1Gi", 2**30) == {"n": 2**31}  # the sum over GPU resources
    for values in (("2147483649",), ("1Gi", 2**30 + 1)):
        with pytest.raises(InvalidInput) as info:
            _allocatable(*values)
        assert info.value.code == "too_many_gpus"
    for hostile in ("1e999999", "1e999999Ei"):
        with pytest.raises(InvalidInput) as info:
            _allocatable(hostile)
        assert info.value.code == "bad_quantity"


def test_an_empty_allocatable_is_zero_gpus_and_a_missing_one_unknown() -> None:
    """{} lists no resource at all (0 GPUs); no allocatable (or a mistyped one) says nothing: the
    node is left to the inventory's count."""
    names = ("nvidia.com/gpu",)
    for status, expected in (({"allocatable": {}}, {"n": 0}), ({}, {}), ({"allocatable": []}, {}), (None, {})):
        node = {"metadata": {"name": "n"}, "status": status}
        assert parse_extender_args(_nodes_body(1, node)).allocatable(names, {}) == expected, status


def test_a_duplicate_key_message_never_echoes_a_huge_key() -> None:
    key = "k" * 100_000
    body = orjson.dumps({"Pod": {}, "NodeNames": [], key: 1, key.upper(): 2})
    with pytest.raises(InvalidInput) as info:
        parse_extender_args(body)
    assert info.value.code == "duplicate_key" and len(info.value.message) < 150, info.value.message
