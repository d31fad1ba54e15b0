"""The file inventory: YAML on disk -> store -> the view the request path reads."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from extender.inventory.file_source import FileInventorySource, InventoryPathError
from extender.inventory.store import InventoryStore
from extender.inventory.view import ViewBuilder
from tests.harness import ROOT

GPU = ("nvidia.com/gpu",)


def build(path: Path) -> tuple[FileInventorySource, InventoryStore, ViewBuilder, list]:
    store = InventoryStore()
    invalid: list = []
    views = ViewBuilder(store, GPU, on_invalid=lambda kind, key, problem: invalid.append((kind, key, problem)))
    source = FileInventorySource(path, store)
    return source, store, views, invalid


def touch_later(path: Path, text: str) -> None:
    """Write and move the mtime forward, so a change within the same second is seen."""
    before = path.stat().st_mtime if path.exists() else 0
    path.write_text(text)
    os.utime(path, (before + 2, before + 2))


def test_demo_inventory_loads_and_marks_every_kind_synced() -> None:
    source, store, views, invalid = build(ROOT / "examples" / "demo" / "inventory")
    assert not store.ready
    assert source.load()
    assert store.ready and invalid == []
    assert views.current.allocatable_gpus == {"gpu-node-1": 8, "gpu-node-2": 8, "gpu-node-3": 8, "cpu-node-1": 0}
    assert views.current.node_labels["gpu-node-1"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert not source.load()  # nothing changed on disk


NODES = """
kind: Node
metadata: {name: good, resourceVersion: "1"}
status: {allocatable: {nvidia.com/gpu: '4'}}
---
kind: Node
metadata: {name: bad, resourceVersion: "1"}
status: {allocatable: {nvidia.com/gpu: eighty}}
---
kind: Node
metadata: {}
---
kind: ConfigMap
metadata: {name: ignored}
"""


def test_bad_objects_are_skipped_with_one_log_line_each(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "nodes.yaml").write_text(NODES)
    (tmp_path / "notes.txt").write_text("not inventory")
    source, store, views, invalid = build(tmp_path)
    with caplog.at_level(logging.WARNING):
        source.load()
        views.rebuild()  # a rebuild does not log the same bad object again
    assert views.current.allocatable_gpus == {"good": 4}
    assert invalid == [("Node", "bad", "status.allocatable[nvidia.com/gpu]: 'eighty' is not a Kubernetes quantity")]
    assert views.current.invalid == {"Node": 1}
    messages = [r.message for r in caplog.records]
    assert sum("Node bad skipped" in m for m in messages) == 1
    assert any("without metadata.name" in m for m in messages)


def test_changes_on_disk_are_picked_up_and_broken_saves_keep_the_last_good_content(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("kind: Node\nmetadata: {name: a}\nstatus: {allocatable: {nvidia.com/gpu: '8'}}\n")
    source, store, views, _ = build(tmp_path)
    source.load()
    assert views.current.allocatable_gpus == {"a": 8}

    touch_later(nodes, "kind: Node\nmetadata: {name: a}\nstatus: {allocatable: {nvidia.com/gpu: '2'}}\n")
    assert source.load() and views.current.allocatable_gpus == {"a": 2}

    with caplog.at_level(logging.WARNING):
        touch_later(nodes, "kind: Node\nmetadata: [\n")  # half-written save
        source.load()
    assert views.current.allocatable_gpus == {"a": 2}
    assert any("keeping its previous content" in r.message for r in caplog.records)

    extra = tmp_path / "more.yml"
    touch_later(extra, "apiVersion: v1\nkind: List\nitems:\n- kind: Node\n  metadata: {name: b}\n")
    source.load()
    assert views.current.allocatable_gpus == {"a": 2, "b": 0}
    extra.unlink()
    source.load()
    assert views.current.allocatable_gpus == {"a": 2}


def test_missing_inventory_path() -> None:
    with pytest.raises(InventoryPathError, match="no such file or directory"):
        FileInventorySource(Path("/nonexistent/inventory"), InventoryStore())


def test_store_keys_and_deletes() -> None:
    store = InventoryStore()
    changes: list[str] = []
    store.on_change(changes.append)
    runtime = {"kind": "ServingRuntime", "metadata": {"name": "vllm", "namespace": "team-a"}}
    store.upsert("ServingRuntime", runtime)
    assert store.get("ServingRuntime", "team-a/vllm") is runtime
    store.delete("ServingRuntime", {"metadata": {"name": "vllm", "namespace": "team-a"}})
    store.delete("ServingRuntime", {"metadata": {"name": "vllm", "namespace": "team-a"}})  # already gone: no change
    assert store.objects("ServingRuntime") == [] and changes == ["ServingRuntime", "ServingRuntime"]
    with pytest.raises(ValueError, match="unknown kind"):
        store.upsert("Pod", runtime)



def full_node(rv: str, labels: dict, gpus: str = "8", heartbeat: str = "2026-11-22T10:00:00Z") -> dict:
    """A Node the way the API server sends it: most of it is status the extender never reads."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-1", "resourceVersion": rv, "uid": "u-1", "labels": labels,
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}, "managedFields": [{"manager": "kubelet"}]},
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {"allocatable": {"nvidia.com/gpu": gpus, "cpu": "64"}, "capacity": {"nvidia.com/gpu": gpus},
                       "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}],
                       "images": [{"names": ["registry/vllm:latest"], "sizeBytes": 9_000_000_000}]}}  # fmt: skip


def test_nodes_are_stored_slim_and_status_only_updates_are_not_changes() -> None:
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    changes: list[str] = []
    store.on_change(changes.append)
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    store.replace_all("Node", [full_node("1", labels)])
    assert store.get("Node", "gpu-1") == {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-1", "labels": labels, "resourceVersion": "1", "uid": "u-1"},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64"}},
    }  # fmt: skip
    version = store.version
    store.upsert("Node", full_node("2", labels, heartbeat="2026-11-22T10:05:00Z"))  # the kubelet's status write
    assert store.version == version and changes == ["Node"]
    assert store.get("Node", "gpu-1")["metadata"]["resourceVersion"] == "2"  # kept current all the same
    store.upsert("Node", full_node("3", {**labels, "team": "llm"}))  # a label: a change
    store.upsert("Node", full_node("4", {**labels, "team": "llm"}, gpus="7"))  # allocatable: a change
    assert changes == ["Node", "Node", "Node"]
    assert views.current.allocatable_gpus == {"gpu-1": 7} and views.current.node_labels["gpu-1"]["team"] == "llm"


def test_one_changed_node_is_reparsed_and_the_rest_reused() -> None:
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    store.upsert("AcceleratorClass", {"kind": "AcceleratorClass", "metadata": {"name": "h100"},
                                      "spec": {"capabilities": {"memoryGB": "80Gi"}, "discovery": {
                                          "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}})  # fmt: skip
    for i in range(3):
        store.upsert("Node", {"kind": "Node", "metadata": {"name": f"n{i}", "labels": {}},
                              "status": {"allocatable": {"nvidia.com/gpu": "8"}}})  # fmt: skip
    assert views.current.membership.classes_by_node == {"n0": (), "n1": (), "n2": ()}
    store.upsert("Node", {"kind": "Node", "metadata": {"name": "n1", "labels": {
        "nvidia.com/gpu.product": "NVIDIA H100 80GB HBM3"}}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    assert views.current.membership.classes_by_node == {"n0": (), "n1": ("h100",), "n2": ()}
    # A class edit re-classifies every node, cached or not.
    store.upsert("AcceleratorClass", {"kind": "AcceleratorClass", "metadata": {"name": "h100"},
                                      "spec": {"capabilities": {"memoryGB": "80Gi"}, "discovery": {
                                          "nodeSelector": {}}}})  # fmt: skip
    assert views.current.membership.classes_by_node == {"n0": ("h100",), "n1": ("h100",), "n2": ("h100",)}


CLASSED = """
kind: AcceleratorClass
metadata: {name: h100}
spec: {vendor: nvidia, capabilities: {memoryGB: 80Gi}, discovery: {nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}}
---
kind: AcceleratorClass
metadata: {name: hopper}
spec: {vendor: nvidia, capabilities: {memoryGB: 80Gi}, discovery: {nodeSelector: {nvidia.com/gpu.family: hopper}}}
---
kind: Node
metadata: {name: both, labels: {nvidia.com/gpu.product: NVIDIA H100 80GB HBM3, nvidia.com/gpu.family: hopper}}
status: {allocatable: {nvidia.com/gpu: '8'}}
---
kind: Node
metadata: {name: unlabelled-gpu-node}
status: {allocatable: {nvidia.com/gpu: '8'}}
---
kind: Node
metadata: {name: cpu-node}
status: {allocatable: {cpu: '64'}}
"""


def test_nodes_in_several_classes_or_none_are_logged_when_that_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "inventory.yaml").write_text(CLASSED)
    source, _, views, _ = build(tmp_path)
    with caplog.at_level(logging.INFO, logger="gpu_extender.inventory"):
        source.load()
        views.rebuild()  # the same membership: not logged again
    messages = [r.message for r in caplog.records if "node(s)" in r.message]
    assert messages == [
        "inventory: 1 node(s) in several AcceleratorClasses: both: h100, hopper",
        "inventory: 1 GPU node(s) match no AcceleratorClass (OME pods with class rules cannot land there): "
        "unlabelled-gpu-node",
    ]  # the CPU node is in no class either, and that is expected
    assert views.current.membership.classes_of("both") == ("h100", "hopper")


def test_rebuild_listeners_get_each_new_view() -> None:
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    seen: list[int] = []
    views.on_rebuild(lambda view: seen.append(view.version))
    store.upsert("Node", {"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    store.upsert("Node", {"kind": "Node", "metadata": {"name": "n2"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    assert seen == [1, 2] and views.current.version == 2
