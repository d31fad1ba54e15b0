"""Rules of the PodDisruptionBudgets count (state/disruption_budgets.py) that mutation testing
(mutmut) found no test holding; each test fails on a one-line change to the module: a budget is
kept by its namespace and name (one without a string name is not kept), each budget of a namespace
is counted on its own (two that allow one each let one pod go), a budget that does not match does
not stop the ones after it, deleting one budget (or one never seen) leaves the others, and watch
events before the first list are taken."""

from __future__ import annotations

from typing import Any

from gpuextender.extender.state.disruption_budgets import KIND, DisruptionBudgets
from gpuextender.extender.state.pod_ledger import BoundPod

APP = {"matchLabels": {"app": "train"}}
OTHER = {"matchLabels": {"app": "serve"}}


def budget(name: Any, selector: Any, allowed: int = 0, namespace: str = "ml") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector},
        "status": {"disruptionsAllowed": allowed},
    }


def bound(name: str, **labels: str) -> BoundPod:
    return BoundPod(f"uid-{name}", f"ml/{name}", "n", 1, (), "Running", 0.0, labels=tuple(sorted(labels.items())))


def budgets(*objects: dict[str, Any]) -> DisruptionBudgets:
    b = DisruptionBudgets()
    b.replace_all(KIND, list(objects))
    return b


def test_a_budget_without_a_string_name_is_not_kept() -> None:
    b = budgets(budget(None, APP), budget(3, APP))
    assert len(b) == 0 and b.violations([bound("a", app="train")]) == 0


def test_each_budget_of_a_namespace_is_counted_on_its_own() -> None:
    b = budgets(budget("one", APP, 1), budget("two", APP, 1))
    assert b.violations([bound("a", app="train")]) == 0
    assert b.violations([bound("a", app="train"), bound("b", app="train")]) == 1


def test_a_budget_that_does_not_match_does_not_stop_the_ones_after_it() -> None:
    b = budgets(budget("serve", OTHER, 0), budget("train", APP, 0))
    assert b.violations([bound("a", app="train")]) == 1


def test_deleting_one_budget_leaves_the_others() -> None:
    b = budgets(budget("one", APP, 0), budget("two", APP, 0))
    b.delete(KIND, budget("never-seen", APP))
    b.delete(KIND, budget("one", APP))
    assert len(b) == 1 and b.violations([bound("a", app="train")]) == 1


def test_watch_events_before_the_first_list_are_taken() -> None:
    b = DisruptionBudgets()
    assert len(b) == 0
    b.delete(KIND, budget("one", APP))
    b.upsert(KIND, budget("one", APP))
    assert len(b) == 1
