"""The report gate (issue 13): a report when something an extender decides with changed, a
heartbeat otherwise; every sample while an extender has not said its rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuextender.agent.report.gate import ExtenderRule, ReportGate, decision_key, rule_from_ack
from gpuextender.common.idle_rule import IdleRule
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import GIB, gpu, report

RULE = ExtenderRule(30.0, 50.0, 30.0)  # heartbeat from the TTL: 10 s
THRESHOLDS = (IdleRule(30.0, 50.0, None),)  # an extender with the SM rule off (or before 0.5)


def base() -> pb.NodeReport:
    r = report("n", [gpu(0, 10, 10), gpu(1, 90, 80)])
    r.allocation_source = pb.ALLOCATION_KUBELET
    return r


def edited(edit: Callable[[pb.NodeReport], object]) -> pb.NodeReport:
    r = base()
    edit(r)
    return r


def used(percent: float) -> int:
    return int(80 * GIB * percent / 100)


MATTERS: list[tuple[str, Callable[[pb.NodeReport], object]]] = [
    ("node error", lambda r: setattr(r, "node_error", "DriverNotLoaded")),
    ("allocation source", lambda r: setattr(r, "allocation_source", pb.ALLOCATION_UNAVAILABLE)),
    ("allocation problem", lambda r: setattr(r, "allocation_problem", "socket_missing")),
    ("sharing label", lambda r: r.sharing_labels.update({"nvidia.com/gpu.replicas": "4"})),
    ("topology", lambda r: r.topology.links.add(a=0, b=1, nvlinks=12)),
    ("a GPU lost", lambda r: setattr(r.gpus[0], "healthy", False)),
    ("health state", lambda r: setattr(r.gpus[0], "health", pb.HEALTH_DEGRADED)),
    ("health reason", lambda r: r.gpus[0].health_reasons.append("ThermalSlowdown")),
    ("critical XID", lambda r: r.gpus[0].xids.add(xid=79)),
    ("holder", lambda r: r.gpus[0].holders.add(namespace="a", pod="p", container="c", device_id="GPU-0")),
    (
        "sharing",
        lambda r: (
            setattr(r.gpus[0].sharing, "mode", pb.SHARING_TIME_SLICING),
            setattr(r.gpus[0].sharing, "replicas", 4),
        ),
    ),
    ("idle -> busy by utilization", lambda r: setattr(r.gpus[0], "utilization_gpu_percent", 30)),
    ("idle -> busy by memory", lambda r: setattr(r.gpus[0], "memory_used_bytes", used(50))),
    (
        "busy -> idle",
        lambda r: (
            setattr(r.gpus[1], "utilization_gpu_percent", 29),
            setattr(r.gpus[1], "memory_used_bytes", used(49)),
        ),
    ),
    ("MIG instance", lambda r: r.gpus[0].mig_instances.add(uuid="MIG-1", profile="1g.10gb")),
    ("a GPU more", lambda r: r.gpus.add(index=2, uuid="GPU-2")),
]

DOES_NOT: list[tuple[str, Callable[[pb.NodeReport], object]]] = [
    ("sequence", lambda r: setattr(r, "sequence", 99)),
    ("sample time", lambda r: setattr(r.sample_time, "seconds", 2000)),
    ("utilization within idle", lambda r: setattr(r.gpus[0], "utilization_gpu_percent", 29)),  # the bound: 30
    ("memory within idle", lambda r: setattr(r.gpus[0], "memory_used_bytes", used(49))),
    ("utilization within busy", lambda r: setattr(r.gpus[1], "utilization_gpu_percent", 31)),
    ("temperature", lambda r: setattr(r.gpus[0], "temperature_celsius", 77)),
    ("power", lambda r: setattr(r.gpus[0], "power_watts", 612.5)),
    ("energy", lambda r: setattr(r.gpus[0], "energy_millijoules", 123456789)),
    ("clocks", lambda r: setattr(r.gpus[0], "sm_clock_mhz", 1410)),
    ("ECC corrected count", lambda r: setattr(r.gpus[0].errors, "ecc_corrected_volatile", 3)),
]


@pytest.mark.parametrize(("what", "edit"), MATTERS, ids=[m[0] for m in MATTERS])
def test_what_the_extender_decides_with_changes_the_key(what: str, edit: Callable[[pb.NodeReport], object]) -> None:
    assert decision_key(edited(edit), THRESHOLDS) != decision_key(base(), THRESHOLDS), what


@pytest.mark.parametrize(("what", "edit"), DOES_NOT, ids=[m[0] for m in DOES_NOT])
def test_readings_that_decide_nothing_leave_the_key(what: str, edit: Callable[[pb.NodeReport], object]) -> None:
    assert decision_key(edited(edit), THRESHOLDS) == decision_key(base(), THRESHOLDS), what


def test_each_extenders_rule_is_watched() -> None:
    """Two extenders with different idle rules: crossing either one's threshold matters."""
    r = edited(lambda r: setattr(r.gpus[0], "utilization_gpu_percent", 20))  # idle at 30, busy at 15
    assert decision_key(r, THRESHOLDS) == decision_key(base(), THRESHOLDS)
    both = (IdleRule(15.0, 50.0, None), IdleRule(30.0, 50.0, None))
    assert decision_key(r, both) != decision_key(base(), both)


def test_every_sample_until_every_extender_said_its_rule() -> None:
    gate = ReportGate(heartbeat_s=3.0)
    assert gate.heartbeat() is None and gate.admit(base(), 0.0) and gate.admit(base(), 0.1)  # nobody said anything
    gate.learn("new", RULE)
    gate.learn("old", None)  # an extender before 0.3
    assert gate.heartbeat() is None and gate.admit(base(), 0.2)
    gate.forget("old")  # its address went away
    assert gate.heartbeat() == 3.0
    assert gate.admit(base(), 0.3) is True  # the first gated sample: the baseline to compare with
    assert gate.admit(base(), 0.4) is False  # unchanged, heartbeat not due


def test_the_heartbeat_is_exact_and_a_third_of_the_shortest_ttl_at_most() -> None:
    gate = ReportGate(heartbeat_s=3.0)
    gate.learn("a", RULE)
    assert gate.admit(base(), 10.0)  # first: sent
    assert gate.admit(base(), 12.999) is False
    assert gate.admit(base(), 13.0) is True  # exactly one heartbeat later
    gate.learn("b", ExtenderRule(30.0, 50.0, 6.0))  # stale after 6 s: heartbeat 2 s
    assert gate.heartbeat() == 2.0
    assert gate.admit(base(), 14.999) is False and gate.admit(base(), 15.0) is True
    gate.learn("b", ExtenderRule(30.0, 50.0, 0.0))  # TTL not said: the flag alone
    assert gate.heartbeat() == 3.0


def test_a_change_is_sent_at_once_and_only_once() -> None:
    gate = ReportGate(heartbeat_s=3.0)
    gate.learn("a", RULE)
    assert gate.admit(base(), 0.0)
    lost = edited(lambda r: setattr(r.gpus[0], "healthy", False))
    assert gate.admit(lost, 0.1) is True
    assert gate.admit(lost, 0.2) is False
    assert gate.admit(base(), 0.3) is True  # back: a change again


def test_zero_heartbeat_turns_the_gate_off() -> None:
    gate = ReportGate(heartbeat_s=0.0)
    gate.learn("a", RULE)
    assert gate.heartbeat() is None and all(gate.admit(base(), t) for t in (0.0, 0.1, 0.2))


def test_the_rule_comes_from_the_ack() -> None:
    ack = pb.ReportAck(
        sequence=1,
        status=pb.ReportAck.ACCEPTED,
        idle_max_utilization_percent=25,
        idle_max_memory_used_percent=40,
        stale_after_ms=10_000,
    )
    assert rule_from_ack(ack) == ExtenderRule(25.0, 40.0, 10.0)
    assert rule_from_ack(pb.ReportAck(sequence=1, status=pb.ReportAck.ACCEPTED)) is None  # an extender before 0.3


def test_the_sm_activity_rule_is_learnt_from_the_ack_and_watched() -> None:
    ack = pb.ReportAck(
        sequence=1,
        status=pb.ReportAck.ACCEPTED,
        idle_max_utilization_percent=30.0,
        idle_max_memory_used_percent=50.0,
        idle_max_sm_active_percent=10.0,
    )
    assert rule_from_ack(ack) == ExtenderRule(30.0, 50.0, 0.0, 10.0)
    ack.ClearField("idle_max_sm_active_percent")
    assert rule_from_ack(ack) == ExtenderRule(30.0, 50.0, 0.0, None)  # off, or an extender before 0.5
    # GPU 0 (utilization 10) crossing 10 % SM active matters under the SM rule, not under utilization's.
    sm_rule = (IdleRule(30.0, 50.0, 10.0),)

    def sm(value: float) -> Callable[[pb.NodeReport], object]:
        return lambda r: setattr(r.gpus[0].gpm, "sm_active_percent", value)

    assert decision_key(edited(sm(9.5)), sm_rule) != decision_key(edited(sm(10.0)), sm_rule)
    assert decision_key(edited(sm(1.0)), sm_rule) == decision_key(edited(sm(9.5)), sm_rule)
    assert decision_key(edited(sm(9.5)), THRESHOLDS) == decision_key(edited(sm(10.0)), THRESHOLDS)


def test_epochs_mark_runs_of_equal_keys_and_heartbeats_repeat_them() -> None:
    """A report admitted for its key starts an epoch; a heartbeat (key unchanged) repeats it: only
    such a report may go light (report/light.py) where the epoch's full report went."""
    gate = ReportGate(heartbeat_s=3.0)
    gate.learn("a", RULE)
    seen = []
    for at, r in ((0.0, base()), (3.0, base()), (3.1, edited(lambda r: setattr(r.gpus[0], "healthy", False)))):
        assert gate.admit(r, at)
        seen.append((gate.epoch, gate.repeats))
    assert gate.admit(base(), 3.2) and (gate.epoch, gate.repeats) == (3, False)  # back: a change again
    assert seen == [(1, False), (1, True), (2, False)]


def test_with_the_gate_off_every_report_is_its_own_epoch() -> None:
    gate = ReportGate(heartbeat_s=3.0)  # no extender said its rule: every sample, none repeats
    for at in (0.0, 3.0, 6.0):
        assert gate.admit(base(), at) and not gate.repeats
    assert gate.epoch == 3
