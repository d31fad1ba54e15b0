"""A relay's stream to one replica (relay/upstream.py) against a replica served over a real
grpc.aio channel: it opens with an empty batch (the replica's answer reaches the relay before
any agent streams to it), and it gives a stream up only when that stream leaves a batch
unanswered for ACK_TIMEOUT_S: a batch written while the read waits arms the bound, and what an
earlier stream left unanswered does not count."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest

from gpuextender.common.dial import DialSettings
from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.relay import upstream
from gpuextender.extender.relay.forward_store import ForwardStore
from gpuextender.extender.relay.upstream import Upstream
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.extender.builders import gpu, report

WAIT_S = 20.0  # what a step may take on a busy machine: a bound, never a measurement


class Replica(pb_grpc.GpuStateServiceServicer):
    """Answers message m of stream s (both from 1) when `answers(s, m)`; a stream ends when
    `ends(s, m)` after message m."""

    def __init__(
        self, answers: Callable[[int, int], bool], ends: Callable[[int, int], bool] = lambda s, m: False
    ) -> None:
        self.answers, self.ends = answers, ends
        self.streams: list[list[pb.RelayBatch]] = []

    async def RelayNodeReports(
        self, request_iterator: AsyncIterator[pb.RelayBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.RelayAck]:
        got: list[pb.RelayBatch] = []
        self.streams.append(got)
        s = len(self.streams)
        async for batch in request_iterator:
            got.append(batch)
            if self.answers(s, len(got)):
                yield pb.RelayAck(accepted=len(batch.reports), agent_ack=pb.ReportAck(light_heartbeats=True))
            if self.ends(s, len(got)):
                return


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.01)


async def with_replica(replica: Replica, test: Callable[[str], Awaitable[None]]) -> None:
    server = grpc.aio.server()
    pb_grpc.add_GpuStateServiceServicer_to_server(replica, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        await test(f"127.0.0.1:{port}")
    finally:
        await server.stop(None)


def relay_to(target: str, store: ForwardStore, acks: list[pb.RelayAck | None]) -> tuple[Upstream, asyncio.Task[None]]:
    up = Upstream(target, store, DialSettings(), lambda _t, ack: acks.append(ack))
    return up, asyncio.create_task(up.run())


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_stream_opens_with_an_empty_batch_that_the_replica_answers() -> None:
    replica = Replica(answers=lambda s, m: True)
    acks: list[pb.RelayAck | None] = []

    async def test(target: str) -> None:
        up, task = relay_to(target, ForwardStore(IdleRule()), acks)
        await until(lambda: bool(acks))
        assert up.connected and replica.streams[0][0] == pb.RelayBatch()  # no node held: nothing else
        assert acks[0] is not None and acks[0].agent_ack.light_heartbeats
        await stop(task)

    asyncio.run(with_replica(replica, test))


def test_what_an_earlier_stream_left_unanswered_does_not_end_an_idle_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stream 1 takes the empty batch and ends unanswered; stream 2 answers it and then has
    nothing to answer: it stays open however long it is idle (before, the first stream's
    unanswered batch armed the bound and an idle stream was ended every ACK_TIMEOUT_S)."""
    monkeypatch.setattr(upstream, "ACK_TIMEOUT_S", 0.2)
    replica = Replica(answers=lambda s, m: s > 1, ends=lambda s, m: s == 1)
    acks: list[pb.RelayAck | None] = []

    async def test(target: str) -> None:
        _, task = relay_to(target, ForwardStore(IdleRule()), acks)
        await until(lambda: any(a is not None for a in acks))
        await asyncio.sleep(5 * upstream.ACK_TIMEOUT_S)  # idle for longer than the bound, several times
        assert len(replica.streams) == 2
        await stop(task)

    asyncio.run(with_replica(replica, test))


def test_a_batch_left_unanswered_ends_the_stream_after_the_bound_and_the_next_sends_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stream 1 answers the empty batch only; a node's report written while the read waits with
    nothing outstanding arms the bound: the stream is given up, and the next one is sent the held
    node again."""
    monkeypatch.setattr(upstream, "ACK_TIMEOUT_S", 0.2)
    replica = Replica(answers=lambda s, m: s > 1 or m == 1)
    acks: list[pb.RelayAck | None] = []
    store = ForwardStore(IdleRule())

    async def test(target: str) -> None:
        _, task = relay_to(target, store, acks)
        await until(lambda: bool(acks))
        store.stream_opened("n1")
        assert store.ingest(report("n1", [gpu(0)], seq=1), 0.0)
        await until(lambda: len(replica.streams) == 2 and len(replica.streams[1]) >= 2)
        first, second = replica.streams
        assert [len(b.reports) for b in first] == [0, 1]  # the empty batch, then n1 (never answered)
        assert [len(b.reports) for b in second[:2]] == [0, 1]  # again: n1 is held
        assert pb.NodeReport.FromString(second[1].reports[0].report).node_name == "n1"
        await stop(task)

    asyncio.run(with_replica(replica, test))
