"""Pods whose GPUs have read idle for the idle window without a break: the holders reclaim may
evict (issue 51, item 6; decide/reclaim_plan.py). The AllocatedGPUsIdle signal (idle_allocated.py)
is per GPU; reclaim needs it per pod, so each pod whose every held unit reads idle by the idle rule
(NodeSummary.pod_units) is kept in the same IdleWindows: it stands once idle for `window_s`
without a break, and starts over at the first report that reads any of its GPUs busy.

Device-plugin pods only (pod_units: the kubelet's allocation as the agent reads it); a DRA claim
can be shared by several pods and is deallocated by its owner, not by evicting one of them. Fresh
data only: a node whose agent went silent (--stale-after) is unknown, never idle, and its pods'
windows start over. Kept by the leader, which alone acts on it. Pure: the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuextender.extender.state.freshness import is_fresh
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.idle_allocated import IdleWindows

# What became of each eviction reclaim decided on (gpu_extender_reclaim_evictions_total{outcome}):
# done, only reported (--reclaim=dry-run), refused by a PodDisruptionBudget (HTTP 429), the pod gone
# already (404), or any other failure (a 403 included).
EVICTED, DRY_RUN, REFUSED_BY_PDB, GONE, FAILED = "evicted", "dry_run", "refused_by_pdb", "gone", "failed"
OUTCOMES = (EVICTED, DRY_RUN, REFUSED_BY_PDB, GONE, FAILED)
SEPARATOR = "|"  # node|namespace/pod: a pod's key, per node (a name reused on another node starts over)


class IdleHolders:
    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._windows = IdleWindows(window_s)
        self._asking: set[str] = set()  # nodes with a pod in the windows

    def update(self, summaries: Mapping[str, NodeSummary], stale_after_s: float, now: float) -> None:
        asking: set[str] = set()
        for node, summary in summaries.items():
            if not summary.allocated_idle_gpus or not is_fresh(summary.received_at, now, stale_after_s):
                continue  # nothing held reads idle, or unknown
            asked = {
                f"{node}{SEPARATOR}{pod}": units for pod, units, idle in summary.pod_units if units and idle == units
            }
            if asked:
                self._windows.set_node(node, asked, now)
                asking.add(node)
        for node in self._asking - asking:  # busy again, stale, or gone: starts over
            self._windows.set_node(node, {}, now)
        self._asking = asking
        self._windows.promote(now)

    def standing(self) -> dict[tuple[str, str], int]:
        """(node, namespace/pod) -> the units it holds, every one idle past the window."""
        out: dict[tuple[str, str], int] = {}
        for key, units in self._windows.standing.items():
            node, _, pod = key.partition(SEPARATOR)
            out[(node, pod)] = units
        return out


@dataclass(slots=True)
class ReclaimStatus:
    """What the reclaim writer did, for the metrics (observe/reclaim_metrics.py)."""

    mode: str = "off"  # off, dry-run, on
    evictions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    idle_pods: int = 0  # pods whose GPUs read idle past the window (the leader's last pass)
