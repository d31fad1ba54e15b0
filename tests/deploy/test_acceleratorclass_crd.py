"""The optional AcceleratorClass CRD (deploy/components/acceleratorclass-crd/) and the example
AcceleratorClasses in examples/: the CRD describes the kind the extender watches, its schema
is structural, and every example validates against it the way the API server with kubectl's
strict field validation would treat it (unknown fields are errors)."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest

from gpuextender.extender.model.kube_objects import ACCELERATOR_CLASS
from tests.deploy import manifests as m

EXAMPLES = m.REPO / "examples"


def crd() -> m.KubeObject:
    return m.one(m.load_source(m.COMPONENTS / "acceleratorclass-crd"), "CustomResourceDefinition")


def schema() -> dict:
    (version,) = crd()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def strict(node: dict) -> dict:
    """The schema with unknown fields rejected wherever the API server would drop them
    (objects with `properties`, unless they preserve unknown fields)."""
    node = copy.deepcopy(node)

    def walk(n: dict) -> None:
        if n.get("type") == "object" and "properties" in n and not n.get("x-kubernetes-preserve-unknown-fields"):
            n.setdefault("additionalProperties", False)
        for child in n.get("properties", {}).values():
            walk(child)
        for key in ("items", "additionalProperties"):
            if isinstance(n.get(key), dict):
                walk(n[key])
        for child in n.get("anyOf", []):
            walk(child)

    walk(node)
    return node


def schema_errors(obj: dict) -> list[str]:
    validator = jsonschema.Draft7Validator(strict(schema()))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def example_classes() -> list[tuple[Path, dict]]:
    found = []
    for path in sorted(EXAMPLES.rglob("*.y*ml")):
        for doc in m.load_yaml_docs(path):
            if isinstance(doc, dict) and doc.get("kind") == "AcceleratorClass":
                found.append((path, doc))
    return found


def test_crd_describes_the_kind_the_extender_watches() -> None:
    spec = crd()["spec"]
    assert crd()["metadata"]["name"] == f"{ACCELERATOR_CLASS.plural}.{ACCELERATOR_CLASS.group}"
    assert spec["group"] == ACCELERATOR_CLASS.group
    assert spec["names"]["kind"] == ACCELERATOR_CLASS.kind
    assert spec["names"]["plural"] == ACCELERATOR_CLASS.plural
    assert spec["scope"] == ("Namespaced" if ACCELERATOR_CLASS.namespaced else "Cluster")
    (version,) = spec["versions"]
    assert version["name"] == ACCELERATOR_CLASS.version and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    assert schema()["properties"]["spec"]["required"] == ["capabilities", "discovery"]


def test_schema_is_structural() -> None:
    """Every node has a type, except int-or-string quantities (anyOf integer|string) and
    preserve-unknown-fields objects - what the API server requires of a v1 CRD."""
    problems = []

    def walk(n: dict, path: str) -> None:
        if n.get("x-kubernetes-int-or-string"):
            assert [b.get("type") for b in n["anyOf"]] == ["integer", "string"], path
        elif "type" not in n:
            problems.append(path)
        for name, child in n.get("properties", {}).items():
            walk(child, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(n.get(key), dict):
                walk(n[key], f"{path}[{key}]")

    walk(schema(), "")
    assert not problems, problems


def test_example_accelerator_classes_validate() -> None:
    classes = example_classes()
    assert len(classes) >= 4, "examples/ome/accelerator-classes.yaml has four classes"
    for path, obj in classes:
        assert obj["apiVersion"] == f"{ACCELERATOR_CLASS.group}/{ACCELERATOR_CLASS.version}"
        assert "namespace" not in obj["metadata"], "AcceleratorClass is cluster-scoped"
        assert schema_errors(obj) == [], f"{path.relative_to(m.REPO)}: {obj['metadata']['name']}"


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda o: o["spec"].pop("discovery"), "'discovery' is a required property"),
        (lambda o: o["spec"]["capabilities"].update(memoryGb="80Gi"), "'memoryGb' was unexpected"),
        (lambda o: o["spec"]["capabilities"].update(memoryGB="80 GB"), "does not match"),
        (lambda o: o["spec"]["capabilities"]["performance"].update(fp16Tflops="989"), "is not of type 'integer'"),
        (lambda o: o["spec"]["resources"][0].pop("name"), "'name' is a required property"),
        (lambda o: o["spec"]["discovery"].update(nodeSelector={"a": 1}), "is not of type 'string'"),
    ],
    ids=["no-discovery", "miscased-field", "bad-quantity", "tflops-string", "resource-name", "selector-value"],
)
def test_schema_rejects_broken_classes(mutate, expected: str) -> None:
    _, obj = example_classes()[0]
    obj = copy.deepcopy(obj)
    mutate(obj)
    errors = schema_errors(obj)
    assert any(expected in e for e in errors), errors


def test_affinity_node_terms_are_checked() -> None:
    _, obj = example_classes()[0]
    obj = copy.deepcopy(obj)
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]}]}
    obj["spec"]["discovery"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    assert schema_errors(obj) == []
    term["matchExpressions"][0]["operator"] = "Equals"
    assert any("is not one of" in e for e in schema_errors(obj))
