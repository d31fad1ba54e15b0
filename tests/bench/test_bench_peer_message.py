"""bench/bench_peer_message.py in the suite: the gate filled by the worst messages holds exactly
its bounds (the bench fails otherwise), and says what it measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import bench_peer_message  # noqa: E402

from gpuextender.extender.scheduler.binding_gate import MAX_PEER_NAMES, MAX_PEER_OPEN  # noqa: E402
from gpuextender.extender.scheduler.peer_wire import MAX_NODES_PER_ENTRY  # noqa: E402


def test_the_worst_messages_fill_the_gate_to_exactly_its_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_peer_message.main() == 0
    assert "gate_pass_ms_median" in capsys.readouterr().out
    result = json.loads((bench_peer_message.OUT_DIR / "peer_message.json").read_text())
    assert (result["open"], result["names_open"]) == (MAX_PEER_OPEN, MAX_PEER_NAMES)
    assert result["names_per_binding"] == MAX_NODES_PER_ENTRY and result["body_bytes"] <= 2 * 1024**2
