"""Per node, the bound pods its agent does not attribute yet (state/bound_pods.py): how many, and how
long the oldest has waited. Computed at scrape time over the ledger's nodes only, so a series
exists exactly while a node has such pods (no series per idle node of a 5,000-node fleet)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuextender.extender.state.bound_pods import pending
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.pod_ledger import PodLedger


class BoundPodsCollector(Collector):
    def __init__(self, state: GpuState, ledger: PodLedger, clock: Callable[[], float]) -> None:
        self._state = state
        self._ledger = ledger
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        count = GaugeMetricFamily(
            "gpu_extender_node_bound_pods_pending",
            "Pods bound to the node that its agent does not attribute yet (not admitted by the kubelet, or "
            "not Running where allocation is unknown): their GPUs are taken off what the node offers.",
            labels=["node"],
        )
        oldest = GaugeMetricFamily(
            "gpu_extender_node_bound_pods_pending_oldest_seconds",
            "How long the oldest of those pods has been bound to the node, as the extender saw it.",
            labels=["node"],
        )
        now = self._clock()
        for node in list(self._ledger.nodes()):
            p = pending(self._state.reported(node), self._ledger.pods_on(node))
            if p.pods:
                count.add_metric([node], len(p.pods))
                oldest.add_metric([node], max(0.0, now - min(b.seen_at for b in p.pods)))
        yield count
        yield oldest
