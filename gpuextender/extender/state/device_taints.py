"""What the agents know of GPU health, as the DRA device taints the allocator honours (issue 25).

kube-scheduler's DRA allocator picks devices on the node the extender chose, first fit, knowing
nothing of what the agents know. A DeviceTaintRule per device it must not hand out closes that gap:

- a GPU its agent reports UNHEALTHY (critical XID quarantine, lost, uncorrectable ECC, row-remap
  failure: the rule the filter uses) gets `gpu-extender.io/unhealthy=<why>:NoSchedule`;
- a DEGRADED one (thermal or power brake, remap pending) `gpu-extender.io/degraded=<why>:None`
  (marked for people and tools; the allocator may still use it);
- a healthy one none: its rule goes as soon as the agent says so (`gpu-agent --clear-xid`);
- a GPU busy outside Kubernetes (issue 35: the idle rule says busy, and no claim holds its device,
  nor a pod where the agent read the kubelet) `gpu-extender.io/busy-outside-kubernetes:NoSchedule`,
  under a rule of its own (`gpu-extender-busy.<node>.<device>`): a degraded GPU can be both.

A GPU is joined to its device as the decisions join them (dra_inventory.capped: by `uuid`, or by
DRA name). Stale agent data keeps its last health, as the filter does; a node the extender forgot
has no rules. Pure: summaries, the DRA inventory and the claims in, the wanted rules out;
`Hysteresis` holds a change back until what it follows has said so for a while (a health rule
never on one bad sample; a busy rule neither on nor off for a job pausing between two kernels).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gpuextender.extender.model.dra import DeviceRef, Toleration
from gpuextender.extender.state.dra_inventory import (
    DraInventory,
    DraNode,
    FreeCounter,
    NodeDevices,
    capped,
    dra_node,
    mig_capped,
)
from gpuextender.extender.state.gpu_summary import NodeSummary

UNHEALTHY_KEY = "gpu-extender.io/unhealthy"
DEGRADED_KEY = "gpu-extender.io/degraded"
BUSY_KEY = "gpu-extender.io/busy-outside-kubernetes"
BUSY_VALUE = "no-pod-holds-it"  # one value: a busy rule is never rewritten while it stands
NO_SCHEDULE, MARK_ONLY = "NoSchedule", "None"
NAME_PREFIX = "gpu-extender."
BUSY_PREFIX = "gpu-extender-busy."
MAX_NAME_CHARS = 253  # a DNS subdomain
LEASE_NAME = "gpu-extender-device-taints"  # the Lease that elects the one replica that writes
GROUP, PLURAL = "resource.k8s.io", "devicetaintrules"  # the API of the rules
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpu-extender")  # the label of every rule written, none other
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TaintRule:
    name: str  # the DeviceTaintRule's metadata.name
    driver: str
    pool: str
    device: str
    key: str
    value: str
    effect: str
    node: str = field(default="", compare=False)  # the node it is on (explain, the fleet page)


def rule_name(node: str, device: str, prefix: str = NAME_PREFIX) -> str:
    """<prefix><node>.<device>: readable, and unique per device (a node's pool and a device name
    are DNS labels/subdomains, so the result is one). Past 253 characters, a digest."""
    name = f"{prefix}{node}.{device}"
    if len(name) <= MAX_NAME_CHARS:
        return name
    return prefix + hashlib.sha256(f"{node}/{device}".encode()).hexdigest()[:40]


def wanted_taints(dra: DraInventory, summary_of: Callable[[str], NodeSummary | None]) -> dict[str, TaintRule]:
    """Every rule the agents' health asks for now, by name."""
    rules: dict[str, TaintRule] = {}
    for node, devices in dra.gpu_devices.items():
        rules.update(health_taints(node, devices, summary_of(node)))
    return rules


def health_taints(node: str, devices: NodeDevices, summary: NodeSummary | None) -> dict[str, TaintRule]:
    """The rules one node's health asks for (a node without problems: none, at the cost of a look)."""
    positions = summary.positions if summary is not None else None
    if positions is None or not positions.problems:
        return {}
    rules: dict[str, TaintRule] = {}
    bad = {at: (unhealthy, why) for at, unhealthy, why in positions.problems}
    for (driver, pool, device_name), device in devices:
        at = positions.position(device.uuid, device.name)
        if at is None or at not in bad:
            continue
        unhealthy, why = bad[at]
        name = rule_name(node, device_name)
        rules[name] = TaintRule(
            name,
            driver,
            pool,
            device_name,
            UNHEALTHY_KEY if unhealthy else DEGRADED_KEY,
            why,
            NO_SCHEDULE if unhealthy else MARK_ONLY,
            node,
        )
    return rules


def busy_taints(
    dra: DraInventory,
    summary_of: Callable[[str], NodeSummary | None],
    allocated_on: Callable[[str], AbstractSet[DeviceRef]] | None,
) -> dict[str, TaintRule]:
    """A NoSchedule rule per DRA GPU its agent reports busy (the idle rule) while no pod holds it:
    no allocated claim holds its device, and no container holds it where the agent read the
    kubelet (GpuPositions.unheld). `allocated_on` None (the claims not listed yet): the holders
    are unknown, and no GPU is tainted for being busy. Unhealthy GPUs are the health rule's."""
    rules: dict[str, TaintRule] = {}
    if allocated_on is None:
        return rules
    for node, devices in dra.gpu_devices.items():
        rules.update(node_busy_taints(node, devices, summary_of(node), allocated_on))
    return rules


def node_busy_taints(
    node: str,
    devices: NodeDevices,
    summary: NodeSummary | None,
    allocated_on: Callable[[str], AbstractSet[DeviceRef]],
) -> dict[str, TaintRule]:
    """One node's busy rules (busy_taints); the claims are read only where a GPU is busy."""
    positions = summary.positions if summary is not None else None
    if positions is None:
        return {}
    busy = positions.busy_outside
    if not busy:
        return {}
    rules: dict[str, TaintRule] = {}
    held = allocated_on(node)
    for ref, device in devices:
        at = positions.position(device.uuid, device.name)
        if at is None or not busy >> at & 1 or ref in held:
            continue
        driver, pool, device_name = ref
        name = rule_name(node, device_name, BUSY_PREFIX)
        rules[name] = TaintRule(name, driver, pool, device_name, BUSY_KEY, BUSY_VALUE, NO_SCHEDULE, node)
    return rules


MODES = ("off", "unsupported", "forbidden", "no-lease-namespace", "standby", "writing")
NODE_MODES = ("off", "forbidden", "standby", "writing")  # the node-status writer's


@dataclass(slots=True)
class TaintWriterStatus:
    """What the writer (inventory/device_taint_writer.py) does now, for metrics and /readyz-free
    reporting: `mode` one of MODES (off: --device-taints off or no --kubernetes)."""

    mode: str = "off"
    rules: int = 0  # rules the leader keeps now
    writes: dict[str, int] = field(default_factory=lambda: {"create": 0, "update": 0, "delete": 0})
    # The node-status writer (issue 35): its mode (NODE_MODES) and writes by what they changed.
    node_mode: str = "off"
    node_writes: dict[str, int] = field(default_factory=lambda: {"condition": 0, "taint": 0, "untaint": 0, "event": 0})
    deferred: int = 0  # writes the budget (--publish-writes-per-second) refused (each ends a pass)
    standing: dict[str, int] = field(default_factory=dict)  # rules that stand now, by taint key (every replica)
    nodes_by_condition: dict[str, int] = field(default_factory=dict)  # GPUsUsable status -> nodes (every replica)
    # The reclaim signal (every replica): held GPUs idle past --idle-window, per node and per claim.
    idle_by_node: dict[str, int] = field(default_factory=dict)
    idle_claims: dict[str, int] = field(default_factory=dict)


class Hysteresis(Generic[T]):
    """Which names stand, of those asked for now: a name not standing starts to once it has been
    asked for without a break for `on_s`; a standing one stops once it has not been asked for
    without a break for `off_s` (0: at once). A break restarts the clock: a GPU toggling faster
    than the hold never changes what stands (one write per hold at most). What stands at the start
    (`adopt`: the rules a new leader finds) counts as standing. Asked values replace standing ones
    at once (unhealthy -> degraded is one rule's new value, not a new rule)."""

    def __init__(self, on_s: float, off_s: float) -> None:
        self.on_s, self.off_s = on_s, off_s
        self.standing: dict[str, T] = {}
        self._since: dict[str, float] = {}  # name -> when asked first disagreed with standing

    def adopt(self, names: Mapping[str, T]) -> None:
        for name, value in names.items():
            self.standing.setdefault(name, value)

    def settle(self, asked: Mapping[str, T], now: float) -> dict[str, T]:
        standing, since = self.standing, self._since
        for name in [n for n in since if (n in asked) == (n in standing)]:
            del since[name]  # agrees again: a later change starts from zero
        for name, value in asked.items():
            if name in standing:
                standing[name] = value
            elif now - since.setdefault(name, now) >= self.on_s:
                standing[name] = value
                del since[name]
        for name in [n for n in standing if n not in asked]:
            if now - since.setdefault(name, now) >= self.off_s:
                del standing[name], since[name]
        return standing

    def pending(self, name: str) -> float | None:
        """When `name` began to disagree with what stands (None: it agrees)."""
        return self._since.get(name)


class TolerantView:
    """One decision's view of DRA nodes for a pod whose claims tolerate device taints (issue 25: an
    operator's diagnostics on a quarantined GPU is not blocked by the extender either): on a node
    with tainted devices or GPUs its agent reports unhealthy, a device whose every taint the pod
    tolerates is free to it, and an unhealthy GPU whose rule here (UNHEALTHY_KEY=<why>:NoSchedule)
    it tolerates is available to it. Every other node reads the shared cache. Such pods are rare and
    such nodes few: computed per decision, per node asked."""

    def __init__(
        self,
        dra: DraInventory,
        held: Callable[[str], AbstractSet[DeviceRef]],
        tolerations: tuple[Toleration, ...],
        shared: tuple[FreeCounter, Callable[[str], NodeSummary | None]],
        offered: Callable[[str], NodeSummary | None],
    ) -> None:
        self._dra, self._held, self._tolerations = dra, held, tolerations
        self._free, self._summary = shared
        self._offered = offered
        self._nodes: dict[str, tuple[DraNode, NodeSummary | None] | None] = {}

    def _own(self, node: str) -> tuple[DraNode, NodeSummary | None] | None:
        """This pod's view of `node`, or None where it is the shared one."""
        if node in self._nodes:
            return self._nodes[node]
        devices = self._dra.gpu_devices.get(node)
        summary = self._offered(node)
        positions = summary.positions if summary is not None else None
        found: tuple[DraNode, NodeSummary | None] | None = None
        if devices and (any(d.taints for _, d in devices) or (positions is not None and positions.problems)):
            tolerations = self._tolerations
            mine = dra_node(devices, self._held(node), tolerations)
            extra = 0
            for at, unhealthy, why in positions.problems if positions is not None else ():
                if unhealthy and any(t.tolerates(UNHEALTHY_KEY, why, NO_SCHEDULE) for t in tolerations):
                    extra |= 1 << at
            own = capped(summary, mine, extra) if summary is not None else None
            shared = self._free.node(node)  # its MIG devices: as for every pod (tolerations are GPU requests')
            if own is not None and shared is not None and shared.mig_free is not None:
                own = mig_capped(own, shared.mig_free)
            found = (mine, own)
        self._nodes[node] = found
        return found

    def free(self, node: str) -> int | None:
        own = self._own(node)
        return self._free(node) if own is None else own[0].free

    def summary(self, node: str) -> NodeSummary | None:
        own = self._own(node)
        return self._summary(node) if own is None else own[1]
