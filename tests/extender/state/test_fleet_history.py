"""The fleet history (state/fleet_history.py): one point per wall-clock minute, at most 1440, none
24 hours old; a wall clock stepped back or forward never puts points out of order, twice for one
minute, or day-old beside new; a minute not sampled, or with no GPU data, is a gap, not a zero."""

from __future__ import annotations

from gpuextender.extender.state.fleet_history import (
    MAX_POINTS,
    STEP_S,
    WINDOW_S,
    FleetHistory,
    Point,
    Sample,
    minute_of,
)

T0 = 1_700_000_040  # a minute's start (Unix seconds)


def at(n: int) -> Sample:
    return Sample(n, n + 1, n + 2, n + 3, n + 4)


def minutes(history: FleetHistory, now: float) -> list[int]:
    return [p.minute for p in history.points(now)]


def test_the_bounds_are_a_day_of_minutes() -> None:
    assert (STEP_S, WINDOW_S, MAX_POINTS) == (60, 86_400, 1440)


def test_a_point_is_its_wall_clock_minute_start() -> None:
    assert minute_of(T0) == T0
    assert minute_of(T0 + 59.999) == T0
    assert minute_of(T0 + 60) == T0 + 60
    assert minute_of(T0 - 0.001) == T0 - 60
    history = FleetHistory()
    history.record(T0 + 12.5, at(1))
    assert history.points(T0 + 12.5) == [Point(T0, at(1))]


def test_a_second_sample_in_a_minute_replaces_its_point() -> None:
    history = FleetHistory()
    history.record(T0 + 1, at(1))
    history.record(T0 + 59.9, at(2))
    assert history.points(T0 + 59.9) == [Point(T0, at(2))]
    history.record(T0 + 60, at(3))
    assert history.points(T0 + 60) == [Point(T0, at(2)), Point(T0 + 60, at(3))]


def test_exactly_1440_points_are_kept_and_the_1441st_pushes_out_the_oldest() -> None:
    history = FleetHistory()
    for i in range(MAX_POINTS):
        history.record(T0 + i * STEP_S, at(i))
    now = T0 + (MAX_POINTS - 1) * STEP_S
    kept = history.points(now)
    assert len(kept) == MAX_POINTS and kept[0] == Point(T0, at(0))
    history.record(now + STEP_S, at(MAX_POINTS))
    kept = history.points(now + STEP_S)
    assert len(kept) == MAX_POINTS
    assert kept[0] == Point(T0 + STEP_S, at(1)) and kept[-1] == Point(now + STEP_S, at(MAX_POINTS))


def test_a_point_leaves_when_it_is_24_hours_old_to_the_minute() -> None:
    history = FleetHistory()
    history.record(T0, at(0))
    history.record(T0 + WINDOW_S - STEP_S, at(1))  # 23 h 59 min later: both kept
    assert minutes(history, T0 + WINDOW_S - 1) == [T0, T0 + WINDOW_S - STEP_S]
    # Read at the minute 24 h after the first: it leaves, with no new sample needed.
    assert minutes(history, T0 + WINDOW_S) == [T0 + WINDOW_S - STEP_S]


def test_a_sample_24_hours_on_evicts_the_points_it_makes_24_hours_old() -> None:
    history = FleetHistory()
    history.record(T0, at(0))
    history.record(T0 + 60, at(1))
    history.record(T0 + WINDOW_S, at(2))  # the first is now exactly 24 h old, the second 23 h 59 min
    assert len(history) == 2
    assert minutes(history, T0 + WINDOW_S) == [T0 + 60, T0 + WINDOW_S]


def test_a_clock_stepped_forward_a_day_leaves_no_day_old_point() -> None:
    history = FleetHistory()
    for i in range(10):
        history.record(T0 + i * STEP_S, at(i))
    history.record(T0 + 9 * STEP_S + WINDOW_S + 1, at(99))
    assert history.points(T0 + 9 * STEP_S + WINDOW_S + 1) == [Point(T0 + 9 * STEP_S + WINDOW_S, at(99))]


def test_a_clock_stepped_back_never_puts_points_out_of_order_or_twice() -> None:
    history = FleetHistory()
    for i in range(5):
        history.record(T0 + i * STEP_S + 30, at(i))
    # Back into the latest point's own minute: replaced, not added.
    history.record(T0 + 4 * STEP_S + 1, at(40))
    assert minutes(history, T0 + 4 * STEP_S + 1) == [T0 + i * STEP_S for i in range(5)]
    assert history.rewinds == 0
    # Back two minutes: the points the clock stamped ahead go; the sample takes its own minute.
    history.record(T0 + 2 * STEP_S + 30, at(20))
    assert history.points(T0 + 2 * STEP_S + 30) == [
        Point(T0, at(0)),
        Point(T0 + STEP_S, at(1)),
        Point(T0 + 2 * STEP_S, at(20)),
    ]
    assert history.rewinds == 1
    # From there on the history grows as before: it never waits for the clock to catch up.
    history.record(T0 + 3 * STEP_S + 30, at(30))
    assert minutes(history, T0 + 3 * STEP_S + 30) == [T0 + i * STEP_S for i in range(4)]


def test_a_clock_stepped_back_before_every_point_keeps_only_the_new_one() -> None:
    history = FleetHistory()
    for i in range(3):
        history.record(T0 + i * STEP_S, at(i))
    history.record(T0 - 3600, at(7))
    assert history.points(T0 - 3600) == [Point(T0 - 3600, at(7))]


def test_minutes_not_sampled_are_gaps_and_unknown_counts_stay_unknown() -> None:
    history = FleetHistory()
    history.record(T0, at(0))
    history.record(T0 + 3 * STEP_S, Sample(None, None, None, None, 2))  # no GPU had data
    history.record(T0 + 4 * STEP_S, at(4))
    points = history.points(T0 + 4 * STEP_S)
    assert [p.minute for p in points] == [T0, T0 + 3 * STEP_S, T0 + 4 * STEP_S]  # 2 minutes: no point
    assert points[1].sample == Sample(None, None, None, None, 2)  # not zeros


def test_a_minute_before_1970_starts_at_its_floor() -> None:
    """A wall clock set before the epoch still names the minute it falls in (floor, not truncation)."""
    assert minute_of(-0.5) == -60 and minute_of(-60.0) == -60 and minute_of(-60.5) == -120


def test_every_step_back_of_the_clock_is_counted() -> None:
    history = FleetHistory()
    history.record(T0 + 120, at(1))
    history.record(T0 + 60, at(2))  # back a minute
    history.record(T0, at(3))  # and again
    assert history.rewinds == 2
