"""Rules of the bound-pod arithmetic (state/bound_pods.py) that mutation testing (mutmut) found no
test holding; each test fails on a one-line change to the module: pending pods' MIG devices add up
per profile; pending pods asking for nothing leave the summary itself; what a node offers (idle,
degraded, free MIG devices, allocatable less bound) goes down to exactly 0, never below, profiles no
pending pod asks for untouched, and its quality table follows; and `given_back` raises or lowers
idle and free units to exactly 0, never above what the agent reported (free only where both know
it), takes the degraded count from the report, and lowers the bound-pod units to exactly 0."""

from __future__ import annotations

import dataclasses

from gpuextender.extender.state.bound_pods import AllocatableLessBound, Pending, given_back, offered, pending
from gpuextender.extender.state.gpu_summary import NodeSummary, quality_table
from gpuextender.extender.state.pod_ledger import BoundPod
from tests.extender.builders import node


def bound(name: str, gpus: int = 0, mig: tuple[tuple[str, int], ...] = ()) -> BoundPod:
    return BoundPod(f"uid-{name}", f"ml/{name}", "n", gpus, mig, "Pending", 0.0)


def summary(idle: int = 4, **fields: object) -> NodeSummary:
    return dataclasses.replace(node("n", idle), **fields)  # type: ignore[arg-type]


def test_pending_mig_devices_add_up_per_profile() -> None:
    p = pending(None, [bound("a", mig=(("1g.10gb", 1),)), bound("b", mig=(("1g.10gb", 2), ("2g.20gb", 1)))])
    assert p.mig == {"1g.10gb": 3, "2g.20gb": 1}


def test_pending_pods_asking_for_nothing_leave_the_summary_itself() -> None:
    s = summary(degraded_idle_gpus=2, bound_pod_units=1)
    assert offered(s, Pending((bound("a"),), 0, {})) is s


def test_offered_mig_devices_go_to_exactly_zero_and_other_profiles_stay() -> None:
    s = summary(mig_free=(("1g.10gb", 2), ("2g.20gb", 3), ("3g.40gb", 1)))
    out = offered(s, Pending((bound("a"),), 0, {"1g.10gb": 2, "3g.40gb": 2}))
    assert out.mig_free == (("1g.10gb", 0), ("2g.20gb", 3), ("3g.40gb", 0))


def test_offered_degraded_units_are_at_most_the_idle_ones_and_the_quality_follows() -> None:
    s = summary(4, degraded_idle_gpus=2)
    out = offered(s, Pending((bound("a"),), 3, {}))
    assert (out.idle_gpus, out.degraded_idle_gpus, out.bound_pod_units) == (1, 1, 3)
    assert out.quality == quality_table(1, 1, s.set_tiers) != s.quality


def test_allocatable_less_bound_goes_to_exactly_zero() -> None:
    pods = {"a": [bound("x", 2)], "b": [bound("y", 3)]}
    less = AllocatableLessBound({"a": 2, "b": 2, "c": 5}, lambda n: pods.get(n, []))
    assert (less["a"], less["b"], less["c"]) == (0, 0, 5)
    assert list(less) == ["a", "b", "c"] and len(less) == 3


def test_given_back_idle_and_free_go_to_exactly_zero() -> None:
    out = given_back(summary(2, free_gpus=3, bound_pod_units=2), None, -2)
    assert (out.idle_gpus, out.free_gpus, out.bound_pod_units) == (0, 1, 4)
    out = given_back(summary(2, free_gpus=2, bound_pod_units=2), None, 2)
    assert (out.idle_gpus, out.free_gpus, out.bound_pod_units) == (4, 4, 0)
    out = given_back(summary(2, free_gpus=2), None, -3)
    assert (out.idle_gpus, out.free_gpus) == (0, 0)


def test_given_back_never_above_what_the_agent_reported() -> None:
    reported = summary(3, free_gpus=4, degraded_idle_gpus=2)
    out = given_back(summary(1, free_gpus=1, degraded_idle_gpus=0), reported, 5)
    assert (out.idle_gpus, out.free_gpus, out.degraded_idle_gpus) == (3, 4, 2)


def test_given_back_free_stays_unknown_and_is_not_clamped_by_an_unknown_report() -> None:
    out = given_back(summary(1), summary(3, free_gpus=4), 1)
    assert out.free_gpus is None
    out = given_back(summary(1, free_gpus=1), summary(3), 1)
    assert out.free_gpus == 2


def test_given_back_without_a_report_keeps_the_summarys_degraded_units() -> None:
    out = given_back(summary(2, degraded_idle_gpus=1), None, 1)
    assert (out.idle_gpus, out.degraded_idle_gpus) == (3, 1)
