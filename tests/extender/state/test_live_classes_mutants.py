"""Rules of LiveClasses (state/live_classes.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: the first view is built whatever
its version (0 and 1 alike), facts that change after a build at version 0 refine at once; a node
whose facts are forgotten goes back to its label classes; every label class is checked (not
only up to the first kept one) with the tolerance given; a mismatch is logged once per node and
class, with the whole sentence; the nodes_in cache keeps its answers until membership changes
and holds 256 class lists before it is cleared."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.live_classes import _NODES_IN_CACHE, LiveClasses
from tests.extender.decide.test_class_plan import view  # noqa: F401  (module fixture: examples/ome inventory)
from tests.extender.state.test_live_classes import A100_40, H100, send

A100 = "nvidia-a100-80gb"


def with_copy(view: InventoryView) -> InventoryView:
    """`view` with a class "copy" that asks what nvidia-a100-80gb asks, on both A100 nodes' labels."""
    classes = {**view.classes, "copy": replace(view.classes[A100], name="copy")}
    by_node = dict(view.membership.classes_by_node)
    by_node["a100-80-node"] = ("nvidia-h100-80gb", A100, "copy")
    by_node["h100-node"] = (A100, "copy")
    return replace(
        view, version=view.version + 1, classes=classes, membership=replace(view.membership, classes_by_node=by_node)
    )


@pytest.mark.parametrize("version", [0, 1])
def test_the_first_view_is_built_at_any_version(view: InventoryView, version: int) -> None:
    live = LiveClasses(GpuState(IdleRule()))
    assert live.classes_by_node(replace(view, version=version))["a100-80-node"] == (A100,)


def test_facts_after_a_build_at_version_0_refine_at_once(view: InventoryView) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state)
    first = replace(view, version=0)
    assert live.classes_by_node(first)["a100-80-node"] == (A100,)
    send(state, "a100-80-node", A100_40)
    assert live.classes_by_node(first)["a100-80-node"] == ()


def test_a_forgotten_node_goes_back_to_its_label_classes(view: InventoryView) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state)
    send(state, "a100-80-node", A100_40, seq=1)
    assert live.classes_by_node(view)["a100-80-node"] == ()
    assert state.forget_older_than(2.0) == ["a100-80-node"]
    assert live.classes_by_node(view)["a100-80-node"] == (A100,)
    assert live.excluded(view, "a100-80-node") == {}


def test_every_label_class_is_checked_after_a_kept_one(view: InventoryView) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state)
    send(state, "a100-80-node", H100)  # keeps the H100 class, fails both A100 ones (compute capability)
    edited = with_copy(view)
    assert live.classes_by_node(edited)["a100-80-node"] == ("nvidia-h100-80gb",)
    assert set(live.excluded(edited, "a100-80-node")) == {A100, "copy"}


def test_the_memory_tolerance_given_is_the_one_checked(view: InventoryView) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state, memory_tolerance=0.0)
    send(state, "a100-80-node", ("NVIDIA A100-SXM4-80GB", 79, (8, 0)))  # within the default 5 %, not 0 %
    assert live.classes_by_node(view)["a100-80-node"] == ()
    assert live.excluded(view, "a100-80-node")[A100].check == "memory"


def test_the_same_mismatch_is_logged_once_per_node_and_class(
    view: InventoryView,
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state)
    send(state, "a100-80-node", A100_40)
    send(state, "h100-node", A100_40)
    with caplog.at_level(logging.WARNING, logger="gpu_extender.classes"):
        live.classes_by_node(with_copy(view))
    lines = sorted(r.getMessage() for r in caplog.records)
    assert [line.split(" by ")[0] for line in lines] == [
        "node a100-80-node matches AcceleratorClass copy",
        "node a100-80-node matches AcceleratorClass nvidia-a100-80gb",
        "node a100-80-node matches AcceleratorClass nvidia-h100-80gb",
        "node h100-node matches AcceleratorClass copy",
        "node h100-node matches AcceleratorClass nvidia-a100-80gb",
    ]
    detail = live.excluded(with_copy(view), "h100-node")[A100].detail
    assert lines[4] == (
        f"node h100-node matches AcceleratorClass nvidia-a100-80gb by its labels but not by its GPUs ({detail}): "
        "left out of the class; check the node's labels"
    )


def test_nodes_in_keeps_its_answer_while_membership_stays(view: InventoryView) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state)
    wanted = (A100, "nvidia-h100-80gb")
    first = live.nodes_in(view, wanted)
    send(state, "h100-node", H100)  # facts that keep the node in its class
    assert live.nodes_in(view, wanted) is first


def test_the_nodes_in_cache_is_cleared_past_256_class_lists(view: InventoryView) -> None:
    live = LiveClasses(GpuState(IdleRule()))
    assert _NODES_IN_CACHE == 256
    first = live.nodes_in(view, (A100, "c0"))
    for i in range(1, _NODES_IN_CACHE):
        live.nodes_in(view, (A100, f"c{i}"))
    assert live.nodes_in(view, (A100, "c0")) is first  # 256 lists held
    live.nodes_in(view, (A100, "one-more"))  # the 257th clears them
    again = live.nodes_in(view, (A100, "c0"))
    assert again == first and again is not first
