"""Rules of what a member's filter leaves in the group book (scheduler/group_record.py) that a
one-line change would break unseen (issue 52 item 0): a plan with a member bound is never
released, or its room would go to other pods."""

from __future__ import annotations

from tests.extender.scheduler.test_groups import Cluster, failures, lws_pod, single_pod

KEY = "llm/leaderworkerset/g"


def test_a_plan_is_not_released_while_a_member_is_bound() -> None:
    """Clique a was planned for 3 members and member 0 is bound on a0; then kube-scheduler leaves
    a1 out of member 1's candidates, so a (offered: a0, a2) no longer holds the 2 members left, and
    the bound member pins the group there: member 1 waits. The plan and a2's hold stay, so a
    single pod does not take a2."""
    cluster = Cluster({"a0": ("a", 8, 0), "a1": ("a", 8, 0), "a2": ("a", 8, 0), "b0": ("b", 8, 0)})
    assert sorted(cluster.filter(lws_pod("g", 0, 3))["NodeNames"]) == ["a0", "a1", "a2"]
    cluster.bind(lws_pod("g", 0, 3), "a0")
    answer = cluster.filter(lws_pod("g", 1, 3), ["a0", "a2", "b0"])
    assert answer["NodeNames"] == [] and "GroupDoesNotFit" in failures(answer)["a2"]
    plan = cluster.api.groups.plan(KEY)
    assert plan is not None and plan.value == "a" and plan.holds == {"a1": 1, "a2": 1}
    assert cluster.api.groups.released(KEY) == ""
    single = cluster.filter(single_pod("s"), ["a2", "b0"])
    assert single["NodeNames"] == ["b0"] and "GPUsTakenByBoundPods" in failures(single)["a2"]
