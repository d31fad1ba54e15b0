"""Benchmark: the extender's filter/prioritize latency at 5,000 names against an earlier revision,
side by side in one run (issue 12: "no worse than 1.2x today's in the same run").

How: `git archive REV gpuextender` is unpacked under bench/out/baseline-<rev>/, and
bench_extender's names-5000 scenario runs alternately against the extender of that tree
(PYTHONPATH puts it ahead of the installed package in the extender process only; the bench
client, the fleet and the requests are this tree's) and of this one: base, current, current,
base, so drift on a shared machine hits both alike. Reported: p50, p99 and the extender's own
handler mean per verb for each, and current/base ratios of the medians over the rounds.

The fleet's reports carry the 0.2 facts (bench_extender: allocation, health, NVLink islands); a
revision that predates a fact ignores it, which is what that revision would do with them.

Run: `.venv/bin/python bench/bench_baseline.py REV [--rounds 2]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import bench_extender
from benchlib import OUT_DIR, REPO_ROOT, BenchError

SCENARIO = "names-5000"


@dataclass(slots=True)
class Side:
    label: str  # "base" or "current"
    p50_ms: dict[str, list[float]] = field(default_factory=dict)  # verb -> one figure per round
    p99_ms: dict[str, list[float]] = field(default_factory=dict)
    server_ms: dict[str, list[float]] = field(default_factory=dict)

    def add(self, result: bench_extender.ExtenderBenchResult) -> None:
        for verb in result.scenarios[0].verbs:
            self.p50_ms.setdefault(verb.verb, []).append(verb.p50_ms)
            self.p99_ms.setdefault(verb.verb, []).append(verb.p99_ms)
            self.server_ms.setdefault(verb.verb, []).append(verb.server_mean_ms)


@dataclass(slots=True)
class BaselineResult:
    revision: str
    rounds: int
    base: Side
    current: Side

    def ratio(self, figure: str, verb: str) -> float:
        cur, base = getattr(self.current, figure)[verb], getattr(self.base, figure)[verb]
        return statistics.median(cur) / statistics.median(base)


def unpack(revision: str) -> Path:
    """The revision's gpuextender package under bench/out/baseline-<sha>/ (reused when there)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", revision], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    ).stdout.strip()
    target = OUT_DIR / f"baseline-{sha}"
    if not (target / "gpuextender" / "__init__.py").exists():
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", revision, "gpuextender"], capture_output=True, check=True, cwd=REPO_ROOT
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


@contextmanager
def python_path(path: Path | None) -> Iterator[None]:
    """Child processes started meanwhile import gpuextender from `path` (None: the installed one).

    `python -m` puts its working directory (the repository root, where this tree's gpuextender
    is) first on sys.path, ahead of PYTHONPATH: PYTHONSAFEPATH keeps it off, or the base side would
    run this tree (it did, before: every earlier "against REV" table compared this tree with
    itself). Checked before the side starts."""
    saved = {key: os.environ.get(key) for key in ("PYTHONPATH", "PYTHONSAFEPATH", "BENCH_RUN_MODULES")}
    if path is not None:
        os.environ["PYTHONPATH"] = str(path)
    os.environ["PYTHONSAFEPATH"] = "1"
    os.environ["BENCH_RUN_MODULES"] = "1"  # both sides as `python -m gpuextender.extender` (benchlib.program)
    try:
        imported = subprocess.run(
            [sys.executable, "-c", "import gpuextender; print(gpuextender.__file__)"],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO_ROOT,
        ).stdout.strip()
        expected = (path if path is not None else REPO_ROOT) / "gpuextender" / "__init__.py"
        if Path(imported).resolve() != expected.resolve():
            raise BenchError(f"this side would import {imported}, not {expected}")
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run(revision: str, rounds: int = 2, quick: bool = False) -> BaselineResult:
    tree = unpack(revision)
    base, current = Side("base"), Side("current")
    for i in range(rounds):
        order = ((base, tree), (current, None)) if i % 2 == 0 else ((current, None), (base, tree))
        for side, path in order:
            with python_path(path):
                side.add(bench_extender.run([SCENARIO], quick=quick))
    return BaselineResult(revision, rounds, base, current)


def format_result(r: BaselineResult) -> list[str]:
    lines = [f"{'verb':<11} {'side':<8} {'p50 ms':>14} {'p99 ms':>14} {'server ms':>14}"]
    for verb in r.current.p50_ms:
        for side in (r.base, r.current):
            cells = [" ".join(f"{v:.2f}" for v in getattr(side, f)[verb]) for f in ("p50_ms", "p99_ms", "server_ms")]
            lines.append(f"{verb:<11} {side.label:<8} {cells[0]:>14} {cells[1]:>14} {cells[2]:>14}")
        lines.append(
            f"{verb:<11} {'ratio':<8} {r.ratio('p50_ms', verb):>13.2f}x {r.ratio('p99_ms', verb):>13.2f}x "
            f"{r.ratio('server_ms', verb):>13.2f}x"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", help="the earlier revision (any git revision)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (base, current) pairs, order alternating")
    parser.add_argument("--quick", action="store_true", help="few iterations: a smoke check")
    args = parser.parse_args(argv)
    try:
        result = run(args.revision, args.rounds, args.quick)
    except (BenchError, subprocess.CalledProcessError) as exc:
        print(f"bench_baseline: FAILED: {exc}", file=sys.stderr)
        return 1
    print(
        f"{SCENARIO}: {args.revision} (base) against this tree (current), {args.rounds} round(s) each; "
        "figures per round, ratio of the medians"
    )
    print("\n".join(format_result(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
