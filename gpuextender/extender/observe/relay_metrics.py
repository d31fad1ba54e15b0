"""The gpu-relay's own series (gpu_relay_*), on the registry of its agents' side's ingest series
(its /metrics: relay/http_probes.py)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge


class RelayMetrics:
    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        connected: Callable[[], int],
        found: Callable[[], int],
        nodes: Callable[[], int],
    ) -> None:
        """`connected`: replicas with a stream open; `found`: replicas found (it streams to each);
        `nodes`: nodes whose reports it holds."""
        Gauge(
            "gpu_relay_extenders_connected", "Extender replicas with a relay stream open.", registry=registry
        ).set_function(connected)
        # Against gpu_relay_extenders_connected: a replica found but not streamed to gets none of
        # this relay's agents' reports (the GPURelayExtendersUnreached alert).
        Gauge(
            "gpu_relay_extenders",
            "Extender replicas the relay found through --extender-service (it streams to each).",
            registry=registry,
        ).set_function(found)
        Gauge("gpu_relay_nodes", "Nodes whose reports the relay holds.", registry=registry).set_function(nodes)
        self.refused = Counter(
            "gpu_relay_refused_reports",
            "Reports the relay forwarded that an extender replica refused (the agent is told at its next heartbeat).",
            registry=registry,
        )
