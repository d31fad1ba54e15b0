"""Class membership refined by NVML facts: GpuState's facts tracking and LiveClasses,
in-process on an inventory of labelled nodes and examples/ome's AcceleratorClasses."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.observe.live_classes_metrics import LiveClassesCollector
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.live_classes import LiveClasses
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import GIB, report
from tests.extender.decide.test_class_plan import view  # noqa: F401  (module fixture: examples/ome inventory)
from tests.extender.ome_reference import classify_nodes


def gpus(count: int, name: str, gib: int | None, cc: tuple[int, int] | None) -> list[pb.GpuSample]:
    out = []
    for i in range(count):
        g = pb.GpuSample(index=i, uuid=f"GPU-{name}-{gib}-{i}", name=name, healthy=True)
        if gib is not None:
            g.memory_total_bytes = gib * GIB
        if cc is not None:
            g.compute_capability.major, g.compute_capability.minor = cc
        out.append(g)
    return out


H100 = ("NVIDIA H100 80GB HBM3", 80, (9, 0))
A100_40 = ("NVIDIA A100-SXM4-40GB", 40, (8, 0))
A100_80 = ("NVIDIA A100-SXM4-80GB", 80, (8, 0))


def send(state: GpuState, node: str, spec: tuple[str, int | None, tuple[int, int] | None], seq: int = 1) -> None:
    assert state.ingest(report(node, gpus(2, *spec), seconds=1000 + seq, seq=seq), float(seq))


def test_facts_change_only_when_the_gpus_do() -> None:
    state = GpuState(IdleRule())
    heard: list[str] = []
    state.on_facts_change(heard.append)
    assert state.facts("n1") is None
    send(state, "n1", H100)
    assert heard == ["n1"]
    assert state.facts("n1") == (GpuFacts("NVIDIA H100 80GB HBM3", 80 * GIB, "9.0"),) * 2
    send(state, "n1", H100, seq=2)  # same GPUs, new readings: nothing to re-check
    assert heard == ["n1"]
    send(state, "n1", ("NVIDIA H100 80GB HBM3", None, (9, 0)), seq=3)  # the memory reading went away
    assert heard == ["n1", "n1"] and state.facts("n1")[0].memory_total_bytes is None
    send(state, "n2", A100_40)
    assert heard == ["n1", "n1", "n2"]


def test_forgetting_a_node_drops_its_facts() -> None:
    state = GpuState(IdleRule())
    heard: list[str] = []
    state.on_facts_change(heard.append)
    send(state, "old", A100_40, seq=1)
    send(state, "new", H100, seq=5)
    assert state.forget_older_than(2.0) == ["old"]
    assert heard == ["old", "new", "old"]
    assert state.facts("old") is None and state.facts("new") is not None


def test_labels_decide_until_the_agent_reports_then_capabilities_too(view: InventoryView) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state)
    by_node = live.classes_by_node(view)
    assert by_node["a100-80-node"] == ("nvidia-a100-80gb",)  # no report: labels only
    assert by_node["h100-node"] == ("nvidia-h100-80gb",)

    send(state, "a100-80-node", A100_40)  # labelled 80 GB, really 40 GB
    send(state, "h100-node", H100)
    by_node = live.classes_by_node(view)
    assert by_node["a100-80-node"] == ()
    assert by_node["h100-node"] == ("nvidia-h100-80gb",)
    why = live.excluded(view, "a100-80-node")["nvidia-a100-80gb"]
    assert why.check == "memory" and "has 40.0 GiB; class needs 80.0 GiB" in why.detail
    assert live.excluded(view, "h100-node") == {}

    send(state, "a100-80-node", A100_80, seq=2)  # the right GPUs now (e.g. after a repair)
    assert live.classes_by_node(view)["a100-80-node"] == ("nvidia-a100-80gb",)
    assert live.excluded_pairs(view) == 0


def test_compute_capability_mismatch_and_unknown_readings(view: InventoryView) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state)
    send(state, "h100-node", ("NVIDIA H100 80GB HBM3", 80, (8, 6)))
    assert live.classes_by_node(view)["h100-node"] == ()
    assert live.excluded(view, "h100-node")["nvidia-h100-80gb"].check == "computeCapability"
    send(state, "h100-node", ("NVIDIA H100 80GB HBM3", None, None), seq=2)  # nothing known: nothing against it
    assert live.classes_by_node(view)["h100-node"] == ("nvidia-h100-80gb",)


def test_a_new_inventory_version_rechecks_reported_nodes(view: InventoryView) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state)
    send(state, "a100-80-node", A100_40)
    assert live.classes_by_node(view)["a100-80-node"] == ()
    # The class is edited to ask for 40 GiB: the same facts now fit.
    cls = view.classes["nvidia-a100-80gb"]
    relaxed = replace(cls, memory_bytes=40 * GIB)
    classes = {**view.classes, "nvidia-a100-80gb": relaxed}
    nodes = [{"metadata": {"name": n, "labels": labels}} for n, labels in view.node_labels.items()]
    edited = replace(
        view, version=view.version + 1, classes=classes, membership=classify_nodes(nodes, classes.values())
    )
    assert live.classes_by_node(edited)["a100-80-node"] == ("nvidia-a100-80gb",)
    assert live.excluded_pairs(edited) == 0


def test_unknown_nodes_are_ignored_and_each_mismatch_is_logged_once(
    view: InventoryView,
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state)
    live.classes_by_node(view)
    send(state, "not-in-inventory", A100_40)
    assert "not-in-inventory" not in live.classes_by_node(view)
    with caplog.at_level(logging.WARNING, logger="gpu_extender.classes"):
        for seq in range(1, 4):
            send(state, "a100-80-node", A100_40 if seq != 2 else ("NVIDIA A100-SXM4-40GB", 24, (8, 0)), seq=seq)
            live.classes_by_node(view)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2  # 40 GiB (seq 1 and 3: the same cause, logged once), 24 GiB (seq 2)
    assert "has 40.0 GiB" in lines[0] and "has 24.0 GiB" in lines[1]
    assert all(
        "a100-80-node matches AcceleratorClass nvidia-a100-80gb by its labels but not by its GPUs" in line
        for line in lines
    )


def test_gauges(view: InventoryView) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state)
    registry = CollectorRegistry()
    registry.register(LiveClassesCollector(live, lambda: view))
    send(state, "a100-80-node", A100_40)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("gpu_extender_class_nodes", accelerator_class="nvidia-a100-80gb") == 0
    assert value("gpu_extender_class_nodes", accelerator_class="nvidia-h100-80gb") == 1
    assert value("gpu_extender_class_capability_mismatches") == 1
    assert value("gpu_extender_gpu_nodes_without_class") == 1  # the mislabelled node, 8 allocatable GPUs
    assert value("gpu_extender_nodes_in_several_classes") == 0


def test_nodes_in_follows_membership_changes(view: InventoryView) -> None:
    state = GpuState(IdleRule())
    live = LiveClasses(state)
    wanted = ("nvidia-a100-80gb", "nvidia-h100-80gb")
    assert live.nodes_in(view, wanted) == {"a100-80-node", "h100-node"}
    assert live.nodes_in(view, wanted) is live.nodes_in(view, wanted)  # cached
    send(state, "a100-80-node", A100_40)
    assert live.nodes_in(view, wanted) == {"h100-node"}
    send(state, "a100-80-node", A100_80, seq=2)
    assert live.nodes_in(view, wanted) == {"a100-80-node", "h100-node"}
    assert live.nodes_in(view, ("nvidia-l40s",)) == {"l40s-node"}


def test_nodes_with_the_same_hardware_share_one_facts_tuple() -> None:
    state = GpuState(IdleRule())
    send(state, "n1", H100)
    send(state, "n2", H100)
    send(state, "n3", A100_40)
    assert state.facts("n1") is state.facts("n2")
    assert state.facts("n3") != state.facts("n1")


def test_facts_follow_readings_that_arrive_after_the_uuid() -> None:
    """The agent sends a GPU's UUID even when NVML could not give its name or compute
    capability yet; when they arrive (same UUID), the facts must follow."""
    state = GpuState(IdleRule())
    heard: list[str] = []
    state.on_facts_change(heard.append)
    partial = pb.GpuSample(index=0, uuid="GPU-same", healthy=True)
    assert state.ingest(report("n1", [partial], seconds=1001, seq=1), 1.0)
    assert state.facts("n1") == (GpuFacts("", None, ""),)
    complete = pb.GpuSample(
        index=0, uuid="GPU-same", name="NVIDIA H100 80GB HBM3", healthy=True, memory_total_bytes=80 * GIB
    )
    complete.compute_capability.major = 9
    assert state.ingest(report("n1", [complete], seconds=1002, seq=2), 2.0)
    assert state.facts("n1") == (GpuFacts("NVIDIA H100 80GB HBM3", 80 * GIB, "9.0"),)
    assert heard == ["n1", "n1"]
