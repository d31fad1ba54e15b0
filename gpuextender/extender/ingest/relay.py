"""The extender's side of its ingest process (ingest_process.py): start it, store what it relays.

Reports arrive in frames of up to ~10 ms of accepted reports; each is parsed and stored in the
live GpuState (ordered by when the ingest process received it, as in one process). A frame is
applied in slices of SLICE reports with a yield between them, so a scheduler request waits
behind at most one slice (~0.5 ms), never behind a burst of agents. The inventory's node
names go the other way (the ingest process limits reports of nodes it does not know), as do
the nodes the extender forgot.

If the ingest process exits, the extender cannot learn anything new: it says why and exits
(its Deployment restarts it), rather than serve on data that only ages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence

from gpuextender.extender.ingest import frames as frames
from gpuextender.extender.observe.relayed import RelayedMetrics
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.v1 import gpu_state_pb2 as pb

log = logging.getLogger("gpu_extender.ingest")

SLICE = 32  # reports applied between two yields to the loop (~20 us each)
KNOWN_EVERY_S = 1.0  # the inventory's node names are sent at most this often, when they changed


class IngestStartError(Exception):
    """The ingest process did not come up; the message says what it printed or how it ended."""


class IngestProcess:
    def __init__(self, argv: Sequence[str], state: GpuState, relayed: RelayedMetrics) -> None:
        self._argv, self._state, self._relayed = list(argv), state, relayed
        self._proc: asyncio.subprocess.Process | None = None
        self.port = 0  # the gRPC port it bound, once started
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._known: frozenset[str] | None = None
        self._metrics_waiters: list[asyncio.Future[None]] = []
        relayed.ask = self.ask_metrics

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def start(self, known: frozenset[str] | None) -> None:
        """Start it with our flags; return once its gRPC port listens. `known`: the inventory's
        node names now (None: no inventory source), sent before it takes its first report."""
        ours, theirs = socket.socketpair()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gpuextender.extender.ingest_process",
                "--link-fd",
                str(theirs.fileno()),
                *self._argv,
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self._reader, self._writer = await asyncio.open_unix_connection(sock=ours)
        if known is not None:
            self.send_known(known)
        got = await frames.read_frame(self._reader)
        if got is None or got[0] != frames.READY:
            code = await self._proc.wait()
            raise IngestStartError(
                f"the ingest process exited with code {code} before its gRPC port listened (its message is above)"
            )
        self.port = int(got[1] or b"0")
        log.info("ingest process %d serves the agents' gRPC port", self._proc.pid)

    async def run(self, on_exit: Callable[[], None]) -> None:
        """Apply what it relays until it goes away; then call `on_exit`."""
        assert self._reader is not None
        try:
            while (got := await frames.read_frame(self._reader)) is not None:
                kind, payload = got
                if kind == frames.REPORTS:
                    await self._apply(payload)
                elif kind == frames.METRICS:
                    self._relayed.text = payload.decode()
                    waiters, self._metrics_waiters = self._metrics_waiters, []
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_result(None)
        except (frames.FrameError, ConnectionError) as exc:
            log.error("link to the ingest process broken: %s", exc)
        code = await self._proc.wait() if self._proc is not None else None
        log.error("the ingest process exited (code %s): no agent data can arrive; stopping", code)
        on_exit()

    async def _apply(self, payload: bytes) -> None:
        ingest, parse = self._state.ingest, pb.NodeReport.FromString
        for i, (received_at, report) in enumerate(frames.report_entries(payload), 1):
            try:
                ingest(parse(report), received_at)
            except Exception:  # a bug, never a reason to stop taking reports: say so, go on
                log.exception("could not store a relayed report (%d bytes)", len(report))
            if i % SLICE == 0:
                await asyncio.sleep(0)

    async def ask_metrics(self, timeout_s: float = 1.0) -> None:
        """Have it send its metrics now; after `timeout_s` the last ones it sent are shown."""
        writer = self._writer
        if writer is None or writer.is_closing():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._metrics_waiters.append(waiter)
        writer.write(frames.frame(frames.ASK_METRICS))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(waiter, timeout_s)

    def send_known(self, names: frozenset[str]) -> None:
        """The inventory's node names, when they differ from what was sent last."""
        if names != self._known and self._writer is not None and not self._writer.is_closing():
            self._known = names
            self._writer.write(frames.frame(frames.KNOWN, "\n".join(sorted(names)).encode()))

    def send_forgot(self, names: Sequence[str]) -> None:
        if names and self._writer is not None and not self._writer.is_closing():
            self._writer.write(frames.frame(frames.FORGOT, "\n".join(names).encode()))

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Close our end (it stops its server and exits); kill it if it does not."""
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError):
                await self._writer.wait_closed()
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            log.warning("ingest process %d still running %.0fs after the link closed: killing it", proc.pid, timeout_s)
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, 9)
            await proc.wait()


async def sync_known_nodes(process: IngestProcess, names: Callable[[], frozenset[str]]) -> None:
    """Send the inventory's node names whenever they change (checked every KNOWN_EVERY_S)."""
    while True:
        process.send_known(names())
        await asyncio.sleep(KNOWN_EVERY_S)
