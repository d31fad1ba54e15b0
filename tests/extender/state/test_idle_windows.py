"""The reclaim signal's windows (state/idle_allocated.IdleWindows): a key stands after exactly its
window without a break, goes at once, and a key that toggles keeps one deadline in the heap."""

from __future__ import annotations

import pytest

from gpuextender.extender.state.idle_allocated import IdleWindows

WINDOW = 60.0


@pytest.mark.parametrize(("after", "stands"), [(WINDOW - 0.001, False), (WINDOW, True)])
def test_a_key_stands_after_exactly_its_window(after: float, stands: bool) -> None:
    w = IdleWindows(WINDOW)
    w.set_node("n", {"n/0": 1}, 100.0)
    w.promote(100.0 + after)
    assert ("n/0" in w.standing) is stands


def test_a_break_starts_the_window_over_and_a_toggling_key_keeps_one_heap_entry() -> None:
    w = IdleWindows(WINDOW)
    for k in range(1000):  # idle 5 s, busy 5 s, for 10,000 s: never 60 s without a break
        t = k * 5.0
        w.set_node("n", {"n/0": 1} if k % 2 == 0 else {}, t)
        w.promote(t)
        assert len(w._due) <= 1
    assert w.standing == {}
    w.set_node("n", {"n/0": 1}, 10_000.0)
    w.promote(10_000.0 + WINDOW - 0.001)
    assert w.standing == {}
    w.promote(10_000.0 + WINDOW)
    assert w.standing == {"n/0": 1}
    version = w.version
    w.set_node("n", {}, 10_100.0)  # busy: gone at once
    assert w.standing == {} and w.version == version + 1


def test_a_standing_claims_value_follows_what_is_asked() -> None:
    w = IdleWindows(WINDOW)
    w.set_node("n", {"ns/c": 2}, 0.0)
    w.promote(WINDOW)
    w.set_node("n", {"ns/c": 3}, WINDOW + 1)
    assert w.standing == {"ns/c": 3}
