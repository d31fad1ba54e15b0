"""What the agents' knowledge publishes for every scheduler and autoscaler (issues 25 and 35), as it
stands now: DRA device taint rules (unhealthy, degraded, busy outside Kubernetes) and each
device-plugin GPU node's `GPUsUsable` condition and taint (node_gpu_status.py).

Every replica keeps one and updates it on a timer (the leader writes it, inventory/
device_taint_writer.py; every replica's explain and fleet page show it). Each rule or per-GPU mark
stands only once asked for without a break for its hold, and goes only once not asked for without
a break (Hysteresis): health after `health_after_s`, gone at once; busy after `busy_hold_s` and gone
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
    busy_taints,
    wanted_taints,
)
from gpuextender.extender.state.dra_inventory import DraInventory
from gpuextender.extender.state.freshness import is_fresh
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.idle_allocated import held_idle_gpus, idle_claims
from gpuextender.extender.state.node_gpu_status import NodeGpuStatus, count_by_node, marks, node_status

# A restarted replica's agents reconnect within seconds (they re-resolve the Service every 15 s and
# back off 5 s at most): every node said Unknown, then usable again, at each start would be two
# writes a node for nothing (10,000 at 5,000 nodes).
NO_DATA_GRACE_S = 60.0


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
        busy: bool = True,
        idle_window_s: float = DEFAULT_IDLE_WINDOW_S,
        no_data_grace_s: float = NO_DATA_GRACE_S,
    ) -> None:
        self.busy_hold_s = busy_hold_s
        # A node without agent data is said Unknown only this long after the first update
        # (NO_DATA_GRACE_S).
        self._no_data_grace_s = no_data_grace_s
        self._first: float | None = None
        self._busy_on = busy
        self._health = Hysteresis[TaintRule](health_after_s, 0.0)
        self._busy = Hysteresis[TaintRule](busy_hold_s, busy_hold_s)
        self._sick_gpus = Hysteresis[bool](health_after_s, 0.0)  # device-plugin GPUs, by node_gpu_status.mark_key
        self._busy_gpus = Hysteresis[bool](busy_hold_s, busy_hold_s)
        # The reclaim signal: held GPUs idle for the window without a break (idle_allocated.py).
        self.idle_window_s = idle_window_s
        self._idle_gpus = Hysteresis[bool](idle_window_s, 0.0)
        self._idle_claims = Hysteresis[int](idle_window_s, 0.0)
        self.idle_by_node: dict[str, int] = {}  # node -> held GPUs idle past the window
        self.idle_claims: dict[str, int] = {}  # claim (namespace/name) -> its GPUs, every one idle past the window
        self.rules: dict[str, TaintRule] = {}  # the DeviceTaintRules that stand, by name
        self.nodes: dict[str, NodeGpuStatus] = {}  # each device-plugin GPU node's condition
        self.updated_at: float | None = None
        self._asked: dict[str, TaintRule] = {}  # the rules asked for at the last update
        self._by_node: dict[str, list[PublishedTaint]] | None = None  # built when first read

    def update(self, inputs: PublishInputs, now: float) -> None:
        health_asked = wanted_taints(inputs.dra, inputs.summary_of)
        busy_asked_rules = busy_taints(inputs.dra, inputs.summary_of, inputs.allocated_on) if self._busy_on else {}
        health = self._health.settle(health_asked, now)
        busy = self._busy.settle(busy_asked_rules, now) if self._busy_on else {}
        self.rules = {**health, **busy}
        self._asked = {**health_asked, **busy_asked_rules}
        self._by_node = None
        if self._first is None:
            self._first = now
        settling = now - self._first < self._no_data_grace_s
        sick_asked: dict[str, bool] = {}
        busy_asked: dict[str, bool] = {}
        summaries = {}
        for node, allocatable in inputs.device_plugin_nodes.items():
            if allocatable <= 0 or node in inputs.dra.gpu_devices:
                continue  # no device-plugin GPU, or its GPUs are DRA devices: the rules above
            summary = inputs.summary_of(node)
            if summary is None and settling:
                continue
            summaries[node] = summary
            unhealthy, busy_gpus = marks(node, summary)
            sick_asked.update(dict.fromkeys(unhealthy, True))
            if self._busy_on:
                busy_asked.update(dict.fromkeys(busy_gpus, True))
        self._reclaim(inputs, now)
        sick = count_by_node(self._sick_gpus.settle(sick_asked, now))
        busy_count = count_by_node(self._busy_gpus.settle(busy_asked, now))
        self.nodes = {
            node: node_status(summary, sick.get(node, 0), busy_count.get(node, 0), self.busy_hold_s)
            for node, summary in summaries.items()
        }
        self.updated_at = now

    def _reclaim(self, inputs: PublishInputs, now: float) -> None:
        gpus: dict[str, bool] = {}
        claims: dict[str, int] = {}
        summary_of, stale_after = inputs.summary_of, inputs.stale_after_s
        for node, allocatable in inputs.device_plugin_nodes.items():
            summary = summary_of(node) if allocatable > 0 and node not in inputs.dra.gpu_devices else None
            if summary is not None and summary.allocated_idle_gpus and is_fresh(summary.received_at, now, stale_after):
                gpus.update(dict.fromkeys(held_idle_gpus(node, summary), True))
        if inputs.claim_of is not None:
            for node, devices in inputs.dra.gpu_devices.items():
                holders = inputs.claim_of(node)
                summary = summary_of(node) if holders else None
                if summary is None or not is_fresh(summary.received_at, now, stale_after):
                    continue
                marks, idle = idle_claims(node, summary, devices, holders)
                gpus.update(dict.fromkeys(marks, True))
                claims.update(idle)
        self.idle_by_node = count_by_node(self._idle_gpus.settle(gpus, now))
        self.idle_claims = dict(self._idle_claims.settle(claims, now))

    def adopt(self, rules: Mapping[str, TaintRule]) -> None:
        """The rules a new leader finds stand (their holds start from them, never churn them)."""
        self._busy.adopt({n: r for n, r in rules.items() if n.startswith(BUSY_PREFIX)})
        self._health.adopt({n: r for n, r in rules.items() if not n.startswith(BUSY_PREFIX)})
        self.rules = {**self._health.standing, **self._busy.standing}

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
