"""The extender's Prometheus metrics: one registry per extender (so tests can run several), the
counters and histograms of the scheduler verbs and the inventory here, the ingest's in
ingest_metrics.py, and one scrape-time collector per file beside this one (node_data, bound_pods_metrics,
bindings, live_classes_metrics, device_taints_metrics, silent_nodes, worker_metrics), each added with `add`."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.registry import Collector

from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.observe.node_data import NodeDataCollector
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.pod_ledger import PodLedger

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


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
        """`ingest_here` False: the ingest series come from the ingest workers (`workers`).
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
        self.filter_preemptible = Counter(
            "gpu_extender_filter_preemptible",
            "Filter calls where no node fit and the fallback was held back: the pod may preempt "
            "lower-priority GPU pods, kube-scheduler's preemption decides.",
            registry=r,
        )
        self.preemption_nodes = Counter(
            "gpu_extender_preemption_nodes",
            "Candidate nodes of kube-scheduler's preemption judged by the preempt verb, by action: kept "
            "(its victims free enough usable GPUs), extended (lower-priority GPU pods added), dropped "
            "(no eviction makes the node usable), as proposed (not judged: no fresh GPU data, DRA, no "
            "whole GPUs asked for).",
            ["action"],
            registry=r,
        )
        self.preemption_victims_added = Counter(
            "gpu_extender_preemption_victims_added",
            "Victims the preempt verb added to kube-scheduler's (lower-priority GPU pods, cheapest first).",
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
        r.register(NodeDataCollector(state, store, clock))
        # The ingest's series are counted where the gRPC server runs: here, or in the ingest process,
        # whose exposition of the same registry then arrives in a METRICS frame (workers/frames.py).
        # (The workers' collector comes with them: app.py adds it with its refresh.)
        self.ingest = IngestMetrics()
        if ingest_here:
            r.register(self.ingest.registry)
        self._refresh: list[Callable[[], Awaitable[None]]] = []

    def add(self, collector: Collector, refresh: Callable[[], Awaitable[None]] | None = None) -> None:
        """A scrape-time collector of another stage's state, on the one registry /metrics serves;
        `refresh`: what brings it up to date before each scrape (the ingest workers' series)."""
        self.registry.register(collector)
        if refresh is not None:
            self._refresh.append(refresh)

    async def refresh(self) -> None:
        """Before a scrape: each collector's series up to date."""
        for refresh in self._refresh:
            await refresh()

    def count_watch_restart(self, kind: str, cause: str) -> None:
        self.watch_restarts.labels(kind=kind, cause=cause).inc()

    def count_invalid_object(self, kind: str, key: str, problem: str) -> None:
        self.invalid_objects.labels(kind=kind).inc()
