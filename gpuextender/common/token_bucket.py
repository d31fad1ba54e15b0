"""A token bucket: at most `rate` takes per second on average, `burst` at once; the one refill rule
(a clock stepped back adds nothing) for every budget built on it. The API writers' budget
(inventory/device_taint_writer.py) takes a token per write and a pass stops when none is left, so a
storm of changes is spread over time, never dropped (what stands is written later); an agent
stream's pace (ingest/limits.ReportPacer) waits for its next token; a relay stream's refusals
(ingest/limits.RefusalBudget) are charged after the fact, a debt waited off."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not rate > 0 or not burst >= 1:  # also refuses NaN
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1 (got {rate}, {burst})")
        self.rate, self.burst = rate, float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self.refused = 0  # takes refused: writes deferred to a later pass

    def _refill(self, rate: float) -> None:
        now = self._clock()
        if now > self._at:  # a clock stepped back adds nothing (monotonic in production)
            self._tokens = min(self.burst, self._tokens + (now - self._at) * rate)
        self._at = now

    def take(self) -> bool:
        """A token if there is one (else counted in `refused`)."""
        self._refill(self.rate)
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self.refused += 1
        return False

    def wait(self) -> float:
        """Take a token: 0.0 when there was one, else the seconds until there is one (nothing taken;
        call again after waiting)."""
        self._refill(self.rate)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate

    def full(self, rate: float) -> bool:
        """Whether the bucket, refilled at `rate` a second, holds its whole burst: as a new one would."""
        self._refill(rate)
        return self._tokens >= self.burst

    def charge(self, count: int, rate: float) -> float:
        """`count` tokens taken after the fact, refilled at `rate` a second (read at each charge): the
        seconds to wait until the debt they leave is paid, 0.0 within the budget."""
        self._refill(rate)
        self._tokens -= count
        return -self._tokens / rate if self._tokens < 0.0 else 0.0
