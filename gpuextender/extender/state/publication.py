"""What the agents' knowledge publishes for every scheduler and autoscaler (issues 25 and 35), as it
stands now: DRA device taint rules (unhealthy, degraded, busy outside Kubernetes) and each
device-plugin GPU node's `GPUsUsable` condition and taint (node_gpu_status.py).

Every replica keeps one and updates it on a timer (the leader writes it, inventory/
device_taint_writer.py; every replica's explain and fleet page show it). Each rule or per-GPU mark
stands only once asked for without a break for its hold, and goes only once not asked for without
a break (Hysteresis): health after `health_after_s`, gone after `health_clear_s` healthy (so a GPU
flapping health is written once a hold at most, as a busy one is); busy after `busy_hold_s` and gone
after `busy_hold_s` of idle or held. A new leader adopts the rules it finds (`adopt`).
Pure: inputs and the clock are passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from gpuextender.extender.model.dra import DeviceRef
from gpuextender.extender.settings import DEFAULT_IDLE_WINDOW_S
from gpuextender.extender.state.device_taints import (
    BUSY_PREFIX,
    Hysteresis,
    TaintRule,
    health_taints,
    node_busy_taints,
)
from gpuextender.extender.state.dra_inventory import DraInventory, NodeDevices
from gpuextender.extender.state.freshness import is_fresh
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.idle_allocated import IdleWindows, held_idle_gpus, idle_claims
from gpuextender.extender.state.node_gpu_status import NodeGpuStatus, count_by_node, marks, node_status

# A restarted replica's agents reconnect within seconds (they re-resolve the Service every 15 s and
# back off 5 s at most): every node said Unknown, then usable again, at each start would be two
# writes a node for nothing (10,000 at 5,000 nodes).
NO_DATA_GRACE_S = 60.0
# Agent data that went stale without a report is swept out of the reclaim signal this often: its
# window is 10 s or more (30 min by default).
RECLAIM_EVERY_S = 5.0


@dataclass(frozen=True, slots=True)
class PublishInputs:
    dra: DraInventory
    device_plugin_nodes: Mapping[str, int]  # node -> its allocatable nvidia.com/gpu (Node objects)
    summary_of: Callable[[str], NodeSummary | None]
    # The devices each node's allocated claims hold; None while the claims are not listed.
    allocated_on: Callable[[str], AbstractSet[DeviceRef]] | None
    # Which claim holds each device of a node (the reclaim signal); None while not listed.
    claim_of: Callable[[str], Mapping[DeviceRef, str]] | None = None
    stale_after_s: float = float("inf")  # agent data older than this is unknown (the reclaim signal)
    # The nodes whose summary, devices or claims may have changed since the last update (ChangeFeed);
    # None: any node may have (every node is looked at).
    changed: AbstractSet[str] | None = None
    # A number that moves whenever the claims on a node change (ClaimLedger.node_version).
    claims_version_of: Callable[[str], int] = lambda _node: 0


class ChangeFeed:
    """Which nodes' inputs changed between two updates, so that an update looks at those only (at
    5,000 nodes, looking at every node took ~85 ms a pass on the event loop). Fed by the GPU
    state's listener (`node_changed`: a report, a node forgotten); the DRA inventory and the claims
    are compared at each `drain`. Anything it cannot follow (the first pass, a claims relist, a
    rebuilt inventory of Nodes) means every node."""

    def __init__(self) -> None:
        self._dirty: set[str] = set()
        self._all = True
        self._dra: DraInventory | None = None
        self._plugin_nodes: Mapping[str, int] | None = None
        self._claims_version = -1

    def node_changed(self, node: str) -> None:
        self._dirty.add(node)

    def drain(
        self,
        dra: DraInventory,
        plugin_nodes: Mapping[str, int],
        claims_version: int,
        claims_changed_since: Callable[[int], set[str] | None],
    ) -> frozenset[str] | None:
        every = self._all
        if plugin_nodes is not self._plugin_nodes:
            every = True  # the Nodes' view was rebuilt: which nodes are device-plugin nodes may differ
        if dra is not self._dra:
            last = self._dra
            if last is not None and dra.generation == last.generation + 1 and dra.changed is not None:
                self._dirty.update(dra.changed)
            else:
                every = True
        if claims_version != self._claims_version:
            since = claims_changed_since(self._claims_version) if self._claims_version >= 0 else None
            if since is None:
                every = True
            else:
                self._dirty.update(since)
        self._dra, self._plugin_nodes, self._claims_version = dra, plugin_nodes, claims_version
        changed = None if every else frozenset(self._dirty)
        self._dirty = set()
        self._all = False
        return changed


@dataclass(frozen=True, slots=True)
class _NodeAsks:
    """What one node asks for now, and what it was computed from (`key`): recomputed only when the
    key differs (a report that changed only readings, not states, costs a comparison)."""

    key: tuple[object, ...]
    health: dict[str, TaintRule]
    busy: dict[str, TaintRule]
    sick: tuple[str, ...]  # device-plugin GPUs unhealthy (node_gpu_status.mark_key)
    busy_gpus: tuple[str, ...]  # device-plugin GPUs busy outside Kubernetes
    idle: tuple[str, ...]  # held GPUs that read idle (idle_allocated.py)
    idle_claims: dict[str, int]

    def asks(self) -> bool:
        return bool(self.health or self.busy or self.sick or self.busy_gpus or self.idle or self.idle_claims)


def _state_key(summary: NodeSummary | None) -> object:
    """What of a summary the asks depend on: GPU states, positions, allocation, errors; not readings."""
    if summary is None:
        return None
    return (
        summary.positions,
        tuple([cell[1] for cell in summary.gpus]),
        summary.allocation,
        summary.node_error,
    )


@dataclass(frozen=True, slots=True)
class PublishedTaint:
    """A device's rule as explain and the fleet page show it: standing (written by the leader) or
    pending (asked for, not standing yet; or standing, no longer asked for), and since when."""

    device: str
    key: str
    value: str
    effect: str
    stands: bool
    pending_since: float | None  # when what is asked began to differ from what stands


@dataclass(frozen=True, slots=True)
class NodePublished:
    taints: tuple[PublishedTaint, ...]
    status: NodeGpuStatus | None  # device-plugin nodes' GPUsUsable condition; None for others


class Publication:
    def __init__(
        self,
        health_after_s: float,
        busy_hold_s: float,
        *,
        health_clear_s: float = 0.0,
        busy: bool = True,
        idle_window_s: float = DEFAULT_IDLE_WINDOW_S,
        no_data_grace_s: float = NO_DATA_GRACE_S,
        reclaim_every_s: float = RECLAIM_EVERY_S,
    ) -> None:
        self.busy_hold_s = busy_hold_s
        # A new leader knows not since when a GPU has been healthy: it clears no mark it did not
        # follow for the clear hold (`warm`).
        self._warm_after_s = max(busy_hold_s, health_after_s, health_clear_s)
        self._reclaim_every_s = reclaim_every_s
        self._reclaimed_at: float | None = None
        # A node without agent data is said Unknown only this long after the first update
        # (NO_DATA_GRACE_S).
        self._no_data_grace_s = no_data_grace_s
        self._first: float | None = None
        self._grace_over = False
        self._busy_on = busy
        self._health = Hysteresis[TaintRule](health_after_s, health_clear_s)
        self._busy = Hysteresis[TaintRule](busy_hold_s, busy_hold_s)
        self._sick_gpus = Hysteresis[bool](health_after_s, health_clear_s)  # device-plugin GPUs, by mark_key
        self._busy_gpus = Hysteresis[bool](busy_hold_s, busy_hold_s)
        # The reclaim signal: held GPUs idle for the window without a break (idle_allocated.py).
        self.idle_window_s = idle_window_s
        self._idle_gpus = IdleWindows(idle_window_s)
        self._idle_claims = IdleWindows(idle_window_s)
        self._idle_seen = (-1, -1)  # the windows' versions idle_by_node and idle_claims were made at
        self._stale: set[str] = set()  # nodes whose idle asks are left out: their data is stale
        self.idle_by_node: dict[str, int] = {}  # node -> held GPUs idle past the window
        self.idle_claims: dict[str, int] = {}  # claim (namespace/name) -> its GPUs, every one idle past the window
        self.rules: dict[str, TaintRule] = {}  # the DeviceTaintRules that stand, by name
        self.nodes: dict[str, NodeGpuStatus] = {}  # each device-plugin GPU node's condition
        self.nodes_changed: set[str] = set()  # nodes whose condition changed (the node writer drains it)
        self.rules_version = 0  # moves whenever `rules` does
        self.updated_at: float | None = None
        self._asked: dict[str, TaintRule] = {}  # the rules asked for at the last update
        self._by_node: dict[str, list[PublishedTaint]] | None = None  # built when first read
        self._asks: dict[str, _NodeAsks] = {}  # every DRA and device-plugin GPU node's
        self._asking: set[str] = set()  # the nodes whose asks are not empty
        self._received: dict[str, float | None] = {}  # each node's summary's received_at (freshness)
        self._plugin: set[str] = set()  # the device-plugin GPU nodes (a condition each)
        self._merged: tuple[dict[str, TaintRule], dict[str, TaintRule], dict[str, bool], dict[str, bool]] = (
            {},
            {},
            {},
            {},
        )
        self._counts: tuple[dict[str, int], dict[str, int]] = ({}, {})  # settled sick, busy per node

    def update(self, inputs: PublishInputs, now: float) -> None:
        if self._first is None:
            self._first = now
        settling = now - self._first < self._no_data_grace_s
        recomputed = self._recompute(inputs, now)
        if recomputed:
            self._merge()
        health_asked, busy_asked, sick_asked, busy_gpus_asked = self._merged
        health = self._health.settle(health_asked, now)
        busy = self._busy.settle(busy_asked, now) if self._busy_on else {}
        rules = {**health, **busy}
        if rules != self.rules:
            self.rules = rules
            self.rules_version += 1
        self._asked = {**health_asked, **busy_asked}
        self._by_node = None
        self._reclaim(recomputed, inputs.stale_after_s, now)
        sick = count_by_node(self._sick_gpus.settle(sick_asked, now))
        busy_count = count_by_node(self._busy_gpus.settle(busy_gpus_asked, now))
        # A node's condition is rebuilt when its asks or its settled counts moved, or the grace ended.
        again = set(recomputed)
        for now_counts, then_counts in zip((sick, busy_count), self._counts, strict=True):
            again.update(n for n in now_counts.keys() | then_counts.keys() if now_counts.get(n) != then_counts.get(n))
        if not settling and not self._grace_over:
            self._grace_over = True
            again.update(self._plugin)
        self._counts = (sick, busy_count)
        for node in again:
            summary = inputs.summary_of(node) if node in self._plugin else None
            if node not in self._plugin or (summary is None and settling):
                if self.nodes.pop(node, None) is not None:
                    self.nodes_changed.add(node)
                continue
            status = node_status(summary, sick.get(node, 0), busy_count.get(node, 0), self.busy_hold_s)
            if self.nodes.get(node) != status:
                self.nodes[node] = status
                self.nodes_changed.add(node)
        self.updated_at = now

    def _recompute(self, inputs: PublishInputs, now: float) -> set[str]:
        """The nodes whose asks were computed anew (`inputs.changed`, or all of them)."""
        dra, plugin_nodes = inputs.dra, inputs.device_plugin_nodes
        if inputs.changed is None:
            look: AbstractSet[str] = dra.gpu_devices.keys() | plugin_nodes.keys() | self._asks.keys()
            self._plugin = {n for n, count in plugin_nodes.items() if count > 0 and n not in dra.gpu_devices}
        else:
            look = inputs.changed
        recomputed: set[str] = set()
        for node in look:
            devices = dra.gpu_devices.get(node)
            plugin = devices is None and plugin_nodes.get(node, 0) > 0
            if plugin:
                self._plugin.add(node)
            else:
                self._plugin.discard(node)
            if devices is None and not plugin:
                self._received.pop(node, None)
                if self._asks.pop(node, None) is not None:
                    self._asking.discard(node)
                    recomputed.add(node)
                continue
            summary = inputs.summary_of(node)
            self._received[node] = summary.received_at if summary is not None else None
            key = (_state_key(summary), devices, inputs.claims_version_of(node), inputs.allocated_on is None)
            cached = self._asks.get(node)
            if cached is not None and cached.key == key:
                continue
            asks = self._node_asks(node, key, summary, devices, inputs)
            self._asks[node] = asks
            if asks.asks():
                self._asking.add(node)
            else:
                self._asking.discard(node)
            recomputed.add(node)
        return recomputed

    def _node_asks(
        self,
        node: str,
        key: tuple[object, ...],
        summary: NodeSummary | None,
        devices: NodeDevices | None,
        inputs: PublishInputs,
    ) -> _NodeAsks:
        if devices is not None:  # a DRA node: its devices' rules, its claims' idle GPUs
            health = health_taints(node, devices, summary)
            busy = (
                node_busy_taints(node, devices, summary, inputs.allocated_on)
                if self._busy_on and inputs.allocated_on is not None
                else {}
            )
            idle: tuple[str, ...] = ()
            claims: dict[str, int] = {}
            holders = inputs.claim_of(node) if inputs.claim_of is not None and summary is not None else None
            if holders and summary is not None:
                marks_, claims = idle_claims(node, summary, devices, holders)
                idle = tuple(marks_)
            return _NodeAsks(key, health, busy, (), (), idle, claims)
        sick, busy_gpus = marks(node, summary)
        held_idle = tuple(held_idle_gpus(node, summary)) if summary is not None and summary.allocated_idle_gpus else ()
        return _NodeAsks(key, {}, {}, tuple(sick), tuple(busy_gpus) if self._busy_on else (), held_idle, {})

    def _merge(self) -> None:
        health: dict[str, TaintRule] = {}
        busy: dict[str, TaintRule] = {}
        sick: dict[str, bool] = {}
        busy_gpus: dict[str, bool] = {}
        for node in self._asking:
            asks = self._asks[node]
            health.update(asks.health)
            busy.update(asks.busy)
            sick.update(dict.fromkeys(asks.sick, True))
            busy_gpus.update(dict.fromkeys(asks.busy_gpus, True))
        self._merged = (health, busy, sick, busy_gpus)

    def _reclaim(self, recomputed: set[str], stale_after_s: float, now: float) -> None:
        """The reclaim signal: the nodes whose asks changed tell the windows at once; staleness (no
        report for --stale-after: unknown, never idle) is swept every `reclaim_every_s`, and only a
        node whose freshness flipped is told again."""
        gpus, claims = self._idle_gpus, self._idle_claims

        def tell(node: str, fresh: bool) -> None:
            asks = self._asks.get(node)
            if asks is None or not fresh:
                if asks is not None and (asks.idle or asks.idle_claims):
                    self._stale.add(node)
                gpus.set_node(node, {}, now)
                claims.set_node(node, {}, now)
                return
            self._stale.discard(node)
            gpus.set_node(node, dict.fromkeys(asks.idle, 1), now)
            claims.set_node(node, asks.idle_claims, now)

        for node in recomputed:
            tell(node, self._fresh(node, stale_after_s, now))
        if self._reclaimed_at is None or now - self._reclaimed_at >= self._reclaim_every_s:
            self._reclaimed_at = now
            for node in self._asking:
                asks = self._asks[node]
                if asks.idle or asks.idle_claims:
                    fresh = self._fresh(node, stale_after_s, now)
                    if fresh == (node in self._stale):  # its freshness flipped since it was told
                        tell(node, fresh)
        gpus.promote(now)
        claims.promote(now)
        if (gpus.version, claims.version) != self._idle_seen:
            self._idle_seen = (gpus.version, claims.version)
            self.idle_by_node = count_by_node(gpus.standing)
            self.idle_claims = dict(claims.standing)

    def _fresh(self, node: str, stale_after_s: float, now: float) -> bool:
        received = self._received.get(node)
        return received is not None and is_fresh(received, now, stale_after_s)

    def warm(self, now: float) -> bool:
        """Followed the agents for a hold: every busy or unhealthy mark that should stand does."""
        return self._first is not None and now - self._first >= self._warm_after_s

    def adopt(self, rules: Mapping[str, TaintRule]) -> None:
        """The rules a new leader finds stand (their holds start from them, never churn them)."""
        self._busy.adopt({n: r for n, r in rules.items() if n.startswith(BUSY_PREFIX)})
        self._health.adopt({n: r for n, r in rules.items() if not n.startswith(BUSY_PREFIX)})
        self.rules = {**self._health.standing, **self._busy.standing}
        self.rules_version += 1

    def node(self, node: str) -> NodePublished | None:
        """What stands and what is pending for `node`, for people (None: nothing at all)."""
        if self._by_node is None:
            by_node: dict[str, list[PublishedTaint]] = {}
            for name in self.rules.keys() | self._asked.keys():
                rule = self.rules.get(name) or self._asked[name]
                by_node.setdefault(rule.node, []).append(
                    PublishedTaint(
                        rule.device,
                        rule.key,
                        rule.value,
                        rule.effect,
                        name in self.rules,
                        self.pending_since(name),
                    )
                )
            self._by_node = by_node
        taints = self._by_node.get(node)
        status = self.nodes.get(node)
        if not taints and status is None:
            return None
        return NodePublished(tuple(sorted(taints or (), key=lambda t: (t.device, t.key))), status)

    def pending_since(self, name: str) -> float | None:
        """When the rule `name` began to be asked for (not standing yet) or not (still standing)."""
        since = self._busy.pending(name) if name.startswith(BUSY_PREFIX) else self._health.pending(name)
        return since
