"""The freshness rule (state/freshness.py) at its bound, and the copy whole_gpus.filter_nodes inlines
on its per-node loop held equal to it on generated cases, the bound and its float neighbours included."""

from __future__ import annotations

import math
import random

from gpuextender.extender.decide.whole_gpus import filter_nodes
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.freshness import data_age, is_fresh
from tests.extender.builders import node


def test_fresh_at_exactly_the_bound_and_stale_one_step_past_it() -> None:
    assert is_fresh(90.0, 100.0, 10.0)
    assert not is_fresh(math.nextafter(90.0, 0.0), 100.0, 10.0)
    assert is_fresh(math.nextafter(90.0, 100.0), 100.0, 10.0)
    assert is_fresh(100.0, 100.0, 0.0) and not is_fresh(99.0, 100.0, 0.0)


def test_a_report_received_after_now_was_read_is_fresh_and_zero_old() -> None:
    assert is_fresh(101.0, 100.0, 10.0)
    assert data_age(101.0, 100.0) == 0.0
    assert data_age(90.0, 100.0) == 10.0


def test_filter_nodes_inlined_rule_equals_is_fresh() -> None:
    """A node that fits on its data passes as fresh exactly when is_fresh says so; otherwise
    (fail-open, allocatable enough) it fits on assumed data."""
    rng = random.Random(7)
    now = 1000.0
    cases = [(now - s, s) for s in (0.0, 1.0, 10.0, 30.0)]
    cases += [(math.nextafter(now - s, d), s) for s in (1.0, 10.0, 30.0) for d in (0.0, 2 * now)]
    cases += [(now - rng.uniform(0, 40), rng.choice([1.0, 5.0, 10.0, 20.0])) for _ in range(500)]
    for received_at, stale_after in cases:
        summary = node("n", idle=4, received_at=received_at)
        out = filter_nodes(2, ["n"], {"n": 4}, {"n": summary}.get, now, DecisionPolicy(stale_after_s=stale_after))
        assert out.passed == ["n"]
        assert (out.assumed == []) is is_fresh(received_at, now, stale_after), (received_at, stale_after)
