"""A token bucket: at most `rate` takes per second on average, `burst` at once. The API writers'
budget (inventory/device_taint_writer.py): a pass takes a token per write and stops when none is
left, so a storm of changes is spread over time, never dropped (what stands is written later)."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not rate > 0 or not burst >= 1:  # also refuses NaN
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1 (got {rate}, {burst})")
        self.rate, self.burst = rate, burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()
        self.refused = 0  # takes refused: writes deferred to a later pass

    def take(self) -> bool:
        now = self._clock()
        if now > self._at:  # a clock stepped back adds nothing (monotonic in production)
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self.refused += 1
        return False
