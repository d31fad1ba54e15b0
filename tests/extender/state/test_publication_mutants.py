"""Rules of the publication (state/publication.py) that mutation testing found no test holding: a
publication publishes nothing before its first update, nor from a first update that names only a CPU
node; `node` shows each DRA device's standing and pending rules, sorted, with since when they
disagree, and a device-plugin node's condition; each adopt and each change of the rules moves the
version by one; busy taints off drop an adopted busy rule at once, and claims not listed yet ask for
none; a GPU turning unhealthy is seen even when no reading moved (no positions), and an unhealthy
mark goes at once; a claim allocated on one node recomputes that node; nodes that stop being
device-plugin GPU nodes lose their conditions, a node with one GPU has one, and a condition that did
not change is not reported changed; past the start grace an update looks only at the nodes it is
told changed; stale agent data leaves the reclaim signal (claims too) at the next sweep, not before,
and comes back a window after it is fresh again; and a ChangeFeed asks the claims what changed since
version 0."""

from __future__ import annotations

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.kube_objects import RESOURCE_CLAIM
from gpuextender.extender.state.device_taints import (
    BUSY_KEY,
    BUSY_VALUE,
    NO_SCHEDULE,
    UNHEALTHY_KEY,
    TaintRule,
    rule_name,
)
from gpuextender.extender.state.dra_inventory import DraInventory
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.extender.state.node_gpu_status import NodeGpuStatus
from gpuextender.extender.state.publication import (
    NO_DATA_GRACE_S,
    ChangeFeed,
    NodePublished,
    Publication,
    PublishedTaint,
    PublishInputs,
)
from tests.extender.builders import gpu, report
from tests.extender.builders import node as agent_node
from tests.extender.dra_objects import allocated_claim
from tests.extender.state.test_publication import (
    DP_NODE,
    DRA_NODE,
    busy_rule,
    claims,
    dra,
    reclaim_inputs,
    replace_received,
)
from tests.extender.state.test_publication import summary as summary_of_node
from tests.extender.state.test_publication_rules import (
    CPU_NODE,
    HEALTH_S,
    HOLD,
    NODE,
    Claims,
    inputs,
    said,
    summary,
)

# -- before and at the first update --------------------------------------------------------------


def test_a_publication_publishes_nothing_before_its_first_update() -> None:
    pub = Publication(HEALTH_S, HOLD, idle_window_s=10.0)
    assert (pub.rules, pub.nodes, pub.idle_by_node, pub.idle_claims) == ({}, {}, {}, {})
    assert (pub.rules_version, pub.updated_at, pub.idle_window_s) == (0, None, 10.0)
    assert pub.node(NODE) is None


def test_a_first_update_naming_only_a_cpu_node_publishes_nothing() -> None:
    pub = Publication(HEALTH_S, HOLD)
    pub.update(inputs(summary(), frozenset({CPU_NODE})), 0.0)
    assert (pub.rules, pub.nodes, pub.updated_at) == ({}, {}, 0.0)


# -- what `node` shows ---------------------------------------------------------------------------


def test_node_shows_standing_and_pending_rules_sorted_with_since_when_and_a_condition() -> None:
    """Three busy DRA GPUs' rules stand after the hold; then they idle (standing, pending the
    hold) and GPU 0 turns unhealthy (asked, pending health_after_s)."""
    pub = Publication(HEALTH_S, HOLD)
    ledger = claims()

    def at(t: float, dra_summary: NodeSummary) -> None:
        summaries = {DRA_NODE: dra_summary, DP_NODE: summary_of_node(DP_NODE)}
        pub.update(PublishInputs(dra(), {DP_NODE: 4}, summaries.get, ledger.allocated_on), t)

    at(0.0, summary_of_node(DRA_NODE, busy=(1, 2, 3)))
    at(HOLD, summary_of_node(DRA_NODE, busy=(1, 2, 3)))
    assert pub.node(DRA_NODE) is not None  # read once: the next update must build it anew
    at(HOLD + 1.0, summary_of_node(DRA_NODE, sick=(0,)))
    sick = PublishedTaint("gpu-0", UNHEALTHY_KEY, "xid-79", NO_SCHEDULE, False, HOLD + 1.0)
    busy = [PublishedTaint(f"gpu-{i}", BUSY_KEY, BUSY_VALUE, NO_SCHEDULE, True, HOLD + 1.0) for i in (1, 2, 3)]
    assert pub.node(DRA_NODE) == NodePublished((sick, *busy), None)
    assert pub.pending_since(rule_name(DRA_NODE, "gpu-0")) == HOLD + 1.0
    assert pub.pending_since(busy_rule("gpu-1").name) == HOLD + 1.0
    assert pub.node(DP_NODE) == NodePublished((), NodeGpuStatus("True", "GPUsUsable", "4 of 4 GPUs usable"))
    assert pub.node("nowhere") is None


# -- the rules and their version -----------------------------------------------------------------


def health_rule() -> TaintRule:
    name = rule_name(DRA_NODE, "gpu-0")
    return TaintRule(name, "gpu.nvidia.com", DRA_NODE, "gpu-0", UNHEALTHY_KEY, "x", NO_SCHEDULE, DRA_NODE)


def test_each_adopt_and_each_change_of_the_rules_moves_the_version_by_one() -> None:
    pub = Publication(HEALTH_S, HOLD)
    pub.adopt({health_rule().name: health_rule()})
    pub.adopt({health_rule().name: health_rule()})
    assert pub.rules_version == 2
    pub.update(PublishInputs(dra(), {}, {DRA_NODE: summary_of_node(DRA_NODE)}.get, claims().allocated_on), 0.0)
    assert pub.rules == {} and pub.rules_version == 3  # healthy: the health rule goes at once


def test_with_busy_taints_off_an_adopted_busy_rule_goes_at_once() -> None:
    pub = Publication(HEALTH_S, HOLD, busy=False)
    pub.adopt({busy_rule("gpu-1").name: busy_rule("gpu-1")})
    pub.update(PublishInputs(dra(), {}, {DRA_NODE: summary_of_node(DRA_NODE)}.get, claims().allocated_on), 0.0)
    assert pub.rules == {}


def test_claims_not_listed_yet_ask_for_no_busy_rule() -> None:
    pub = Publication(HEALTH_S, HOLD)
    busy = PublishInputs(dra(), {}, {DRA_NODE: summary_of_node(DRA_NODE, busy=(1,))}.get, None)
    pub.update(busy, 0.0)
    pub.update(busy, HOLD)
    assert pub.rules == {} and pub.node(DRA_NODE) is None


def test_a_claim_allocated_on_a_node_recomputes_that_node() -> None:
    """A claim added to the node (not a relist): only the node's claims version moves."""
    pub, ledger = Publication(HEALTH_S, HOLD), claims()
    busy = PublishInputs(
        dra(),
        {},
        {DRA_NODE: summary_of_node(DRA_NODE, busy=(1,))}.get,
        ledger.allocated_on,
        claims_version_of=ledger.node_version,
    )
    pub.update(busy, 0.0)
    pub.update(busy, HOLD)
    assert set(pub.rules) == {busy_rule("gpu-1").name}
    ledger.upsert(RESOURCE_CLAIM.kind, allocated_claim("c", DRA_NODE, ["gpu-1"]))
    pub.update(busy, HOLD + 1.0)
    pub.update(busy, 2 * HOLD + 1.0)
    assert pub.rules == {}


# -- device-plugin marks -------------------------------------------------------------------------


def test_a_gpu_turning_unhealthy_with_the_same_readings_is_seen_without_positions() -> None:
    """GPUs reported out of index order (no positions): only the cell's state says GPU 0 turned
    unhealthy; its utilization and memory read as before."""

    def at(t: float, sick: bool) -> None:
        s = summarize(report(NODE, [gpu(1), gpu(0, healthy=not sick)]), IdleRule(), 0.0)
        pub.update(PublishInputs(DraInventory(), {NODE: 2}, {NODE: s}.get, None), t)

    pub = Publication(HEALTH_S, HOLD)
    at(0.0, False)
    at(1.0, True)
    at(1.0 + HEALTH_S, True)
    assert pub.nodes[NODE].message.startswith("1 of 2 GPUs usable; 1 unhealthy")


def test_an_unhealthy_mark_goes_as_soon_as_the_gpu_is_healthy() -> None:
    pub = Publication(HEALTH_S, HOLD)
    pub.update(inputs(summary(sick=(0, 1, 2, 3))), 0.0)
    pub.update(inputs(summary(sick=(0, 1, 2, 3))), HEALTH_S)
    assert said(pub) == ("False", True)
    pub.update(inputs(summary()), HEALTH_S + 0.5)
    assert said(pub) == ("True", False)


# -- which nodes get a condition, and when it is reported changed --------------------------------


@pytest.mark.parametrize("feed", [False, True], ids=["every-node", "changed-nodes"])
def test_nodes_no_longer_device_plugin_gpu_nodes_lose_their_conditions(feed: bool) -> None:
    """Two nodes, each with an unhealthy GPU asking for a mark, both gone from the Nodes' view."""
    pub = Publication(HEALTH_S, HOLD)
    two = ("dp-1", "dp-2")
    summaries = dict.fromkeys(two, summary(sick=(0,))).get
    pub.update(PublishInputs(DraInventory(), dict.fromkeys(two, 4), summaries, None), 0.0)
    assert set(pub.nodes) == set(two)
    pub.nodes_changed.clear()
    gone = PublishInputs(DraInventory(), {}, summaries, None, changed=frozenset(two) if feed else None)
    pub.update(gone, 1.0)
    assert pub.nodes == {} and pub.nodes_changed == set(two)


def test_a_node_with_one_gpu_gets_a_condition() -> None:
    pub = Publication(HEALTH_S, HOLD)
    pub.update(PublishInputs(DraInventory(), {NODE: 1}, {NODE: agent_node(NODE, 1)}.get, None), 0.0)
    assert pub.nodes[NODE].status == "True"


def test_a_condition_that_did_not_change_is_not_reported_changed() -> None:
    pub = Publication(HEALTH_S, HOLD)
    pub.update(inputs(summary()), 0.0)
    pub.nodes_changed.clear()
    pub.update(inputs(summary(busy=(0,))), 1.0)  # a busy mark asked, not standing: still 4 of 4
    assert pub.nodes_changed == set() and pub.nodes[NODE].message == "4 of 4 GPUs usable"
    assert pub.updated_at == 1.0


def test_past_the_start_grace_an_update_looks_only_at_the_nodes_it_is_told_changed() -> None:
    pub = Publication(HEALTH_S, HOLD)
    pub.update(inputs(summary()), 0.0)
    pub.update(inputs(summary(), frozenset()), NO_DATA_GRACE_S)
    pub.update(inputs(None, frozenset()), NO_DATA_GRACE_S + 1.0)  # not named: not looked at
    assert pub.nodes[NODE].reason == "GPUsUsable"
    pub.update(inputs(None, frozenset({NODE})), NO_DATA_GRACE_S + 2.0)
    assert pub.nodes[NODE].reason == "NoAgentData"


# -- the reclaim signal --------------------------------------------------------------------------


def test_stale_data_leaves_the_reclaim_signal_and_returns_a_window_after_it_is_fresh_again() -> None:
    """Agent data stale after 30 s, a window of 10 s, swept at every update; the reports that
    come back say the same states (no node is recomputed: only the sweep sees them)."""
    pub = Publication(HEALTH_S, HOLD, idle_window_s=10.0, reclaim_every_s=0.0)
    first = replace_received(reclaim_inputs(dp_held=(0,)), 0.0)
    signal = ({DP_NODE: 1, DRA_NODE: 2}, {"default/c": 2})
    pub.update(first, 0.0)
    pub.update(first, 10.0)
    assert (pub.idle_by_node, pub.idle_claims) == signal
    pub.update(first, 31.0)  # stale: unknown, never idle
    assert (pub.idle_by_node, pub.idle_claims) == ({}, {})
    again = replace_received(first, 40.0)
    pub.update(again, 40.0)
    pub.update(again, 50.0)
    assert (pub.idle_by_node, pub.idle_claims) == signal
    pub.update(again, 71.0)  # stale once more
    assert (pub.idle_by_node, pub.idle_claims) == ({}, {})


def test_a_device_plugin_node_gone_stale_without_a_report_leaves_the_signal_only_at_the_sweep() -> None:
    """Reports received at 10 s, stale after 30 s, swept every RECLAIM_EVERY_S (5 s): at 44.5 s
    the data is stale, but nothing has told the windows yet."""
    pub = Publication(HEALTH_S, HOLD, idle_window_s=10.0)
    last = replace_received(reclaim_inputs(dp_held=(0,)), 10.0)
    for t in (0.0, 10.0, 40.0, 44.5):
        pub.update(last, t)
    assert pub.idle_by_node == {DP_NODE: 1, DRA_NODE: 2}
    pub.update(last, 45.0)
    assert pub.idle_by_node == {}


# -- ChangeFeed ----------------------------------------------------------------------------------


def test_a_claims_version_moving_from_0_asks_what_changed_since_0() -> None:
    feed, dra_now, plugin = ChangeFeed(), DraInventory(), {NODE: 4}
    assert feed.drain(dra_now, plugin, 0, Claims(set())) is None  # the first pass: every node
    ledger = Claims({"c"})
    assert feed.drain(dra_now, plugin, 1, ledger) == frozenset({"c"}) and ledger.asked == [0]
