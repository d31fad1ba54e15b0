"""The retry side of a gRPC stream held open against a peer that may be down: the agent's stream to
each extender (agent/stream/streamer.py) and the gpu-relay's to each replica (extender/relay/upstream.py).

After each attempt: an attempt that got answers resets the backoff and the count of failures; one
that ended is logged as a WARNING (what went wrong, in the words of common/stream_problem.py, the
attempt's number and the delay) at once when the problem is new or changed kind, else at most once
every `repeat_s` (common/log_once.py), and the next attempt waits the backoff's delay."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gpuextender.common.backoff import Backoff
from gpuextender.common.log_once import OncePer
from gpuextender.common.stream_problem import StreamProblem

REPEAT_WARNING_S = 60.0  # while the peer is unreachable, the same warning at most this often


class Reconnects:
    def __init__(
        self,
        backoff: Backoff,
        log: logging.Logger,
        what: str,
        repeat_s: float = REPEAT_WARNING_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = asyncio.sleep,
    ) -> None:
        """`what`: the stream, as the warning names it ("stream to extender 10.0.0.1:9090")."""
        self.backoff, self._log, self._what = backoff, log, what
        self._sleep = sleep
        self.failures = 0  # attempts failed since the last one that was answered
        self._last_kind = ""
        self._say = OncePer(repeat_s, clock)

    def answered(self) -> None:
        """The attempt that just ended got answers: the next failure is a new problem."""
        self.backoff.reset()
        self.failures = 0
        self._last_kind = ""
        self._say.forget()

    async def failed(self, problem: StreamProblem) -> None:
        """The attempt ended with `problem`: say so (rate-limited), then wait the backoff's delay."""
        self.failures += 1
        delay = self.backoff.next_delay()
        if problem.kind != self._last_kind:  # a new kind of problem is said at once
            self._say.forget()
            self._last_kind = problem.kind
        if self._say():
            self._log.warning(
                "%s down (%s); attempt %d, retrying in %.1fs", self._what, problem.message, self.failures, delay
            )
        await self._sleep(delay)  # type: ignore[misc]  # asyncio.sleep, or a test's
