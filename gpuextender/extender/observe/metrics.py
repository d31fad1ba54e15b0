"""The extender's Prometheus metrics (own registry, so tests can run several apps)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.pod_ledger import PodLedger

# The ingest's own series: counted where the gRPC server runs (the ingest process, unless
# --ingest-in-process), shown on the extender's /metrics either way.
INGEST_SAMPLES = [
    "gpu_extender_reports_total",
    "gpu_extender_reports_rejected_total",
    "gpu_extender_connected_agents",
    "gpu_extender_unknown_nodes",
    "gpu_extender_paced_streams",
    "gpu_extender_paced_reports_total",
    "gpu_extender_agent_auth_failures_total",
]

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class _NodeDataCollector(Collector):
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
        by_namespace: dict[str, int] = {}
        for s in self._state.summaries():
            age.add_metric([s.node], max(0.0, now - s.received_at))
            idle.add_metric([s.node], s.idle_gpus)
            if s.free_gpus is not None:
                waste.add_metric([s.node], s.allocated_idle_gpus)
                for namespace, count in s.idle_by_namespace:
                    by_namespace[namespace] = by_namespace.get(namespace, 0) + count
        yield age
        yield idle
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


class RelayedMetrics(Collector):
    """The ingest process's series, as it last sent them (relay.py); `refresh` asks it
    for them now (a scrape then shows every report it acked before)."""

    def __init__(self) -> None:
        self.text = ""
        self.ask: Callable[[], Awaitable[None]] | None = None

    async def refresh(self) -> None:
        if self.ask is not None:
            await self.ask()

    def collect(self) -> Iterator[Metric]:
        yield from text_string_to_metric_families(self.text)


class ExtenderMetrics:
    def __init__(
        self,
        state: GpuState,
        store: InventoryStore | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        ingest_here: bool = True,
        ledger: PodLedger | None = None,
    ) -> None:
        """`ingest_here` False: the ingest series come from the ingest process (`relayed`).
        `ledger`: the bound-pod ledger, counted in gpu_extender_bound_pods (absent without one)."""
        self.registry = r = CollectorRegistry()
        self.request_duration = Histogram(
            "gpu_extender_request_duration_seconds",
            "Time to answer a scheduler call, by verb.",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "gpu_extender_requests", "Scheduler calls answered, by verb and HTTP status.", ["verb", "code"], registry=r
        )
        self.bad_requests = Counter(
            "gpu_extender_bad_requests", "Refused calls, by verb and reason code.", ["verb", "reason"], registry=r
        )
        self.filter_nodes = Counter(
            "gpu_extender_filter_nodes",
            "Candidate nodes judged by filter, by result "
            "(passed: in the answer; held_back: passed, not among the --shortlist best).",
            ["result"],
            registry=r,
        )
        self.filter_failures = Counter(
            "gpu_extender_filter_failures", "Nodes rejected by filter, by reason code.", ["reason"], registry=r
        )
        self.filter_fallbacks = Counter(
            "gpu_extender_filter_fallbacks",
            "Filter calls where no node fit and the soft failures were passed.",
            registry=r,
        )
        self.filter_assumed_passes = Counter(
            "gpu_extender_filter_assumed_passes",
            "Nodes passed by filter on assumed data (agent silent or never "
            "heard) because no node with fresh GPU data fit.",
            registry=r,
        )
        self.runtime_incompatible = Counter(
            "gpu_extender_runtime_incompatible",
            "Filter calls for OME pods whose runtime cannot serve their model, "
            "by --runtime-check mode (enforce: every node failed; warn: only reported).",
            ["mode"],
            registry=r,
        )
        self.class_policy_no_class = Counter(
            "gpu_extender_class_policy_no_class",
            "Filter calls for OME pods left class-neutral because the "
            "AcceleratorClass policy chose no class (as OME does), by reason (class_policy.NoClass: "
            "no_eligible_class, no_cost_data, unknown_policy, no_policy, class_not_found).",
            ["reason"],
            registry=r,
        )
        self.reports = Counter("gpu_extender_reports", "Node reports from agents, by result.", ["result"], registry=r)
        self.connected_agents = Gauge("gpu_extender_connected_agents", "Agent streams currently open.", registry=r)
        self.reports_rejected = Counter(
            "gpu_extender_reports_rejected",
            "Reports answered REJECTED (not stored), by reason: invalid, "
            "clock_skew, sequence, unknown_node_limit, node_mismatch, superseded.",
            ["reason"],
            registry=r,
        )
        self.unknown_nodes = Gauge(
            "gpu_extender_unknown_nodes",
            "Nodes not in the inventory whose reports are held "
            "(at most --max-unknown-nodes; 0 without an inventory source).",
            registry=r,
        )
        self.paced_streams = Gauge(
            "gpu_extender_paced_streams",
            "Agent streams waiting because they send reports faster than the "
            "per-stream rate limit (a real agent never does).",
            registry=r,
        )
        self.paced_reports = Counter(
            "gpu_extender_paced_reports",
            "Reports held back by the per-stream rate limit before processing.",
            registry=r,
        )
        self.invalid_objects = Counter(
            "gpu_extender_inventory_invalid_objects",
            "Inventory objects skipped as invalid, by kind.",
            ["kind"],
            registry=r,
        )
        self.watch_restarts = Counter(
            "gpu_extender_inventory_watch_restarts",
            "Times a kind's list+watch started over, by kind and cause: "
            "relist_410 (resourceVersion expired: relisted), crd_removed (CRD gone while watched: relisted), "
            "server_closed (the server ended the watch: watched again), error (a failed LIST or WATCH: retried "
            "after backoff).",
            ["kind", "cause"],
            registry=r,
        )
        if ledger is not None:
            bound = Gauge(
                "gpu_extender_bound_pods",
                "Pods bound to a node, not finished nor being deleted, that request GPUs (the bound-pod ledger).",
                registry=r,
            )
            bound.set_function(lambda: len(ledger))
        r.register(_NodeDataCollector(state, store, clock))
        self.relayed: RelayedMetrics | None = None
        if not ingest_here:  # the same names come from the ingest process instead
            for collector in (
                self.reports,
                self.connected_agents,
                self.reports_rejected,
                self.unknown_nodes,
                self.paced_streams,
                self.paced_reports,
            ):
                r.unregister(collector)
            self.relayed = RelayedMetrics()
            r.register(self.relayed)

    def count_watch_restart(self, kind: str, cause: str) -> None:
        self.watch_restarts.labels(kind=kind, cause=cause).inc()

    def count_invalid_object(self, kind: str, key: str, problem: str) -> None:
        self.invalid_objects.labels(kind=kind).inc()
