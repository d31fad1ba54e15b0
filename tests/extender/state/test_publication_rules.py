"""Issue 52 item 0: the rules of state/publication.py that a one-line change would break unseen (fake
clock): a device-plugin GPU's unhealthy mark waits for health_after_s, its busy mark goes only after
busy_hold_s of idle, a node without GPUs gets no GPUsUsable condition, and ChangeFeed reports each
node whose inputs changed, once, or every node where it cannot follow."""

from __future__ import annotations

import dataclasses

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.state.dra_inventory import DraInventory
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.extender.state.publication import NO_DATA_GRACE_S, ChangeFeed, Publication, PublishInputs
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report

NODE, CPU_NODE = "dp-1", "cpu-1"
HEALTH_S, HOLD = 3.0, 60.0


def summary(busy: tuple[int, ...] = (), sick: tuple[int, ...] = ()) -> NodeSummary:
    """Four GPUs, no container holding any (the agent reads the kubelet: holders known)."""
    gpus = []
    for i in range(4):
        g = gpu(i, 90 if i in busy else 0, 80 if i in busy else 1, healthy=i not in sick)
        if i in sick:
            g.health = pb.HEALTH_UNHEALTHY
            g.health_reasons.append("XidCritical")
        gpus.append(g)
    r = report(NODE, gpus)
    r.allocation_source = pb.ALLOCATION_KUBELET
    return summarize(r, IdleRule(), 0.0)


def inputs(s: NodeSummary | None, changed: frozenset[str] | None = None) -> PublishInputs:
    return PublishInputs(DraInventory(), {NODE: 4, CPU_NODE: 0}, {NODE: s}.get, None, changed=changed)


def said(pub: Publication) -> tuple[str, bool]:
    got = pub.nodes[NODE]
    return got.status, got.no_usable_gpu


# -- device-plugin marks and their holds ---------------------------------------------------------


def test_one_sample_of_every_gpu_unhealthy_taints_nothing() -> None:
    pub = Publication(HEALTH_S, HOLD)
    pub.update(inputs(summary(sick=(0, 1, 2, 3))), 0.0)
    assert said(pub) == ("True", False) and pub.nodes[NODE].message == "4 of 4 GPUs usable"
    for t in (0.5, 1.0, HEALTH_S, 2 * HEALTH_S):  # healthy again: the bad sample never counts
        pub.update(inputs(summary()), t)
        assert said(pub) == ("True", False)


def test_every_gpu_unhealthy_for_health_after_s_makes_the_node_unusable() -> None:
    pub = Publication(HEALTH_S, HOLD)
    sick = inputs(summary(sick=(0, 1, 2, 3)))
    pub.update(sick, 0.0)
    pub.update(sick, HEALTH_S - 0.5)
    assert said(pub) == ("True", False)
    pub.update(sick, HEALTH_S)
    assert said(pub) == ("False", True)


def test_a_busy_mark_goes_only_after_busy_hold_s_of_idle() -> None:
    pub = Publication(HEALTH_S, HOLD)
    busy, idle = inputs(summary(busy=(0, 1, 2, 3))), inputs(summary())
    pub.update(busy, 0.0)
    pub.update(busy, HOLD)
    assert said(pub) == ("False", True)  # every GPU busy outside Kubernetes past the hold
    pub.update(idle, 100.0)  # one idle sample: the marks still stand
    assert said(pub) == ("False", True)
    pub.update(idle, 100.0 + HOLD - 0.5)
    assert said(pub) == ("False", True)
    pub.update(idle, 100.0 + HOLD)
    assert said(pub) == ("True", False) and pub.nodes[NODE].message == "4 of 4 GPUs usable"


# -- which nodes get a condition -----------------------------------------------------------------


@pytest.mark.parametrize("feed", [False, True], ids=["every-node", "changed-nodes"])
def test_a_node_with_no_gpu_gets_no_condition(feed: bool) -> None:
    """A CPU node (allocatable nvidia.com/gpu 0) has no agent: past the start grace a GPU node
    without agent data is said Unknown; a CPU node is said nothing at all, whether the update
    looks at every node or at those a ChangeFeed names."""
    pub = Publication(HEALTH_S, HOLD)
    pub.update(inputs(summary()), 0.0)
    changed = frozenset({NODE, CPU_NODE}) if feed else None
    pub.update(inputs(summary(), changed), NO_DATA_GRACE_S)
    pub.update(inputs(None, changed), NO_DATA_GRACE_S + 1.0)
    assert set(pub.nodes) == {NODE} and pub.nodes[NODE].reason == "NoAgentData"
    assert CPU_NODE not in pub.nodes_changed


# -- ChangeFeed ----------------------------------------------------------------------------------


class Claims:
    """ClaimLedger.nodes_changed_since as a table: what it answers, and what it was asked."""

    def __init__(self, answer: set[str] | None) -> None:
        self.answer, self.asked = answer, list[int]()

    def __call__(self, version: int) -> set[str] | None:
        self.asked.append(version)
        return None if self.answer is None else set(self.answer)


def next_generation(dra: DraInventory, changed: frozenset[str] | None) -> DraInventory:
    """The inventory that follows `dra` (dra_inventory.carried_over), naming the nodes it changed."""
    return dataclasses.replace(dra, generation=dra.generation + 1, changed=changed)


def test_the_first_drain_is_every_node_then_only_what_changed_once() -> None:
    feed, dra, plugin, none = ChangeFeed(), DraInventory(), {NODE: 4}, Claims(set())
    feed.node_changed("early")
    assert feed.drain(dra, plugin, 0, none) is None  # the first pass: every node
    assert feed.drain(dra, plugin, 0, none) == frozenset()  # nothing since
    feed.node_changed("a")
    feed.node_changed("b")
    assert feed.drain(dra, plugin, 0, none) == frozenset({"a", "b"})
    assert feed.drain(dra, plugin, 0, none) == frozenset()  # drained: reported once
    assert none.asked == []  # the claims version never moved


def test_a_rebuilt_view_of_the_nodes_is_every_node() -> None:
    feed, dra, none = ChangeFeed(), DraInventory(), Claims(set())
    plugin = {NODE: 4}
    feed.drain(dra, plugin, 0, none)
    feed.node_changed("a")
    rebuilt = {NODE: 4, "new": 8}  # a Node added: the view of the Nodes is built anew
    assert feed.drain(dra, rebuilt, 0, none) is None
    assert feed.drain(dra, rebuilt, 0, none) == frozenset()


def test_the_next_dra_generation_adds_its_changed_nodes_and_any_other_is_every_node() -> None:
    feed, plugin, none = ChangeFeed(), {NODE: 4}, Claims(set())
    first = DraInventory(generation=5)
    feed.drain(first, plugin, 0, none)
    second = next_generation(first, frozenset({"x"}))
    feed.node_changed("a")
    assert feed.drain(second, plugin, 0, none) == frozenset({"a", "x"})
    assert feed.drain(second, plugin, 0, none) == frozenset()  # the same object: nothing
    skipped = next_generation(next_generation(second, frozenset({"y"})), frozenset({"z"}))  # one missed
    assert feed.drain(skipped, plugin, 0, none) is None
    unknown = next_generation(skipped, None)  # a successor that cannot say which nodes changed
    assert feed.drain(unknown, plugin, 0, none) is None
    rebuilt = DraInventory(generation=0)  # built anew (a relist)
    assert feed.drain(rebuilt, plugin, 0, none) is None
    assert feed.drain(rebuilt, plugin, 0, none) == frozenset()


def test_a_claims_version_that_moved_adds_the_nodes_changed_since_the_last_drain() -> None:
    feed, dra, plugin = ChangeFeed(), DraInventory(), {NODE: 4}
    first = Claims({"never-asked"})
    assert feed.drain(dra, plugin, 3, first) is None and first.asked == []  # no version before: every node
    ledger = Claims({"c"})
    assert feed.drain(dra, plugin, 7, ledger) == frozenset({"c"}) and ledger.asked == [3]
    assert feed.drain(dra, plugin, 7, ledger) == frozenset() and ledger.asked == [3]
    relisted = Claims(None)  # the ledger cannot say any more (a relist, its log overrun)
    assert feed.drain(dra, plugin, 9, relisted) is None and relisted.asked == [7]
    assert feed.drain(dra, plugin, 9, relisted) == frozenset()
