"""What a cleanup removes of a Node and what it says (state/cleanup_plan.py), every branch. On the
real API server: tests/kube/test_cleanup.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuextender.extender.state.cleanup_plan import (
    CleanupReport,
    NodePlan,
    Removal,
    condition_patch,
    exit_status,
    forbidden,
    lease_holder,
    lines,
    node_plan,
    taint_patch,
)

KEY = "gpu-extender.io/no-usable-gpu"
RULES = "DeviceTaintRules (app.kubernetes.io/managed-by=gpu-extender, resource.k8s.io/v1beta2)"
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def node(name: Any = "n", conditions: Any = None, taints: Any = None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"taints": taints}, "status": {"conditions": conditions}}


# -- what of a Node is ours ------------------------------------------------------------------------


def test_a_node_with_nothing_of_ours_needs_nothing() -> None:
    other = [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure"}]
    foreign = [{"key": "example.com/maintenance", "effect": "NoSchedule"}]
    assert node_plan(node(conditions=other, taints=foreign), KEY) is None
    assert node_plan(node(), KEY) is None  # no conditions, no taints (null)
    assert node_plan({"metadata": {"name": "bare"}}, KEY) is None  # no spec, no status


@pytest.mark.parametrize("name", [None, "", 7])
def test_a_node_without_a_name_cannot_be_patched(name: Any) -> None:
    assert node_plan(node(name, [{"type": "GPUsUsable"}]), KEY) is None
    assert node_plan({"status": {"conditions": [{"type": "GPUsUsable"}]}}, KEY) is None


def test_only_the_condition_of_ours_and_the_taints_of_our_key_are_planned() -> None:
    ours = {"key": KEY, "effect": "NoSchedule"}
    also_ours = {"key": KEY, "effect": "PreferNoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
    taints = [{"key": "example.com/maintenance"}, ours, "not a taint", {"key": f"{KEY}-2"}, also_ours]
    conditions = [{"type": "Ready"}, "junk", {"type": "GPUsUsable", "status": "False"}]
    assert node_plan(node("n", conditions, taints), KEY) == NodePlan("n", True, ((1, ours), (4, also_ours)))
    assert node_plan(node("n", conditions, []), KEY) == NodePlan("n", True, ())
    assert node_plan(node("n", [{"type": "Ready"}], [ours]), KEY) == NodePlan("n", False, ((0, ours),))
    assert node_plan(node("n", None, [ours]), "another.io/key") is None  # another --node-taint-key


def test_the_condition_goes_by_its_type_alone() -> None:
    assert condition_patch() == {"status": {"conditions": [{"type": "GPUsUsable", "$patch": "delete"}]}}
    assert condition_patch() is not condition_patch()  # a fresh body each time


def test_each_taint_is_tested_then_removed_from_the_highest_position_down() -> None:
    first, second = {"key": KEY, "effect": "NoSchedule"}, {"key": KEY, "effect": "PreferNoSchedule"}
    assert taint_patch(NodePlan("n", False, ((1, first), (4, second)))) == [
        {"op": "test", "path": "/spec/taints/4", "value": second},
        {"op": "remove", "path": "/spec/taints/4"},
        {"op": "test", "path": "/spec/taints/1", "value": first},
        {"op": "remove", "path": "/spec/taints/1"},
    ]
    assert taint_patch(NodePlan("n", True, ())) == []


# -- what it says ------------------------------------------------------------------------------------


def report(**kinds: Removal) -> CleanupReport:
    r = CleanupReport(KEY, version="v1beta2")
    for name, removal in kinds.items():
        setattr(r, name, removal)
    return r


def done(found: int, removed: int | None = None, *problems: str) -> Removal:
    return Removal(found, found if removed is None else removed, True, list(problems))


@pytest.mark.parametrize(
    ("dry", "said"),
    [
        (
            False,
            [f"deleted 3 {RULES}", "removed the GPUsUsable condition from 1 Node", f"removed taint {KEY} from 0 Nodes"],
        ),
        (
            True,
            [
                f"would delete 3 {RULES}",
                "would remove the GPUsUsable condition from 1 Node",
                f"would remove taint {KEY} from 0 Nodes",
            ],
        ),
    ],
    ids=["done", "dry-run: what it found"],
)
def test_a_complete_run_is_one_line_per_kind_counted_singular_and_plural_and_exit_0(dry: bool, said: list[str]) -> None:
    r = report(rules=done(3, 0 if dry else 3), conditions=done(1, 0 if dry else 1), taints=done(0))
    r.dry_run = dry
    assert lines(r) == said
    assert exit_status(r) == 0


def test_an_api_server_without_device_taint_rules_has_none_to_delete() -> None:
    r = report(rules=done(0), conditions=done(0), taints=done(0))
    r.version = None
    assert lines(r)[0] == "the API server serves no DeviceTaintRules (resource.k8s.io): none to delete"
    assert exit_status(r) == 0


def test_what_was_not_removed_is_counted_with_its_distinct_reasons_and_exit_1() -> None:
    refused = forbidden("delete", "devicetaintrules.resource.k8s.io")
    assert refused == "forbidden (RBAC: needs delete on devicetaintrules.resource.k8s.io)"
    rules = done(4, 1)
    for why in (refused, refused, "HTTP 500 on devicetaintrules: x", "a third reason"):
        rules.fail(why)
    assert rules.problems == [refused, "HTTP 500 on devicetaintrules: x", "a third reason"]  # once each
    r = report(rules=rules, conditions=done(2), taints=done(1))
    one = RULES.replace("DeviceTaintRules", "DeviceTaintRule")
    assert lines(r)[0] == f"deleted 1 {one}; 3 not: {refused}; HTTP 500 on devicetaintrules: x"
    assert exit_status(r) == 1
    r.dry_run = True  # a dry run that found them all: nothing was to be removed
    assert lines(r)[0] == f"would delete 4 {RULES}"


def test_a_kind_that_could_not_be_listed_says_why_and_exit_1() -> None:
    nodes = Removal()
    nodes.fail(forbidden("list", "nodes"))
    r = report(rules=done(0), conditions=nodes, taints=Removal())
    assert lines(r)[1:] == [
        "removed the GPUsUsable condition from 0 Nodes: could not list them: forbidden (RBAC: needs list on nodes)",
        f"removed taint {KEY} from 0 Nodes: could not list them: not looked at",
    ]
    assert exit_status(r) == 1
    r.version = None  # discovery never answered (the run stopped): the rules were not looked at either
    r.rules = Removal()
    assert lines(r)[0] == (
        "deleted 0 DeviceTaintRules (app.kubernetes.io/managed-by=gpu-extender, resource.k8s.io): could not list "
        "them: not looked at"
    )


def test_a_running_leader_is_a_warning_and_exit_1_a_lease_not_read_a_note() -> None:
    r = report(rules=done(0), conditions=done(0), taints=done(0))
    r.lease = "gpu-extender/gpu-extender-device-taints"
    r.lease_note = "cannot read the Lease gpu-extender/gpu-extender-device-taints: forbidden"
    assert lines(r)[0] == (
        "note: cannot read the Lease gpu-extender/gpu-extender-device-taints: forbidden: not checked whether a "
        "gpu-extender still runs"
    )
    assert exit_status(r) == 0 and len(lines(r)) == 4
    r.leader = "gpu-extender-7d9c-x"
    assert lines(r)[0] == (
        "warning: gpu-extender-7d9c-x holds the Lease gpu-extender/gpu-extender-device-taints: a running "
        "gpu-extender writes what this removes again; stop it first (kubectl delete -k deploy/), then run this again"
    )
    assert exit_status(r) == 1 and len(lines(r)) == 4  # the warning instead of the note


def test_a_run_that_stopped_early_says_so_and_exit_1() -> None:
    r = report(rules=done(2), conditions=done(1), taints=done(0))
    r.stopped = "out of time after 5s"
    assert lines(r)[0] == "stopped: out of time after 5s" and len(lines(r)) == 4
    assert exit_status(r) == 1


# -- whether a replica still leads -------------------------------------------------------------------


def lease(
    holder: Any = "replica-1", renewed: Any = "2026-12-01T11:59:55.000000Z", duration: Any = 15
) -> dict[str, Any]:
    return {"spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": duration}}


def test_a_lease_renewed_within_its_duration_is_held_by_its_holder() -> None:
    assert lease_holder(lease(), NOW) == "replica-1"
    edge = (NOW - timedelta(seconds=15)).isoformat()
    assert lease_holder(lease(renewed=edge), NOW) == "replica-1"
    ahead = (NOW + timedelta(seconds=10)).isoformat()  # a skewed clock: still held
    assert lease_holder(lease(renewed=ahead), NOW) == "replica-1"


def test_a_lapsed_lease_or_one_given_up_or_none_is_held_by_nobody() -> None:
    past = (NOW - timedelta(seconds=15, microseconds=1)).isoformat()
    assert lease_holder(lease(renewed=past), NOW) == ""
    assert lease_holder(lease(renewed=(NOW + timedelta(seconds=16)).isoformat()), NOW) == ""
    for holder in (None, "", 3):
        assert lease_holder(lease(holder=holder), NOW) == ""
    assert lease_holder(None, NOW) == "" and lease_holder({}, NOW) == "" and lease_holder({"spec": None}, NOW) == ""


@pytest.mark.parametrize(
    ("renewed", "duration"),
    [(None, 15), (1234, 15), ("yesterday", 15), ("2026-12-01T11:00:00", 15), ("2026-12-01T11:00:00Z", None)],
    ids=["no-renewal", "not-a-string", "not-a-time", "no-zone", "no-duration"],
)
def test_a_holder_whose_renewal_cannot_be_read_is_taken_to_hold_it(renewed: Any, duration: Any) -> None:
    assert lease_holder(lease(renewed=renewed, duration=duration), NOW) == "replica-1"
