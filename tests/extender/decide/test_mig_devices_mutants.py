"""Rules of MIG devices (decide/mig_devices.py) that mutation testing found no test holding: a node
whose agent cannot read NVML fails NvmlUnavailable; each requested profile needs at least its count
of instances, then of free ones (exactly the count passes, one fewer or a missing profile fails); a
pod asking no MIG device passes every node; fresh data is judged, stale data fails only under
fail-closed, a node with no data is assumed; the no-fit policy is the policy's. Each test fails on a
one-line change to the module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.mig_devices import filter_mig, mig_reason
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_summary import NodeSummary

NOW = 100.0
ONE = (("1g", 1),)
TWO = (("1g", 2),)


@dataclass
class Summary:
    """The fields of a NodeSummary the MIG rules read."""

    mig_instances: tuple[tuple[str, int], ...] = ()
    mig_free: tuple[tuple[str, int], ...] = ()
    node_error: str = ""
    received_at: float = NOW


def summary(instances: int, free: int, node_error: str = "", received_at: float = NOW) -> NodeSummary:
    return cast(NodeSummary, Summary((("1g", instances),), (("1g", free),), node_error, received_at))


def test_a_node_whose_agent_cannot_read_nvml_fails_nvml_unavailable() -> None:
    assert mig_reason(summary(2, 2, node_error="nvml"), ONE) is reasons.NVML_UNAVAILABLE


def test_exactly_the_count_of_free_instances_fits() -> None:
    assert mig_reason(summary(2, 2), TWO) is None


def test_one_instance_fewer_than_the_count_fails_insufficient_mig_devices() -> None:
    assert mig_reason(summary(1, 1), TWO) is reasons.INSUFFICIENT_MIG_DEVICES


def test_one_free_instance_fewer_than_the_count_fails_insufficient_free_mig_devices() -> None:
    assert mig_reason(summary(2, 1), TWO) is reasons.INSUFFICIENT_FREE_MIG_DEVICES


def test_a_profile_the_node_lacks_fails_even_for_one_device() -> None:
    none = cast(NodeSummary, Summary())
    assert mig_reason(none, ONE) is reasons.INSUFFICIENT_MIG_DEVICES
    not_free = cast(NodeSummary, Summary(mig_instances=(("1g", 1),)))
    assert mig_reason(not_free, ONE) is reasons.INSUFFICIENT_FREE_MIG_DEVICES


def test_every_requested_profile_must_fit_not_only_the_first() -> None:
    two_profiles = (("1g", 1), ("3g", 1))
    no_3g = cast(NodeSummary, Summary((("1g", 1),), (("1g", 1),)))
    assert mig_reason(no_3g, two_profiles) is reasons.INSUFFICIENT_MIG_DEVICES
    no_free_3g = cast(NodeSummary, Summary((("1g", 1), ("3g", 1)), (("1g", 1),)))
    assert mig_reason(no_free_3g, two_profiles) is reasons.INSUFFICIENT_FREE_MIG_DEVICES


def test_a_pod_asking_no_mig_device_passes_every_node_without_looking() -> None:
    names = ["a", "b"]
    out = filter_mig((), names, lambda n: None, NOW, DecisionPolicy(stale_policy="fail-closed"))
    assert out.passed == ["a", "b"] and out.passed is not names
    assert out.failed == {} and out.assumed == [] and not out.fallback


def test_fresh_nodes_are_judged_each_on_its_data() -> None:
    data = {"fits": summary(1, 1), "busy": summary(1, 0)}
    out = filter_mig(ONE, ["fits", "busy"], data.get, NOW, DecisionPolicy())
    assert out.passed == ["fits"] and out.failed == {"busy": reasons.INSUFFICIENT_FREE_MIG_DEVICES}
    assert out.assumed == [] and not out.fallback


def test_data_exactly_stale_after_old_is_fresh_and_older_is_stale() -> None:
    policy = DecisionPolicy(stale_after_s=10.0, stale_policy="fail-closed")
    data = {"edge": summary(1, 1, received_at=NOW - 10.0), "old": summary(1, 1, received_at=NOW - 10.5)}
    out = filter_mig(ONE, ["edge", "old"], data.get, NOW, policy)
    assert out.passed == ["edge"] and out.failed == {"old": reasons.STALE_GPU_DATA}


def test_stale_data_fails_under_fail_closed_and_a_node_without_data_is_assumed() -> None:
    data = {"old": summary(1, 1, received_at=0.0)}
    out = filter_mig(ONE, ["old", "none"], data.get, NOW, DecisionPolicy(stale_policy="fail-closed"))
    assert out.passed == ["none"] and out.assumed == ["none"]
    assert out.failed == {"old": reasons.STALE_GPU_DATA}


def test_stale_data_is_assumed_under_fail_open() -> None:
    data = {"old": summary(0, 0, received_at=0.0)}
    out = filter_mig(ONE, ["old"], data.get, NOW, DecisionPolicy(stale_policy="fail-open"))
    assert out.passed == ["old"] and out.assumed == ["old"] and out.failed == {}


def test_the_no_fit_policy_is_the_policys() -> None:
    data = {"busy": summary(1, 0)}
    out = filter_mig(ONE, ["busy"], data.get, NOW, DecisionPolicy(no_fit_policy="reject"))
    assert out.passed == [] and not out.fallback
    out = filter_mig(ONE, ["busy"], data.get, NOW, DecisionPolicy(no_fit_policy="pass-all"))
    assert out.passed == ["busy"] and out.fallback
