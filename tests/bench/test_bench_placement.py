"""Smoke test of the placement benchmark's simulation core (bench/placement_sim.py):
no processes, no network. The benchmark itself is bench/bench_placement.py."""

from __future__ import annotations

import random
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import placement_sim as ps  # noqa: E402


def _node(name: str, product: ps.Product = ps.H100, replicas: int = 1) -> ps.Node:
    gpus = [ps.Gpu(i, f"GPU-{name}-{i}", replicas) for i in range(product.gpus)]
    node = ps.Node(name, product, gpus, replicas)
    node.last_report_at = 0.0  # fresh at now=0
    return node


def _pod(name: str, gpus: int, *, quiet: bool = False) -> ps.PodSpec:
    # quiet: allocated but idle from the start (quiet_after 0); else active once started (startup 0)
    return ps.PodSpec(name, f"uid-{name}", gpus, arrival=0, lifetime=None, startup=0, quiet_after=0 if quiet else None)


def _sim(*nodes: ps.Node, pods: list[ps.PodSpec] | None = None) -> ps.Simulation:
    sim = ps.Simulation(
        ps.SimConfig(nodes=len(nodes), pods=len(pods or [])),
        stale_after=3.0,
        fleet=list(nodes),
        pods=pods or [],
        events=[],
    )
    sim.tick = 0
    return sim


def test_whole_run_without_extender_is_consistent_and_repeatable() -> None:
    cfg = ps.SimConfig(nodes=12, pods=60, seed=7)
    m = ps.run_without_extender(cfg)
    assert m.placed + m.given_up == cfg.pods  # every pod is placed once or given up once
    assert m.attempts == m.placed + m.pending_attempts
    # kube-scheduler alone places whenever a node fits; a node with free idle healthy GPUs fits
    assert m.pending_attempts_with_capacity == 0 and m.given_up_with_capacity == 0
    assert 0 <= m.short <= m.placed and 0 <= m.nvlink <= m.nvlink_possible <= m.placed_multi
    assert ps.run_without_extender(cfg) == m  # seeded: the same figures again


def test_allocated_but_idle_gpus_are_not_free_capacity() -> None:
    a, b = _node("a"), _node("b")
    sim = _sim(a, b)
    sim.bind(_pod("quiet", 4, quiet=True), a, tick=0)  # GPUs 0-3 held by an idle pod
    a.gpus[4].outside_until = 100  # GPUs 4-5 busy outside Kubernetes
    a.gpus[5].outside_until = 100
    a.changed()
    sim.bind(_pod("busy", 2), b, tick=0)  # GPUs 0-1 held and busy
    assert ps.gpu_state(a.gpus[0], sim.tick, sim.running) == "quiet"  # reads idle...
    assert a.kube_free == 4 and sim.capacity(a) == (2, 2)  # ...but only GPUs 6-7 are free idle healthy
    assert b.kube_free == 6 and sim.capacity(b) == (6, 6)

    pod = _pod("p", 4)
    candidates = sim.candidates(pod)
    assert candidates == [a, b]  # both fit by allocation count
    sim.place(pod, a, candidates, now=0.0)
    assert (sim.metrics.placed, sim.metrics.short, sim.metrics.stale) == (1, 1, 0)

    # the same choice is not "short" when no candidate had enough
    sim2 = _sim(c := _node("c"))
    sim2.bind(_pod("quiet", 4, quiet=True), c, tick=0)
    c.gpus[4].outside_until = 100
    c.changed()
    sim2.place(_pod("p", 4), c, sim2.candidates(_pod("p", 4)), now=0.0)
    assert (sim2.metrics.placed, sim2.metrics.short) == (1, 0)


def test_unhealthy_gpus_do_not_count_degraded_ones_do() -> None:
    a = _node("a", ps.L40S)
    a.gpus[0].health = ps.UNHEALTHY
    a.gpus[1].health = ps.DEGRADED
    sim = _sim(a)
    assert sim.capacity(a) == (3, 1)  # no NVLink on L40S: the largest connected set is one GPU
    assert a.kube_free == 4  # the device plugin does not see it: allocatable unchanged


def test_time_slicing_slots() -> None:
    ts = _node("ts", ps.L40S, replicas=ps.TIME_SLICING_REPLICAS)
    sim = _sim(ts)
    assert ts.allocatable == 16 and sim.capacity(ts)[0] == 16
    sim.bind(_pod("quiet", 1, quiet=True), ts, tick=0)  # one slot of GPU 0, idle: its other 3 stay usable
    assert sim.capacity(ts)[0] == 15
    sim.bind(_pod("busy", 1), ts, tick=0)  # lands on GPU 0 again (still free idle): now busy
    assert ts.gpus[0].holders == ["quiet", "busy"]
    assert sim.capacity(ts)[0] == 12 and ts.kube_free == 14


def test_stale_and_nvlink_metrics() -> None:
    fresh, dead, pcie = _node("fresh"), _node("dead"), _node("pcie", ps.L40S)
    dead.last_report_at = -10.0  # last report 10 s ago, stale_after 3 s
    sim = _sim(fresh, dead, pcie)
    pod = _pod("p", 2)
    sim.place(pod, dead, sim.candidates(pod), now=0.0)
    assert (sim.metrics.stale, sim.metrics.short, sim.metrics.nvlink) == (1, 0, 0)
    pod2 = _pod("q", 2)
    sim.place(pod2, pcie, sim.candidates(pod2), now=0.0)  # 4 free idle GPUs, none NVLinked
    m = sim.metrics
    assert (m.placed_multi, m.nvlink_possible, m.nvlink, m.short, m.stale) == (2, 2, 1, 0, 1)


def test_pending_with_capacity_after_bounded_retries() -> None:
    a = _node("a")
    pod = _pod("p", 1)
    sim = _sim(a, pods=[pod])
    sim.tick = -1
    tries = 0
    while not sim.finished():
        for p in sim.begin_tick():
            tries += 1
            sim.place(p, None, sim.candidates(p), now=0.0)  # a chooser that never places
    m = sim.finish()
    assert tries == 1 + sim.cfg.max_retries
    assert (m.given_up, m.given_up_with_capacity, m.pending_attempts_with_capacity) == (1, 1, tries)


def test_end_state_fragmentation() -> None:
    a, b, c = _node("a"), _node("b"), _node("c", ps.L40S)
    sim = _sim(a, b, c)
    sim.bind(_pod("x", 6), b, tick=0)  # b: 2 free
    sim.bind(_pod("y", 1), c, tick=0)  # c: 3 free
    m = sim.finish()
    assert m.nodes_fit_8 == 1  # only a
    assert m.free_slots == 8 + 2 + 3 and m.stranded_slots == 5


def test_least_allocated_picks_most_free() -> None:
    a, b = _node("a"), _node("b")
    sim = _sim(a, b)
    sim.bind(_pod("x", 3), a, tick=0)
    assert ps.least_allocated([a, b], random.Random(1)) is b
    assert ps.least_allocated([], random.Random(1)) is None
