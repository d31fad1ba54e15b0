"""The agent's HTTP side: Prometheus /metrics and a liveness /healthz."""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuextender.agent.metrics import AgentMetrics
from gpuextender.agent.sample_loop import SampleLoop


def build_app(metrics: AgentMetrics, sampler: SampleLoop) -> web.Application:
    async def get_metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def get_healthz(_: web.Request) -> web.Response:
        # Live while the sample loop keeps producing samples; a stalled NVML call
        # (hung driver) makes the kubelet restart us. NVML errors alone do not:
        # they are reported to the extender, which is more useful than a restart loop.
        last = sampler.last_sample_monotonic
        limit = max(10.0, 5 * sampler.interval_s)
        if last is None or asyncio.get_running_loop().time() - last > limit:
            age = "never" if last is None else f"{asyncio.get_running_loop().time() - last:.1f}s ago"
            return web.Response(status=503, text=f"no NVML sample for too long (last: {age})\n")
        sample = metrics.last_sample
        nvml = f"nvml error {sample.node_error}" if sample and sample.node_error else "nvml ok"
        return web.Response(text=f"ok ({nvml}, sequence {sampler.sequence})\n")

    app = web.Application()
    app.router.add_get("/metrics", get_metrics)
    app.router.add_get("/healthz", get_healthz)
    return app
