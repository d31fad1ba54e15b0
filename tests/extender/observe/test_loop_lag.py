"""observe/loop_lag.py: how late the event loop runs what is due, with its bound at exactly its
value, and on a real loop that something holds."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, generate_latest

from gpuextender.extender.observe.loop_lag import PERIOD_S, LoopLag
from tests.harness import metric, parse_metrics


def scraped(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return metric(parse_metrics(generate_latest(registry).decode()), name, **labels)


def test_a_wake_up_on_time_is_no_lag_and_a_late_one_is_its_delay() -> None:
    registry = CollectorRegistry()
    lag = LoopLag(registry)
    assert lag.record(10.0, 10.0 + PERIOD_S) == 0.0
    assert lag.record(10.0, 10.5) == 0.5 - PERIOD_S
    assert lag.record(10.0, 9.0) == 0.0  # a clock stepped back: no lag, never below 0
    assert lag.worst == 0.5 - PERIOD_S
    assert scraped(registry, "gpu_extender_event_loop_lag_max_seconds") == 0.5 - PERIOD_S
    assert scraped(registry, "gpu_extender_event_loop_lag_seconds_count") == 3
    assert scraped(registry, "gpu_extender_event_loop_lag_seconds_bucket", le="0.5") == 3
    assert scraped(registry, "gpu_extender_event_loop_lag_seconds_bucket", le="0.25") == 2


def test_a_loop_held_shows_at_least_the_hold_less_the_period() -> None:
    registry = CollectorRegistry()
    lag = LoopLag(registry)

    async def scenario() -> None:
        task = asyncio.create_task(lag.run())
        await asyncio.sleep(0)  # the task starts waiting
        time.sleep(0.3)  # something holds the loop
        await asyncio.sleep(PERIOD_S)  # the task woke, late
        task.cancel()

    asyncio.run(scenario())
    assert lag.worst >= 0.3 - PERIOD_S
