"""How late the scheduler API's event loop runs what is due (issue 54: "event-loop holds bounded").

A task asks to wake every PERIOD_S and records how much later than asked it woke: whatever held
the loop meanwhile (a decision over a large fleet, a parse, a collector) delayed every scheduler
call waiting behind it by as much. Seen here before kube-scheduler's httpTimeout makes it an
outage: `gpu_extender_event_loop_lag_seconds` (a histogram) and `..._max_seconds` (the worst since
the start)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, Gauge, Histogram

PERIOD_S = 0.1
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class LoopLag:
    def __init__(
        self,
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock, self._sleep = clock, sleep
        self.lag = Histogram(
            "gpu_extender_event_loop_lag_seconds",
            f"How much later than asked the event loop ran a task due every {PERIOD_S:g} s.",
            buckets=BUCKETS,
            registry=registry,
        )
        self.worst = 0.0
        Gauge(
            "gpu_extender_event_loop_lag_max_seconds",
            "The event loop's worst lag since the start.",
            registry=registry,
        ).set_function(lambda: self.worst)

    def record(self, asked_at: float, woke_at: float) -> float:
        """One wake-up: the lag (never below 0: a clock that stepped back holds nothing)."""
        lag = max(0.0, woke_at - asked_at - PERIOD_S)
        self.lag.observe(lag)
        self.worst = max(self.worst, lag)
        return lag

    async def run(self) -> None:
        while True:
            asked = self._clock()
            await self._sleep(PERIOD_S)
            self.record(asked, self._clock())
