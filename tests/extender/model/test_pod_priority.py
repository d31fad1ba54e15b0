"""model/pod_priority.py: spec.priority read as kube-scheduler reads it, bounded to int32 on both
sides; preemptionPolicy Never is the one that forbids preempting."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.model.pod_priority import INT32_MAX, INT32_MIN, may_preempt, priority


@pytest.mark.parametrize(
    ("value", "read"),
    [
        (1000, 1000),
        (-5, -5),
        (INT32_MAX, INT32_MAX),
        (INT32_MAX + 1, 0),
        (INT32_MIN, INT32_MIN),
        (INT32_MIN - 1, 0),
        (True, 0),  # a bool is no priority, though Python calls it an int
        ("1000", 0),
        (1000.0, 0),
        (None, 0),
    ],
)
def test_priority_is_an_int32_or_zero(value: Any, read: int) -> None:
    assert priority({"priority": value}) == read


def test_no_priority_reads_zero() -> None:
    assert priority({}) == 0


@pytest.mark.parametrize(
    ("spec", "preempts"),
    [({}, True), ({"preemptionPolicy": "PreemptLowerPriority"}, True), ({"preemptionPolicy": "Never"}, False)],
)
def test_only_never_forbids_preempting(spec: dict[str, Any], preempts: bool) -> None:
    assert may_preempt(spec) is preempts
