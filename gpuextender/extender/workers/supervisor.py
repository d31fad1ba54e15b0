"""The extender's side of its ingest workers (worker_main.py): start them, store what they
send, restart one that dies or goes silent.

Reports arrive in frames of up to ~50 ms of accepted reports, each already summarized by the
worker (state/summary_codec.py); each summary is stored in the live GpuState (ordered by when a
worker received it: one clock, time.monotonic, for every process on the host, so a node whose
stream moved to another worker is still taken in order, and a report received before the
stored one is refused by GpuState). A frame is applied in slices of SLICE reports, the state
settled after each (GpuState.settle: what decisions derive from the changes is brought up to
date then, not on the next scheduler call's path) and a yield between them, so each step of a
scheduler request (its body read, its answer) waits behind one slice at most (~0.1-0.2 ms; the
loop runs the slice already queued first), never behind a burst of agents. The inventory's node
names go the other way (the workers limit reports of nodes it does not know), as do the nodes the
extender forgot.

A worker that exits, or sends nothing for WORKER_SILENT_S (it sends a BEAT every second when
it has nothing else: stopped or stuck, it is killed), is started again on the same port; its
agents' streams break and they reconnect, to it or to another worker. The reports it had
acked but not yet sent (at most ingest/limits.py's FLUSH_S of them) are lost, and superseded by the agents'
next reports (each stream starts with the newest). If workers keep failing (MAX_RESTARTS in
RESTART_WINDOW_S) or one cannot start again, the extender cannot learn anything new: it says
why and exits (its Deployment restarts it), rather than serve on data that only ages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence

from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.observe.worker_metrics import WorkerMetrics
from gpuextender.extender.state.facts_reader import POOL_SIZE
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.summary_codec import decode_facts, decode_readings, decode_summary
from gpuextender.extender.workers import frames as frames
from gpuextender.extender.workers.port_guard import PortGuard
from gpuextender.extender.workers.worker_args import Worker, worker_argv

log = logging.getLogger("gpu_extender.ingest")

SLICE = 8  # summaries stored between two yields to the loop (~10-30 us each, and the settle)
KNOWN_EVERY_S = 1.0  # the inventory's node names are sent at most this often, when they changed
# A worker sends a frame at least every second (frames.BEAT); ten seconds without one is a
# stopped or stuck process, not a busy one (a full frame takes milliseconds).
WORKER_SILENT_S = 10.0
WATCH_EVERY_S = 1.0
MAX_RESTARTS, RESTART_WINDOW_S = 5, 60.0  # more restarts than this within the window: exit


class IngestStartError(Exception):
    """An ingest worker did not come up; the message says what it printed or how it ended."""


class IngestProcess:
    """One worker: its process and the link to it."""

    def __init__(
        self, argv: Sequence[str], worker: Worker, state: GpuState, on_metrics: Callable[[int, str], None]
    ) -> None:
        self._argv, self.worker, self._state, self._on_metrics = list(argv), worker, state, on_metrics
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._known: frozenset[str] | None = None
        self._metrics_waiters: list[asyncio.Future[None]] = []
        self.last_heard = time.monotonic()  # when its last frame arrived
        self.killed_silent = False  # killed by IngestWorkers for sending nothing
        self._facts: dict[bytes, tuple[GpuFacts, ...]] = {}  # equal facts: one tuple (gpu_facts.py)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def start(self, known: frozenset[str] | None) -> None:
        """Start it; return once its gRPC server listens. `known`: the inventory's node names now
        (None: no inventory source), sent before it takes its first report."""
        ours, theirs = socket.socketpair()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gpuextender.extender.workers.worker_main",
                *worker_argv(theirs.fileno(), self.worker, self._argv),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self._reader, self._writer = await asyncio.open_unix_connection(sock=ours)
        if known is not None:
            self.send_known(known)
        try:
            got = await frames.read_frame(self._reader)
        except (frames.FrameError, ConnectionError):
            got = None
        if got is None or got[0] != frames.READY:
            code = await self._proc.wait()
            raise IngestStartError(
                f"ingest worker {self.name()} exited with code {code} before its gRPC server listened "
                "(its message is above)"
            )
        self.last_heard = time.monotonic()

    def kill_silent(self, now: float) -> None:
        """Killed for sending nothing: once (its restart follows), counted as "silent"."""
        self.killed_silent = True
        self.kill()
        self.last_heard = now

    def name(self) -> str:
        return f"{self.worker.index + 1}/{self.worker.count}"

    async def run(self) -> int | None:
        """Apply what it sends until it goes away; its exit code."""
        assert self._reader is not None
        try:
            while (got := await frames.read_frame(self._reader)) is not None:
                self.last_heard = time.monotonic()
                kind, payload = got
                if kind == frames.SUMMARIES:
                    await self.apply(payload)
                elif kind == frames.METRICS:
                    self._on_metrics(self.worker.index, payload.decode())
                    waiters, self._metrics_waiters = self._metrics_waiters, []
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_result(None)
        except (frames.FrameError, ConnectionError) as exc:
            log.error("link to ingest worker %s broken: %s", self.name(), exc)
        self._close_link()
        return await self._proc.wait() if self._proc is not None else None

    async def apply(self, payload: bytes) -> None:
        """Store a SUMMARIES frame's entries in order, yielding to the loop every SLICE of them."""
        state, decode, facts = self._state, decode_summary, self._facts
        for i, (tag, first, second) in enumerate(frames.summary_entries(payload), 1):
            try:
                if tag == frames.READINGS:
                    # False where the node's summary is of another full report by now: superseded.
                    state.store_readings(*decode_readings(first))
                else:
                    known = facts.get(second)
                    if known is None:
                        if len(facts) >= POOL_SIZE:
                            facts.clear()
                        known = facts[second] = decode_facts(second)
                    state.store(decode(first), known)
            except Exception:  # a bug, never a reason to stop taking reports: say so, go on
                log.exception("could not store a summary a worker sent (%d bytes)", len(first))
            if i % SLICE == 0:
                state.settle()
                await asyncio.sleep(0)
        state.settle()

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

    def kill(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGKILL)

    def _close_link(self) -> None:
        if self._writer is not None:
            self._writer.close()

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
            log.warning(
                "ingest worker %s still running %.0fs after the link closed: killing it", self.name(), timeout_s
            )
            self.kill()
            await proc.wait()


class IngestWorkers:
    """`count` workers on the port `guard` holds."""

    def __init__(
        self,
        argv: Sequence[str],
        count: int,
        guard: PortGuard,
        state: GpuState,
        silent_s: float = WORKER_SILENT_S,
    ) -> None:
        self._argv, self._guard, self._state = list(argv), guard, state
        self.worker_metrics = WorkerMetrics(self.ask_metrics)  # on the extender's /metrics (app.py)
        self._silent_s = silent_s
        self.port = guard.port
        self.workers = [self._new(i, count) for i in range(count)]
        self._known: frozenset[str] | None = None
        self._restarts: deque[float] = deque()
        self._stopping = False

    def _new(self, index: int, count: int) -> IngestProcess:
        return IngestProcess(self._argv, Worker(index, count, self._guard.port), self._state, self._metrics_from)

    def _metrics_from(self, index: int, text: str) -> None:
        self.worker_metrics.received(index, text)

    async def start(self, known: frozenset[str] | None) -> None:
        """Start every worker; once all listen, return. One failing stops the others."""
        self._known = known
        results = await asyncio.gather(*(w.start(known) for w in self.workers), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            await self.stop()
            raise failed[0]
        self.worker_metrics.running(len(self.workers))
        pids = ", ".join(str(w.pid) for w in self.workers)
        log.info("%d ingest worker(s) (pid %s) serve the agents' gRPC port %d", len(self.workers), pids, self.port)

    async def run(self, on_exit: Callable[[], None]) -> None:
        """Supervise the workers until the extender stops, or they cannot be kept running
        (then call `on_exit`)."""
        given_up = asyncio.Event()
        tasks = [asyncio.create_task(self._supervise(i, given_up)) for i in range(len(self.workers))]
        tasks.append(asyncio.create_task(self._watch()))
        try:
            await given_up.wait()
            on_exit()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _supervise(self, index: int, given_up: asyncio.Event) -> None:
        while True:
            worker = self.workers[index]
            code = await worker.run()
            if self._stopping:
                return
            silent = worker.killed_silent
            reason = "silent" if silent else "exited"
            self.worker_metrics.ended(index, reason)
            now = time.monotonic()
            self._restarts.append(now)
            while self._restarts and self._restarts[0] < now - RESTART_WINDOW_S:
                self._restarts.popleft()
            if len(self._restarts) > MAX_RESTARTS:
                log.error(
                    "ingest worker %s ended (code %s); %d restarts within %.0fs: no agent data can arrive; stopping",
                    worker.name(),
                    code,
                    len(self._restarts) - 1,
                    RESTART_WINDOW_S,
                )
                given_up.set()
                return
            log.error(
                "ingest worker %s %s (code %s): starting it again; its agents reconnect",
                worker.name(),
                f"sent nothing for {self._silent_s:g}s and was killed" if silent else "exited",
                code,
            )
            replacement = self._new(index, len(self.workers))
            try:
                await replacement.start(self._known)
            except IngestStartError as exc:
                log.error("%s: no agent data can arrive; stopping", exc)
                given_up.set()
                return
            self.workers[index] = replacement
            self.worker_metrics.restarted()

    async def _watch(self) -> None:
        """Kill a worker silent for longer than its bound (WORKER_SILENT_S). A late tick (this loop
        was held) judges no one: their frames may be waiting to be read."""
        last = time.monotonic()
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            now = time.monotonic()
            late = now - last > 2 * WATCH_EVERY_S
            last = now
            if late:
                continue
            for worker in self.workers:
                if now - worker.last_heard > self._silent_s and worker.pid is not None:
                    log.warning(
                        "ingest worker %s (pid %s) sent nothing for %.0fs: killing it",
                        worker.name(),
                        worker.pid,
                        now - worker.last_heard,
                    )
                    worker.kill_silent(now)

    async def ask_metrics(self) -> None:
        await asyncio.gather(*(w.ask_metrics() for w in self.workers))

    def send_known(self, names: frozenset[str]) -> None:
        self._known = names
        for worker in self.workers:
            worker.send_known(names)

    def send_forgot(self, names: Sequence[str]) -> None:
        for worker in self.workers:
            worker.send_forgot(names)

    async def stop(self) -> None:
        self._stopping = True
        await asyncio.gather(*(w.stop() for w in self.workers))
        self._guard.close()


async def sync_known_nodes(workers: IngestWorkers, names: Callable[[], frozenset[str]]) -> None:
    """Send the inventory's node names whenever they change (checked every KNOWN_EVERY_S)."""
    while True:
        workers.send_known(names())
        await asyncio.sleep(KNOWN_EVERY_S)
