"""Reclaim (issue 51, item 6; deploy/README.md, "Reclaim"): which pods holding GPUs that read idle
for the idle window to evict in one pass, so that GPU pods kube-scheduler could not place get them.

The holders are state/idle_holders.py's (device-plugin pods whose every held GPU read idle for the
window without a break, on fresh data), joined with the bound-pod ledger; the waiting pods are
model/waiting_pod.py's (marked Unschedulable by kube-scheduler). A holder is evicted only when all
of these hold:

- its namespace carries the opt-in label (an operator's choice per namespace);
- it is Running and has run for at least the minimum runtime (status.startTime; unknown: never);
- it is no member of a multi-pod group (evicting one member breaks the whole job);
- its node has fresh GPU data (unknown is never idle) and no eviction of an earlier pass still
  settling there;
- a waiting pod of equal or higher priority that may run on its node (model/waiting_pod.py) needs
  it: the node's free, idle, healthy GPUs are fewer than the pod asks for, and those plus the
  GPUs of the holders chosen there are enough. Equal priority is allowed, unlike kube-scheduler's
  preemption (strictly lower): reclaim takes back GPUs doing nothing, not work; a pod of higher
  priority than the pod it would serve is never evicted;
- no node the waiting pod may run on already has enough free, idle, healthy GPUs for it (it needs
  no eviction: what keeps it waiting is something else).

Per waiting pod (highest priority first, then the longest waiting), the node where the fewest
holders (then the fewest GPUs) are enough; one waiting pod per node per pass; at most
`max_evictions` evictions a pass: a waiting pod whose holders would pass the limit waits for the
next. Every holder not evicted says why. Pure: every input is an argument.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from gpuextender.extender.model.waiting_pod import WaitingPod


@dataclass(frozen=True, slots=True)
class Holder:
    """A pod whose every held GPU read idle for the window, with what the ledger knows of it."""

    uid: str
    key: str  # namespace/name
    node: str
    units: int  # GPUs (or replicas) it holds on healthy GPUs: what its eviction gives back
    priority: int
    started: float  # Unix seconds; 0.0: not started or unknown
    running: bool
    group: str = ""  # its multi-pod group's key; "" for a single pod


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """A node with fresh GPU data: its free, idle, healthy GPUs (units), labels and taints."""

    free: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True, slots=True)
class Eviction:
    holder: Holder
    serves: WaitingPod
    free: int  # the node's free, idle, healthy GPUs beside what the evictions there give back


@dataclass(frozen=True, slots=True)
class Skipped:
    pod: str  # namespace/name of a holder
    node: str
    why: str


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    evictions: tuple[Eviction, ...]
    skipped: tuple[Skipped, ...]


def plan(
    holders: Iterable[Holder],
    waiting: Iterable[WaitingPod],
    rooms: Mapping[str, NodeRoom],
    *,
    opted_in: AbstractSet[str],
    min_runtime_s: float,
    wall_now: float,
    max_evictions: int,
    settling: AbstractSet[str] = frozenset(),
) -> ReclaimPlan:
    """`rooms`: every node with fresh GPU data; `settling`: nodes where an earlier pass's eviction
    has not landed yet."""
    skipped: dict[str, Skipped] = {}
    by_node: dict[str, list[Holder]] = {}
    for h in holders:
        why = _ineligible(h, rooms, opted_in, min_runtime_s, wall_now, settling)
        if why:
            skipped[h.key] = Skipped(h.key, h.node, why)
        else:
            by_node.setdefault(h.node, []).append(h)
    evictions: list[Eviction] = []
    used: set[str] = set()  # nodes a waiting pod was served on this pass
    order = sorted((w for w in waiting if w.gpus >= 1), key=lambda w: (-w.priority, w.created, w.key))
    for w in order:
        fits = [n for n, room in rooms.items() if n not in used and _may_run(w, room)]
        if any(rooms[n].free >= w.gpus for n in fits):
            continue  # room without evicting anything: not what keeps it waiting
        best: tuple[tuple[int, int, str], str, list[Holder]] | None = None
        for node in fits:
            candidates = by_node.get(node)
            if not candidates:
                continue
            need = w.gpus - rooms[node].free
            allowed = []
            for h in candidates:
                if h.priority > w.priority:
                    skipped.setdefault(
                        h.key,
                        Skipped(h.key, node, f"priority {h.priority} above the waiting pod {w.key}'s {w.priority}"),
                    )
                else:
                    allowed.append(h)
            chosen = _fewest(allowed, need)
            if chosen is None:
                continue
            score = (len(chosen), sum(h.units for h in chosen), node)
            if best is None or score < best[0]:
                best = (score, node, chosen)
        if best is None:
            continue
        _, node, chosen = best
        if len(evictions) + len(chosen) > max_evictions:
            for h in chosen:
                skipped[h.key] = Skipped(h.key, node, f"over this pass's limit of {max_evictions} evictions")
            continue
        used.add(node)
        free = rooms[node].free
        for h in chosen:
            evictions.append(Eviction(h, w, free))
            skipped.pop(h.key, None)
        by_node[node] = [h for h in by_node[node] if h not in chosen]
    for node, left in by_node.items():
        for h in left:
            skipped.setdefault(h.key, Skipped(h.key, node, "no waiting pod needs its GPUs on its node"))
    return ReclaimPlan(tuple(evictions), tuple(sorted(skipped.values(), key=lambda s: s.pod)))


def _ineligible(
    h: Holder,
    rooms: Mapping[str, NodeRoom],
    opted_in: AbstractSet[str],
    min_runtime_s: float,
    wall_now: float,
    settling: AbstractSet[str],
) -> str:
    namespace = h.key.partition("/")[0]
    if namespace not in opted_in:
        return f"namespace {namespace} is not opted in"
    if not h.running:
        return "not Running"
    if h.group:
        return f"a member of the multi-pod group {h.group}"
    if h.started <= 0:
        return "its start time is unknown"
    ran = wall_now - h.started
    if ran < min_runtime_s:
        return f"running for {ran:.0f}s, under the minimum runtime of {min_runtime_s:g}s"
    if h.node not in rooms:
        return "its node has no fresh GPU data (unknown is never idle)"
    if h.node in settling:
        return "an earlier eviction on its node has not landed yet"
    return ""


def _may_run(w: WaitingPod, room: NodeRoom) -> bool:
    return w.may_run_on(room.labels, room.taints)


def _fewest(holders: Collection[Holder], need: int) -> list[Holder] | None:
    """The fewest holders whose GPUs add up to `need`, largest first (then none of them is spare:
    each frees at least what the last one taken does, without which they were too few); None when
    all of them are too few."""
    if sum(h.units for h in holders) < need:
        return None
    chosen: list[Holder] = []
    got = 0
    for h in sorted(holders, key=lambda h: (-h.units, h.key)):
        if got >= need:
            break
        chosen.append(h)
        got += h.units
    return chosen
