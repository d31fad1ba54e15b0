"""A relay's stream to one extender replica (RelayNodeReports): what the relay holds, then what
changes, FLUSH_S of it per message; the replica's answers (what it refused, what its agents are
to be told) back into the relay.

Each replica gets every held node when its stream opens (forward_store.replica_opened), so a
replica that restarted is whole again at once; one that is slow gets the newest report per
node (HTTP/2 flow control holds the writes back while the changes gather in its Pending). A
failed stream is retried with backoff, with fresh credentials (common/dial.py), as an agent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import grpc

from gpuextender.common.backoff import Backoff
from gpuextender.common.dial import DialError, DialSettings, call_metadata, open_channel
from gpuextender.common.reconnect import Reconnects
from gpuextender.common.stream_problem import StreamProblem, describe_failure
from gpuextender.extender.ingest.limits import FLUSH_S, MAX_BATCH_BYTES  # (FLUSH_S: changes go out together)
from gpuextender.extender.ingest.service import RELAY_METHOD
from gpuextender.extender.relay.forward_store import ForwardStore
from gpuextender.v1 import gpu_state_pb2 as pb

log = logging.getLogger("gpu_extender.relay")

# A replica that answers none of what was sent within this long is treated as gone.
ACK_TIMEOUT_S = 30.0


class Upstream:
    """One replica's stream, retried until cancelled."""

    def __init__(
        self,
        target: str,
        store: ForwardStore,
        dial: DialSettings,
        on_ack: Callable[[str, pb.RelayAck | None], None],
        backoff: Backoff | None = None,
    ) -> None:
        """`on_ack(target, ack)`: each RelayAck of the replica; None when its stream ended."""
        self.target = target
        self._store = store
        self._dial = dial
        self._on_ack = on_ack
        self._backoff = backoff or Backoff(initial_s=0.5, max_s=10.0)
        self.connected = False
        self.acks = 0
        self._unanswered = 0  # batches written on the current stream that its replica has not answered
        self._deadline: asyncio.Timeout | None = None  # the current read's: armed while any is unanswered

    async def run(self) -> None:
        retry = Reconnects(self._backoff, log, f"relay stream to extender {self.target}")
        while True:
            acks_before = self.acks
            try:
                await self._attempt()
                problem = StreamProblem("closed", "the extender closed the stream")
            except DialError as exc:
                problem = StreamProblem("credentials", str(exc))
            except grpc.aio.AioRpcError as exc:  # a TLS handshake's failure named as the agent names it
                problem = describe_failure(exc.code().name, exc.details() or "", self.target, self._dial)
            except TimeoutError:
                problem = StreamProblem("timeout", f"no answer within {ACK_TIMEOUT_S:.0f}s")
            except Exception as exc:  # never fatal: a write racing the call's end, an odd answer
                problem = StreamProblem("error", f"{type(exc).__name__}: {exc}")
                log.debug("relay stream to %s failed", self.target, exc_info=True)
            finally:
                if self.connected:
                    self.connected = False
                    self._store.replica_closed(self.target)
                    self._on_ack(self.target, None)
            if self.acks > acks_before:
                retry.answered()
            await retry.failed(problem)

    async def _attempt(self) -> None:
        metadata = call_metadata(self._dial)
        options = [("grpc.keepalive_time_ms", 20_000), ("grpc.keepalive_timeout_ms", 10_000)]
        async with open_channel(self.target, self._dial, options) as channel:
            call = channel.stream_stream(
                RELAY_METHOD,
                request_serializer=None,  # RelayBatch bytes (forward_store.Pending.take)
                response_deserializer=pb.RelayAck.FromString,
            )(metadata=metadata or None, wait_for_ready=False)
            pending = self._store.replica_opened(self.target)
            self.connected = True
            self._unanswered, self._deadline = 0, None
            log.info("relay stream to extender %s open: %d node(s) to send", self.target, len(pending.reports))
            reader = asyncio.ensure_future(self._read(call))
            try:
                # An empty batch first: the replica's answer says it takes this relay, and what the
                # agents are to be told, before any agent streams here (the relay's /readyz).
                await self._write(call, b"")
                while True:
                    if not pending.ready.is_set():
                        waiter = asyncio.ensure_future(pending.ready.wait())
                        done, _ = await asyncio.wait({waiter, reader}, return_when=asyncio.FIRST_COMPLETED)
                        if reader in done:
                            waiter.cancel()
                            reader.result()  # the call's error, or its end
                            return
                    await asyncio.sleep(FLUSH_S)  # let changes gather into one message
                    for batch in pending.take(MAX_BATCH_BYTES):
                        await self._write(call, batch)
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                    await reader
                call.cancel()

    async def _write(self, call: grpc.aio.StreamStreamCall, batch: bytes) -> None:
        self._unanswered += 1
        deadline = self._deadline
        if deadline is not None and deadline.when() is None:  # a read waiting with nothing outstanding
            deadline.reschedule(asyncio.get_running_loop().time() + ACK_TIMEOUT_S)
        await call.write(batch)

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:
        """The replica's answers until its stream ends; TimeoutError when no answer comes for
        ACK_TIMEOUT_S while a batch written on this stream is unanswered (an earlier stream's do
        not count: an idle stream after one would be ended every ACK_TIMEOUT_S)."""
        loop = asyncio.get_running_loop()
        while True:
            async with asyncio.timeout_at(loop.time() + ACK_TIMEOUT_S if self._unanswered else None) as deadline:
                self._deadline = deadline
                ack = await call.read()
            self._deadline = None
            if ack is grpc.aio.EOF:
                return
            self._unanswered = max(0, self._unanswered - 1)
            self.acks += 1
            self._on_ack(self.target, ack)
