"""limits.RefusalBudget: a relay stream's refusals, charged after the fact, paid by waiting."""

from __future__ import annotations

import pytest

from gpuextender.extender.ingest.limits import RELAY_REFUSAL_BURST, RefusalBudget


def test_the_burst_is_free_and_one_more_is_owed_at_the_rate() -> None:
    now = [0.0]
    budget = RefusalBudget(lambda: now[0])
    assert budget.charge(RELAY_REFUSAL_BURST, 1000.0) == 0.0  # exactly the burst: nothing owed
    assert budget.charge(1, 1000.0) == pytest.approx(1 / 1000)  # one more: a thousandth of a second
    assert budget.charge(0, 1000.0) == pytest.approx(1 / 1000)  # still owed until time passes
    now[0] = 0.001
    assert budget.charge(0, 1000.0) == 0.0  # paid by waiting


def test_the_budget_refills_at_the_rate_of_each_charge_up_to_the_burst() -> None:
    now = [0.0]
    budget = RefusalBudget(lambda: now[0], burst=100)
    assert budget.charge(100, 50.0) == 0.0
    now[0] = 1.0  # 1 s at 40 a second: 40 refused for free, the 41st owed 1/40 s
    assert budget.charge(40, 40.0) == 0.0
    assert budget.charge(1, 40.0) == pytest.approx(1 / 40)
    now[0] = 1000.0  # a long quiet spell refills to the burst, no more
    assert budget.charge(100, 40.0) == 0.0
    assert budget.charge(1, 40.0) == pytest.approx(1 / 40)


def test_a_clock_stepping_back_adds_nothing() -> None:
    now = [10.0]
    budget = RefusalBudget(lambda: now[0], burst=10)
    assert budget.charge(10, 1.0) == 0.0
    now[0] = 5.0
    assert budget.charge(1, 1.0) == pytest.approx(1.0)
    now[0] = 5.5  # half a second after the stepped-back reading
    assert budget.charge(0, 1.0) == pytest.approx(0.5)


def test_an_agent_streams_pace_loses_nothing_to_a_clock_stepping_back() -> None:
    """ReportPacer on the one token bucket (common/token_bucket.py) gains its clock-step guard: a
    clock stepped back 100 s neither adds tokens nor takes any (it used to take 1,000)."""
    from gpuextender.extender.ingest.limits import REPORT_BURST, REPORTS_PER_SECOND, ReportPacer

    now = [1000.0]
    pacer = ReportPacer(lambda: now[0])
    now[0] -= 100.0
    assert [pacer.take() for _ in range(REPORT_BURST)] == [0.0] * REPORT_BURST  # the burst is still there
    assert pacer.take() == pytest.approx(1 / REPORTS_PER_SECOND)  # and no more: the step added nothing
