"""What the agents know of GPU health, as the DRA device taints the allocator honours (issue 25).

kube-scheduler's DRA allocator picks devices on the node the extender chose, first fit, knowing
nothing of what the agents know. A DeviceTaintRule per device it must not hand out closes that gap:

- a GPU its agent reports UNHEALTHY (critical XID quarantine, lost, uncorrectable ECC, row-remap
  failure: the rule the filter uses) gets `gpu-extender.io/unhealthy=<why>:NoSchedule`;
- a DEGRADED one (thermal or power brake, remap pending) `gpu-extender.io/degraded=<why>:None`
  (marked for people and tools; the allocator may still use it);
- a healthy one none: its rule goes as soon as the agent says so (`gpu-agent --clear-xid`).

A GPU is joined to its device as the decisions join them (dra_inventory.capped: by `uuid`, or by
DRA name). Stale agent data keeps its last health, as the filter does; a node the extender forgot
has no rules. Pure: summaries and the DRA inventory in, the wanted rules out; `Debounce` holds a
rule back until the GPU has been bad for a while (never on a single bad sample).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from gpuextender.extender.model.dra import DeviceRef, Toleration
from gpuextender.extender.state.dra_inventory import DraInventory, DraNode, FreeCounter, capped, dra_node, mig_capped
from gpuextender.extender.state.gpu_summary import NodeSummary

UNHEALTHY_KEY = "gpu-extender.io/unhealthy"
DEGRADED_KEY = "gpu-extender.io/degraded"
NO_SCHEDULE, MARK_ONLY = "NoSchedule", "None"
NAME_PREFIX = "gpu-extender."
MAX_NAME_CHARS = 253  # a DNS subdomain
LEASE_NAME = "gpu-extender-device-taints"  # the Lease that elects the one replica that writes


@dataclass(frozen=True, slots=True)
class TaintRule:
    name: str  # the DeviceTaintRule's metadata.name
    driver: str
    pool: str
    device: str
    key: str
    value: str
    effect: str


def rule_name(node: str, device: str) -> str:
    """gpu-extender.<node>.<device>: readable, and unique per device (a node's pool and a device
    name are DNS labels/subdomains, so the result is one). Past 253 characters, a digest."""
    name = f"{NAME_PREFIX}{node}.{device}"
    if len(name) <= MAX_NAME_CHARS:
        return name
    return NAME_PREFIX + hashlib.sha256(f"{node}/{device}".encode()).hexdigest()[:40]


def wanted_taints(dra: DraInventory, summary_of: Callable[[str], NodeSummary | None]) -> dict[str, TaintRule]:
    """Every rule the agents' health asks for now, by name."""
    rules: dict[str, TaintRule] = {}
    for node, devices in dra.gpu_devices.items():
        summary = summary_of(node)
        positions = summary.positions if summary is not None else None
        if positions is None or not positions.problems:
            continue
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
            )
    return rules


MODES = ("off", "unsupported", "forbidden", "no-lease-namespace", "standby", "writing")


@dataclass(slots=True)
class TaintWriterStatus:
    """What the writer (inventory/device_taint_writer.py) does now, for metrics and /readyz-free
    reporting: `mode` one of MODES (off: --device-taints off or no --kubernetes)."""

    mode: str = "off"
    rules: int = 0  # rules the leader keeps now
    writes: dict[str, int] = field(default_factory=lambda: {"create": 0, "update": 0, "delete": 0})


class Debounce:
    """A rule is wanted once the GPU has been bad for `hold_s` (any bad verdict, unhealthy or
    degraded, counts from the first): a single bad sample never taints. A rule whose GPU is healthy
    again is not wanted at once."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self._since: dict[str, float] = {}

    def settled(self, wanted: dict[str, TaintRule], now: float) -> dict[str, TaintRule]:
        since = self._since
        for name in [n for n in since if n not in wanted]:
            del since[name]
        ready = {}
        for name, rule in wanted.items():
            first = since.setdefault(name, now)
            if now - first >= self.hold_s:
                ready[name] = rule
        return ready


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
