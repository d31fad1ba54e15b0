"""GPU nodes whose agent never reported: a scrape-time gauge and a warning when the set changes."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.observe.silent_nodes import SilentNodesCollector, SilentNodesWarning, silent_gpu_nodes
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from tests.extender.builders import gpu, report
from tests.harness import metric, parse_metrics


def test_only_gpu_nodes_without_data_are_silent(caplog: pytest.LogCaptureFixture) -> None:
    view = InventoryView(allocatable_gpus={"a": 8, "b": 8, "cpu": 0, "c": 1})
    state = GpuState(IdleRule())
    state.ingest(report("b", [gpu(0)]), 0.0)
    assert silent_gpu_nodes(view, state) == ["a", "c"]  # a CPU node (0 GPUs) is never silent

    registry = CollectorRegistry()
    registry.register(SilentNodesCollector(state, lambda: view))
    samples = parse_metrics(generate_latest(registry).decode())
    assert metric(samples, "gpu_extender_gpu_nodes_without_agent_data") == 2

    warning = SilentNodesWarning(state, lambda: view)
    with caplog.at_level(logging.INFO, logger="gpu_extender.silent_nodes"):
        assert warning.check() == ["a", "c"]
        assert warning.check() == ["a", "c"]  # unchanged: said once
        state.ingest(report("a", [gpu(0)]), 0.0)
        state.ingest(report("c", [gpu(0)]), 0.0)
        assert warning.check() == []
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "2 GPU node(s) in the inventory have no data from their agent (a, c): their verdicts rest on assumed data; "
        "is gpu-agent running there?",
        "every GPU node in the inventory has reported",
    ]


def test_a_long_silent_list_is_named_in_part(caplog: pytest.LogCaptureFixture) -> None:
    view = InventoryView(allocatable_gpus={f"n{i:02}": 8 for i in range(11)})
    with caplog.at_level(logging.WARNING, logger="gpu_extender.silent_nodes"):
        SilentNodesWarning(GpuState(IdleRule()), lambda: view).check()
    assert (
        caplog.records[0]
        .getMessage()
        .startswith(
            "11 GPU node(s) in the inventory have no data from their agent (n00, n01, n02, n03, n04, n05, n06, n07, "
            "n08, n09 and 1 more)"
        )
    )
