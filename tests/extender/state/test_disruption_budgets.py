"""state/disruption_budgets.py and model/label_selector.py: PodDisruptionBudgets counted as
kube-scheduler's preemption counts them (filterPodsWithPDBViolation), and not at all until listed."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.model.label_selector import read_selector
from gpuextender.extender.state.disruption_budgets import KIND, DisruptionBudgets
from gpuextender.extender.state.pod_ledger import BoundPod


def budget(name: str, selector: Any, allowed: Any = 0, namespace: str = "ml", disrupted: Any = None) -> dict[str, Any]:
    status: dict[str, Any] = {"disruptionsAllowed": allowed}
    if disrupted is not None:
        status["disruptedPods"] = disrupted
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"selector": selector}, "status": status}


def bound(name: str, namespace: str = "ml", **labels: str) -> BoundPod:
    return BoundPod(
        f"uid-{name}", f"{namespace}/{name}", "n", 1, (), "Running", 0.0, labels=tuple(sorted(labels.items()))
    )


APP = {"matchLabels": {"app": "train"}}


def budgets(*objects: dict[str, Any]) -> DisruptionBudgets:
    b = DisruptionBudgets()
    b.replace_all(KIND, list(objects))
    return b


def test_unknown_until_listed() -> None:
    b = DisruptionBudgets()
    assert b.violations([bound("a", app="train")]) is None
    b.replace_all(KIND, [])
    assert b.violations([bound("a", app="train")]) == 0


@pytest.mark.parametrize(("allowed", "violating"), [(0, 2), (1, 1), (2, 0), (3, 0)])
def test_each_matching_pod_takes_one_disruption_a_pod_below_zero_violates(allowed: int, violating: int) -> None:
    b = budgets(budget("pdb", APP, allowed))
    assert b.violations([bound("a", app="train"), bound("b", app="train")]) == violating


def test_kube_schedulers_own_victims_take_the_budget_first() -> None:
    b = budgets(budget("pdb", APP, 1))
    assert b.violations([bound("added", app="train")]) == 0
    assert b.violations([bound("added", app="train")], [bound("theirs", app="train")]) == 1
    assert b.violations([], [bound("theirs", app="train")]) == 0


def test_what_no_budget_covers() -> None:
    b = budgets(
        budget("pdb", APP, 0),
        budget("empty", {}, 0),  # an empty selector: kube-scheduler counts nothing against it
        budget("none", None, 0),  # no selector: matches nothing
        budget("elsewhere", APP, 0, namespace="other"),
        budget("counted", {"matchLabels": {"app": "serve"}}, 0, disrupted={"already": "2026-12-07T01:00:00Z"}),
    )
    assert b.violations([bound("nolabels")]) == 0
    assert b.violations([bound("other-app", app="infer")]) == 0
    assert b.violations([bound("already", app="serve")]) == 0  # listed in disruptedPods
    assert b.violations([bound("x", "other", app="serve")]) == 0
    assert b.violations([bound("x", app="train")]) == 1
    assert b.violations([bound("x", "other", app="train")]) == 1


def test_updates_and_deletes_change_the_count() -> None:
    b = budgets(budget("pdb", APP, 0))
    b.upsert(KIND, budget("pdb", APP, 1))
    assert b.violations([bound("a", app="train")]) == 0
    b.delete(KIND, budget("pdb", APP))
    assert b.violations([bound("a", app="train")]) == 0 and len(b) == 0
    b.upsert(KIND, budget("pdb", APP, True))  # not an integer: none allowed
    assert b.violations([bound("a", app="train")]) == 1


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({"matchLabels": {"a": "1"}}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"b": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
        (
            {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
            {"a": "1"},
            False,
        ),
    ],
)
def test_label_selector_operators(selector: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    read = read_selector(selector)
    assert read is not None and read.matches(labels) is matches


@pytest.mark.parametrize(
    "selector",
    [
        "app=train",
        {"matchLabels": ["app"]},
        {"matchLabels": {"app": 1}},
        {"matchExpressions": {"key": "a"}},
        {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]},
        {"matchExpressions": ["a"]},
    ],
)
def test_an_unreadable_selector_matches_nothing(selector: Any) -> None:
    assert read_selector(selector) is None
    assert budgets(budget("pdb", selector, 0)).violations([bound("a", app="train", a="1")]) == 0


def test_every_change_is_a_new_generation() -> None:
    """The preempt verb keeps a plan that read the budgets for the generation it read
    (decide/preempt_victims.judge_table): each change of what `violations` reads makes a new one."""
    b = DisruptionBudgets()
    seen = [b.generation]
    b.replace_all(KIND, [])  # (listed: `violations` says 0 where it said None)
    seen.append(b.generation)
    b.upsert(KIND, budget("pdb", APP, 1))
    seen.append(b.generation)
    b.upsert(KIND, budget("pdb", APP, 0))
    seen.append(b.generation)
    b.delete(KIND, budget("pdb", APP))
    seen.append(b.generation)
    b.replace_all(KIND, [budget("pdb", APP, 1)])
    seen.append(b.generation)
    assert seen == sorted(set(seen)) and len(seen) == 6
