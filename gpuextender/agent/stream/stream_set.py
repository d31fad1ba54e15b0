"""The running extender streams: one per target, started when a target appears
and cancelled when it goes (the fixed --extender targets never go)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterable

from gpuextender.agent.stream.streamer import ExtenderStream
from gpuextender.common.discovery import diff_targets

log = logging.getLogger("gpu_agent.streams")


class StreamSet:
    def __init__(self, make_stream: Callable[[str], ExtenderStream], static: Iterable[str] = ()) -> None:
        self._make_stream = make_stream
        self._static = frozenset(static)
        self._resolved: frozenset[str] = frozenset()
        self._running: dict[str, tuple[ExtenderStream, asyncio.Task[None]]] = {}
        self._crash = asyncio.Event()
        self._crashed: BaseException | None = None

    @property
    def targets(self) -> frozenset[str]:
        return frozenset(self._running)

    def stream(self, target: str) -> ExtenderStream:
        return self._running[target][0]

    def set_resolved(self, targets: frozenset[str]) -> None:
        """The Service's current addresses (the fixed targets are kept whatever they are)."""
        self._resolved = targets
        self._apply()

    async def run(self) -> None:
        """Start the streams; returns only by raising what a crashed stream raised (a bug), else runs
        until cancelled, and then cancels every stream."""
        self._apply()
        try:
            await self._crash.wait()
            assert self._crashed is not None
            raise self._crashed
        finally:
            tasks = [task for _, task in self._running.values()]
            self._running.clear()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def _apply(self) -> None:
        change = diff_targets(self._running, self._static | self._resolved)
        for target in change.removed:
            _, task = self._running.pop(target)
            task.cancel()
            log.info("stopped the stream to extender %s: no longer resolved", target)
        for target in change.added:
            stream = self._make_stream(target)
            task = asyncio.create_task(stream.run(), name=f"stream {target}")
            task.add_done_callback(functools.partial(self._stream_done, stream))
            self._running[target] = (stream, task)

    def _stream_done(self, stream: ExtenderStream, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            if stream.target not in self._running:  # removed, not replaced: drop its metric series
                stream.forget_metrics()
            return
        if task.exception() is not None and self._crashed is None:
            self._crashed = task.exception()
            self._crash.set()
