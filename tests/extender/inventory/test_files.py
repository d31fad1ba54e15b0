"""The file inventory: YAML on disk -> store -> the view the request path reads."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import yaml

from gpuextender.extender.inventory.files import FileInventorySource, InventoryPathError
from gpuextender.extender.state.claim_ledger import ClaimLedger
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import ViewBuilder
from gpuextender.extender.state.pod_ledger import PodLedger
from tests.extender.dra_objects import allocated_claim, device_class, gpu_slice
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
    source, _store, views, invalid = build(tmp_path)
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
    source, _store, views, _ = build(tmp_path)
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
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu-1",
            "resourceVersion": rv,
            "uid": "u-1",
            "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"podCIDR": "10.0.0.0/24"},
        "status": {
            "allocatable": {"nvidia.com/gpu": gpus, "cpu": "64"},
            "capacity": {"nvidia.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}],
            "images": [{"names": ["registry/vllm:latest"], "sizeBytes": 9_000_000_000}],
        },
    }


def test_nodes_are_stored_slim_and_status_only_updates_are_not_changes() -> None:
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    changes: list[str] = []
    store.on_change(changes.append)
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    store.replace_all("Node", [full_node("1", labels)])
    assert store.get("Node", "gpu-1") == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "labels": labels, "resourceVersion": "1", "uid": "u-1"},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64"}},
    }
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
    store.upsert(
        "AcceleratorClass",
        {
            "kind": "AcceleratorClass",
            "metadata": {"name": "h100"},
            "spec": {
                "capabilities": {"memoryGB": "80Gi"},
                "discovery": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            },
        },
    )
    for i in range(3):
        store.upsert(
            "Node",
            {
                "kind": "Node",
                "metadata": {"name": f"n{i}", "labels": {}},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            },
        )
    assert views.current.membership.classes_by_node == {"n0": (), "n1": (), "n2": ()}
    store.upsert(
        "Node",
        {
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA H100 80GB HBM3"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        },
    )
    assert views.current.membership.classes_by_node == {"n0": (), "n1": ("h100",), "n2": ()}
    # A class edit re-classifies every node, cached or not.
    store.upsert(
        "AcceleratorClass",
        {
            "kind": "AcceleratorClass",
            "metadata": {"name": "h100"},
            "spec": {"capabilities": {"memoryGB": "80Gi"}, "discovery": {"nodeSelector": {}}},
        },
    )
    assert views.current.membership.classes_by_node == {"n0": ("h100",), "n1": ("h100",), "n2": ("h100",)}


CLASSED = """
kind: AcceleratorClass
metadata: {name: h100}
spec:
  vendor: nvidia
  capabilities: {memoryGB: 80Gi}
  discovery: {nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
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
    store.upsert(
        "Node", {"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    )
    store.upsert(
        "Node", {"kind": "Node", "metadata": {"name": "n2"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    )
    assert seen == [1, 2] and views.current.version == 2


TWO_NODES = """
kind: Node
metadata: {name: a}
status: {allocatable: {nvidia.com/gpu: '8'}}
---
kind: Node
metadata: {name: b}
status: {allocatable: {nvidia.com/gpu: '8'}}
"""

ONE_NODE = "kind: Node\nmetadata: {name: c}\nstatus: {allocatable: {nvidia.com/gpu: '4'}}\n"

# What a file can hold in the middle of a non-atomic save (truncate, then write piecemeal), or by mistake.
UNUSABLE = {
    "0 bytes": ("", "is empty"),
    "whitespace": ("\n  \n", "is empty"),
    "only comments": ("# nodes, being rewritten\n", "is empty"),  # decided: empty, like 0 bytes
    "only document markers": ("---\n# c\n---\n", "is empty"),
    "a scalar": ("hello\n", "document 0 is str 'hello', not a Kubernetes object"),
    "a number": ("42\n", "document 0 is int 42, not a Kubernetes object"),
    "a top-level list": (
        "- kind: Node\n  metadata: {name: a}\n",
        "document 0 is list (1 item), not a Kubernetes object",
    ),
    "a mapping without kind (the first line of a save)": ("apiVersion: v1\n", "document 0 has no kind"),
    "a truncated second document": (TWO_NODES.split("---")[0] + "---\nkin\n", "document 1 is str 'kin'"),
    "List items not a list": ("kind: List\nitems: hello\n", "document 0 (List): items is str 'hello', not a list"),
    "List item not an object": ("kind: NodeList\nitems: [hello]\n", "document 0 (NodeList) item 0 is str 'hello'"),
    "does not parse": ("kind: Node\nmetadata: [\n", "does not parse"),
}


@pytest.mark.parametrize("content, why", UNUSABLE.values(), ids=UNUSABLE.keys())
def test_an_unusable_file_keeps_its_last_good_objects_until_it_is_fixed_or_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str, why: str
) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(TWO_NODES)
    (tmp_path / "other.yaml").write_text(ONE_NODE)
    source, store, views, _ = build(tmp_path)
    source.load()
    assert views.current.allocatable_gpus == {"a": 8, "b": 8, "c": 4}

    with caplog.at_level(logging.INFO, logger="gpu_extender.inventory"):
        touch_later(nodes, content)
        assert source.load()
        assert not source.load()  # unchanged on disk: not read, not logged again
    assert views.current.allocatable_gpus == {"a": 8, "b": 8, "c": 4}
    assert len(store.objects("Node")) == 3
    warnings = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"{nodes} {why}" in warnings[0]
    assert "keeping its previous content (2 object(s)): delete the file to remove them" in warnings[0]

    touch_later(nodes, TWO_NODES.replace("'8'", "'2'", 1))  # a valid save after the bad one applies
    source.load()
    assert views.current.allocatable_gpus == {"a": 2, "b": 8, "c": 4}

    touch_later(nodes, content)  # bad again: the newest good content is kept
    source.load()
    assert views.current.allocatable_gpus == {"a": 2, "b": 8, "c": 4}

    nodes.unlink()  # removing the file is how its objects are removed
    source.load()
    assert views.current.allocatable_gpus == {"c": 4}


def test_each_change_to_an_unusable_file_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(TWO_NODES)
    source, _, views, _ = build(tmp_path)
    source.load()
    with caplog.at_level(logging.WARNING, logger="gpu_extender.inventory"):
        for content in ("", "", "hello\n"):  # truncated, touched while still empty, then a scalar
            touch_later(nodes, content)
            source.load()
            source.load()
    assert [r.message.split(";")[0] for r in caplog.records] == [
        f"inventory: {nodes} is empty (no YAML document)",
        f"inventory: {nodes} is empty (no YAML document)",
        f"inventory: {nodes} document 0 is str 'hello', not a Kubernetes object",
    ]
    assert views.current.allocatable_gpus == {"a": 8, "b": 8}


def test_a_file_unusable_when_first_seen_contributes_nothing_until_it_holds_objects(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "good.yaml").write_text(ONE_NODE)
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("")
    source, store, views, _ = build(tmp_path)
    with caplog.at_level(logging.INFO, logger="gpu_extender.inventory"):
        source.load()
    assert store.ready and views.current.allocatable_gpus == {"c": 4}
    ours = [r.message for r in caplog.records if str(nodes) in r.message]
    assert ours == [
        f"inventory: {nodes} is empty (no YAML document); nothing loaded from it until it holds Kubernetes objects"
    ]
    caplog.clear()

    with caplog.at_level(logging.INFO, logger="gpu_extender.inventory"):
        touch_later(nodes, "hello\n")  # still nothing good known: still nothing from it
        source.load()
        assert views.current.allocatable_gpus == {"c": 4}
        touch_later(nodes, TWO_NODES)
        source.load()
    assert views.current.allocatable_gpus == {"a": 8, "b": 8, "c": 4}
    ours = [r.message for r in caplog.records if str(nodes) in r.message]
    assert len(ours) == 2 and "is str 'hello', not a Kubernetes object; nothing loaded from it" in ours[0]
    assert ours[1] == f"inventory: reloaded {nodes} (2 object(s))"

    touch_later(nodes, "")  # from now on there is a last good content to keep
    source.load()
    assert views.current.allocatable_gpus == {"a": 8, "b": 8, "c": 4}


def test_an_empty_list_empties_a_file_on_purpose(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(TWO_NODES)
    source, _, views, _ = build(tmp_path)
    source.load()
    touch_later(nodes, "apiVersion: v1\nkind: List\nitems: []\n")
    source.load()
    assert views.current.allocatable_gpus == {}


def test_objects_of_other_kinds_still_make_a_usable_file(tmp_path: Path) -> None:
    """A ConfigMap is a Kubernetes object we do not use: the file is valid and holds no inventory."""
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(TWO_NODES)
    source, _, views, _ = build(tmp_path)
    source.load()
    touch_later(nodes, "kind: ConfigMap\nmetadata: {name: x}\n")
    source.load()
    assert views.current.allocatable_gpus == {}


def test_a_single_inventory_file_truncated_keeps_its_objects(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(TWO_NODES)
    source, _, views, _ = build(nodes)  # --inventory FILE
    source.load()
    touch_later(nodes, "")
    source.load()
    assert views.current.allocatable_gpus == {"a": 8, "b": 8}


PODS = """
kind: Pod
metadata: {name: serving, namespace: ml, uid: u-1, labels: {ome.io/inferenceservice: llama}}
spec:
  nodeName: gpu-node-1
  containers: [{name: main, resources: {limits: {nvidia.com/gpu: "2"}}}]
status: {phase: Running}
---
kind: List
items:
- kind: Pod
  metadata: {name: by-hand}
  spec:
    nodeName: gpu-node-2
    containers: [{name: main, resources: {requests: {nvidia.com/gpu: "1"}}}]
- kind: Pod
  metadata: {name: pending, namespace: ml, uid: u-3}
  spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: "1"}}}]}
"""

NODE_ONLY = """
kind: Node
metadata: {name: gpu-node-1}
status: {allocatable: {nvidia.com/gpu: '8'}}
"""


def test_pods_in_the_files_go_to_the_ledger_not_the_store(tmp_path: Path) -> None:
    (tmp_path / "nodes.yaml").write_text(NODE_ONLY)
    touch_later(tmp_path / "pods.yaml", PODS)
    store, ledger = InventoryStore(), PodLedger(GPU)
    heard: list[str] = []
    ledger.on_change(heard.append)
    source = FileInventorySource(tmp_path, store, pods=ledger)
    assert source.load()
    assert ledger.synced and store.ready
    assert "Pod" not in store.counts() and store.counts()["Node"] == 1
    [serving] = ledger.pods_on("gpu-node-1")
    assert (serving.uid, serving.key, serving.gpus, serving.phase, serving.inference_service) == (
        "u-1",
        "ml/serving",
        2,
        "Running",
        "llama",
    )
    [by_hand] = ledger.pods_on("gpu-node-2")  # no uid, no namespace: one made from its name
    assert (by_hand.uid, by_hand.key) == ("file:default/by-hand", "default/by-hand")
    assert len(ledger) == 2 and sorted(heard) == ["gpu-node-1", "gpu-node-2"]  # the unbound pod is not held

    heard.clear()
    touch_later(tmp_path / "nodes.yaml", NODE_ONLY.replace("'8'", "'4'"))  # reloaded: pods replaced, unchanged
    assert source.load()
    assert len(ledger) == 2 and heard == [] and [p.key for p in ledger.pods_on("gpu-node-2")] == ["default/by-hand"]

    touch_later(tmp_path / "pods.yaml", PODS.split("---")[0])  # by-hand removed from the file: it leaves
    assert source.load()
    assert len(ledger) == 1 and list(ledger.pods_on("gpu-node-2")) == [] and heard == ["gpu-node-2"]
    (tmp_path / "pods.yaml").unlink()
    assert source.load()
    assert len(ledger) == 0 and list(ledger.nodes()) == []


def test_without_a_ledger_pods_in_the_files_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "pods.yaml").write_text(PODS + "---\n" + NODE_ONLY)
    store = InventoryStore()
    assert FileInventorySource(tmp_path, store).load()
    assert store.ready and "Pod" not in store.counts() and store.counts()["Node"] == 1


def test_dra_objects_in_the_files_claims_to_their_ledger(tmp_path: Path) -> None:
    """DeviceClasses and ResourceSlices go to the store (the view counts the DRA GPUs), ResourceClaims
    to the claim ledger; without a claims sink, claims are ignored."""
    docs = [
        device_class(),
        gpu_slice("gpu-dra-1", 8, tainted=(7,)),
        allocated_claim("two", "gpu-dra-1", ["gpu-0", "gpu-1"]),
    ]
    (tmp_path / "dra.yaml").write_text(yaml.safe_dump_all(docs))
    store, claims = InventoryStore(), ClaimLedger()
    views = ViewBuilder(store, GPU)
    assert FileInventorySource(tmp_path, store, claims=claims).load()
    assert store.counts()["ResourceSlice"] == 1 and store.counts()["DeviceClass"] == 1
    assert "ResourceClaim" not in store.counts()
    assert claims.synced and len(claims.allocated_on("gpu-dra-1")) == 2
    assert len(views.current.dra.devices("gpu-dra-1")) == 8
    store2 = InventoryStore()
    assert FileInventorySource(tmp_path, store2).load()
    assert "ResourceClaim" not in store2.counts() and store2.counts()["ResourceSlice"] == 1
