"""The one rule for saying a repeated thing less often: `OncePer(period_s)` answers True for a key at
most once per `period_s` (a refusal a minute per peer, a reconnect warning a minute per stream),
`OncePer(EVER)` the first time a key is seen (an invalid object per version, a class mismatch per
node). Bounded: when `max_keys` are held it forgets them all, so a flood of new keys costs memory
up to the bound and some repeated lines, never more. Used by the ingest service and the relay
(refusals), common/reconnect.py (the streams' warnings), the inventory view and live classes
(objects and nodes skipped) and the agent's GPM reader."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable

EVER = math.inf  # as a period: once per key, until the keys are forgotten
MAX_KEYS = 10_000


class OncePer:
    def __init__(self, period_s: float, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS) -> None:
        self._period_s, self._clock, self._max_keys = period_s, clock, max_keys
        self._last: dict[tuple[Hashable, ...], float] = {}

    def __call__(self, *key: Hashable) -> bool:
        """True when `key` was not said within the period: it is said now."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._period_s:
            return False
        if len(self._last) >= self._max_keys:
            self._last.clear()
        self._last[key] = now
        return True

    def forget(self) -> None:
        """Every key may be said at once again (what was said is no longer the news)."""
        self._last.clear()
