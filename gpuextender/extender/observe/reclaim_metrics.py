"""Reclaim at scrape time (issue 51, item 6; inventory/reclaim_writer.py): its mode, the pods whose
GPUs read idle past the window as the leader last counted them, and what became of each eviction it
decided on."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuextender.extender.state.idle_holders import OUTCOMES, ReclaimStatus

MODES = ("off", "dry-run", "on")


class ReclaimCollector(Collector):
    def __init__(self, status: ReclaimStatus) -> None:
        self._status = status

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        status = self._status
        mode = GaugeMetricFamily("gpu_extender_reclaim_mode", "1 for --reclaim: off, dry-run, on.", labels=["mode"])
        for m in MODES:
            mode.add_metric([m], 1 if status.mode == m else 0)
        yield mode
        yield GaugeMetricFamily(
            "gpu_extender_reclaim_idle_pods",
            "Pods whose every held GPU read idle for over --idle-window without a break (the leader's last "
            "reclaim pass; 0 in the other replicas).",
            value=status.idle_pods,
        )
        evictions = CounterMetricFamily(
            "gpu_extender_reclaim_evictions",
            "Evictions reclaim decided on, by outcome: evicted, dry_run (--reclaim=dry-run: reported only), "
            "refused_by_pdb (a PodDisruptionBudget forbids it), gone (the pod was gone), failed.",
            labels=["outcome"],
        )
        for outcome in OUTCOMES:
            evictions.add_metric([outcome], status.evictions.get(outcome, 0))
        yield evictions
