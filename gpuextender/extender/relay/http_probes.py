"""The relay's HTTP side on --metrics-addr: Prometheus /metrics, a liveness /healthz and a
readiness /readyz.

/readyz is 200 once an extender replica has answered this relay (its first RelayAck: the replica
took the relay's identity and stream), and stays so: later outages show in
gpu_relay_extenders_connected and the alert GPURelayExtendersUnreached, not here, so that they do
not take every relay out of its Service at once (then no agent could reconnect to any). A new
relay that no replica takes (a wrong token, address or certificate) is never ready: a rollout
gated on readiness stops there, before its agents move to it. Otherwise 503 with a one-line
reason. Served with aiohttp, which the relay has anyway (the extender's scheduler API)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gpuextender.common.netaddr import HostPort

# (ready, the line to say): what /readyz answers.
Readiness = Callable[[], tuple[bool, str]]


def probes_app(registry: CollectorRegistry, readiness: Readiness) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")  # the loop answers: alive

    async def readyz(_: web.Request) -> web.Response:
        ready, line = readiness()
        return web.Response(status=200 if ready else 503, text=f"{line}\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def start_probes(address: HostPort, registry: CollectorRegistry, readiness: Readiness) -> web.AppRunner:
    """Serving on `address` until the runner's cleanup(); OSError when the address is taken."""
    runner = web.AppRunner(probes_app(registry, readiness), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, address.host or None, address.port).start()
    except OSError:
        await runner.cleanup()
        raise
    return runner
