"""Builders for NodeReports and summaries used across extender tests, and a loopback server to
call an app over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.v1 import gpu_state_pb2 as pb

GIB = 1024**3


def gpu(index: int, util: int | None = 0, mem_pct: float | None = 0, *, healthy: bool = True) -> pb.GpuSample:
    msg = pb.GpuSample(index=index, uuid=f"GPU-{index}", name="NVIDIA H100 80GB HBM3", healthy=healthy)
    if util is not None:
        msg.utilization_gpu_percent = util
    if mem_pct is not None:
        msg.memory_total_bytes = 80 * GIB
        msg.memory_used_bytes = int(80 * GIB * mem_pct / 100)
    if not healthy:
        msg.unhealthy_reasons.append("GpuIsLost")
    return msg


def report(
    node: str, gpus: list[pb.GpuSample], *, seconds: int = 1000, node_error: str = "", seq: int = 1
) -> pb.NodeReport:
    r = pb.NodeReport(node_name=node, sequence=seq, gpus=gpus, node_error=node_error, agent_version="test")
    r.sample_time.seconds = seconds
    return r


def node(
    name: str,
    idle: int,
    busy: int = 0,
    *,
    lost: int = 0,
    busy_util: int = 90,
    idle_util: int = 0,
    received_at: float = 100.0,
    node_error: str = "",
) -> NodeSummary:
    gpus = [gpu(i, idle_util, 1) for i in range(idle)]
    gpus += [gpu(idle + i, busy_util, 80) for i in range(busy)]
    gpus += [gpu(idle + busy + i, None, None, healthy=False) for i in range(lost)]
    return summarize(report(name, gpus, node_error=node_error), IdleRule(), received_at)


def serve(app: web.Application, test: Callable[[TestClient[Any, Any]], Awaitable[None]]) -> None:
    """Run `test` with a client of `app` served on loopback (a real aiohttp server)."""

    async def go() -> None:
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            await test(client)
        finally:
            await client.close()

    asyncio.run(go())
