"""Benchmark: what decide/fit_index.py costs and saves at 5,000 nodes, in-process, side by side.

What it measures (bench_extender's 5,000-node fleet and 2-GPU pod, every node a candidate, shuffled;
`--nodes` another fleet, `--candidates M` a random M of its nodes the candidates):
- a filter call's decision (the verdicts, then the shortlist's cut to 100) through the index against
  the per-call road (whole_gpus.filter_nodes, then shortlist._best_fresh), alternating, with 0, 10
  and 100 nodes reporting before each call (what the index applies first): heartbeats (the same
  readings) and reports whose utilization changed; and
  prioritize of the 100 answered through the index against whole_gpus.prioritize; and with 10 or
  100 changed nodes before it, their marks applied by the call against at the state's settle
  before it (what the main process does after each slice of relayed reports), and that settle;
- filter for more pod sizes than the index keeps, asked in turn (the index answers the sizes it
  keeps; the others are judged per node, never built per call), against per node for all;
- building one pod size (every node's verdict, the spread ranking) from nothing, as after a
  change of more than a quarter of the nodes;
- the memory one size holds (tracemalloc, both strategies ranked).
Reported: medians of per-call milliseconds (timeit, 200 calls per variant and round, 3 rounds
alternating), and the ratios.

Run: `.venv/bin/python bench/bench_fit_index.py [--nodes 20000] [--candidates 1000] [--calls 200] [--rounds 3]`
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_extender import build_api, make_fleet

from gpuextender.extender.decide import shortlist, whole_gpus
from gpuextender.extender.decide.fit_index import MAX_SIZES, FitIndex, _Size
from gpuextender.extender.settings import DecisionPolicy

NODES, NEEDED, KEEP, CALLS, ROUNDS = 5000, 2, 100, 200, 3


def _ms(fn, calls: int, before=lambda: None) -> float:  # type: ignore[no-untyped-def]
    """Median milliseconds of `fn`, `before` run (untimed) ahead of each call."""
    times = []
    for _ in range(calls):
        before()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--candidates", type=int, default=None, help="candidates per call (default: every node)")
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args(argv)
    nodes, calls, rounds = args.nodes, args.calls, args.rounds
    api = build_api(nodes)
    state = api.state
    summaries = state.offered_summaries
    fleet = [n.name for n in make_fleet(nodes)]
    names = list(fleet)
    random.Random(7).shuffle(names)
    names = names[: args.candidates]
    policy = DecisionPolicy(stale_after_s=100000.0)
    now = time.monotonic()
    index = FitIndex(summaries)
    many = FitIndex(summaries)  # for the sizes in turn: its sizes kept make no other row dearer
    rng = random.Random(3)

    def touch(count: int, moved: bool) -> None:
        """`count` nodes report again: the same readings (a heartbeat), or another utilization."""
        for name in rng.sample(fleet, count):
            summary = summaries[name]
            utilization = rng.uniform(0, 100) if moved else summary.mean_utilization
            new = replace(summary, received_at=now, mean_utilization=utilization)
            state._summaries[name] = state._offered[name] = new
            index.changed(name)
            many.changed(name)

    def by_index() -> list[str] | None:
        outcome = index.filter(NEEDED, names, {}, now, policy)  # held, as Decision does: best trusts its passes
        return index.best(NEEDED, outcome.passed, 7, KEEP, "spread", now, policy.stale_after_s)

    def per_call() -> list[str] | None:
        passed = whole_gpus.filter_nodes(NEEDED, names, {}, summaries.get, now, policy).passed
        rotated = passed[7:] + passed[:7]
        return shortlist._best_fresh(NEEDED, rotated, {}, _Known(summaries, now, policy), "spread", KEEP)

    answered = by_index() or []
    rows: dict[str, list[float]] = {}
    turn = iter(range(10**9))

    def sizes_in_turn() -> None:  # more sizes than kept, each asked in turn: sizes 1..MAX_SIZES + 2
        k = 1 + next(turn) % (MAX_SIZES + 2)
        many.filter(k, names, {}, now, policy)

    def sizes_in_turn_per_call() -> None:
        k = 1 + next(turn) % (MAX_SIZES + 2)
        whole_gpus.filter_nodes(k, names, {}, summaries.get, now, policy)

    variants = [(0, False), (10, False), (100, False), (10, True), (100, True)]
    for _ in range(rounds):
        for count, moved in variants:
            label = f"{count} {'changed' if moved else 'heartbeats'}"
            rows.setdefault(f"filter+shortlist, {label} before, per call", []).append(_ms(per_call, calls))
            rows.setdefault(f"filter+shortlist, {label} before, index", []).append(
                _ms(by_index, calls, before=lambda c=count, m=moved: touch(c, m))  # type: ignore[misc]
            )
        rows.setdefault(f"filter of sizes 1..{MAX_SIZES + 2} in turn, per call", []).append(
            _ms(sizes_in_turn_per_call, calls)
        )
        rows.setdefault(f"filter of sizes 1..{MAX_SIZES + 2} in turn, index", []).append(_ms(sizes_in_turn, calls))
        rows.setdefault("prioritize 100, per call", []).append(
            _ms(lambda: whole_gpus.prioritize(NEEDED, answered, {}, summaries.get, now, policy), calls)
        )
        rows.setdefault("prioritize 100, index", []).append(
            _ms(lambda: index.scores(NEEDED, answered, "spread", now, policy.stale_after_s), calls)
        )
        for count in (10, 100):  # a call's own path, the marks left to it or applied at a settle before it
            rows.setdefault(f"prioritize 100, {count} changed before, applied by the call", []).append(
                _ms(
                    lambda: index.scores(NEEDED, answered, "spread", now, policy.stale_after_s),
                    calls,
                    before=lambda c=count: touch(c, True),  # type: ignore[misc]
                )
            )
            rows.setdefault(f"prioritize 100, {count} changed before, applied at the settle", []).append(
                _ms(
                    lambda: index.scores(NEEDED, answered, "spread", now, policy.stale_after_s),
                    calls,
                    before=lambda c=count: (touch(c, True), index.catch_up()),  # type: ignore[misc]
                )
            )
            rows.setdefault(f"the settle of {count} changed (catch_up, off the call)", []).append(
                _ms(index.catch_up, calls, before=lambda c=count: touch(c, True))  # type: ignore[misc]
            )
        rows.setdefault("one size built (verdicts + spread ranking)", []).append(
            _ms(lambda: _Size(NEEDED, summaries).ranking("spread"), calls=20)
        )
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    size = _Size(NEEDED, summaries)
    size.ranking("spread")
    size.ranking("binpack")
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()

    candidates = "every node" if len(names) == nodes else f"{len(names):,} of them"
    print(
        f"{nodes:,} nodes, {NEEDED}-GPU pod, {candidates} a candidate; medians of {rounds} rounds x {calls} calls, ms"
    )
    print()
    print("| what | ms |")
    print("|---|---:|")
    for label, figures in rows.items():
        print(f"| {label} | {statistics.median(figures):.3f} |")
    print()
    for count, moved in variants:
        label = f"{count} {'changed' if moved else 'heartbeats'}"
        a = statistics.median(rows[f"filter+shortlist, {label} before, index"])
        b = statistics.median(rows[f"filter+shortlist, {label} before, per call"])
        print(f"filter+shortlist, {label} before each call: index / per call = {a / b:.2f}x")
    p = statistics.median(rows["prioritize 100, index"]) / statistics.median(rows["prioritize 100, per call"])
    print(f"prioritize of 100: index / per call = {p:.2f}x")
    print(f"one size held: {held / 2**20:.2f} MiB (verdicts, fits, both strategies ranked)")
    return 0


class _Known:
    """What _best_fresh reads of a Snapshot."""

    def __init__(self, summaries, now: float, policy: DecisionPolicy) -> None:  # type: ignore[no-untyped-def]
        self.summary, self.now, self.policy = summaries.get, now, policy


if __name__ == "__main__":
    sys.exit(main())
