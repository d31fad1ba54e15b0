"""Rules of the inventory store (state/inventory_store.py) that mutation testing (mutmut) found no
test holding; each test fails on a one-line change to the module: the version starts at 0 and
grows by one per change, each listener hearing the kind; delete removes a stored object once and
ignores a missing or nameless one; the first full list of a kind is logged once and marks it
synced; a nameless object is logged with its kind; Nodes (by replace_all and upsert) and
ResourceSlices are kept slim, other kinds whole; the slim Node's exact shape; a Node update
without status is compared, not refused."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gpuextender.extender.model.dra import relevant_slice_part
from gpuextender.extender.model.kube_objects import KIND_BY_NAME
from gpuextender.extender.state.inventory_store import InventoryStore, relevant_node_part
from gpuextender.extender.state.node_gpu_status import CONDITION_TYPE

LOGGER = "gpu_extender.inventory"


def fat_node(name: str = "n", rv: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": rv,
            "uid": "u-1",
            "labels": {"a": "b"},
            "annotations": {"x": "y"},
        },
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "images": ["big"]},
    }


def slim_node(name: str = "n", rv: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"a": "b"}, "resourceVersion": rv, "uid": "u-1"},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }


def heard(store: InventoryStore) -> list[str]:
    kinds: list[str] = []
    store.on_change(kinds.append)
    return kinds


def test_the_version_starts_at_0_and_grows_by_one_per_change() -> None:
    store = InventoryStore()
    assert store.version == 0
    store.upsert("Node", fat_node("a"))
    store.upsert("Node", fat_node("b"))
    assert store.version == 2


def test_delete_removes_a_stored_object_once_and_tells_its_kind() -> None:
    store = InventoryStore()
    store.upsert("Node", fat_node())
    kinds = heard(store)
    store.delete("Node", fat_node())
    assert store.get("Node", "n") is None and store.version == 2 and kinds == ["Node"]
    store.delete("Node", fat_node())  # no longer there: no change
    assert store.version == 2 and kinds == ["Node"]


def test_deleting_a_nameless_object_changes_nothing_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    store = InventoryStore()
    store.upsert("Node", fat_node())
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        store.delete("Node", {"metadata": {}})
    assert store.version == 1 and store.get("Node", "n") is not None
    assert [r.getMessage() for r in caplog.records] == ["inventory: Node object without metadata.name skipped"]


def test_upserting_a_nameless_object_is_logged_with_its_kind(caplog: pytest.LogCaptureFixture) -> None:
    store = InventoryStore()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        store.upsert("Node", {"metadata": {"labels": {}}})
    assert store.version == 0
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "inventory: Node object without metadata.name skipped")
    ]


def test_the_first_full_list_of_a_kind_is_logged_once_and_marks_it_synced(caplog: pytest.LogCaptureFixture) -> None:
    store = InventoryStore()
    kinds = heard(store)
    assert not store.synced("Node")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        store.replace_all("Node", [fat_node()])
        store.replace_all("Node", [fat_node(), fat_node("m")])
    assert store.synced("Node") and not store.synced("ResourceSlice")
    assert [r.getMessage() for r in caplog.records] == ["inventory: Node synced (1 object(s))"]
    assert kinds == ["Node", "Node"]


def test_an_unknown_kind_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError) as raised:
        InventoryStore().objects("Nope")
    assert str(raised.value) == f"unknown kind 'Nope'; known: {sorted(KIND_BY_NAME)}"


def test_nodes_are_kept_slim_by_replace_all_and_upsert() -> None:
    store = InventoryStore()
    store.replace_all("Node", [fat_node("a")])
    store.upsert("Node", fat_node("b"))
    assert store.get("Node", "a") == slim_node("a")
    assert store.get("Node", "b") == slim_node("b")


def test_resource_slices_are_kept_slim_other_kinds_whole() -> None:
    devices = {"driver": "gpu.nvidia.com", "devices": [{"name": "gpu-0", "attributes": {"junk": {"string": "x"}}}]}
    sliced = {"metadata": {"name": "s"}, "spec": devices}
    assert relevant_slice_part(sliced) != sliced
    other = {"metadata": {"name": "s"}, "spec": devices}
    store = InventoryStore()
    store.upsert("ResourceSlice", sliced)
    store.upsert("AcceleratorClass", other)
    assert store.get("ResourceSlice", "s") == relevant_slice_part(sliced)
    assert store.get("AcceleratorClass", "s") == other


def test_a_slim_node_keeps_its_api_version_or_says_v1() -> None:
    node = {"apiVersion": "v9", "kind": "Whatever", "metadata": {"name": "n"}}
    assert relevant_node_part(node) == {"apiVersion": "v9", "kind": "Node", "metadata": {"name": "n"}}
    assert relevant_node_part({"metadata": {"name": "n"}}) == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n"},
    }


def test_a_status_without_allocatable_is_left_out() -> None:
    node = {"metadata": {"name": "n"}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    assert "status" not in relevant_node_part(node)


def test_a_status_that_is_not_a_mapping_is_kept_as_it_is() -> None:
    assert relevant_node_part({"metadata": {"name": "n"}, "status": "bad"})["status"] == "bad"


def test_only_the_first_of_our_conditions_is_kept() -> None:
    first = {"type": CONDITION_TYPE, "status": "True"}
    second = {"type": CONDITION_TYPE, "status": "False"}
    node = {"metadata": {"name": "n"}, "status": {"allocatable": {}, "conditions": [first, second]}}
    assert relevant_node_part(node)["status"] == {"allocatable": {}, "conditions": [first]}


def test_a_node_update_without_status_that_changes_nothing_else_is_no_change() -> None:
    store = InventoryStore()
    store.upsert("Node", {"metadata": {"name": "n", "resourceVersion": "1"}})
    store.upsert("Node", {"metadata": {"name": "n", "resourceVersion": "2"}})
    assert store.version == 1
    assert store.get("Node", "n") == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "resourceVersion": "2"},
    }


def test_a_nameless_object_in_a_full_list_is_skipped_and_logged_with_its_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InventoryStore()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        store.replace_all("Node", [{"metadata": {}}, fat_node()])
    assert store.counts()["Node"] == 1
    assert [r.getMessage() for r in caplog.records] == ["inventory: Node object without metadata.name skipped"]
