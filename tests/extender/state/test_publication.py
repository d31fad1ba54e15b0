"""Issue 35, the pure part: GPUs busy outside Kubernetes as DRA device taints, device-plugin nodes'
GPUsUsable condition and taint, and the holds that keep a flapping GPU from writing (fake clock).
The writers on the real API server: tests/kube/test_publish.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.dra import parse_device_class, parse_resource_slice
from gpuextender.extender.model.kube_objects import RESOURCE_CLAIM
from gpuextender.extender.state.claim_ledger import ClaimLedger
from gpuextender.extender.state.device_taints import (
    BUSY_KEY,
    BUSY_PREFIX,
    BUSY_VALUE,
    NO_SCHEDULE,
    UNHEALTHY_KEY,
    Hysteresis,
    TaintRule,
    busy_taints,
    rule_name,
)
from gpuextender.extender.state.dra_inventory import DraInventory, build_dra
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.extender.state.node_gpu_status import CONDITION_TYPE, marks, node_status
from gpuextender.extender.state.publication import RECLAIM_EVERY_S, Publication, PublishInputs
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.dra_objects import allocated_claim, device_class, gpu_slice

DRA_NODE, DP_NODE = "dra-1", "dp-1"
HOLD = 60.0


def sample(index: int, *, busy: bool = False, healthy: bool = True) -> pb.GpuSample:
    g = gpu(index, 90 if busy else 0, 80 if busy else 1, healthy=healthy)
    g.uuid = f"GPU-{index}"
    if not healthy:
        g.health = pb.HEALTH_UNHEALTHY
        g.health_reasons.append("XidCritical")
        g.xids.add(xid=79)
    return g


def summary(
    node: str, busy: tuple[int, ...] = (), sick: tuple[int, ...] = (), *, gpus: int = 4, held: tuple[int, ...] = ()
) -> NodeSummary:
    """`held`: GPUs a container holds per the kubelet (allocation known); else allocation unknown."""
    r = report(node, [sample(i, busy=i in busy, healthy=i not in sick) for i in range(gpus)])
    if held or node == DP_NODE:
        r.allocation_source = pb.ALLOCATION_KUBELET
        for i in held:
            r.gpus[i].holders.add(namespace="team", pod=f"p{i}", container="c", device_id=f"GPU-{i}")
    return summarize(r, IdleRule(), 0.0)


def dra(gpus: int = 4) -> DraInventory:
    return build_dra(
        [parse_resource_slice(gpu_slice(DRA_NODE, gpus, uuid_of=lambda m: f"GPU-{m}"))],
        [parse_device_class(device_class())],
        ("nvidia.com/gpu",),
    )


def claims(*held: str) -> ClaimLedger:
    ledger = ClaimLedger()
    ledger.replace_all(RESOURCE_CLAIM.kind, [allocated_claim("c", DRA_NODE, list(held))] if held else [])
    return ledger


def busy_rule(device: str) -> TaintRule:
    name = rule_name(DRA_NODE, device, BUSY_PREFIX)
    return TaintRule(name, "gpu.nvidia.com", DRA_NODE, device, BUSY_KEY, BUSY_VALUE, NO_SCHEDULE)


# -- which DRA GPUs are busy outside Kubernetes --------------------------------------------------


def test_a_busy_gpu_no_claim_holds_gets_a_busy_rule_of_its_own_name() -> None:
    s = summary(DRA_NODE, busy=(1, 2))
    rules = busy_taints(dra(), {DRA_NODE: s}.get, claims().allocated_on)
    assert rules == {busy_rule("gpu-1").name: busy_rule("gpu-1"), busy_rule("gpu-2").name: busy_rule("gpu-2")}
    assert busy_rule("gpu-1").name == f"gpu-extender-busy.{DRA_NODE}.gpu-1"


def test_a_device_an_allocated_claim_holds_is_never_tainted_for_being_busy() -> None:
    s = summary(DRA_NODE, busy=(1, 2))
    assert set(busy_taints(dra(), {DRA_NODE: s}.get, claims("gpu-1").allocated_on)) == {busy_rule("gpu-2").name}


def test_claims_not_listed_yet_mean_holders_unknown_and_no_busy_rule() -> None:
    s = summary(DRA_NODE, busy=(0, 1, 2, 3))
    assert busy_taints(dra(), {DRA_NODE: s}.get, None) == {}


def test_a_gpu_a_container_holds_per_the_kubelet_is_not_busy_outside_kubernetes() -> None:
    s = summary(DRA_NODE, busy=(1, 2), held=(1,))
    assert set(busy_taints(dra(), {DRA_NODE: s}.get, claims().allocated_on)) == {busy_rule("gpu-2").name}


def test_idle_unhealthy_and_unknown_gpus_get_no_busy_rule() -> None:
    s = summary(DRA_NODE, busy=(), sick=(0,))
    assert busy_taints(dra(), {DRA_NODE: s}.get, claims().allocated_on) == {}
    assert busy_taints(dra(), {}.get, claims().allocated_on) == {}  # no agent data: unknown, not busy
    broken = summarize(
        report(DRA_NODE, [sample(0, busy=True)], node_error="NVML_ERROR_DRIVER_NOT_LOADED"), IdleRule(), 0
    )
    assert busy_taints(dra(), {DRA_NODE: broken}.get, claims().allocated_on) == {}


# -- the holds -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("after", "stands"), [(HOLD - 0.001, False), (HOLD, True)])
def test_a_busy_rule_stands_after_exactly_the_hold_and_goes_after_exactly_the_hold(after: float, stands: bool) -> None:
    hold = Hysteresis[str](HOLD, HOLD)
    assert hold.settle({"r": "busy"}, 0.0) == {}
    assert ("r" in hold.settle({"r": "busy"}, after)) is stands
    hold.settle({"r": "busy"}, HOLD)  # stands now
    assert hold.settle({}, 100.0) == {"r": "busy"}  # idle: the hold starts
    assert ("r" in hold.settle({}, 100.0 + after)) is not stands


def test_a_gpu_toggling_every_10_s_never_changes_what_stands() -> None:
    off, on = Hysteresis[str](HOLD, HOLD), Hysteresis[str](HOLD, HOLD)
    on.adopt({"r": "busy"})
    changes = {"off": 0, "on": 0}
    before = {"off": False, "on": True}
    for tick in range(0, 3600 * 2):  # two ticks a second for an hour, busy 10 s then idle 10 s
        now = tick / 2
        asked = {"r": "busy"} if int(now // 10) % 2 == 0 else {}
        for name, h in (("off", off), ("on", on)):
            stands = "r" in h.settle(asked, now)
            changes[name] += stands != before[name]
            before[name] = stands
    assert changes == {"off": 0, "on": 0}


def test_a_new_value_replaces_a_standing_one_at_once() -> None:
    hold = Hysteresis[str](3.0, 0.0)
    hold.settle({"r": "degraded"}, 0.0)
    assert hold.settle({"r": "degraded"}, 3.0) == {"r": "degraded"}
    assert hold.settle({"r": "unhealthy"}, 3.5) == {"r": "unhealthy"}
    assert hold.pending("r") is None


def test_pending_says_since_when_a_name_disagrees() -> None:
    hold = Hysteresis[str](HOLD, HOLD)
    hold.settle({"r": "busy"}, 5.0)
    assert hold.pending("r") == 5.0
    hold.settle({}, 6.0)
    assert hold.pending("r") is None


# -- device-plugin nodes -------------------------------------------------------------------------


def test_marks_count_unhealthy_and_busy_unheld_gpus_only_where_holders_are_known() -> None:
    s = summary(DP_NODE, busy=(1, 2), sick=(0,), held=(2,))
    assert marks(DP_NODE, s) == ([f"{DP_NODE}/0"], [f"{DP_NODE}/1"])
    unknown = summarize(report(DP_NODE, [sample(0, busy=True)]), IdleRule(), 0.0)  # no kubelet
    assert marks(DP_NODE, unknown) == ([], [])
    assert marks(DP_NODE, None) == ([], [])


@pytest.mark.parametrize(
    ("unhealthy", "busy", "status", "taint"),
    [(0, 0, "True", False), (3, 0, "True", False), (2, 1, "True", False), (4, 0, "False", True), (2, 2, "False", True)],
)
def test_the_condition_is_false_and_the_taint_wanted_only_when_no_gpu_is_usable(
    unhealthy: int, busy: int, status: str, taint: bool
) -> None:
    got = node_status(summary(DP_NODE), unhealthy, busy, HOLD)
    assert (got.status, got.no_usable_gpu) == (status, taint)
    assert got.message.startswith(f"{4 - unhealthy - busy} of 4 GPUs usable")
    assert ("unhealthy" in got.message) is bool(unhealthy)
    assert ("busy outside Kubernetes for over 60s" in got.message) is bool(busy)


def test_without_agent_data_the_condition_is_unknown_never_a_taint() -> None:
    for got in (
        node_status(None, 0, 0, HOLD),
        node_status(summarize(report(DP_NODE, [], node_error="NVML_ERROR_UNINITIALIZED"), IdleRule(), 0), 0, 0, HOLD),
        node_status(summarize(report(DP_NODE, []), IdleRule(), 0), 0, 0, HOLD),
    ):
        assert (got.status, got.no_usable_gpu) == ("Unknown", False)
    assert CONDITION_TYPE == "GPUsUsable"


# -- the whole publication, on a fake clock ------------------------------------------------------


class World:
    def __init__(self) -> None:
        self.dra_busy: tuple[int, ...] = ()
        self.dra_sick: tuple[int, ...] = ()
        self.dp_busy: tuple[int, ...] = ()
        self.dp_sick: tuple[int, ...] = ()
        self.ledger = claims()

    def inputs(self) -> PublishInputs:
        summaries = {
            DRA_NODE: summary(DRA_NODE, busy=self.dra_busy, sick=self.dra_sick),
            DP_NODE: summary(DP_NODE, busy=self.dp_busy, sick=self.dp_sick),
        }
        ledger = self.ledger
        return PublishInputs(
            dra(), {DP_NODE: 4, DRA_NODE: 0}, summaries.get, ledger.allocated_on, claims_version_of=ledger.node_version
        )


def run(
    pub: Publication,
    world: World,
    start: float,
    end: float,
    change: Callable[[float], None],
    watch: Callable[[Publication], object] = lambda pub: dict(pub.rules),
) -> list[float]:
    """Ticks every 0.5 s from `start` to `end`; the times what `watch` reads (the rules) changed."""
    changed, before = [], watch(pub)
    t = start
    while t <= end:
        change(t)
        pub.update(world.inputs(), t)
        now = watch(pub)
        if now != before:
            changed.append(t)
        before = now
        t += 0.5
    return changed


def test_a_gpu_turning_busy_is_tainted_at_the_hold_and_untainted_at_the_hold_after_it_idles() -> None:
    world, pub = World(), Publication(3.0, HOLD)
    world.dra_busy = (1,)
    assert run(pub, world, 0.0, HOLD - 0.5, lambda t: None) == []
    assert run(pub, world, HOLD, HOLD + 10, lambda t: None) == [HOLD]
    assert set(pub.rules) == {busy_rule("gpu-1").name}
    world.dra_busy = ()
    assert run(pub, world, 100.0, 100.0 + HOLD, lambda t: None) == [100.0 + HOLD]
    assert pub.rules == {}


def test_a_claim_allocated_while_busy_removes_the_rule_after_the_hold_never_before() -> None:
    world, pub = World(), Publication(3.0, HOLD)
    world.dra_busy = (1,)
    run(pub, world, 0.0, HOLD, lambda t: None)
    # A pod got it (the allocator did not: an admin's claim, a race): the claims are listed anew.
    world.ledger.replace_all(RESOURCE_CLAIM.kind, [allocated_claim("c", DRA_NODE, ["gpu-1"])])
    assert busy_rule("gpu-1").name in pub.rules
    assert run(pub, world, 70.0, 70.0 + HOLD, lambda t: None) == [70.0 + HOLD]


def test_a_gpu_toggling_every_10_s_for_an_hour_publishes_nothing() -> None:
    world, pub = World(), Publication(3.0, HOLD)

    def toggle(t: float) -> None:
        world.dra_busy = world.dp_busy = (1,) if int(t // 10) % 2 == 0 else ()

    changes = run(pub, world, 0.0, 3600.0, toggle, lambda pub: (dict(pub.rules), dict(pub.nodes)))
    assert changes == [0.0]  # the device-plugin node's first condition only
    assert pub.rules == {} and pub.nodes[DP_NODE].message == "4 of 4 GPUs usable"


def test_a_device_plugin_node_with_every_gpu_unusable_wants_the_taint() -> None:
    world, pub = World(), Publication(3.0, HOLD)
    world.dp_sick, world.dp_busy = (0, 1), (2, 3)
    run(pub, world, 0.0, 2.5, lambda t: None)
    assert pub.nodes[DP_NODE].status == "True"  # neither hold has passed
    run(pub, world, 3.0, 3.0, lambda t: None)
    assert pub.nodes[DP_NODE].message.startswith("2 of 4 GPUs usable; 2 unhealthy")
    run(pub, world, 3.5, HOLD, lambda t: None)
    got = pub.nodes[DP_NODE]
    assert (got.status, got.reason, got.no_usable_gpu) == ("False", "NoUsableGPU", True)
    assert DRA_NODE not in pub.nodes  # its GPUs are DRA devices: rules, no condition


def test_busy_taints_off_publishes_health_only() -> None:
    world, pub = World(), Publication(3.0, HOLD, busy=False)
    world.dra_busy, world.dp_busy = (0, 1), (0, 1, 2, 3)
    run(pub, world, 0.0, 2 * HOLD, lambda t: None)
    assert pub.rules == {} and pub.nodes[DP_NODE].status == "True"


def test_a_new_leader_adopts_the_rules_it_finds() -> None:
    pub = Publication(3.0, HOLD)
    found = {busy_rule("gpu-1").name: busy_rule("gpu-1")}
    health = TaintRule(
        rule_name(DRA_NODE, "gpu-0"), "gpu.nvidia.com", DRA_NODE, "gpu-0", UNHEALTHY_KEY, "x", NO_SCHEDULE
    )
    pub.adopt({**found, health.name: health})
    assert set(pub.rules) == {busy_rule("gpu-1").name, health.name}
    world = World()
    world.dra_busy = (1,)
    pub.update(world.inputs(), 0.0)  # still busy: the adopted rule stands, no churn
    assert set(pub.rules) == {busy_rule("gpu-1").name}  # the GPU is healthy: the health rule goes at once


@pytest.mark.parametrize(("after", "said"), [(59.5, False), (60.0, True)])
def test_a_node_without_agent_data_is_unknown_only_after_the_start_grace(after: float, said: bool) -> None:
    pub = Publication(3.0, HOLD)
    silent = PublishInputs(dra(), {DP_NODE: 4}, {}.get, claims().allocated_on)
    pub.update(silent, 1000.0)
    assert pub.nodes == {}  # its agent may not have found this replica yet
    pub.update(silent, 1000.0 + after)
    assert (DP_NODE in pub.nodes) is said
    if said:
        assert (pub.nodes[DP_NODE].status, pub.nodes[DP_NODE].reason) == ("Unknown", "NoAgentData")


# -- the reclaim signal: held GPUs idle past the window ------------------------------------------

WINDOW = 1800.0


def reclaim_inputs(
    *, dp_held: tuple[int, ...], dp_busy: tuple[int, ...] = (), claim_busy: bool = False
) -> PublishInputs:
    ledger = claims("gpu-0", "gpu-1")
    summaries = {
        DRA_NODE: summary(DRA_NODE, busy=(1,) if claim_busy else ()),
        DP_NODE: summary(DP_NODE, busy=dp_busy, held=dp_held),
    }
    return PublishInputs(dra(), {DP_NODE: 4}, summaries.get, ledger.allocated_on, ledger.holders_on, stale_after_s=30.0)


@pytest.mark.parametrize(("after", "signalled"), [(WINDOW - 0.5, False), (WINDOW, True)])
def test_held_gpus_idle_for_exactly_the_window_are_the_signal(after: float, signalled: bool) -> None:
    pub = Publication(3.0, HOLD, idle_window_s=WINDOW, reclaim_every_s=0.0)
    inputs = reclaim_inputs(dp_held=(0, 2))
    for t in (0.0, after):
        pub.update(replace_received(inputs, t), t)
    assert (pub.idle_by_node == {DP_NODE: 2, DRA_NODE: 2}) is signalled
    assert (pub.idle_claims == {"default/c": 2}) is signalled
    if not signalled:
        assert pub.idle_by_node == {} and pub.idle_claims == {}


def test_one_busy_sample_starts_the_window_over_and_a_busy_gpu_of_a_claim_keeps_it_quiet() -> None:
    pub = Publication(3.0, HOLD, idle_window_s=WINDOW, reclaim_every_s=0.0)
    pub.update(replace_received(reclaim_inputs(dp_held=(0,)), 0.0), 0.0)
    pub.update(replace_received(reclaim_inputs(dp_held=(0,), dp_busy=(0,), claim_busy=True), 1000.0), 1000.0)
    pub.update(replace_received(reclaim_inputs(dp_held=(0,), claim_busy=True), 1001.0), 1001.0)
    pub.update(replace_received(reclaim_inputs(dp_held=(0,), claim_busy=True), WINDOW + 1.0), WINDOW + 1.0)
    # The device-plugin GPU was busy at 1000 s: its window runs from 1001 s. The claim's gpu-1 is busy:
    # the claim is no signal, its idle gpu-0 still counts on the node.
    assert pub.idle_by_node == {DRA_NODE: 1} and pub.idle_claims == {}
    pub.update(replace_received(reclaim_inputs(dp_held=(0,), claim_busy=True), 1001.0 + WINDOW), 1001.0 + WINDOW)
    assert pub.idle_by_node == {DRA_NODE: 1, DP_NODE: 1}


def test_stale_agent_data_is_unknown_never_idle() -> None:
    pub = Publication(3.0, HOLD, idle_window_s=WINDOW, reclaim_every_s=0.0)
    inputs = reclaim_inputs(dp_held=(0,))  # summaries received at 0 s, stale after 30 s
    pub.update(inputs, 0.0)
    pub.update(inputs, 30.0)  # at exactly --stale-after: still fresh
    assert pub.idle_by_node == {}  # not a window yet
    pub.update(inputs, 30.5)  # stale: the idle marks go, and the window with them
    pub.update(replace_received(inputs, WINDOW), WINDOW)
    assert pub.idle_by_node == {}


def replace_received(inputs: PublishInputs, at: float) -> PublishInputs:
    """The same summaries, received at `at` (fresh then)."""
    summaries = {n: dataclasses.replace(s, received_at=at) for n in (DRA_NODE, DP_NODE) if (s := inputs.summary_of(n))}
    return dataclasses.replace(inputs, summary_of=summaries.get)


@pytest.mark.parametrize(("after", "swept"), [(RECLAIM_EVERY_S - 0.001, False), (RECLAIM_EVERY_S, True)])
def test_data_gone_stale_leaves_the_reclaim_signal_at_the_next_sweep(after: float, swept: bool) -> None:
    """A report that changes a GPU's state is seen at once; data that goes stale without a report
    is swept out every RECLAIM_EVERY_S (a window of minutes loses nothing to a few seconds)."""
    pub = Publication(3.0, HOLD, idle_window_s=10.0)
    inputs = replace_received(reclaim_inputs(dp_held=(0,)), 10.0)  # the last reports: at 10 s
    pub.update(inputs, 0.0)
    pub.update(inputs, 10.0)
    assert pub.idle_by_node == {DP_NODE: 1, DRA_NODE: 2}
    pub.update(inputs, 40.0)  # 30 s old: --stale-after exactly, still fresh (a sweep: 30 s since the last)
    assert pub.idle_by_node == {DP_NODE: 1, DRA_NODE: 2}
    pub.update(inputs, 40.0 + after)  # stale now; seen at the sweep 5 s after the last
    assert (pub.idle_by_node == {}) is swept
    busy = replace_received(reclaim_inputs(dp_held=(0,), dp_busy=(0,), claim_busy=True), 50.0)
    pub.update(busy, 50.0)  # a new report: fresh, and its states are seen at once
    assert pub.idle_claims == {}  # one of the claim's GPUs is busy
    # gpu-0 of the claim stayed idle: standing still, unless the sweep had taken it out (unknown
    # then: its window starts over).
    assert pub.idle_by_node == ({} if swept else {DRA_NODE: 1})


# -- health's off-hold (issue 54: a GPU flapping health wrote on every toggle) --------------------

CLEAR = 60.0


def health_rule(device: str) -> str:
    return rule_name(DRA_NODE, device)


def test_a_health_rule_goes_only_after_the_clear_hold_of_health() -> None:
    world, pub = World(), Publication(3.0, HOLD, health_clear_s=CLEAR)
    world.dra_sick = world.dp_sick = (0,)
    assert run(pub, world, 0.0, 9.5, lambda t: None, lambda pub: set(pub.rules)) == [3.0]
    assert set(pub.rules) == {health_rule("gpu-0")} and "1 unhealthy" in pub.nodes[DP_NODE].message
    world.dra_sick = world.dp_sick = ()
    watch = lambda pub: (set(pub.rules), pub.nodes[DP_NODE].message)  # noqa: E731
    assert run(pub, world, 10.0, 10.0 + CLEAR + 5, lambda t: None, watch) == [10.0 + CLEAR]
    assert pub.rules == {} and pub.nodes[DP_NODE].message == "4 of 4 GPUs usable"


def test_without_a_clear_hold_a_health_rule_goes_at_once() -> None:
    world, pub = World(), Publication(3.0, HOLD, health_clear_s=0.0)
    world.dra_sick = (0,)
    run(pub, world, 0.0, 9.5, lambda t: None)
    world.dra_sick = ()
    assert run(pub, world, 10.0, 20.0, lambda t: None) == [10.0]


@pytest.mark.parametrize(("clear", "changes"), [(0.0, 360), (CLEAR, 1)])
def test_a_gpu_whose_health_flaps_every_10_s_for_an_hour_is_written_once(clear: float, changes: int) -> None:
    """Unhealthy 10 s, healthy 10 s, for an hour: with the clear hold the rule and the node's mark
    stand once (at 3.5 s) and stay; without it they came and went 180 times."""
    world, pub = World(), Publication(3.0, HOLD, health_clear_s=clear)

    def flap(t: float) -> None:
        world.dra_sick = world.dp_sick = (1,) if int(t // 10) % 2 == 0 else ()

    watch = lambda pub: (set(pub.rules), pub.nodes.get(DP_NODE))  # noqa: E731
    got = run(pub, world, 0.5, 3600.0, flap, watch)
    assert len(got) == changes + 1  # and the device-plugin node's first condition, at 0.5 s
    assert set(pub.rules) == ({health_rule("gpu-1")} if clear else set())


@pytest.mark.parametrize(("after", "warm"), [(2 * HOLD - 0.001, False), (2 * HOLD, True)])
def test_a_replica_is_warm_only_after_the_clear_hold_where_that_is_longer(after: float, warm: bool) -> None:
    """A new leader knows not since when a GPU has been healthy: it clears no node's mark before it
    has followed the agents for the clear hold."""
    pub, world = Publication(3.0, HOLD, health_clear_s=2 * HOLD), World()
    pub.update(world.inputs(), 100.0)
    assert pub.warm(100.0 + after) is warm


def test_a_health_rule_a_new_leader_finds_on_a_healthy_gpu_goes_after_the_clear_hold() -> None:
    pub = Publication(3.0, HOLD, health_clear_s=CLEAR)
    found = TaintRule(health_rule("gpu-0"), "gpu.nvidia.com", DRA_NODE, "gpu-0", UNHEALTHY_KEY, "x", NO_SCHEDULE)
    pub.adopt({found.name: found})
    assert run(pub, World(), 0.0, CLEAR + 5, lambda t: None, lambda pub: set(pub.rules)) == [CLEAR]


@pytest.mark.parametrize(("after", "warm"), [(HOLD - 0.001, False), (HOLD, True)])
def test_a_replica_is_warm_once_it_has_followed_the_agents_for_a_hold(after: float, warm: bool) -> None:
    """A leader that starts cold writes no condition before: its busy marks would still be at zero."""
    pub, world = Publication(3.0, HOLD), World()
    assert not pub.warm(0.0)
    pub.update(world.inputs(), 100.0)
    assert pub.warm(100.0 + after) is warm


def test_the_rules_version_moves_only_when_the_rules_do() -> None:
    world, pub = World(), Publication(3.0, HOLD)
    world.dra_busy = (1,)
    pub.update(world.inputs(), 0.0)
    version = pub.rules_version
    pub.update(world.inputs(), 30.0)
    assert pub.rules_version == version
    pub.update(world.inputs(), HOLD)
    assert pub.rules_version == version + 1 and set(pub.rules) == {busy_rule("gpu-1").name}
    assert DP_NODE in pub.nodes_changed
