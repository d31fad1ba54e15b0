"""bench/bench_hostile_relay.py against the real extender, briefly: a relay stream of empty items
is refused no faster than its budget (the bench fails when it is), and the bench says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import bench_hostile_relay  # noqa: E402

from gpuextender.extender.ingest.limits import RELAY_REFUSAL_BURST  # noqa: E402


def test_one_hostile_relay_stream_is_held_to_its_refusal_budget(capsys: pytest.CaptureFixture[str]) -> None:
    # After the window, until the stream waits (at most 45 s: a liveness bound, where a busy machine
    # has not reached the budget in the window): the budget bound then counts that time too.
    sides = bench_hostile_relay.run(1.0, 1, None, until_paced_s=45.0)
    [side] = sides
    # The first message alone holds more than the burst: past it the stream waits off its debt.
    assert RELAY_REFUSAL_BURST < side.refused <= side.bound
    assert side.messages == 0 and side.waiting == 1
    assert bench_hostile_relay.main(["--window", "0.5"]) == 0
    out = capsys.readouterr().out
    items = len(bench_hostile_relay.pb.RelayBatch.FromString(bench_hostile_relay.worst_message()).reports)
    assert items > 46_000  # as many as 256 KiB holds
    assert f"{items:,} empty items per message" in out and "\ncurrent " in out
