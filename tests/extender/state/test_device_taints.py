"""Agent health as DRA device taints (state/device_taints.py, state/gpu_health.py; issue 25): which
rules are wanted, their names and values, and the hold that keeps one bad sample from tainting.
The writer and the allocator honouring the rules: tests/kube/test_device_taints.py."""

from __future__ import annotations

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.model.dra import parse_device_class, parse_resource_slice
from gpuextender.extender.state.device_taints import (
    MAX_NAME_CHARS,
    NAME_PREFIX,
    Hysteresis,
    TaintRule,
    rule_name,
    wanted_taints,
)
from gpuextender.extender.state.dra_inventory import build_dra
from gpuextender.extender.state.gpu_health import MAX_VALUE_CHARS, problem_of
from gpuextender.extender.state.gpu_summary import summarize
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.dra_objects import device_class, gpu_slice

NODE = "dra-1"


def sick(index: int, *reasons: str, xid: int | None = None, degraded: bool = False) -> pb.GpuSample:
    g = gpu(index, 0, 1)
    g.uuid = f"GPU-agent-{index}"
    g.health = pb.HEALTH_DEGRADED if degraded else pb.HEALTH_UNHEALTHY
    g.healthy = degraded
    g.health_reasons.extend(reasons)
    if xid is not None:
        g.xids.add(xid=xid)
    return g


def fine(index: int) -> pb.GpuSample:
    g = gpu(index, 0, 1)
    g.uuid = f"GPU-agent-{index}"
    return g


def wanted(gpus: list[pb.GpuSample], *, devices: int = 4) -> dict[str, TaintRule]:
    inventory = build_dra(
        [parse_resource_slice(gpu_slice(NODE, devices, uuid_of=lambda m: f"GPU-agent-{m}"))],
        [parse_device_class(device_class())],
        ("nvidia.com/gpu",),
    )
    summaries = {NODE: summarize(report(NODE, gpus), IdleRule(), 0.0)}
    return wanted_taints(inventory, summaries.get)


def test_an_unhealthy_gpu_is_tainted_noschedule_and_a_degraded_one_none() -> None:
    rules = wanted([sick(0, "XidCritical", xid=79), sick(1, "ThermalSlowdown", degraded=True), fine(2), fine(3)])
    assert rules == {
        f"gpu-extender.{NODE}.gpu-0": TaintRule(
            f"gpu-extender.{NODE}.gpu-0",
            "gpu.nvidia.com",
            NODE,
            "gpu-0",
            "gpu-extender.io/unhealthy",
            "xid-79",
            "NoSchedule",
        ),
        f"gpu-extender.{NODE}.gpu-1": TaintRule(
            f"gpu-extender.{NODE}.gpu-1",
            "gpu.nvidia.com",
            NODE,
            "gpu-1",
            "gpu-extender.io/degraded",
            "thermal-slowdown",
            "None",
        ),
    }
    assert wanted([fine(i) for i in range(4)]) == {}  # a healthy node: no rule at all


def test_a_gpu_that_joins_no_device_is_not_tainted() -> None:
    # The slice publishes gpu-0..1 only: the agent's bad GPU 3 is no DRA device here.
    assert wanted([fine(0), fine(1), fine(2), sick(3, "GpuIsLost")], devices=2) == {}


@pytest.mark.parametrize(
    ("reasons", "xid", "value"),
    [
        (("XidCritical",), 79, "xid-79"),
        (("XidCritical",), None, "xid-critical"),
        (("GpuIsLost",), None, "gpu-is-lost"),
        (("EccUncorrected", "ThermalSlowdown"), None, "ecc-uncorrected"),
        (("RowRemapFailure",), None, "row-remap-failure"),
        ((), None, "unknown"),
        (("Weird Reason!!",), None, "weird-reason"),
    ],
)
def test_the_taint_value_says_why_as_a_label_value(reasons: tuple[str, ...], xid: int | None, value: str) -> None:
    assert problem_of(sick(0, *reasons, xid=xid)) == value


def test_a_value_is_cut_at_a_label_values_bound() -> None:
    long = problem_of(sick(0, "A" * 200))
    assert len(long) == MAX_VALUE_CHARS == 63
    # An agent before 0.2 sends unhealthy_reasons only.
    old = gpu(0, 0, 1, healthy=False)
    assert problem_of(old) == "gpu-is-lost"


def test_rule_names_are_readable_up_to_a_dns_subdomain_and_a_digest_past_it() -> None:
    assert rule_name("n1", "gpu-3") == "gpu-extender.n1.gpu-3"
    room = MAX_NAME_CHARS - len(NAME_PREFIX) - len(".gpu-3")
    at = rule_name("n" * room, "gpu-3")
    assert len(at) == MAX_NAME_CHARS and at.endswith(".gpu-3")
    over = rule_name("n" * (room + 1), "gpu-3")
    assert over.startswith(NAME_PREFIX) and len(over) < MAX_NAME_CHARS and "nnn" not in over
    assert over == rule_name("n" * (room + 1), "gpu-3") != rule_name("n" * (room + 1), "gpu-4")


@pytest.mark.parametrize(("after", "wanted_now"), [(2.999, False), (3.0, True)])
def test_a_rule_is_wanted_once_the_gpu_was_bad_for_the_hold_and_goes_at_once(after: float, wanted_now: bool) -> None:
    rule = TaintRule("r", "gpu.nvidia.com", "n", "gpu-0", "gpu-extender.io/unhealthy", "xid-79", "NoSchedule")
    hold = Hysteresis[TaintRule](3.0, 0.0)
    assert hold.settle({"r": rule}, 100.0) == {}  # one bad sample: nothing yet
    assert (hold.settle({"r": rule}, 100.0 + after) == {"r": rule}) is wanted_now
    assert hold.settle({}, 104.0) == {}  # healthy again: gone at once
    assert hold.settle({"r": rule}, 104.5) == {}  # bad again: the hold starts over


def test_device_taint_flags() -> None:
    config = build_config(["--kubernetes", "--device-taint-after", "0"], env={})
    assert (config.device_taints, config.device_taint_after_s, config.leader_namespace) == ("on", 0.0, "gpu-extender")
    assert build_config(["--kubernetes"], env={"POD_NAMESPACE": "gpu-system"}).leader_namespace == "gpu-system"
    assert build_config([], env={}).device_taints == "off"  # no API server to write to
    assert build_config(["--kubernetes", "--device-taints", "off"], env={}).device_taints == "off"
    assert build_config(["--kubernetes", "--device-taint-after", "3600"], env={}).device_taint_after_s == 3600
    for bad in ("-0.001", "3600.001", "nan"):
        with pytest.raises(ConfigError, match="--device-taint-after"):
            build_config(["--kubernetes", "--device-taint-after", bad], env={})
    assert build_config(["--kubernetes"], env={}).device_taint_clear_after_s == 60.0
    for hold in ("0", "3600"):
        config = build_config(["--kubernetes", "--device-taint-clear-after", hold], env={})
        assert config.device_taint_clear_after_s == float(hold)
    for bad in ("-0.001", "3600.001", "nan"):
        with pytest.raises(ConfigError, match="--device-taint-clear-after"):
            build_config(["--kubernetes", "--device-taint-clear-after", bad], env={})


def test_publish_flags_defaults_and_bounds() -> None:
    publish = build_config(["--kubernetes"], env={}).publish
    assert (publish.busy_taints, publish.busy_hold_s, publish.node_conditions, publish.node_taint) == (
        True,
        60.0,
        True,
        False,
    )
    assert (publish.node_taint_key, publish.node_taint_effect, publish.writes_per_s) == (
        "gpu-extender.io/no-usable-gpu",
        "NoSchedule",
        20.0,
    )
    on = build_config(
        ["--kubernetes", "--node-taint", "on", "--node-taint-key", "example.com/gpus-gone", "--busy-taints", "off"],
        env={},
    ).publish
    assert (on.node_taint, on.node_taint_key, on.busy_taints) == (True, "example.com/gpus-gone", False)
    for hold in ("1", "3600"):
        assert build_config(["--kubernetes", "--busy-hold", hold], env={}).publish.busy_hold_s == float(hold)
    for bad in ("0.999", "3600.001", "nan"):
        with pytest.raises(ConfigError, match="--busy-hold"):
            build_config(["--kubernetes", "--busy-hold", bad], env={})
    assert build_config(["--kubernetes", "--publish-writes-per-second", "1000"], env={}).publish.writes_per_s == 1000
    for bad in ("0", "1000.001", "nan", "-1"):
        with pytest.raises(ConfigError, match="--publish-writes-per-second"):
            build_config(["--kubernetes", "--publish-writes-per-second", bad], env={})
    assert build_config(["--kubernetes", "--node-taint-key", "a" * 63], env={}).publish.node_taint_key == "a" * 63
    for bad in ("a" * 64, "Bad Key", "/x", "x/", "-x", "example.com/"):
        with pytest.raises(ConfigError, match="--node-taint-key"):
            build_config(["--kubernetes", f"--node-taint-key={bad}"], env={})
    with pytest.raises(SystemExit):
        build_config(["--kubernetes", "--node-taint-effect", "NoExecute"], env={})


def test_idle_window_flag_bounds() -> None:
    publish = build_config(["--kubernetes"], env={}).publish
    assert (publish.idle_window_s, publish.idle_events) == (1800.0, True)
    for ok in ("10", "604800"):
        assert build_config(["--kubernetes", "--idle-window", ok], env={}).publish.idle_window_s == float(ok)
    for bad in ("9.999", "604800.001", "nan"):
        with pytest.raises(ConfigError, match="--idle-window"):
            build_config(["--kubernetes", "--idle-window", bad], env={})
    assert build_config(["--kubernetes", "--idle-events", "off"], env={}).publish.idle_events is False
