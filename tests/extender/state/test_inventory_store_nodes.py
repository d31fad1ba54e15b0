"""What the inventory keeps of a Node for the node-status writer (issue 35): its taints (up to a
bound) and the GPUsUsable condition only; a change of either rebuilds nothing."""

from __future__ import annotations

from typing import Any

from gpuextender.extender.model.kube_objects import NODE
from gpuextender.extender.state.inventory_store import MAX_KEPT_TAINTS, InventoryStore, relevant_node_part


def node(taints: int = 0, conditions: tuple[str, ...] = (), rv: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "labels": {"a": "b"}, "resourceVersion": rv, "uid": "u1"},
        "spec": {"taints": [{"key": f"k{i}", "effect": "NoSchedule"} for i in range(taints)]},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": t, "status": "True", "message": "m"} for t in conditions],
            "images": [{"names": ["big"], "sizeBytes": 1}],
        },
    }


def test_the_taints_up_to_the_bound_and_our_condition_only_are_kept() -> None:
    kept = relevant_node_part(node(MAX_KEPT_TAINTS + 1, ("Ready", "GPUsUsable", "MemoryPressure")))
    assert len(kept["spec"]["taints"]) == MAX_KEPT_TAINTS == 64
    assert kept["status"] == {
        "allocatable": {"nvidia.com/gpu": "8"},
        "conditions": [node(0, ("GPUsUsable",))["status"]["conditions"][0]],
    }
    assert relevant_node_part(node(MAX_KEPT_TAINTS))["spec"]["taints"][-1]["key"] == "k63"
    assert "spec" not in relevant_node_part(node(0))  # no taints: nothing kept
    assert "conditions" not in relevant_node_part(node(0, ("Ready",)))["status"]


def test_a_new_taint_or_condition_is_stored_but_rebuilds_nothing() -> None:
    store = InventoryStore()
    changes: list[str] = []
    store.on_change(changes.append)
    store.upsert(NODE.kind, node(rv="1"))
    assert changes == [NODE.kind]
    store.upsert(NODE.kind, node(1, ("GPUsUsable",), rv="2"))
    assert changes == [NODE.kind]  # no rebuild for our own write
    stored = store.get(NODE.kind, "n1")
    assert stored is not None and stored["spec"]["taints"] == [{"key": "k0", "effect": "NoSchedule"}]
    assert stored["status"]["conditions"][0]["type"] == "GPUsUsable"
    store.upsert(NODE.kind, {**node(rv="3"), "metadata": {**node()["metadata"], "labels": {"a": "c"}}})
    assert changes == [NODE.kind, NODE.kind]  # a label a decision reads: a rebuild
