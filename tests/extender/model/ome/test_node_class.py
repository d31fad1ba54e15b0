"""Node membership in AcceleratorClasses: nodeSelector, required node affinity, GPU facts."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.model.gpu_facts import GpuFacts, facts_from_report
from gpuextender.extender.model.ome.accelerator_class import AcceleratorClass, parse_accelerator_class
from gpuextender.extender.model.ome.node_class import (
    AFFINITY,
    COMPUTE_CAPABILITY,
    GPU_PRODUCT_LABEL,
    MEMORY,
    NODE_SELECTOR,
    ClassMatcher,
    classes_for_node,
    compile_classes,
    normalize_gpu_product,
)
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.ome_reference import classify_nodes, node_class_mismatch, node_in_class

GIB = 1024**3


def ac(
    name: str,
    selector: dict[str, str] | None = None,
    *,
    terms: list[dict[str, Any]] | None = None,
    memory: str | None = None,
    cc: str | None = None,
) -> AcceleratorClass:
    discovery: dict[str, Any] = {}
    if selector is not None:
        discovery["nodeSelector"] = selector
    if terms is not None:
        discovery["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }
    caps: dict[str, Any] = {}
    if memory is not None:
        caps["memoryGB"] = memory
    if cc is not None:
        caps["computeCapability"] = cc
    return parse_accelerator_class({"metadata": {"name": name}, "spec": {"discovery": discovery, "capabilities": caps}})


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels)}}


def gpu_node(name: str, product: str, **labels: str) -> dict[str, Any]:
    n = node(name, **labels)
    n["metadata"]["labels"][GPU_PRODUCT_LABEL] = product
    return n


@pytest.mark.parametrize(
    ("value", "normal"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"),  # NVML name
        ("NVIDIA-H100-80GB-HBM3", "h100-80gb-hbm3"),  # GFD label
        ("NVIDIA-H100-80GB-HBM3-SHARED", "h100-80gb-hbm3"),  # GFD under sharing
        ("nvidia-h100-80gb-hbm3", "h100-80gb-hbm3"),
        ("H100-80GB-HBM3", "h100-80gb-hbm3"),  # no vendor prefix
        ("NVIDIA  H100 - 80GB HBM3 ", "h100-80gb-hbm3"),  # runs of spaces/dashes collapse
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("Tesla T4", "tesla-t4"),
        ("Tesla-T4", "tesla-t4"),
        ("NVIDIA GeForce RTX 4090 (TM)", "geforce-rtx-4090-tm"),  # GFD drops the parentheses
        ("A100-SXM4-40GB-MIG-1g.5gb", "a100-sxm4-40gb-mig-1g.5gb"),  # MIG stays distinct
    ],
)
def test_normalize_gpu_product(value: str, normal: str) -> None:
    assert normalize_gpu_product(value) == normal


H100_NVML = ac("h100-nvml", {GPU_PRODUCT_LABEL: "NVIDIA H100 80GB HBM3"})
H100_GFD = ac("h100-gfd", {GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"})


@pytest.mark.parametrize("cls", [H100_NVML, H100_GFD], ids=["nvml-name", "gfd-label"])
@pytest.mark.parametrize(
    ("product", "member"),
    [
        ("NVIDIA-H100-80GB-HBM3", True),
        ("NVIDIA-H100-80GB-HBM3-SHARED", True),
        ("nvidia-h100-80gb-hbm3", True),
        ("NVIDIA-H100-NVL", False),
        ("NVIDIA-A100-SXM4-80GB", False),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", False),
    ],
)
def test_product_label_both_styles(cls: AcceleratorClass, product: str, member: bool) -> None:
    assert node_in_class(gpu_node("n", product), cls) is member


def test_other_labels_compare_exactly() -> None:
    cls = ac("pool", {"pool": "GPU-A"})
    assert node_in_class(node("n", pool="GPU-A"), cls)
    assert not node_in_class(node("n", pool="gpu-a"), cls)
    assert not node_in_class(node("n", pool="GPU A"), cls)


def test_all_selector_pairs_must_match() -> None:
    cls = ac("two", {GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3", "pool": "a"})
    assert node_in_class(gpu_node("n", "NVIDIA-H100-80GB-HBM3", pool="a"), cls)
    m = node_class_mismatch(gpu_node("n", "NVIDIA-H100-80GB-HBM3"), cls)
    assert m is not None and m.check == NODE_SELECTOR and "pool='a'" in m.detail and "no such label" in m.detail
    m = node_class_mismatch(gpu_node("n", "NVIDIA-A100-SXM4-80GB", pool="a"), cls)
    assert m is not None and m.check == NODE_SELECTOR and GPU_PRODUCT_LABEL in m.detail


def test_empty_discovery_matches_every_node() -> None:
    assert node_in_class(node("n"), ac("any"))


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)} if values else {"key": key, "operator": op}


def term(*exprs: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"matchExpressions": list(exprs)}
    if fields is not None:
        t["matchFields"] = fields
    return t


N_A = node("node-a", zone="z1", mem="81559")
N_B = gpu_node("node-b", "NVIDIA-H100-80GB-HBM3-SHARED", zone="z2", mem="40960")
N_C = node("node-c", mem="lots")  # no zone, non-integer mem


@pytest.mark.parametrize(
    ("terms", "members"),
    [
        ([term(expr("zone", "In", "z1", "z3"))], {"node-a"}),
        ([term(expr("zone", "NotIn", "z1"))], {"node-b", "node-c"}),  # NotIn holds when absent
        ([term(expr("zone", "Exists"))], {"node-a", "node-b"}),
        ([term(expr("zone", "DoesNotExist"))], {"node-c"}),
        ([term(expr("mem", "Gt", "40960"))], {"node-a"}),  # strict; non-integer label fails
        ([term(expr("mem", "Lt", "81559"))], {"node-b"}),
        ([term(expr("mem", "Gt", "-1"))], {"node-a", "node-b"}),
        ([term(expr("absent", "Lt", "5"))], set()),  # absent label fails Gt/Lt
        ([term(expr("zone", "In", "z1")), term(expr("zone", "In", "z2"))], {"node-a", "node-b"}),  # terms: OR
        ([term(expr("zone", "Exists"), expr("mem", "Gt", "50000"))], {"node-a"}),  # within a term: AND
        ([term(fields=[expr("metadata.name", "In", "node-c")])], {"node-c"}),
        ([term(fields=[expr("metadata.name", "NotIn", "node-c")])], {"node-a", "node-b"}),
        ([term(expr("zone", "Exists"), fields=[expr("metadata.name", "NotIn", "node-a")])], {"node-b"}),
        ([term()], set()),  # an empty term matches nothing
        ([], set()),  # no term at all matches nothing
        ([term(expr(GPU_PRODUCT_LABEL, "In", "NVIDIA H100 80GB HBM3"))], {"node-b"}),  # normalised in In
        ([term(expr(GPU_PRODUCT_LABEL, "NotIn", "nvidia-h100-80gb-hbm3"))], {"node-a", "node-c"}),
    ],
)
def test_required_node_affinity(terms: list[dict[str, Any]], members: set[str]) -> None:
    cls = ac("aff", terms=terms)
    assert {n["metadata"]["name"] for n in (N_A, N_B, N_C) if node_in_class(n, cls)} == members


def test_affinity_and_selector_both_apply() -> None:
    cls = ac("both", {"pool": "p"}, terms=[term(expr("zone", "In", "z1"))])
    assert node_in_class(node("n", pool="p", zone="z1"), cls)
    m = node_class_mismatch(node("n", pool="p", zone="z2"), cls)
    assert m is not None and m.check == AFFINITY and "term 0: zone In [z1]" in m.detail
    m = node_class_mismatch(node("n", zone="z1"), cls)
    assert m is not None and m.check == NODE_SELECTOR


def test_affinity_mismatch_lists_each_term() -> None:
    cls = ac("aff", terms=[term(expr("zone", "In", "z1")), term(expr("mem", "Gt", "1"))])
    m = node_class_mismatch(node("n", zone="z9"), cls)
    assert m is not None and m.detail == "required node affinity not met (term 0: zone In [z1]; term 1: mem Gt [1])"


H100_CAPS = ac("h100", {GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}, memory="80Gi", cc="9.0")
H100_NODE = gpu_node("n", "NVIDIA-H100-80GB-HBM3")


def h100(memory_bytes: int | None = 81559 * 2**20, cc: str = "9.0") -> GpuFacts:
    return GpuFacts("NVIDIA H100 80GB HBM3", memory_bytes, cc)


@pytest.mark.parametrize(
    ("gpus", "tolerance", "check"),
    [
        (None, 0.05, None),  # no facts: not checked
        ([], 0.05, None),
        ([h100()], 0.05, None),  # 79.6 GiB reads as an 80Gi card within 5 %
        ([h100(), h100()], 0.05, None),
        ([h100(int(76.1 * GIB))], 0.05, None),  # just above 95 % of 80 GiB
        ([h100(int(75.9 * GIB))], 0.05, MEMORY),  # just below
        ([h100(int(75.9 * GIB))], 0.10, None),  # a wider tolerance admits it
        ([h100(81559 * 2**20), h100(40 * GIB)], 0.05, MEMORY),  # every GPU must qualify
        ([h100(81559 * 2**20), h100(None)], 0.05, None),  # a GPU without a reading is not counted against
        ([h100(cc="9")], 0.05, None),  # numeric comparison: 9 == 9.0
        ([h100(cc="9.00")], 0.05, None),
        ([h100(cc="8.0")], 0.05, COMPUTE_CAPABILITY),
        ([h100(cc="10.0")], 0.05, COMPUTE_CAPABILITY),
        ([h100(cc="")], 0.05, None),  # unknown compute capability is not counted against
        ([h100(cc="garbage")], 0.05, None),
        ([h100(40 * GIB, cc="8.0")], 0.05, MEMORY),  # memory is checked first
    ],
)
def test_capabilities(gpus: list[GpuFacts] | None, tolerance: float, check: str | None) -> None:
    m = node_class_mismatch(H100_NODE, H100_CAPS, gpus, memory_tolerance=tolerance)
    assert (m.check if m else None) == check


def test_capability_mismatch_says_why() -> None:
    m = node_class_mismatch(H100_NODE, H100_CAPS, [h100(), GpuFacts("NVIDIA A100-SXM4-40GB", 40 * GIB, "8.0")])
    assert m is not None and m.check == MEMORY
    assert m.detail == (
        "GPU 1 (NVIDIA A100-SXM4-40GB) has 40.0 GiB; class needs 80.0 GiB (at least 76.0 GiB with 5% tolerance)"
    )
    m = node_class_mismatch(H100_NODE, H100_CAPS, [h100(cc="8.0")])
    assert m is not None and m.detail == "GPU 0 (NVIDIA H100 80GB HBM3) has compute capability 8.0; class says 9.0"


def test_capabilities_plain_tuples_accepted() -> None:
    good: list[Any] = [("NVIDIA H100 80GB HBM3", 80 * GIB, "9.0")]
    bad: list[Any] = [("NVIDIA H100 80GB HBM3", 80 * GIB, "8.9")]
    assert node_in_class(H100_NODE, H100_CAPS, good)
    assert not node_in_class(H100_NODE, H100_CAPS, bad)


def test_class_without_capabilities_skips_those_checks() -> None:
    cls = ac("h100", {GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"})
    assert node_in_class(H100_NODE, cls, [GpuFacts("x", 1, "1.0")])


def test_non_numeric_class_compute_capability_compares_as_text() -> None:
    cls = ac("mi", cc="GFX90A")
    assert node_in_class(node("n"), cls, [GpuFacts("AMD MI250X", None, "gfx90a")])
    assert not node_in_class(node("n"), cls, [GpuFacts("AMD MI300X", None, "gfx942")])


def test_capability_check_runs_only_after_labels_match() -> None:
    m = node_class_mismatch(gpu_node("n", "NVIDIA-A100-SXM4-40GB"), H100_CAPS, [h100(40 * GIB)])
    assert m is not None and m.check == NODE_SELECTOR


@pytest.mark.parametrize("tolerance", [-0.1, 1.0, 2.0])
def test_bad_tolerance(tolerance: float) -> None:
    with pytest.raises(ValueError, match="tolerance"):
        node_class_mismatch(H100_NODE, H100_CAPS, memory_tolerance=tolerance)


A100 = ac("a100", {GPU_PRODUCT_LABEL: "NVIDIA A100-SXM4-80GB"}, memory="80Gi", cc="8.0")
POOL_A = ac("pool-a", {"pool": "a"})


def test_classify_nodes_reports_multi_and_no_class() -> None:
    nodes = [
        gpu_node("h1", "NVIDIA-H100-80GB-HBM3", pool="a"),  # H100 and pool-a
        gpu_node("h2", "NVIDIA-H100-80GB-HBM3-SHARED"),
        gpu_node("a1", "NVIDIA-A100-SXM4-80GB"),
        node("cpu-1"),
        gpu_node("t4", "Tesla-T4"),
    ]
    result = classify_nodes(nodes, [H100_CAPS, A100, POOL_A])
    assert result.classes_of("h1") == ("h100", "pool-a")  # in class order
    assert result.classes_of("h2") == ("h100",)
    assert result.classes_of("a1") == ("a100",)
    assert result.classes_of("cpu-1") == ()
    assert result.classes_of("unknown") == ()
    assert result.nodes_of("h100") == ("h1", "h2")
    assert result.nodes_of("pool-a") == ("h1",)
    assert result.nodes_of("nope") == ()
    assert dict(result.multi_class) == {"h1": ("h100", "pool-a")}
    assert result.no_class == ("cpu-1", "t4")
    assert set(result.nodes_by_class) == {"h100", "a100", "pool-a"}


def test_classify_nodes_uses_gpu_facts_per_node() -> None:
    # An H100 node whose agent reports A100 40GB memory and compute capability is not an H100.
    nodes = [gpu_node("h1", "NVIDIA-H100-80GB-HBM3"), gpu_node("h2", "NVIDIA-H100-80GB-HBM3")]
    facts = {"h1": [h100()], "h2": [GpuFacts("NVIDIA A100-SXM4-40GB", 40 * GIB, "8.0")]}
    result = classify_nodes(nodes, [H100_CAPS], facts)
    assert result.nodes_of("h100") == ("h1",)
    assert result.no_class == ("h2",)


def test_compiled_matchers_are_reusable_and_classes_for_node_updates_one_node() -> None:
    matchers = compile_classes([H100_CAPS, A100, POOL_A])
    assert all(isinstance(m, ClassMatcher) for m in matchers)
    assert classes_for_node(gpu_node("x", "NVIDIA-A100-SXM4-80GB", pool="a"), matchers) == ("a100", "pool-a")
    assert classify_nodes([gpu_node("x", "NVIDIA-A100-SXM4-80GB")], matchers).classes_of("x") == ("a100",)
    assert node_in_class(gpu_node("x", "NVIDIA-A100-SXM4-80GB"), matchers[1])


def test_duplicates_and_bad_nodes_are_errors() -> None:
    with pytest.raises(ValueError, match="'h100' given twice"):
        compile_classes([H100_CAPS, H100_CAPS])
    with pytest.raises(ValueError, match="'n' given twice"):
        classify_nodes([node("n"), node("n")], [H100_CAPS])
    with pytest.raises(ValueError, match=r"metadata.name"):
        classify_nodes([{"metadata": {"labels": {}}}], [H100_CAPS])
    with pytest.raises(ValueError, match="labels"):
        classify_nodes([{"metadata": {"name": "n", "labels": ["a"]}}], [H100_CAPS])
    with pytest.raises(ValueError, match="metadata"):
        node_class_mismatch({}, H100_CAPS)


def test_node_without_labels() -> None:
    assert classify_nodes([{"metadata": {"name": "n"}}], [H100_CAPS, ac("any")]).classes_of("n") == ("any",)


def test_facts_from_report() -> None:
    g0 = pb.GpuSample(index=0, name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB)
    g0.compute_capability.major, g0.compute_capability.minor = 9, 0
    g1 = pb.GpuSample(index=1, name="NVIDIA H100 80GB HBM3")  # no memory reading, no compute capability
    report = pb.NodeReport(node_name="n", gpus=[g0, g1])
    assert facts_from_report(report) == (
        GpuFacts("NVIDIA H100 80GB HBM3", 80 * GIB, "9.0"),
        GpuFacts("NVIDIA H100 80GB HBM3", None, ""),
    )
