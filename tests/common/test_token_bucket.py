"""The write budget's token bucket (common/token_bucket.py), on a fake clock."""

from __future__ import annotations

import pytest

from gpuextender.common.token_bucket import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_exactly_the_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(4.0, 4.0, clock)
    assert [bucket.take() for _ in range(5)] == [True] * 4 + [False]
    clock.now += 0.249  # just short of one token at 4/s
    assert bucket.take() is False
    clock.now += 0.001
    assert bucket.take() is True
    assert bucket.take() is False
    assert bucket.refused == 3


def test_idle_time_fills_the_bucket_to_its_burst_and_no_more() -> None:
    clock = Clock()
    bucket = TokenBucket(10.0, 2.0, clock)
    assert bucket.take() and bucket.take() and not bucket.take()
    clock.now += 3600
    assert [bucket.take() for _ in range(3)] == [True, True, False]


def test_a_clock_stepped_back_adds_no_token() -> None:
    clock = Clock()
    bucket = TokenBucket(1.0, 1.0, clock)
    assert bucket.take()
    clock.now -= 50
    assert not bucket.take()
    clock.now += 1.0  # a second after the step: one token
    assert bucket.take()


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1.0), (-1.0, 1.0), (float("nan"), 1.0), (1.0, 0.999)])
def test_a_bucket_that_could_never_give_is_refused(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match="token bucket"):
        TokenBucket(rate, burst)
