"""Parsing AcceleratorClass objects (ome-api.md §2)."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from gpuextender.extender.model.ome.accelerator_class import (
    AcceleratorResource,
    Cost,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Performance,
    parse_accelerator_class,
    parse_compute_capability,
)
from gpuextender.extender.model.untrusted import InvalidInput

H100: dict[str, Any] = {
    "apiVersion": "ome.io/v1beta1",
    "kind": "AcceleratorClass",
    "metadata": {"name": "nvidia-h100-80gb"},
    "spec": {
        "vendor": "nvidia",
        "family": "hopper",
        "model": "H100",
        "discovery": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "pciVendorID": "10de",
            "deviceIDs": ["2330"],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "pool", "operator": "In", "values": ["a", "b"]},
                                    {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]},
                                ],
                                "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad"]}],
                            }
                        ]
                    }
                }
            },
        },
        "capabilities": {
            "memoryGB": "80Gi",
            "computeCapability": "9.0",
            "memoryBandwidthGBps": "3350",
            "features": ["fp8", "nvlink"],
            "performance": {"fp32Tflops": 67, "fp16Tflops": 989, "int8Tops": 1979, "int4Tops": 3958},
        },
        "resources": [{"name": "nvidia.com/gpu", "quantity": "1"}, {"name": "rdma/ib"}],
        "cost": {"perHour": "5.12", "spotPerHour": "2.21", "perMillionTokens": "0.35", "tier": "high"},
        "integration": {"kueueResourceFlavor": "h100"},
    },
    "status": {"nodes": ["n1"], "availableNodes": 1},
}


def with_spec(path: str, value: Any, base: dict[str, Any] = H100) -> dict[str, Any]:
    """A copy of `base` with spec.<path> (dot-separated) set; value `...` deletes it."""
    obj = copy.deepcopy(base)
    node = obj["spec"]
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    if value is ...:
        node.pop(last, None)
    else:
        node[last] = value
    return obj


def test_full_object() -> None:
    ac = parse_accelerator_class(H100)
    assert ac.name == "nvidia-h100-80gb"
    assert (ac.vendor, ac.family, ac.model) == ("nvidia", "hopper", "H100")
    assert dict(ac.node_selector) == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert ac.affinity == H100["spec"]["discovery"]["affinity"]
    assert ac.required_node_terms == (
        NodeSelectorTerm(
            (
                NodeSelectorRequirement("pool", "In", ("a", "b")),
                NodeSelectorRequirement("nvidia.com/gpu.memory", "Gt", ("40000",)),
            ),
            (NodeSelectorRequirement("metadata.name", "NotIn", ("bad",)),),
        ),
    )
    assert ac.memory_bytes == 80 * 2**30
    assert ac.memory_gib == 80.0
    assert ac.memory_gb == 80
    assert ac.compute_capability == "9.0"
    assert ac.compute_capability_version == (9, 0)
    assert ac.memory_bandwidth_gbps == 3350
    assert ac.features == ("fp8", "nvlink")
    assert ac.performance == Performance(67, 989, 1979, 3958)
    assert ac.cost == Cost(per_hour=5.12, spot_per_hour=2.21, per_million_tokens=0.35, tier="high")
    assert ac.resources == (
        AcceleratorResource("nvidia.com/gpu", Decimal(1)),
        AcceleratorResource("rdma/ib", Decimal(1)),  # CRD default quantity "1"
    )


def test_parsed_object_is_independent_of_its_source() -> None:
    src = copy.deepcopy(H100)
    ac = parse_accelerator_class(src)
    src["spec"]["discovery"]["nodeSelector"]["x"] = "y"
    src["spec"]["discovery"]["affinity"]["nodeAffinity"] = None
    assert "x" not in ac.node_selector
    assert ac.affinity is not None and ac.affinity["nodeAffinity"] is not None
    with pytest.raises(TypeError):
        ac.node_selector["x"] = "y"  # type: ignore[index]


def test_minimal_object() -> None:
    ac = parse_accelerator_class({"metadata": {"name": "bare"}, "spec": {"discovery": {}, "capabilities": {}}})
    assert dict(ac.node_selector) == {}
    assert ac.affinity is None and ac.required_node_terms is None
    assert ac.memory_bytes is ac.memory_gib is ac.memory_gb is None
    assert ac.compute_capability == "" and ac.compute_capability_version is None
    assert ac.memory_bandwidth_gbps is None
    assert ac.performance is None and ac.cost is None
    assert ac.features == () and ac.resources == ()


@pytest.mark.parametrize(
    ("memory", "gib", "gb"),
    [
        ("80Gi", 80.0, 80),
        (80, 80 / 2**30, 0),  # a bare number is BYTES, like OME: 80 bytes -> 0 GB
        ("80G", 80e9 / 2**30, 74),  # decimal gigabytes: 74.5 GiB, integer-divided to 74 like OME
        ("40Gi", 40.0, 40),
        ("79.5Gi", 79.5, 79),
        ("0.5", 1 / 2**30, 0),  # Value() rounds 0.5 bytes up to 1
    ],
)
def test_memory_is_bytes(memory: Any, gib: float, gb: int) -> None:
    ac = parse_accelerator_class(with_spec("capabilities.memoryGB", memory))
    assert ac.memory_gib == pytest.approx(gib)
    assert ac.memory_gb == gb


@pytest.mark.parametrize(("bandwidth", "value"), [("3350", 3350), (2039, 2039), ("3.35k", 3350), ("1.5", 2)])
def test_bandwidth_is_go_value(bandwidth: Any, value: int) -> None:
    ac = parse_accelerator_class(with_spec("capabilities.memoryBandwidthGBps", bandwidth))
    assert ac.memory_bandwidth_gbps == value


@pytest.mark.parametrize(
    ("cc", "version"),
    [
        ("9.0", (9, 0)),
        ("12.1", (12, 1)),
        ("10.0", (10, 0)),
        ("8", (8, 0)),
        ("8.10", (8, 10)),
        ("gfx90a", None),
        ("", None),
    ],
)
def test_compute_capability_version(cc: str, version: tuple[int, int] | None) -> None:
    ac = parse_accelerator_class(with_spec("capabilities.computeCapability", cc))
    assert ac.compute_capability == cc
    assert ac.compute_capability_version == version
    if cc:
        assert parse_compute_capability(cc) == version


def test_performance_precision_mapping() -> None:
    perf = Performance(fp32_tflops=67, fp16_tflops=989, int8_tops=1979, int4_tops=None)
    precisions = ("fp32", "FP16", "int8", "fp8", "int4", "bf16")
    assert [perf.for_precision(p) for p in precisions] == [67, 989, 1979, 1979, 0, 0]
    assert perf.max_tflops() == 1979
    assert Performance().max_tflops() == 0


def test_cost_fields_parse_quantities() -> None:
    ac = parse_accelerator_class(with_spec("cost", {"perHour": 3, "perMillionTokens": "500m", "tier": "Low"}))
    assert ac.cost == Cost(per_hour=3.0, spot_per_hour=None, per_million_tokens=0.5, tier="Low")


def test_empty_term_list_is_kept_empty() -> None:
    assert parse_accelerator_class(with_spec("discovery.affinity", _terms([]))).required_node_terms == ()


def test_affinity_without_required_node_part_restricts_nothing() -> None:
    aff = {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]},
        "podAntiAffinity": {},
    }
    ac = parse_accelerator_class(with_spec("discovery.affinity", aff))
    assert ac.required_node_terms is None
    assert ac.affinity == aff


def _terms(terms: Any) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def _term_with(req: dict[str, Any], field: bool = False) -> dict[str, Any]:
    return _terms([{"matchFields" if field else "matchExpressions": [req]}])


REQ_PATH = "spec.discovery.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"


@pytest.mark.parametrize(
    ("obj", "path", "problem"),
    [
        (
            with_spec("capabilities.memoryGB", "eighty"),
            "spec.capabilities.memoryGB",
            "'eighty' is not a Kubernetes quantity",
        ),
        (with_spec("capabilities.memoryGB", "-80Gi"), "spec.capabilities.memoryGB", "negative"),
        (with_spec("capabilities.memoryGB", True), "spec.capabilities.memoryGB", "not a quantity"),
        (
            with_spec("capabilities.memoryBandwidthGBps", "fast"),
            "spec.capabilities.memoryBandwidthGBps",
            "not a Kubernetes quantity",
        ),
        (with_spec("capabilities", ...), "spec.capabilities", "required field is missing"),
        (with_spec("discovery", ...), "spec.discovery", "required field is missing"),
        (with_spec("discovery", ["x"]), "spec.discovery", "expected an object, got list"),
        (with_spec("discovery.nodeSelector", {"a": 1}), "spec.discovery.nodeSelector['a']", "expected a string value"),
        (with_spec("discovery.nodeSelector", "gpu=h100"), "spec.discovery.nodeSelector", "expected an object"),
        (with_spec("discovery.affinity", "x"), "spec.discovery.affinity", "expected an object"),
        (with_spec("capabilities.computeCapability", 9.0), "spec.capabilities.computeCapability", "expected a string"),
        (with_spec("capabilities.features", "fp8"), "spec.capabilities.features", "expected a list"),
        (with_spec("capabilities.features", ["fp8", 8]), "spec.capabilities.features[1]", "expected a string"),
        (
            with_spec("capabilities.performance", {"fp16Tflops": "989"}),
            "spec.capabilities.performance.fp16Tflops",
            "expected an integer",
        ),
        (
            with_spec("capabilities.performance", {"fp16Tflops": 98.5}),
            "spec.capabilities.performance.fp16Tflops",
            "expected an integer",
        ),
        (with_spec("capabilities.performance", {"int8Tops": -1}), "spec.capabilities.performance.int8Tops", "negative"),
        (with_spec("cost", {"perHour": "two dollars"}), "spec.cost.perHour", "not a Kubernetes quantity"),
        (with_spec("cost", {"tier": 1}), "spec.cost.tier", "expected a string"),
        (with_spec("cost", "cheap"), "spec.cost", "expected an object"),
        (with_spec("resources", {"nvidia.com/gpu": 1}), "spec.resources", "expected a list"),
        (with_spec("resources", [{"quantity": "1"}]), "spec.resources[0].name", "required field is missing"),
        (
            with_spec("resources", [{"name": "nvidia.com/gpu", "quantity": "one"}]),
            "spec.resources[0].quantity",
            "not a Kubernetes quantity",
        ),
        (
            with_spec("resources", [{"name": "g", "divisible": "yes"}]),
            "spec.resources[0].divisible",
            "expected true or false",
        ),
        (with_spec("vendor", 10), "spec.vendor", "expected a string"),
        (
            with_spec("discovery.affinity", _term_with({"key": "a", "operator": "Near", "values": ["x"]})),
            f"{REQ_PATH}.matchExpressions[0].operator",
            "unknown operator 'Near'",
        ),
        (
            with_spec("discovery.affinity", _term_with({"key": "a", "operator": "In", "values": []})),
            f"{REQ_PATH}.matchExpressions[0].values",
            "In needs at least one value",
        ),
        (
            with_spec("discovery.affinity", _term_with({"key": "a", "operator": "Exists", "values": ["x"]})),
            f"{REQ_PATH}.matchExpressions[0].values",
            "Exists takes no values",
        ),
        (
            with_spec("discovery.affinity", _term_with({"key": "a", "operator": "Gt", "values": ["1.5"]})),
            f"{REQ_PATH}.matchExpressions[0].values",
            "Gt takes exactly one integer value",
        ),
        (
            with_spec("discovery.affinity", _term_with({"key": "a", "operator": "Lt", "values": ["1", "2"]})),
            f"{REQ_PATH}.matchExpressions[0].values",
            "Lt takes exactly one integer value",
        ),
        (
            with_spec("discovery.affinity", _term_with({"operator": "Exists"})),
            f"{REQ_PATH}.matchExpressions[0].key",
            "required field is missing",
        ),
        (
            with_spec(
                "discovery.affinity", _term_with({"key": "metadata.uid", "operator": "In", "values": ["x"]}, field=True)
            ),
            f"{REQ_PATH}.matchFields[0].key",
            "unsupported node field",
        ),
        (
            with_spec("discovery.affinity", _term_with({"key": "metadata.name", "operator": "Exists"}, field=True)),
            f"{REQ_PATH}.matchFields[0].operator",
            "unsupported operator",
        ),
        (
            with_spec(
                "discovery.affinity",
                _term_with({"key": "metadata.name", "operator": "In", "values": ["a", "b"]}, field=True),
            ),
            f"{REQ_PATH}.matchFields[0].values",
            "exactly one value",
        ),
        (with_spec("discovery.affinity", _terms({})), REQ_PATH.removesuffix("[0]"), "expected a list"),
        (
            with_spec("discovery.affinity", _terms([{"matchExpressions": {}}])),
            f"{REQ_PATH}.matchExpressions",
            "expected a list",
        ),
        ({**H100, "kind": "ServingRuntime"}, "kind", "expected 'AcceleratorClass'"),
        ({**H100, "apiVersion": "v1"}, "apiVersion", "expected ome.io/<version>"),
        ({**H100, "spec": None}, "spec", "required field is missing"),
    ],
)
def test_invalid_objects_name_the_object_and_field(obj: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_accelerator_class(obj)
    err = info.value
    assert err.subject == "AcceleratorClass 'nvidia-h100-80gb'"
    assert err.path == path
    assert problem in err.problem
    assert str(err).startswith(f"AcceleratorClass 'nvidia-h100-80gb': {path}: ")


def test_eighty_message_is_one_clear_line() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_accelerator_class(with_spec("capabilities.memoryGB", "eighty"))
    assert str(info.value) == (
        "AcceleratorClass 'nvidia-h100-80gb': spec.capabilities.memoryGB: 'eighty' is not a Kubernetes quantity"
    )


@pytest.mark.parametrize(
    "obj",
    [
        {"spec": {}},
        {"metadata": {}, "spec": {}},
        {"metadata": {"name": ""}},
        {"metadata": {"name": 5}},
        {"metadata": "x"},
    ],
)
def test_missing_name(obj: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match=r"^AcceleratorClass \(unnamed\): metadata.name: required"):
        parse_accelerator_class(obj)


@pytest.mark.parametrize("obj", [None, "x", ["AcceleratorClass"]])
def test_not_an_object(obj: Any) -> None:
    with pytest.raises(InvalidInput, match="expected an object"):
        parse_accelerator_class(obj)
