"""Groups land whole whenever a packing of all of them exists (issue 53 item 1), on the in-process
emulation of kube-scheduler v1.35.4 (LeaderWorkerSet groups, members pending at once) and of
kube-scheduler-1.36's topology-aware gang scheduling (one domain at a time) that
bench/bench_group_packing.py drives against the real SchedulerApi; and its solver, on cases whose
answer is known. The seeds are fixed: the same runs every time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import bench_group_packing as gp  # noqa: E402


def fleet(cliques: dict[str, list[int]]) -> gp.Fleet:
    idle = {f"{c}-n{i}": n for c, counts in cliques.items() for i, n in enumerate(counts)}
    return gp.Fleet(idle, {node: node.split("-")[0] for node in idle})


def test_the_solver_finds_a_packing_where_one_exists_and_none_where_none_does() -> None:
    # The trap: a 4 x 4 group fits both cliques; only in "tight" does it leave "whole" to the 2 x 8.
    trap = fleet({"whole": [8, 8], "tight": [4, 4, 4, 4]})
    assert gp.packable(trap, [gp.Group("small", 4, 4), gp.Group("big", 2, 8)])
    assert not gp.packable(trap, [gp.Group("small", 4, 4), gp.Group("big", 2, 8), gp.Group("more", 2, 2)])
    # Members of one group share a node when it has room for both; never two cliques.
    assert gp.packable(fleet({"a": [8]}), [gp.Group("pair", 2, 4)])
    assert not gp.packable(fleet({"a": [8], "b": [8]}), [gp.Group("pair", 2, 8)])


@pytest.mark.parametrize("kind", ["designed", "random"])
def test_no_group_waits_while_a_packing_of_every_group_existed(kind: str) -> None:
    rows = gp.run_seeds(kind, range(1, 31))
    packable = sum(packs for packs, _, _ in rows["gpu-extender + v1.35 (LWS)"])
    assert packable >= 15  # (the premise: most seeds can be packed)
    for name in ("gpu-extender + v1.35 (LWS)", "gpu-extender + 1.36 TAS (gangs)"):
        runs = rows[name]
        waiting = [seed for seed, (packs, o, _) in enumerate(runs, 1) if packs and o.waiting]
        assert waiting == [], f"{name}: seeds {waiting}"
        assert sum(o.on_busy for _, o, _ in runs) == 0, name
    # kube-scheduler alone places everything, on GPUs busy outside Kubernetes.
    assert sum(o.on_busy for _, o, _ in rows["1.36 TAS alone"]) > 0


def test_the_benchmark_prints_its_table() -> None:
    assert gp.main(["--seeds", "2"]) == 0
