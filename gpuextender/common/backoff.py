"""Exponential backoff with jitter, shared by the agent (extender streams) and the
extender (API server watches)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class Backoff:
    """Delay n is uniform in [initial/2, min(max, initial * 2**n)]: grows
    exponentially, never exceeds `max_s`, and spreads a fleet of agents out
    so a restarted server is not hit by every client at the same instant."""

    initial_s: float = 0.2
    max_s: float = 5.0
    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0

    def next_delay(self) -> float:
        ceiling = min(self.max_s, self.initial_s * (2**self.attempt))
        self.attempt = min(self.attempt + 1, 32)
        return self.rng.uniform(min(self.initial_s / 2, ceiling), ceiling)

    def reset(self) -> None:
        self.attempt = 0
