"""Several ingest workers on one port (issue 36): real worker processes, real grpc.aio streams
(one TCP connection each, as real agents have), the extender's side (supervisor.IngestWorkers)
in this test's event loop.

What must hold: the kernel spreads the streams over every worker and every node's data
reaches the main process, never a report twice or out of order per node, also when a node's
stream moves to another worker; a worker that dies or goes silent is started again while
the others keep relaying; workers that keep dying stop the extender."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.summary_codec import Base, Readings
from gpuextender.extender.workers import supervisor
from gpuextender.extender.workers.port_guard import hold_port
from gpuextender.extender.workers.supervisor import IngestWorkers
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.extender.builders import gpu, report
from tests.harness import metric, parse_metrics

ARGV = ["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-level", "warning"]


class Applied:
    """Wraps GpuState.store and store_readings: every (node, sequence) the main process stored, in
    order, whether relayed as a summary or as the readings of one (a report of the same shape as
    the node's last one on its stream: summary_store.SummaryStore)."""

    def __init__(self, state: GpuState) -> None:
        self.seen: dict[str, list[int]] = {}
        self.readings = 0  # of those, how many came as readings
        self._store, self._store_readings = state.store, state.store_readings
        state.store = self  # type: ignore[method-assign]
        state.store_readings = self.readings_of  # type: ignore[method-assign]

    def __call__(self, summary: NodeSummary, facts: tuple[GpuFacts, ...]) -> bool:
        stored = self._store(summary, facts)
        if stored:
            self.seen.setdefault(summary.node, []).append(summary.sequence)
        return stored

    def readings_of(self, node: str, base: Base, changes: Readings) -> bool:
        stored = self._store_readings(node, base, changes)
        if stored:
            self.seen.setdefault(node, []).append(dict(changes)["sequence"])
            self.readings += 1
        return stored


class Agent:
    """One node's stream on a TCP connection of its own."""

    def __init__(self, port: int, node: str) -> None:
        self.port, self.node, self.seq = port, node, 0
        self.channel: grpc.aio.Channel | None = None
        self.call: Any = None

    async def connect(self) -> None:
        await self.close()
        options = [("grpc.use_local_subchannel_pool", 1)]
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}", options=options)
        self.call = pb_grpc.GpuStateServiceStub(self.channel).StreamNodeReports()

    async def send(self, timeout_s: float = 10.0) -> pb.ReportAck:
        self.seq += 1
        await self.call.write(report(self.node, [gpu(0)], seconds=int(time.time()), seq=self.seq))
        ack = await asyncio.wait_for(self.call.read(), timeout_s)
        assert ack.status == pb.ReportAck.ACCEPTED, ack
        return ack

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()
            self.channel = None


@contextlib.asynccontextmanager
async def workers(count: int, state: GpuState, **kwargs: float) -> AsyncIterator[tuple[IngestWorkers, asyncio.Event]]:
    ingest = IngestWorkers(ARGV, count, hold_port("127.0.0.1", 0), state, **kwargs)
    await ingest.start(None)
    gave_up = asyncio.Event()
    supervisor = asyncio.create_task(ingest.run(gave_up.set))
    try:
        yield ingest, gave_up
    finally:
        supervisor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await supervisor
        await ingest.stop()


async def until(what: str, check: Callable[[], object], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def connected_per_worker(ingest: IngestWorkers) -> list[float | None]:
    texts = ingest.worker_metrics.texts
    return [
        metric(parse_metrics(texts.get(i, "")), "gpu_extender_connected_agents") for i in range(len(ingest.workers))
    ]


async def connected(port: int, count: int) -> list[Agent]:
    """`count` agents (node-00, node-01, ...), each with its stream open and its first report acked."""
    agents = [Agent(port, f"node-{i:02d}") for i in range(count)]
    for agent in agents:
        await agent.connect()
    await asyncio.gather(*(a.send() for a in agents))
    return agents


async def newest_applied(applied: Applied, agents: list[Agent]) -> None:
    await until(
        "every node's newest report applied", lambda: all(applied.seen.get(a.node, [0])[-1] == a.seq for a in agents)
    )


def in_order(applied: Applied, agents: list[Agent]) -> None:
    for agent in agents:
        seen = applied.seen.get(agent.node, [])
        assert seen and seen[-1] == agent.seq, (agent.node, seen, agent.seq)  # the newest reached it
        assert seen == sorted(set(seen)), (agent.node, seen)  # none twice, none out of order


def test_streams_spread_over_every_worker_and_each_node_arrives_once_in_order() -> None:
    async def scenario() -> None:
        state = GpuState(IdleRule())
        applied = Applied(state)
        async with workers(3, state) as (ingest, _):
            # 48 connections: the kernel hashes each to one of 3 workers; all on two of them
            # has odds of 3 * (2/3)**48, about 1e-8.
            agents = await connected(ingest.port, 48)
            for _ in range(2):
                await asyncio.gather(*(a.send() for a in agents))
            await ingest.ask_metrics()
            per_worker = connected_per_worker(ingest)
            assert all(n and n > 0 for n in per_worker) and sum(n or 0 for n in per_worker) == 48, per_worker
            # Streams move (a reconnect lands on any worker): still in order, none twice.
            for agent in agents[:24]:
                await agent.connect()
            for _ in range(3):
                await asyncio.gather(*(a.send() for a in agents))
            await newest_applied(applied, agents)
            in_order(applied, agents)
            assert applied.readings > 0  # reports of the shape before them came as readings
            await ingest.ask_metrics()
            accepted = sum(
                metric(parse_metrics(t), "gpu_extender_reports_total", result="accepted") or 0
                for t in ingest.worker_metrics.texts.values()
            )
            assert accepted == 48 * 6
            for agent in agents:
                await agent.close()

    asyncio.run(scenario())


def test_a_killed_worker_is_started_again_and_its_agents_reconnect() -> None:
    async def scenario() -> None:
        state = GpuState(IdleRule())
        applied = Applied(state)
        async with workers(2, state) as (ingest, gave_up):
            agents = await connected(ingest.port, 16)
            dead = ingest.workers[0].pid
            assert dead is not None
            os.kill(dead, signal.SIGKILL)
            await until("the worker started again", lambda: ingest.workers[0].pid not in (None, dead))
            assert (
                ingest.worker_metrics.restarts == {"exited": 1, "silent": 0}
                and ingest.worker_metrics.workers_running == 2
            )
            for agent in agents:  # what the agents do when their stream breaks: connect again
                await agent.connect()
            await asyncio.gather(*(a.send() for a in agents))
            await newest_applied(applied, agents)
            in_order(applied, agents)
            assert not gave_up.is_set()
            for agent in agents:
                await agent.close()

    asyncio.run(scenario())


def test_a_silent_worker_is_killed_and_started_again_while_the_others_send() -> None:
    async def scenario() -> None:
        state = GpuState(IdleRule())
        applied = Applied(state)
        async with workers(2, state, silent_s=3.0) as (ingest, gave_up):
            agents = await connected(ingest.port, 16)
            stopped = ingest.workers[0].pid
            assert stopped is not None
            os.kill(stopped, signal.SIGSTOP)
            try:
                # Streams on the other worker are acked and applied meanwhile (16 streams all on
                # the stopped worker: odds of 2**-16).
                sent = await asyncio.gather(*(a.send(timeout_s=1.0) for a in agents), return_exceptions=True)
                live = [a for a, outcome in zip(agents, sent, strict=True) if not isinstance(outcome, BaseException)]
                assert live, sent
                await newest_applied(applied, live)  # while the other worker is stopped
                await until("the silent worker replaced", lambda: ingest.workers[0].pid not in (None, stopped))
                assert (
                    ingest.worker_metrics.restarts == {"exited": 0, "silent": 1}
                    and ingest.worker_metrics.workers_running == 2
                )
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(stopped, signal.SIGCONT)
            assert not gave_up.is_set()
            for agent in agents:
                await agent.close()

    asyncio.run(scenario())


def test_workers_that_keep_dying_stop_the_extender(monkeypatch: pytest.MonkeyPatch) -> None:
    """More than MAX_RESTARTS within the window gives up: at the bound, one more start."""
    monkeypatch.setattr(supervisor, "MAX_RESTARTS", 1)

    async def scenario() -> None:
        state = GpuState(IdleRule())
        async with workers(1, state) as (ingest, gave_up):
            first = ingest.workers[0].pid
            assert first is not None
            os.kill(first, signal.SIGKILL)
            await until("the worker started again", lambda: ingest.workers[0].pid not in (None, first))
            assert not gave_up.is_set() and ingest.worker_metrics.restarts["exited"] == 1  # 1 restart: at the bound
            second = ingest.workers[0].pid
            assert second is not None
            os.kill(second, signal.SIGKILL)
            await until("the extender gives up", gave_up.is_set)
            assert ingest.workers[0].pid == second  # not started a third time

    asyncio.run(scenario())
