"""Per node, what its agent last reported, computed at scrape time from the live state: data age,
idle GPUs, which reading judged its GPUs, allocated-but-idle GPUs (per node and per namespace),
and the inventory's object counts."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuextender.common.idle_rule import JUDGED_BY_SM_ACTIVE, JUDGED_BY_UTILIZATION
from gpuextender.extender.state.freshness import data_age
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import GPU_UNHEALTHY
from gpuextender.extender.state.inventory_store import InventoryStore


class NodeDataCollector(Collector):
    """Per-node data age, computed at scrape time from the live state."""

    def __init__(self, state: GpuState, store: InventoryStore | None, clock: Callable[[], float]) -> None:
        self._state = state
        self._store = store
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self._clock()
        age = GaugeMetricFamily(
            "gpu_extender_node_data_age_seconds", "Seconds since the node's agent last reported.", labels=["node"]
        )
        idle = GaugeMetricFamily(
            "gpu_extender_node_idle_gpus",
            "GPUs (or time-slicing replicas) in the node's last report that can take a pod: "
            "healthy, idle, and unallocated where allocation is known.",
            labels=["node"],
        )
        # The waste platform teams hunt: GPUs held by a pod yet idle (only where the agent knows
        # allocation; elsewhere no series, as unknown is not zero).
        waste = GaugeMetricFamily(
            "gpu_extender_node_allocated_idle_gpus",
            "GPUs held by a pod yet idle in the node's last report (allocation known).",
            labels=["node"],
        )
        judged = GaugeMetricFamily(
            "gpu_extender_node_gpus_judged",
            "Healthy GPUs in the node's last report by the reading that judged them idle or busy: "
            f"{JUDGED_BY_SM_ACTIVE} (GPM SM activity, --idle-max-sm-active) or {JUDGED_BY_UTILIZATION}.",
            labels=["node", "rule"],
        )
        by_namespace: dict[str, int] = {}
        for s in self._state.summaries():
            age.add_metric([s.node], data_age(s.received_at, now))
            idle.add_metric([s.node], s.idle_gpus)
            healthy = sum([1 for cell in s.gpus if cell[1] != GPU_UNHEALTHY])
            by_sm = sum([1 for v in s.sm_active if v is not None])
            if by_sm:
                judged.add_metric([s.node, JUDGED_BY_SM_ACTIVE], by_sm)
            if healthy > by_sm:
                judged.add_metric([s.node, JUDGED_BY_UTILIZATION], healthy - by_sm)
            if s.free_gpus is not None:
                waste.add_metric([s.node], s.allocated_idle_gpus)
                for namespace, count in s.idle_by_namespace:
                    by_namespace[namespace] = by_namespace.get(namespace, 0) + count
        yield age
        yield idle
        yield judged
        yield waste
        wasted = GaugeMetricFamily(
            "gpu_extender_namespace_allocated_idle_gpus",
            "GPUs held by the namespace's pods yet idle, over all nodes (a GPU shared by "
            "two namespaces counts for each).",
            labels=["namespace"],
        )
        for namespace, count in sorted(by_namespace.items()):
            wasted.add_metric([namespace], count)
        yield wasted
        yield GaugeMetricFamily(
            "gpu_extender_nodes_with_data", "Nodes with GPU data from an agent.", value=len(self._state)
        )
        if self._store is not None:
            objects = GaugeMetricFamily(
                "gpu_extender_inventory_objects", "Objects in the inventory, by kind.", labels=["kind"]
            )
            for kind, count in self._store.counts().items():
                objects.add_metric([kind], count)
            yield objects
