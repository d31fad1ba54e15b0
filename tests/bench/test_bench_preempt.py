"""The preempt-verb benchmark (bench/bench_preempt.py) runs as documented on a small fleet: every
answer it times is checked against the fleet it built (a wrong action or victim aborts it), and it
reports each variant. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_runs_and_checks_its_answers() -> None:
    run = subprocess.run(
        [sys.executable, "bench/bench_preempt.py", "--nodes", "500", "--candidates", "50", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for variant in ("50x8", "50x4"):
        assert any(line.startswith(variant) for line in run.stdout.splitlines()), run.stdout
    assert "extended" in run.stdout and "dropped" in run.stdout and "kept" in run.stdout
