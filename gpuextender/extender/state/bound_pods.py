"""Bound pods the agent does not attribute yet, taken off what a node offers (decide/README.md,
"Bound pods"). Pure: a node's summary and its ledger pods in, the summary the decisions read out.

A ledger pod (pod_ledger.py: bound, not finished, not being deleted, requesting GPUs) is
*pending* on its node unless the agent already counts it:
- allocation known (the agent read the kubelet): the pod is pending unless it is one of the
  summary's `holder_pods` (matched by namespace/name, as PodResources names holders). Once the
  kubelet admits it, its GPUs are allocated in the report and it is no longer pending: counted once.
- allocation unknown (an agent before 0.2, a kubelet it cannot read): nothing attributes a pod;
  it is pending until its phase is Running. A running pod's GPUs then show in the readings
  (busy), as everything else does when allocation is unknown.
- no agent data, or stale data: every ledger pod counts against the allocatable GPUs the
  decision assumes from (`pending_units`).
The node then offers its free idle units minus the pending pods' units, never below zero, and
the same for free units and for each MIG profile's free devices. Whole-GPU units are those of the
configured non-MIG resources (time-sliced and MPS replicas included, as the summary counts them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from gpuextender.extender.state.gpu_summary import NodeSummary, quality_table
from gpuextender.extender.state.pod_ledger import BoundPod

RUNNING = "Running"


@dataclass(frozen=True, slots=True)
class Pending:
    pods: tuple[BoundPod, ...]  # the ledger pods the node's data does not account for
    units: int  # their whole-GPU (or replica) units
    mig: dict[str, int]  # their MIG devices per profile


NOTHING = Pending((), 0, {})


def pending(summary: NodeSummary | None, pods: Iterable[BoundPod]) -> Pending:
    """The pods of `pods` (one node's) that `summary` does not account for."""
    if summary is None:
        counted = tuple(pods)
    elif summary.free_gpus is not None:
        holders = summary.holder_pods
        counted = tuple(p for p in pods if p.key not in holders)
    else:
        counted = tuple(p for p in pods if p.phase != RUNNING)
    if not counted:
        return NOTHING
    mig: dict[str, int] = {}
    for pod in counted:
        for profile, n in pod.mig:
            mig[profile] = mig.get(profile, 0) + n
    return Pending(counted, sum(p.gpus for p in counted), mig)


def offered(summary: NodeSummary, p: Pending) -> NodeSummary:
    """The summary as the decisions must read it: the pending pods' units taken off its free,
    idle units (degraded ones last: a pending pod is placed on the best GPUs) and its free MIG
    devices, never below zero. The same object when nothing is pending."""
    if p is NOTHING or (not p.units and not p.mig):
        return summary
    idle = max(0, summary.idle_gpus - p.units)
    free = None if summary.free_gpus is None else max(0, summary.free_gpus - p.units)
    mig_free = summary.mig_free
    if p.mig:
        mig_free = tuple((profile, max(0, n - p.mig.get(profile, 0))) for profile, n in mig_free)
    return _with(summary, idle, free, min(summary.degraded_idle_gpus, idle), p.units, mig_free)


def pending_units(pods: Iterable[BoundPod]) -> int:
    """Whole-GPU units of every ledger pod of a node without usable agent data."""
    return sum(p.gpus for p in pods)


class AllocatableLessBound(Mapping[str, int]):
    """Allocatable GPUs per node less the units of its ledger pods, never below zero: what a
    node without usable agent data (none, or stale) is assumed to have. Read per node, only on
    those paths (fresh data decides from the offered summary)."""

    def __init__(self, allocatable: Mapping[str, int], pods_on: Callable[[str], Iterable[BoundPod]]) -> None:
        self._allocatable = allocatable
        self._pods_on = pods_on

    def __getitem__(self, node: str) -> int:
        count = self._allocatable[node]
        pods = self._pods_on(node)
        return max(0, count - pending_units(pods)) if pods else count

    def __iter__(self) -> Iterator[str]:
        return iter(self._allocatable)

    def __len__(self) -> int:
        return len(self._allocatable)


def given_back(summary: NodeSummary, reported: NodeSummary | None, units: int) -> NodeSummary:
    """`summary` (what every other pod reads) with `units` held for a group given back to that
    group's own members (state/group_book.py): never more than its agent reported; negative `units`
    take GPUs off (a gang's members placed there), never below zero."""
    idle = max(0, summary.idle_gpus + units)
    free = None if summary.free_gpus is None else max(0, summary.free_gpus + units)
    if reported is not None:
        idle = min(idle, reported.idle_gpus)
        if free is not None and reported.free_gpus is not None:
            free = min(free, reported.free_gpus)
    degraded = min(reported.degraded_idle_gpus if reported is not None else summary.degraded_idle_gpus, idle)
    return _with(summary, idle, free, degraded, max(0, summary.bound_pod_units - units), summary.mig_free)


def _with(
    summary: NodeSummary, idle: int, free: int | None, degraded: int, bound: int, mig_free: tuple[tuple[str, int], ...]
) -> NodeSummary:
    """`summary` with other counts of what it offers (its quality table follows them)."""
    return dataclasses.replace(
        summary,
        idle_gpus=idle,
        free_gpus=free,
        degraded_idle_gpus=degraded,
        quality=quality_table(idle, degraded, summary.set_tiers),
        mig_free=mig_free,
        bound_pod_units=bound,
    )
