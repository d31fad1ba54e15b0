"""The fleet page's history (`GET /ui/history.json`): a task that samples the fleet's totals once
a wall-clock minute into state/fleet_history.py, and the document the page draws its chart from.

A sample is the fleet document the page itself gets (fleet_page.FleetCache.sample: a browser's
build of the last 1.5 s when there is one), read through ui/fleet_view.history_sample, so the
chart and the page's counts are one rule. It is taken `SAMPLE_AT_S` into each minute (the middle: a clock
slewed or stepped by less than that either way still lands the sample in its minute), the delay
reckoned from the wall clock at each turn, so the small overruns of each sleep never add up to
a skipped minute.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gpuextender.extender.state.fleet_history import MAX_POINTS, SERIES, STEP_S, WINDOW_S, FleetHistory, Sample

log = logging.getLogger("gpu_extender")

SAMPLE_AT_S = 30.0  # seconds into each wall-clock minute


def next_sample_delay(wall_s: float) -> float:
    """Seconds from `wall_s` to the next `SAMPLE_AT_S` into a minute, in (0, STEP_S]."""
    return STEP_S - (wall_s - SAMPLE_AT_S) % STEP_S


class HistorySampler:
    """Samples the fleet into `history`: once at start, then every minute (`run`). `read` gives the
    fleet now; `wall` and `delay` (wall time -> seconds to sleep) are the clock, for tests."""

    def __init__(
        self,
        history: FleetHistory,
        read: Callable[[], Awaitable[Sample]],
        *,
        wall: Callable[[], float] = time.time,
        delay: Callable[[float], float] = next_sample_delay,
    ) -> None:
        self.history = history
        self._read, self._wall, self._delay = read, wall, delay
        self.failures = 0

    async def sample_once(self) -> None:
        try:
            sample = await self._read()
        except Exception:  # a build that fails is a minute without a point, not the end of the history
            self.failures += 1
            log.exception("fleet history: cannot sample the fleet")
            return
        self.history.record(self._wall(), sample)

    async def run(self) -> None:
        while True:
            await self.sample_once()
            await asyncio.sleep(self._delay(self._wall()))

    def document(self) -> dict[str, Any]:
        """What the page draws: every point of the last 24 hours (at most MAX_POINTS), oldest first,
        each [minute start (Unix seconds), one value per SERIES name], a GPU
        count null where no GPU had data; a minute without a point was not sampled."""
        return {
            "stepSeconds": STEP_S,
            "windowSeconds": WINDOW_S,
            "maxPoints": MAX_POINTS,
            "series": list(SERIES),
            "points": [[p.minute, *p.sample] for p in self.history.points(self._wall())],
        }
