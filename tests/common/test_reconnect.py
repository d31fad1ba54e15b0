"""common/reconnect.Reconnects, the retry side of the agent's and the relay's streams: a warning at
once for a new or changed problem, the same one again only once `repeat_s` has passed (exactly
then, not before), the backoff's delay waited each time, and an answered attempt starting over."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gpuextender.common.backoff import Backoff
from gpuextender.common.reconnect import Reconnects
from gpuextender.common.stream_problem import StreamProblem

DOWN = StreamProblem("unavailable", "connection refused")
TLS = StreamProblem("tls-verify", "certificate verify failed")


class FixedBackoff(Backoff):
    def next_delay(self) -> float:
        self.attempt += 1
        return 0.5


def test_warnings_are_rate_limited_per_problem_and_each_delay_is_waited(caplog: pytest.LogCaptureFixture) -> None:
    now, slept = [100.0], []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    retry = Reconnects(
        FixedBackoff(),
        logging.getLogger("t"),
        "stream to extender x:1",
        repeat_s=60.0,
        clock=lambda: now[0],
        sleep=sleep,
    )

    async def run() -> None:
        await retry.failed(DOWN)  # new: said
        now[0] += 59.5
        await retry.failed(DOWN)  # the same, within 60 s: quiet
        await retry.failed(TLS)  # another kind: said at once
        now[0] += 60.0
        await retry.failed(TLS)  # the same, 60 s on exactly: said again
        retry.answered()
        await retry.failed(TLS)  # after an answered attempt: a new problem, attempt 1 again

    with caplog.at_level(logging.WARNING, logger="t"):
        asyncio.run(run())
    assert [r.getMessage() for r in caplog.records] == [
        "stream to extender x:1 down (connection refused); attempt 1, retrying in 0.5s",
        "stream to extender x:1 down (certificate verify failed); attempt 3, retrying in 0.5s",
        "stream to extender x:1 down (certificate verify failed); attempt 4, retrying in 0.5s",
        "stream to extender x:1 down (certificate verify failed); attempt 1, retrying in 0.5s",
    ]
    assert slept == [0.5] * 5
    assert retry.backoff.attempt == 1  # reset by answered(), then one failure
