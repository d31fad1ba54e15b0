"""The file inventory of Nodes and the extender's flags."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from extender.config import ConfigError, build_config, build_parser
from extender.inventory_file import InventoryError, load_nodes
from tests.harness import ROOT


def test_demo_inventory_loads() -> None:
    nodes = load_nodes(ROOT / "examples" / "demo" / "inventory", ("nvidia.com/gpu",))
    assert {n: v.allocatable_gpus for n, v in nodes.items()} == {
        "gpu-node-1": 8, "gpu-node-2": 8, "gpu-node-3": 8, "cpu-node-1": 0
    }  # fmt: skip
    assert nodes["gpu-node-1"].labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_bad_documents_are_skipped_with_a_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "a.yaml").write_text(
        "kind: Node\nmetadata: {name: good}\nstatus: {allocatable: {nvidia.com/gpu: '4'}}\n---\n"
        "kind: Node\nmetadata: {name: bad}\nstatus: {allocatable: {nvidia.com/gpu: eighty}}\n---\n"
        "kind: Node\nmetadata: {}\n---\n"
        "kind: AcceleratorClass\nmetadata: {name: h100}\n"
    )
    (tmp_path / "broken.yaml").write_text("kind: Node\nmetadata: [\n")
    (tmp_path / "notes.txt").write_text("ignored")
    with caplog.at_level(logging.WARNING):
        nodes = load_nodes(tmp_path, ("nvidia.com/gpu",))
    assert list(nodes) == ["good"] and nodes["good"].allocatable_gpus == 4
    messages = " | ".join(r.message for r in caplog.records)
    assert "bad: status.allocatable[nvidia.com/gpu]: 'eighty' is not a Kubernetes quantity" in messages
    assert "metadata.name is missing" in messages and "broken.yaml skipped" in messages


def test_missing_inventory() -> None:
    with pytest.raises(InventoryError):
        load_nodes(Path("/nonexistent/inventory"), ("nvidia.com/gpu",))


def test_defaults() -> None:
    config = build_config([])
    assert str(config.http_addr) == "0.0.0.0:8888" and str(config.grpc_addr) == "0.0.0.0:9090"
    assert (config.idle_rule.max_utilization_percent, config.idle_rule.max_memory_used_percent) == (30.0, 50.0)
    policy = config.api.policy
    assert (policy.stale_after_s, policy.stale_policy, policy.no_fit_policy) == (10.0, "fail-open", "pass-all")
    assert config.api.gpu_resources == ("nvidia.com/gpu",) and config.api.compact_priorities
    assert config.api.max_body_bytes == 64 * 1024**2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--http-addr", "8888"], "expected HOST:PORT"),
        (["--grpc-addr", "h:70000"], "outside 0..65535"),
        (["--idle-max-utilization", "0"], "must be within (0, 100]"),
        (["--stale-after", "0"], "must be positive"),
        (["--max-body-bytes", "100"], "below 64 KiB"),
        (["--inventory", "/nonexistent"], "no such file"),
    ],
)
def test_flag_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_config(argv)


def test_help_explains_the_policies() -> None:
    text = build_parser().format_help()
    for phrase in ("nodeCacheCapable: true", "fail-closed", "pass-all", "--inventory", "--gpu-resource"):
        assert phrase in text
