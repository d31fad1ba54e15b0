"""Rules of the inventory view (state/inventory_view.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: the empty view, listeners, one rebuild
per loop turn, invalid objects (counted per kind, said once per kind, key and version, reported to
the callback), the log lines on classless and multi-class nodes, the per-object caches."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import InventoryView, ViewBuilder
from tests.extender.dra_objects import device_class, gpu_device, gpu_slice, resource_slice

GPU = ("nvidia.com/gpu",)


def test_an_empty_view_finds_nothing() -> None:
    view = InventoryView()
    assert view.get("ServingRuntime", "llm/x") is None
    assert view.namespaced_first("ServingRuntime", "ClusterServingRuntime", "llm", "x") == (
        "ClusterServingRuntime",
        None,
    )


def test_before_any_change_the_view_is_the_empty_one() -> None:
    assert ViewBuilder(InventoryStore(), GPU).current == InventoryView()


def node(name: str, version: str = "1", gpus: int = 0, **labels: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": version, "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def test_each_rebuilt_view_is_given_to_every_listener() -> None:
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    seen: list[InventoryView] = []
    views.on_rebuild(seen.append)
    store.upsert("Node", node("n1", gpus=8))
    assert seen == [views.current] and views.current.allocatable_gpus == {"n1": 8}


def test_in_a_running_loop_changes_rebuild_once_on_the_next_turn() -> None:
    async def run() -> list[int]:
        store = InventoryStore()
        views = ViewBuilder(store, GPU)
        rebuilt: list[int] = []
        views.on_rebuild(lambda view: rebuilt.append(len(view.allocatable_gpus)))
        store.upsert("Node", node("n1"))
        store.upsert("Node", node("n2"))
        assert rebuilt == []  # (not on the request path: on the next turn)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        store.upsert("Node", node("n3"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return rebuilt

    assert asyncio.run(run()) == [2, 3]


def bad_node(name: str, version: str | None = "1") -> dict[str, Any]:
    obj = node(name, version or "")
    if version is None:
        del obj["metadata"]["resourceVersion"]
    obj["metadata"]["labels"] = "not a map"
    return obj


def bad_class(name: str, version: str = "1") -> dict[str, Any]:
    return {"kind": "AcceleratorClass", "metadata": {"name": name, "resourceVersion": version}, "spec": "x"}


def test_invalid_objects_are_counted_per_kind_and_said_once_per_kind_key_and_version(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InventoryStore()
    reported: list[tuple[str, str, str]] = []
    views = ViewBuilder(store, GPU, lambda kind, key, problem: reported.append((kind, key, problem)))
    with caplog.at_level(logging.WARNING, logger="gpu_extender.inventory"):
        store.replace_all("Node", [bad_node("x"), bad_node("y")])
        store.upsert("Node", node("ok"))  # a rebuild: the same invalid versions are not said again
        store.upsert("Node", bad_node("y", "2"))  # a new version is (at the next rebuild: below)
        # Another kind, same name and version; the valid class after it is read.
        store.replace_all("AcceleratorClass", [bad_class("x"), accelerator_class("a", "P")])
    assert views.current.invalid == {"Node": 2, "AcceleratorClass": 1}
    assert views.current.allocatable_gpus == {"ok": 0}  # (an invalid object skips itself only)
    assert list(views.current.classes) == ["a"]
    problem = "metadata.labels is not a map"
    assert [(kind, key) for kind, key, _ in reported] == [
        ("Node", "x"),
        ("Node", "y"),
        ("Node", "y"),
        ("AcceleratorClass", "x"),
    ]
    assert reported[0] == ("Node", "x", problem)
    assert caplog.messages[:3] == [f"inventory: Node {key} skipped: {problem}" for key in "xyy"]
    assert len(caplog.messages) == 4 and caplog.messages[3].startswith("inventory: AcceleratorClass x skipped: ")
    assert "spec" in reported[3][2]


def test_a_missing_resource_version_is_said_as_an_empty_one() -> None:
    store = InventoryStore()
    reported: list[str] = []
    ViewBuilder(store, GPU, lambda kind, key, problem: reported.append(key))
    store.replace_all("Node", [bad_node("x", None)])
    store.upsert("Node", bad_node("x", ""))  # (only its version changed: kept, no rebuild)
    store.upsert("Node", node("other"))
    assert reported == ["x"]


def accelerator_class(name: str, product: str) -> dict[str, Any]:
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "AcceleratorClass",
        "metadata": {"name": name},
        "spec": {
            "vendor": "nvidia",
            "discovery": {"nodeSelector": {"nvidia.com/gpu.product": product}},
            "capabilities": {"memoryGB": "80Gi", "computeCapability": "9.0"},
        },
    }


def product_node(name: str, product: str, gpus: int) -> dict[str, Any]:
    return node(name, "1", gpus, **{"nvidia.com/gpu.product": product})


def test_nodes_in_several_classes_and_gpu_nodes_in_none_are_said_when_that_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InventoryStore()
    ViewBuilder(store, GPU)
    store.replace_all("AcceleratorClass", [accelerator_class("a", "P"), accelerator_class("b", "P")])
    nodes = [product_node(f"m{i:02}", "P", 8) for i in range(11)]  # in both classes
    nodes += [product_node(f"u{i:02}", "Q", 1) for i in range(11)]  # GPU nodes in none
    nodes.append(product_node("z", "Q", 0))  # in none, but no GPU node
    with caplog.at_level(logging.INFO, logger="gpu_extender.inventory"):
        store.replace_all("Node", nodes)
        store.upsert("Node", product_node("z2", "Q", 0))  # the same nodes to say: not said again
        store.upsert("Node", product_node("u11", "Q", 1))  # one more: said again
    several = "inventory: 11 node(s) in several AcceleratorClasses: " + "; ".join(f"m{i:02}: a, b" for i in range(10))
    none = (
        "inventory: {} GPU node(s) match no AcceleratorClass (OME pods with class rules cannot land there): "
        + ", ".join(f"u{i:02}" for i in range(10))
    )
    said = [r.getMessage() for r in caplog.records if r.module == "inventory_view"]
    assert said == [several, none.format(11), several, none.format(12)]


def test_a_rebuild_reuses_what_it_read_of_the_objects_that_did_not_change() -> None:
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    store.replace_all("AcceleratorClass", [accelerator_class("a", "P"), accelerator_class("b", "P")])
    store.replace_all("Node", [product_node("n1", "P", 8)])
    first = views.current
    store.upsert("Node", product_node("n2", "Q", 8))  # another node: n1 is neither parsed nor classified again
    second = views.current
    assert second.node_labels["n1"] is first.node_labels["n1"]
    assert second.membership.classes_of("n1") is first.membership.classes_of("n1") == ("a", "b")
    store.upsert("AcceleratorClass", accelerator_class("b", "Q"))  # a class changed: every node again
    assert views.current.membership.classes_of("n1") == ("a",)
    assert views.current.membership.classes_of("n2") == ("b",)


def test_a_node_without_a_usable_name_or_gpu_count_is_invalid() -> None:
    store = InventoryStore()
    problems: dict[str, str] = {}
    views = ViewBuilder(store, GPU, lambda kind, key, problem: problems.update({key: problem}))
    nameless, numbered, uncounted = node(""), node("n"), node("m")
    numbered["metadata"]["name"] = 5
    uncounted["status"]["allocatable"]["nvidia.com/gpu"] = "many"
    store.replace_all("Node", [nameless, numbered, uncounted, node("ok", gpus=2)])
    assert views.current.allocatable_gpus == {"ok": 2} and views.current.invalid == {"Node": 3}
    assert problems[""] == problems["5"] == "metadata.name is missing"
    assert "status.allocatable[nvidia.com/gpu]" in problems["m"]


def runtime(name: str, namespace: str | None = None, kind: str = "ClusterServingRuntime") -> dict[str, Any]:
    meta = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    spec = {"supportedModelFormats": [{"name": "safetensors"}]}
    return {"apiVersion": "ome.io/v1beta1", "kind": kind, "metadata": meta, "spec": spec}


def model(name: str, namespace: str | None = None, kind: str = "ClusterBaseModel") -> dict[str, Any]:
    meta = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    spec = {"modelFormat": {"name": "safetensors"}, "storage": {"storageUri": "hf://org/model"}}
    return {"apiVersion": "ome.io/v1beta1", "kind": kind, "metadata": meta, "spec": spec}


def test_namespaced_and_cluster_runtimes_and_models_are_all_read_and_an_invalid_one_skips_itself_only() -> None:
    store = InventoryStore()
    reported: list[tuple[str, str, str]] = []
    views = ViewBuilder(store, GPU, lambda kind, key, problem: reported.append((kind, key, problem)))
    bad = runtime("bad", "llm", "ServingRuntime")
    bad["spec"] = "x"
    store.replace_all("ServingRuntime", [bad, runtime("r", "llm", "ServingRuntime")])
    store.replace_all("ClusterServingRuntime", [runtime("c")])
    store.replace_all("BaseModel", [model("m", "llm", "BaseModel")])
    store.replace_all("ClusterBaseModel", [model("cm")])
    view = views.current
    assert sorted(r.name for r in view.runtimes) == ["c", "r"] and sorted(m.name for m in view.models) == ["cm", "m"]
    assert sorted(view.objects["ServingRuntime"]) == ["llm/r"]
    problem = "ServingRuntime 'llm/bad': spec: expected an object, got str 'x'"
    assert reported == [("ServingRuntime", "llm/bad", problem)] and view.invalid == {"ServingRuntime": 1}


def test_invalid_device_classes_and_slices_skip_themselves_only_and_are_reported() -> None:
    store = InventoryStore()
    problems: list[tuple[str, str, str]] = []
    views = ViewBuilder(store, GPU, lambda kind, key, problem: problems.append((kind, key, problem)))
    bad_class = device_class("bad")
    bad_class["spec"] = "x"
    bad_slice = gpu_slice("n0", 1)
    del bad_slice["spec"]["driver"]
    store.replace_all("ResourceSlice", [bad_slice, gpu_slice("n1", 2)])
    store.replace_all("DeviceClass", [bad_class, device_class()])
    view = views.current
    assert len(view.dra.devices("n1")) == 2 and view.invalid == {"ResourceSlice": 1, "DeviceClass": 1}
    assert [(kind, key) for kind, key, _ in problems] == [
        ("ResourceSlice", bad_slice["metadata"]["name"]),
        ("DeviceClass", "bad"),
    ]
    assert all(isinstance(problem, str) and problem and problem != "None" for *_, problem in problems)


def test_a_class_that_names_the_gpu_resource_selects_devices_of_any_type() -> None:
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    store.replace_all("DeviceClass", [device_class(cel="device.driver == 'gpu.nvidia.com'")])
    store.replace_all("ResourceSlice", [gpu_slice("n1", 2)])
    assert len(views.current.dra.devices("n1")) == 2


def test_a_pool_naming_a_device_twice_is_said_by_pool_and_driver(caplog: pytest.LogCaptureFixture) -> None:
    store = InventoryStore()
    ViewBuilder(store, GPU)
    store.replace_all("DeviceClass", [device_class()])
    with caplog.at_level(logging.WARNING, logger="gpu_extender.inventory"):
        caplog.clear()  # (what was logged before, at whatever level another test left the logger at)
        store.replace_all("ResourceSlice", [resource_slice("n1", [gpu_device(0), gpu_device(0)])])
    assert caplog.messages == [
        "inventory: DRA pool n1 of driver gpu.nvidia.com names a device twice in its newest generation; its devices "
        "are not counted (kube-scheduler's allocator refuses the pool too)"
    ]
