"""The relay's /metrics, /healthz and /readyz on a real aiohttp server on loopback: /readyz is 503
with its reason until an extender replica has answered the relay, then 200 (and stays so while
replicas come and go); a taken address is an OSError at start."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest

from gpuextender.common.dial import DialSettings
from gpuextender.common.idle_rule import IdleRule
from gpuextender.common.netaddr import HostPort
from gpuextender.extender.ingest.service import IngestService
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.relay.forward_store import ForwardStore
from gpuextender.extender.relay.http_probes import start_probes
from gpuextender.extender.relay.relay_app import Relay
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.harness import free_port


def test_readyz_waits_for_a_replicas_answer_and_then_holds() -> None:
    async def scenario() -> None:
        store, metrics = ForwardStore(IdleRule()), IngestMetrics()
        relay = Relay(store, IngestService(store, IngestMetrics()), DialSettings(), metrics)
        port = free_port()
        runner = await start_probes(HostPort("127.0.0.1", port), metrics.registry, relay.readiness)
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as session:

                async def get(path: str) -> tuple[int, str]:
                    async with session.get(base + path) as response:
                        return response.status, await response.text()

                assert await get("/readyz") == (
                    503,
                    "not ready: no extender replica has answered this relay yet (0 found; see the log)\n",
                )
                assert await get("/healthz") == (200, "ok\n")
                status, body = await get("/metrics")
                assert status == 200 and "gpu_relay_extenders_connected 0.0" in body
                relay.on_ack("10.0.0.1:9090", pb.RelayAck())  # a replica answered
                assert await get("/readyz") == (200, "ready: 0 of 0 extender replica(s) found with a stream open\n")
                relay.on_ack("10.0.0.1:9090", None)  # its stream ended: still ready (GPURelayExtendersUnreached tells)
                assert (await get("/readyz"))[0] == 200
                assert (await get("/nothing"))[0] == 404
        finally:
            await runner.cleanup()

    asyncio.run(scenario())


def test_a_taken_address_fails_the_start() -> None:
    async def scenario() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(OSError):
                await start_probes(HostPort("127.0.0.1", port), IngestMetrics().registry, lambda: (True, "ready"))

    asyncio.run(scenario())
