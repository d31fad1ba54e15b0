"""limits.RefusalBudget: a relay client's refusals, charged after the fact, paid by waiting; and
limits.RefusalBudgets: one budget per client, shared by its streams, kept while it may be in debt."""

from __future__ import annotations

import pytest

from gpuextender.extender.ingest.limits import (
    MAX_IDLE_REFUSAL_BUDGETS,
    RELAY_REFUSAL_BURST,
    RELAY_REFUSALS_PER_SECOND,
    RefusalBudget,
    RefusalBudgets,
)


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


def test_a_clients_streams_share_one_budget_and_other_clients_have_their_own() -> None:
    budgets = RefusalBudgets(lambda: 0.0)
    first, second = budgets.open("relay@ipv4:10.0.0.9"), budgets.open("relay@ipv4:10.0.0.9")
    assert first is second  # a second stream gets no fresh burst
    assert first.charge(RELAY_REFUSAL_BURST, RELAY_REFUSALS_PER_SECOND) == 0.0
    assert second.charge(1, RELAY_REFUSALS_PER_SECOND) > 0.0
    assert budgets.open("relay@ipv4:10.0.0.10").charge(RELAY_REFUSAL_BURST, RELAY_REFUSALS_PER_SECOND) == 0.0


def test_a_debt_outlives_the_clients_streams() -> None:
    """A client that reconnects after running its budget into debt finds the debt, not a new burst."""
    now = [0.0]
    budgets = RefusalBudgets(lambda: now[0])
    budget = budgets.open("ipv4:10.0.0.9")
    budget.charge(RELAY_REFUSAL_BURST + 500, RELAY_REFUSALS_PER_SECOND)
    budgets.close("ipv4:10.0.0.9")
    assert budgets.open("ipv4:10.0.0.9") is budget
    assert budget.charge(0, RELAY_REFUSALS_PER_SECOND) == pytest.approx(0.5)


def test_budgets_of_clients_without_streams_are_bounded_exactly() -> None:
    """MAX_IDLE_REFUSAL_BUDGETS budgets of clients gone are kept; the next new client first drops
    those refilled (a new one is the same), then, where all are in debt, the oldest."""
    now = [0.0]
    budgets = RefusalBudgets(lambda: now[0])
    for i in range(MAX_IDLE_REFUSAL_BUDGETS):
        budgets.open(f"c{i}").charge(RELAY_REFUSAL_BURST + 1, RELAY_REFUSALS_PER_SECOND)  # each in debt
        budgets.close(f"c{i}")
    assert len(budgets) == MAX_IDLE_REFUSAL_BUDGETS
    budgets.open("held")  # an open stream's budget is never dropped
    assert len(budgets) == MAX_IDLE_REFUSAL_BUDGETS  # one over the bound: the oldest in debt went
    c1 = budgets.open("c1")  # (c0 was dropped: c1 is the same one, its debt kept)
    assert c1.charge(0, RELAY_REFUSALS_PER_SECOND) > 0.0
    budgets.close("c1")
    now[0] = 1000.0  # every debt paid and refilled
    budgets.open("new")  # 1,023 idle: below the bound, nothing dropped
    assert len(budgets) == MAX_IDLE_REFUSAL_BUDGETS + 1
    budgets.close("new")  # 1,024 idle: at the bound
    budgets.open("newer")
    assert len(budgets) == 2  # "held" and "newer": the refilled idle ones all dropped at once
    budgets.close("nobody")  # a client never opened: nothing to undo


def test_an_idle_budget_below_the_bound_is_kept() -> None:
    budgets = RefusalBudgets(lambda: 0.0)
    for i in range(MAX_IDLE_REFUSAL_BUDGETS - 1):
        budgets.open(f"c{i}")
        budgets.close(f"c{i}")
    budgets.open("next")
    assert len(budgets) == MAX_IDLE_REFUSAL_BUDGETS  # below the bound: nothing dropped, refilled or not
