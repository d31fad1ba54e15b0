"""The agent's HTTP side: Prometheus /metrics, a liveness /healthz and a readiness /readyz.

/readyz is 200 once NVML works (the latest sample has no node_error) and, when the agent has
extenders to report to, once one of them has ACCEPTED a report since start: a new agent whose
reports no extender takes (wrong address, TLS or token, node name refused) is not ready, so a
rollout gated on readiness stops there. The ack part latches: later extender outages show in
gpu_agent_stream_connected, not here, so they do not flap every agent at once. In metrics-only
mode (no --extender, no --extender-service) NVML alone decides: there is nobody to ack.
Otherwise 503 with a one-line reason. Served by http_get_server (why not aiohttp: see there)."""

from __future__ import annotations

import asyncio
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuextender.agent.export.http_get_server import Handler, Response, text
from gpuextender.agent.export.metrics import AgentMetrics


class SamplerProgress(Protocol):
    """What the probes read of the sample loop (sampling/sample_loop.py), which sits above this stage."""

    @property
    def last_sample_monotonic(self) -> float | None: ...
    @property
    def interval_s(self) -> float: ...
    @property
    def sequence(self) -> int: ...


def routes(metrics: AgentMetrics, sampler: SamplerProgress, *, require_ack: bool = True) -> dict[str, Handler]:
    """`require_ack`: whether the agent has extenders to report to (False in metrics-only mode).
    The handlers run on the event loop (they read the loop's clock)."""

    def get_metrics() -> Response:
        return Response(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)

    def get_healthz() -> Response:
        # Live while the sample loop keeps producing samples; a stalled NVML call
        # (hung driver) makes the kubelet restart us. NVML errors alone do not:
        # they are reported to the extender, which is more useful than a restart loop.
        last = sampler.last_sample_monotonic
        limit = max(10.0, 5 * sampler.interval_s)
        if last is None or asyncio.get_running_loop().time() - last > limit:
            age = "never" if last is None else f"{asyncio.get_running_loop().time() - last:.1f}s ago"
            return text(503, f"no NVML sample for too long (last: {age})\n")
        sample = metrics.last_sample
        nvml = f"nvml error {sample.node_error}" if sample and sample.node_error else "nvml ok"
        return text(200, f"ok ({nvml}, sequence {sampler.sequence})\n")

    def get_readyz() -> Response:
        sample = metrics.last_sample
        if sample is None:
            return text(503, "not ready: no NVML sample yet\n")
        if sample.node_error:
            return text(503, f"not ready: NVML not initialised ({sample.node_error})\n")
        if require_ack and not metrics.report_accepted:
            return text(503, "not ready: no extender has accepted a report yet\n")
        return text(200, "ready\n")

    return {"/metrics": get_metrics, "/healthz": get_healthz, "/readyz": get_readyz}
