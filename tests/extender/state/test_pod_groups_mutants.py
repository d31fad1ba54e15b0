"""Rules of a source's PodGroups (state/pod_groups.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: a PodGroup without a namespace is in
"default", one without a string name or namespace is not kept, the bound is MAX_POD_GROUPS (kept at
exactly it, the next one dropped and counted), said once in the log, and a PodGroup that cannot be
used is said in the log with its source, namespace, name and problem."""

from __future__ import annotations

import logging

import pytest

from gpuextender.extender.model.pod_group import COSCHEDULING, PodGroupSpec
from gpuextender.extender.state.pod_groups import MAX_POD_GROUPS, PodGroups


def pg(name: object, minimum: object = 2, namespace: object = "ns") -> dict[str, object]:
    return {"kind": "PodGroup", "metadata": {"name": name, "namespace": namespace}, "spec": {"minMember": minimum}}


def test_a_pod_group_without_a_namespace_is_in_default() -> None:
    groups = PodGroups(COSCHEDULING)
    groups.upsert("PodGroup", {"metadata": {"name": "a"}, "spec": {"minMember": 3}})
    assert groups.spec("default", "a") == PodGroupSpec(3)


def test_a_pod_group_without_a_string_name_or_namespace_is_not_kept() -> None:
    groups = PodGroups(COSCHEDULING)
    gone: list[tuple[str, str]] = []
    groups.on_delete(lambda ns, name: gone.append((ns, name)))
    groups.replace_all("PodGroup", [pg(None), pg(7), pg("a", namespace=7)])
    assert len(groups) == 0
    groups.delete("PodGroup", pg(None))
    assert gone == []


def test_the_default_bound_keeps_exactly_max_pod_groups() -> None:
    groups = PodGroups(COSCHEDULING)
    groups.replace_all("PodGroup", [pg(str(i)) for i in range(MAX_POD_GROUPS + 1)])
    assert len(groups) == MAX_POD_GROUPS == 50_000 and groups.dropped == 1


def test_each_pod_group_past_the_bound_is_counted_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    groups = PodGroups(COSCHEDULING, max_groups=1)
    assert groups.dropped == 0
    with caplog.at_level(logging.WARNING, logger="gpu_extender.groups"):
        groups.replace_all("PodGroup", [pg("a"), pg("b"), pg("c"), pg("d")])
    assert groups.dropped == 3
    assert caplog.messages == ["coscheduling PodGroups: more than 1, the rest are not read"]


def test_a_pod_group_that_cannot_be_used_is_said_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    groups = PodGroups(COSCHEDULING)
    with caplog.at_level(logging.INFO, logger="gpu_extender.groups"):
        groups.upsert("PodGroup", pg("a", 0))
        groups.upsert("PodGroup", pg("b", 2))
    spec = groups.spec("ns", "a")
    assert spec is not None and spec.problem
    assert caplog.messages == [f"coscheduling PodGroup ns/a: {spec.problem}: its pods are single pods"]
