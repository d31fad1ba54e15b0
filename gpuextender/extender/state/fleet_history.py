"""The fleet over time, for the fleet page's chart: one point per wall-clock minute over the last
24 hours: free-idle, holder-unknown-idle, allocated-idle and unhealthy GPUs and pods waiting for
GPUs, as the page counted them when the minute was sampled (ui/fleet_history_sampler.py samples
them; ui/fleet_view.idle_counts is what counts as idle).

Bounded: at most `MAX_POINTS` (24 x 60) points, and a point leaves when it is 24 hours old
(`WINDOW_S`) as well as when a 1441st arrives, so a wall clock stepped forward a day empties the
history instead of keeping day-old points beside new ones.

The minute is the wall clock's (people read a chart's time axis in wall time), so the clock may
step. A sample in the minute of the latest point replaces it (never two points for one minute); a
sample from before the latest point (the clock stepped back) first drops the points after its
minute, which a clock now known to have been ahead stamped, so the points stay in order and the
history never stalls waiting for the clock to catch up.

What the history does not know it does not invent: a minute with no sample (the extender was not
running, or its sampler was late) has no point, and a minute when no GPU had data (every GPU
unknown, or no GPU node known yet) has no GPU counts (None): the page draws both as gaps, never
as zeros ("unknown is never idle").

Pure bookkeeping on the wall-clock time the caller passes.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

STEP_S = 60  # one point per wall-clock minute
WINDOW_S = 24 * 60 * 60  # points this old (or older) leave
MAX_POINTS = WINDOW_S // STEP_S  # 1440: every minute of the window, and no more
# A point's values, in this order (the page's chart reads the names from /ui/history.json).
SERIES = ("free-idle", "holder-unknown-idle", "allocated-idle", "unhealthy", "waiting")


class Sample(NamedTuple):
    """The fleet at one moment. The GPU counts are None when no GPU had data."""

    free_idle: int | None
    holder_unknown_idle: int | None  # idle, but the agent cannot read who holds it: shown apart
    allocated_idle: int | None
    unhealthy: int | None
    waiting: int  # GPU pods whose latest filter call found no place


class Point(NamedTuple):
    minute: int  # Unix seconds of the minute's start
    sample: Sample


def minute_of(wall_s: float) -> int:
    """The start (Unix seconds) of the wall-clock minute `wall_s` falls in."""
    return int(wall_s // STEP_S) * STEP_S


class FleetHistory:
    def __init__(self) -> None:
        self._points: deque[Point] = deque(maxlen=MAX_POINTS)  # oldest first, one per minute
        self.rewinds = 0  # samples that came from before the latest point (a clock stepped back)

    def __len__(self) -> int:
        return len(self._points)

    def record(self, wall_s: float, sample: Sample) -> None:
        """The fleet at `wall_s` (Unix seconds): the point of its minute."""
        minute = minute_of(wall_s)
        points = self._points
        if points and points[-1].minute > minute:  # the clock stepped back past the latest point
            self.rewinds += 1
            while points and points[-1].minute > minute:
                points.pop()
        if points and points[-1].minute == minute:
            points[-1] = Point(minute, sample)
        else:
            points.append(Point(minute, sample))  # the 1441st pushes out the oldest
        self._evict(minute)

    def points(self, wall_s: float) -> list[Point]:
        """The points of the 24 hours up to `wall_s`, oldest first (those older leave now)."""
        self._evict(minute_of(wall_s))
        return list(self._points)

    def _evict(self, minute: int) -> None:
        points = self._points
        while points and minute - points[0].minute >= WINDOW_S:  # 24 h old, to the minute: out
            points.popleft()
