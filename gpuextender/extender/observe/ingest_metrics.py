"""The ingest's series (agents' streams and reports), in their own registry: the ingest process
serves exactly this registry to the extender (workers/worker_main.py), and an extender with
--ingest-in-process adds it to its own. Which series are the ingest's follows from where they are
defined, not from a list."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class IngestMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reports = Counter(
            "gpu_extender_reports", "Node reports from agents, by result.", ["result"], registry=self.registry
        )
        self.connected_agents = Gauge(
            "gpu_extender_connected_agents", "Agent streams currently open.", registry=self.registry
        )
        self.reports_rejected = Counter(
            "gpu_extender_reports_rejected",
            "Reports answered REJECTED (not stored), by reason: invalid, "
            "clock_skew, sequence, unknown_node_limit, node_mismatch, superseded, heartbeat "
            "(a light heartbeat that does not fit the full report it repeats: the agent sends one), "
            "paced (a relayed report over its agent stream's rate).",
            ["reason"],
            registry=self.registry,
        )
        self.unknown_nodes = Gauge(
            "gpu_extender_unknown_nodes",
            "Nodes not in the inventory whose reports are held "
            "(at most --max-unknown-nodes; 0 without an inventory source).",
            registry=self.registry,
        )
        self.paced_streams = Gauge(
            "gpu_extender_paced_streams",
            "Agent streams waiting because they send reports faster than the "
            "per-stream rate limit (a real agent never does), and relay streams waiting because "
            "their reports are refused faster than their budget.",
            registry=self.registry,
        )
        self.paced_reports = Counter(
            "gpu_extender_paced_reports",
            "Reports held back by the per-stream rate limit before processing.",
            registry=self.registry,
        )
        self._auth_failures: Counter | None = None

    def auth_failures(self) -> Counter:
        """Agent authentication failures by reason; the series exists only where agents authenticate."""
        if self._auth_failures is None:
            self._auth_failures = Counter(
                "gpu_extender_agent_auth_failures",
                "Agent streams refused at open (missing/invalid token, wrong service account, no node-name claim, "
                "TokenReview unavailable, peer_busy: too many reviews under way for one client address, "
                "relay_not_allowed: a relay where no --relay-service-account is named) and "
                "reports rejected for another node than the token's, by reason.",
                ["reason"],
                registry=self.registry,
            )
        return self._auth_failures
