"""Rules of the snapshot (decide/snapshot.py) that mutation testing found no test holding: the
nodes of some classes come from the given cache, asked with those classes, and without a cache from
the snapshot's classes per node. Each test fails on a one-line change to the module."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from gpuextender.extender.decide.snapshot import Snapshot
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.inventory_view import InventoryView

CLASSES_BY_NODE = {"a": ("h100",), "b": ("a100",), "c": ("h100", "a100")}


def snapshot(nodes_in: Callable[[tuple[str, ...]], frozenset[str]] | None = None) -> Snapshot:
    return Snapshot(
        lambda node: None,
        cast(InventoryView, None),
        CLASSES_BY_NODE,
        0.0,
        DecisionPolicy(),
        nodes_in=nodes_in,
    )


def test_without_a_cache_the_nodes_of_classes_come_from_the_classes_per_node() -> None:
    assert snapshot().nodes_of(("h100",)) == frozenset({"a", "c"})
    assert snapshot().nodes_of(("a100", "h100")) == frozenset({"a", "b", "c"})


def test_the_cache_is_asked_with_the_classes_and_its_answer_used() -> None:
    asked: list[tuple[str, ...]] = []

    def cache(classes: tuple[str, ...]) -> frozenset[str]:
        asked.append(classes)
        return frozenset({"cached"})

    assert snapshot(cache).nodes_of(("h100",)) == frozenset({"cached"})
    assert asked == [("h100",)]
