"""The preempt-verb benchmark (bench/bench_preempt.py) runs as documented on a small fleet: every
answer it times is checked against the fleet it built (a wrong action or victim aborts it), and it
reports each variant. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("heartbeats", [[], ["--heartbeats"]])
def test_the_benchmark_runs_and_checks_its_answers(heartbeats: list[str]) -> None:
    """With --heartbeats every answer is checked (over tables kept across the nodes' reports)."""
    run = subprocess.run(
        [sys.executable, "bench/bench_preempt.py", "--nodes", "500", "--candidates", "50", "--quick", *heartbeats],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for variant in ("50x8", "50x4"):
        assert any(line.startswith(variant) for line in run.stdout.splitlines()), run.stdout
    assert "extended" in run.stdout and "dropped" in run.stdout and "kept" in run.stdout
    assert ("re-reported (a heartbeat) before each call" in run.stdout) == bool(heartbeats)
