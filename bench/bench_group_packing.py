"""Benchmark: do groups land whole whenever a packing of all of them exists (issue 53 item 1)?

In-process: the real `SchedulerApi` (filter, prioritize, the group book, the fit index, the pod
ledger) over simulated agents' reports, driven by two small emulations of kube-scheduler:
- `v1.35`: LeaderWorkerSet groups, every member pending at once in a random order; a member's
  candidates are the nodes kube-scheduler counts room on (allocatable less its bound pods: GPUs
  busy outside Kubernetes look free to it), only the clique of its group's first bound member once
  there is one (the LWS pod affinity); the extender's filter, then its prioritize's best, binds it.
- `1.36 TAS`: Workload API gangs, one at a time in a random order; the gang is tried in each clique
  in a random order (its topology-aware scheduling offers the extender one domain at a time), each
  member filtered against the clique's nodes with the members before it assumed there; the first
  clique where every member passed is bound.
Both retry the groups left until a round binds nothing. Beside each, kube-scheduler alone: its own
count only (v1.35: the node with the most free GPUs by its count, the clique pinned the same way;
TAS: the first clique whose nodes hold the gang by its count).

Fleets (`--fleet`):
- `designed` (default): 6 cliques of 4 nodes of 8 GPUs; each clique made for one group (2-4
  members x 2, 4 or 8 GPUs: that many nodes with exactly that many idle GPUs, the rest busy outside
  Kubernetes), so a packing of every group exists by construction, and smaller groups also fit in
  the larger groups' cliques (the trap of the real control plane's failure).
- `random`: 6 cliques, each node 0, 2, 4, 6 or 8 idle GPUs (8 twice as often), 5 groups of 2-3 x
  2, 4 (twice as often) or 8 GPUs; a solver says whether every group can be packed at once (exact
  search over member-to-node assignments).

Per run: groups whole, groups waiting, members on busy GPUs, and, where a packing of all existed,
whether a group waited anyway ("waiting while a packing existed"), and the GPUs stranded (free
idle GPUs left while a group waits). Seeds 1..N (`--seeds`).

Run: `.venv/bin/python bench/bench_group_packing.py [--seeds 20] [--fleet designed|random]`
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.pod_group import PodGroupSpec
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import ExtenderArgs
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from gpuextender.v1 import gpu_state_pb2 as pb

CLIQUE = "nvidia.com/gpu.clique"
GPUS, NODES_PER_CLIQUE, CLIQUES = 8, 4, 6
GROUPS_RANDOM = 5
NOW = 1000.0
GIB = 1024**3


@dataclass(frozen=True)
class Group:
    name: str
    members: int
    per_member: int


@dataclass
class Fleet:
    idle: dict[str, int]  # node -> GPUs idle and healthy (the rest busy outside Kubernetes)
    clique: dict[str, str]

    def cliques(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for node, c in self.clique.items():
            found.setdefault(c, []).append(node)
        return found


def designed(rng: random.Random) -> tuple[Fleet, list[Group]]:
    idle: dict[str, int] = {}
    clique: dict[str, str] = {}
    groups = []
    for c in range(CLIQUES):
        members, per = rng.randint(2, NODES_PER_CLIQUE), rng.choice((2, 4, 8))
        for i in range(NODES_PER_CLIQUE):
            node = f"c{c}-n{i}"
            idle[node], clique[node] = (per if i < members else 0), f"c{c}"
        groups.append(Group(f"g{c}", members, per))
    rng.shuffle(groups)
    return Fleet(idle, clique), groups


def random_fleet(rng: random.Random) -> tuple[Fleet, list[Group]]:
    idle = {f"c{c}-n{i}": rng.choice((0, 2, 4, 6, 8, 8)) for c in range(CLIQUES) for i in range(NODES_PER_CLIQUE)}
    clique = {node: node.split("-")[0] for node in idle}
    groups = [Group(f"g{i}", rng.randint(2, 3), rng.choice((2, 4, 4, 8))) for i in range(GROUPS_RANDOM)]
    return Fleet(idle, clique), groups


def packable(fleet: Fleet, groups: Sequence[Group]) -> bool:
    """Whether every group fits at once, each whole in one clique (exact: every member-to-node
    assignment tried, members of a group on nodes in non-increasing order to skip permutations)."""
    free = dict(fleet.idle)
    cliques = list(fleet.cliques().values())
    order = sorted(groups, key=lambda g: -g.members * g.per_member)

    def place_members(g: Group, nodes: list[str], left: int, start: int, then: Callable[[], bool]) -> bool:
        if left == 0:
            return then()
        for i in range(start, len(nodes)):
            n = nodes[i]
            if free[n] >= g.per_member:
                free[n] -= g.per_member
                if place_members(g, nodes, left - 1, i, then):
                    return True
                free[n] += g.per_member
        return False

    def place(i: int) -> bool:
        if i == len(order):
            return True
        g = order[i]
        return any(place_members(g, nodes, g.members, 0, lambda: place(i + 1)) for nodes in cliques)

    return place(0)


@dataclass
class Outcome:
    whole: int = 0
    waiting: int = 0
    on_busy: int = 0  # members bound where fewer good idle GPUs were left than they asked for
    stranded: int = 0  # free idle GPUs left while a group waits
    bound: dict[str, str] = field(default_factory=dict)  # pod -> node


class World:
    """The fleet as kube-scheduler and the extender see it."""

    def __init__(self, fleet: Fleet, groups: Sequence[Group], extender: bool) -> None:
        self.fleet, self.groups = fleet, {g.name: g for g in groups}
        self.k8s_used: dict[str, int] = dict.fromkeys(fleet.idle, 0)  # GPUs of bound pods per node
        self.good_used: dict[str, int] = dict.fromkeys(fleet.idle, 0)
        self.outcome = Outcome()
        self.api: SchedulerApi | None = None
        if extender:
            self.state = GpuState(IdleRule())
            for node, idle in fleet.idle.items():
                gpus = [_gpu(i, 0, 1) for i in range(idle)] + [_gpu(i, 95, 60) for i in range(idle, GPUS)]
                r = pb.NodeReport(node_name=node, sequence=1, gpus=gpus, agent_version="bench")
                r.sample_time.seconds = int(NOW)
                self.state.ingest(r, NOW)
            self.ledger = PodLedger(("nvidia.com/gpu",), lambda: NOW)
            self.ledger.replace_all(POD_KIND, [])
            view = InventoryView(
                node_labels={n: {CLIQUE: c} for n, c in fleet.clique.items()},
                allocatable_gpus=dict.fromkeys(fleet.idle, GPUS),
            )
            sizes = {g.name: g.members for g in groups}

            def pod_groups(_source: str, _namespace: str, name: str) -> PodGroupSpec | None:
                return PodGroupSpec(sizes[name], CLIQUE) if name in sizes else None

            self.api = SchedulerApi(
                self.state,
                ExtenderMetrics(self.state),
                ApiSettings(DecisionPolicy(), compact_priorities=False),
                inventory=lambda: view,
                clock=lambda: NOW,
                sources=ClusterSources(ledger=self.ledger, pod_groups=pod_groups),
            )

    def k8s_fits(self, node: str, gpus: int, assumed: dict[str, int] | None = None) -> bool:
        return GPUS - self.k8s_used[node] - (assumed or {}).get(node, 0) >= gpus

    def pod(self, g: Group, i: int, gang: bool) -> dict[str, Any]:
        pod: dict[str, Any] = {
            "metadata": {"name": f"{g.name}-{i}", "namespace": "llm", "uid": f"uid-{g.name}-{i}"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(g.per_member)}}}]},
        }
        if gang:
            pod["spec"]["schedulingGroup"] = {"podGroupName": g.name}
        else:
            pod["metadata"]["labels"] = {"leaderworkerset.sigs.k8s.io/group-key": g.name}
            pod["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/size": str(g.members)}
        return pod

    def choose(self, pod: dict[str, Any], names: list[str], gpus: int) -> str | None:
        """The node kube-scheduler binds among `names` (with the extender: filter, then prioritize's best)."""
        if not names:
            return None
        if self.api is None:  # kube-scheduler alone: the most free GPUs by its count, then the name
            return max(names, key=lambda n: (GPUS - self.k8s_used[n], n))
        passed = self.api.filter(ExtenderArgs(pod, names, None))["NodeNames"]
        if not passed:
            return None
        scores = {s["Host"]: s["Score"] for s in self.api.prioritize(ExtenderArgs(pod, passed, None))}
        return max(passed, key=lambda n: (scores.get(n, 0), n))

    def bind(self, pod: dict[str, Any], node: str, gpus: int) -> None:
        if self.fleet.idle[node] - self.good_used[node] < gpus:
            self.outcome.on_busy += 1
        self.good_used[node] += min(gpus, max(0, self.fleet.idle[node] - self.good_used[node]))
        self.k8s_used[node] += gpus
        self.outcome.bound[pod["metadata"]["name"]] = node
        if self.api is not None:
            bound = {**pod, "spec": {**pod["spec"], "nodeName": node}, "status": {"phase": "Pending"}}
            self.ledger.upsert(POD_KIND, bound)

    def finish(self) -> Outcome:
        o = self.outcome
        for g in self.groups.values():
            nodes = [o.bound.get(f"{g.name}-{i}") for i in range(g.members)]
            if all(nodes) and len({self.fleet.clique[n] for n in nodes if n}) == 1:
                o.whole += 1
            elif not any(nodes):
                o.waiting += 1
        if o.waiting:
            o.stranded = sum(max(0, self.fleet.idle[n] - self.good_used[n]) for n in self.fleet.idle)
        return o


def _gpu(index: int, util: int, mem_pct: int) -> pb.GpuSample:
    g = pb.GpuSample(index=index, uuid=f"GPU-{index}", name="NVIDIA H100 80GB HBM3", healthy=True)
    g.utilization_gpu_percent = util
    g.memory_total_bytes = 80 * GIB
    g.memory_used_bytes = int(80 * GIB * mem_pct / 100)
    return g


def run_lws(world: World, rng: random.Random) -> Outcome:
    members = [(g, i) for g in world.groups.values() for i in range(g.members)]
    rng.shuffle(members)
    cliques = world.fleet.cliques()
    for _ in range(2 * len(members)):  # rounds: kube-scheduler retries the pending
        pending = [(g, i) for g, i in members if f"{g.name}-{i}" not in world.outcome.bound]
        progress = False
        for g, i in pending:
            pod = world.pod(g, i, gang=False)
            first = next(
                (
                    world.outcome.bound[p]
                    for p in (f"{g.name}-{j}" for j in range(g.members))
                    if p in world.outcome.bound
                ),
                None,
            )
            names = cliques[world.fleet.clique[first]] if first else list(world.fleet.idle)
            names = [n for n in names if world.k8s_fits(n, g.per_member)]
            node = world.choose(pod, names, g.per_member)
            if node is not None:
                world.bind(pod, node, g.per_member)
                progress = True
        if not progress:
            break
    return world.finish()


def run_tas(world: World, rng: random.Random) -> Outcome:
    groups = list(world.groups.values())
    rng.shuffle(groups)
    cliques = world.fleet.cliques()
    for _ in range(len(groups) + 1):
        progress = False
        for g in [g for g in groups if f"{g.name}-0" not in world.outcome.bound]:
            order = list(cliques)
            rng.shuffle(order)
            for c in order:
                assumed: dict[str, int] = {}
                placed: list[tuple[dict[str, Any], str]] = []
                for i in range(g.members):
                    pod = world.pod(g, i, gang=True)
                    names = [n for n in cliques[c] if world.k8s_fits(n, g.per_member, assumed)]
                    node = world.choose(pod, names, g.per_member)
                    if node is None:
                        break
                    assumed[node] = assumed.get(node, 0) + g.per_member
                    placed.append((pod, node))
                if len(placed) == g.members:
                    for pod, node in placed:
                        world.bind(pod, node, g.per_member)
                    progress = True
                    break
        if not progress:
            break
    return world.finish()


VARIANTS: tuple[tuple[str, Callable[[World, random.Random], Outcome], bool], ...] = (
    ("gpu-extender + v1.35 (LWS)", run_lws, True),
    ("v1.35 alone", run_lws, False),
    ("gpu-extender + 1.36 TAS (gangs)", run_tas, True),
    ("1.36 TAS alone", run_tas, False),
)


def run_seeds(fleet: str, seeds: Sequence[int]) -> dict[str, list[tuple[bool, Outcome, list[Group]]]]:
    """Per variant, per seed: (whether a packing of every group existed, the outcome, the groups)."""
    make = designed if fleet == "designed" else random_fleet
    rows: dict[str, list[tuple[bool, Outcome, list[Group]]]] = {}
    for seed in seeds:
        built, groups = make(random.Random(seed))
        packs = packable(built, groups)
        for name, runner, extender in VARIANTS:
            rows.setdefault(name, []).append(
                (packs, runner(World(built, groups, extender), random.Random(seed * 7919)), groups)
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--fleet", choices=("designed", "random"), default="designed")
    args = p.parse_args(argv)
    logging.disable(logging.CRITICAL)  # (the groups' lines, thousands of them; restored below)
    try:
        rows = run_seeds(args.fleet, range(1, args.seeds + 1))
    finally:
        logging.disable(logging.NOTSET)
    first = next(iter(rows.values()))
    packings = sum(packs for packs, _, _ in first)
    for name, runs in rows.items():
        for seed, (packs, o, groups) in enumerate(runs, 1):
            if packs and o.waiting and name.startswith("gpu-extender"):
                print(f"  seed {seed}: {name}: {o.waiting} group(s) waiting while a packing existed; {groups}")
    print(
        f"{args.fleet} fleets, {args.seeds} seeds ({packings} with a packing of every group): "
        f"{CLIQUES} cliques of {NODES_PER_CLIQUE} nodes of {GPUS} GPUs, {len(first[0][2])} groups"
    )
    print(
        f"{'':34} {'whole':>6} {'waiting':>8} {'on busy GPUs':>13} {'stranded GPUs':>14} "
        f"{'runs waiting while packable':>28}"
    )
    for name, runs in rows.items():
        outcomes = [o for _, o, _ in runs]
        print(
            f"{name:34} {sum(o.whole for o in outcomes):>6} {sum(o.waiting for o in outcomes):>8} "
            f"{sum(o.on_busy for o in outcomes):>13} {sum(o.stranded for o in outcomes):>14} "
            f"{sum(1 for packs, o, _ in runs if packs and o.waiting):>28}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
