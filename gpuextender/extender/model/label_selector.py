"""A Kubernetes LabelSelector (`matchLabels`, `matchExpressions` with In, NotIn, Exists,
DoesNotExist), read leniently from an object the API server already validated: a PodDisruptionBudget's
`spec.selector` (state/disruption_budgets.py).

An unreadable selector (a wrong type, an unknown operator) reads as None, which matches nothing, as
kube-scheduler treats a selector it cannot convert. An empty one (`{}`) is kept: what it matches is the
caller's rule (kube-scheduler's preemption counts no PodDisruptionBudget whose selector is empty)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # one of OPERATORS
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        op, present = self.operator, self.key in labels
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # NotIn


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def read_selector(raw: Any) -> LabelSelector | None:
    """The selector, or None where it is absent or cannot be read."""
    if not isinstance(raw, Mapping):
        return None
    labels = raw.get("matchLabels") or {}
    expressions = raw.get("matchExpressions") or []
    if not isinstance(labels, Mapping) or not isinstance(expressions, list):
        return None
    requirements = []
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            return None
        requirements.append(Requirement(key, "In", frozenset((value,))))
    for e in expressions:
        if not isinstance(e, Mapping):
            return None
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if not isinstance(key, str) or op not in OPERATORS or not isinstance(values, list):
            return None
        if not all(isinstance(v, str) for v in values):
            return None
        requirements.append(Requirement(key, op, frozenset(values)))
    return LabelSelector(tuple(requirements))
