"""The fleet page's data (`GET /ui/fleet.json`): every GPU node as a row of its GPUs,
grouped by AcceleratorClass, with the number of GPUs in each state per class.

Pure: it reads the per-node summaries the extender keeps (gpu_summary.NodeSummary.gpus,
one cell per GPU classified at ingest by the same comparisons the decision uses), the
static GPU facts, the inventory's allocatable GPUs and the live class membership
(live_classes: labels refined by NVML facts, what the decisions use). No I/O, no clock.

States (`STATES`; a cell's state is an index into it):
    free-idle       healthy, held by no pod, idle by the idle rule: what a pod can get
    free-busy       held by no pod, but its utilization or memory is over the idle rule
    allocated-busy  held by a pod and busy
    allocated-idle  held by a pod yet idle: the waste platform teams hunt
    degraded        usable but throttled or pending a row remap (ranked lower)
    unhealthy       critical XID, ECC, lost GPU, or NVML unusable on the node
    unknown         no agent data, or data older than --stale-after: never shown as idle
    holder-unknown-idle / -busy   the agent cannot read the kubelet's allocation: the decision
                    goes by the readings alone, the page does not call a guess free
A cell is [index, state, utilization %, memory used %] and, for a GPU that is unhealthy or
degraded, why ("xid-79", "gpu-is-lost", "dra-device-taint": a fifth element), and for a GPU a pod
holds, the pod's namespace (a sixth; the fifth then null where there is no why).

What counts as an idle GPU a pod can get has one definition, `idle_counts`, which the counters, the
24-hour chart (`history_sample`) and the domains table all read: free-idle (no pod holds it) and,
apart, holder-unknown-idle (the agent cannot read the kubelet: the decision offers it, going by the
readings alone, but the page does not call a guess free). The document says which states those are
(`idleStates`) for the page's own sort.

The fleet history (state/fleet_history.py) keeps of each document its totals of free-idle,
holder-unknown-idle, allocated-idle and unhealthy GPUs and its number of waiting pods.

A node whose GPUs come through DRA is shown as the decision counts it: a GPU whose DRA device a
ResourceClaim holds is allocated even before its pod runs (the agent reads it free), one whose device
a NoSchedule/NoExecute taint blocks is unhealthy, one a None-effect taint marks degraded; the row's
`dra` says how many devices its ResourceSlices publish, and how many are claimed and tainted. A DRA
node without agent data shows one unknown cell per device.

Only what is safe to show without a login goes in: node names, GPU models and memory,
utilization and memory readings, data age, NVML error text, the namespaces of pods holding
idle GPUs, and the namespace/name of GPU pods the latest filter found no place for (with the
reasons it gave kube-scheduler, which `kubectl describe pod` shows anyone who may read the pod).
No other pod names, no labels, no tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide.whole_gpus import SummaryLookup
from gpuextender.extender.model.dra import DeviceRef
from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.state.device_taints import BUSY_KEY
from gpuextender.extender.state.dra_inventory import NodeDevices
from gpuextender.extender.state.fleet_history import Sample
from gpuextender.extender.state.freshness import data_age, is_fresh
from gpuextender.extender.state.gpu_summary import (
    GPU_ALLOCATED_BUSY,
    GPU_ALLOCATED_IDLE,
    GPU_DEGRADED,
    GPU_FREE_BUSY,
    GPU_FREE_IDLE,
    GPU_UNHEALTHY,
    NodeSummary,
)
from gpuextender.extender.state.publication import NodePublished
from gpuextender.extender.state.waiting_pods import Waiting

STATES = (
    "free-idle",
    "free-busy",
    "allocated-busy",
    "allocated-idle",
    "degraded",
    "unhealthy",
    "unknown",
    "holder-unknown-idle",
    "holder-unknown-busy",
)
UNKNOWN = STATES.index("unknown")
HOLDER_UNKNOWN_IDLE = STATES.index("holder-unknown-idle")
HOLDER_UNKNOWN_BUSY = STATES.index("holder-unknown-busy")
STATE_TEXT = (
    "free, idle: a pod can get it",
    "free, busy: utilization or memory over the idle rule",
    "allocated to a pod, busy",
    "allocated to a pod, idle (waste)",
    "degraded: usable, ranked lower",
    "unhealthy: never used",
    "unknown: no data or stale data (never counted as idle)",
    "idle, holder unknown: its agent cannot read the kubelet's allocation (a pod may hold it)",
    "busy, holder unknown: its agent cannot read the kubelet's allocation",
)
_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class FleetInputs:
    summary: SummaryLookup  # node -> its agent's summary, or None
    facts: Callable[[str], tuple[GpuFacts, ...] | None]  # node -> its GPUs' static facts
    allocatable: Mapping[str, int]  # node -> allocatable GPUs (inventory)
    classes_by_node: Mapping[str, tuple[str, ...]]  # node -> its AcceleratorClasses (live_classes)
    class_names: Sequence[str]  # every valid AcceleratorClass, shown even when empty
    now: float  # monotonic seconds, the clock summaries' received_at is on
    stale_after_s: float
    rule: IdleRule
    # node -> the whole GPUs its DRA ResourceSlices publish, and the devices claims hold there
    dra_devices: Callable[[str], NodeDevices] = lambda _node: ()
    claimed_on: Callable[[str], AbstractSet[DeviceRef]] = lambda _node: frozenset()
    # Multi-pod groups' domains: the first --group-topology-levels label, each node's value of it
    # (absent: a node outside every domain), and the groups holding room per domain name.
    domain_level: str = ""
    domain_of: Mapping[str, str] = field(default_factory=dict)
    groups_held: Mapping[str, Sequence[tuple[str, int]]] = field(default_factory=dict)  # domain -> (group, members)
    # What the extender publishes per node for other schedulers (state/publication.py).
    published: Callable[[str], NodePublished | None] = lambda _node: None


IDLE_STATES = (STATES[GPU_FREE_IDLE], STATES[HOLDER_UNKNOWN_IDLE])  # what `idle_counts` counts


class IdleCounts(NamedTuple):
    """Idle healthy GPUs no pod is known to hold: what the decision offers a pod."""

    free: int  # free-idle: the kubelet says no pod holds them
    holder_unknown: int  # holder-unknown-idle: nobody can say; shown apart, never called free

    @property
    def offered(self) -> int:
        return self.free + self.holder_unknown


def idle_counts(counts: Mapping[str, int]) -> IdleCounts:
    """The idle GPUs among per-state `counts` (state name -> GPUs): the page's one rule for them."""
    return IdleCounts(counts.get(IDLE_STATES[0], 0), counts.get(IDLE_STATES[1], 0))


# A free GPU whose DRA device a claim holds: allocated, as the decision counts it.
_CLAIMED = {
    GPU_FREE_IDLE: GPU_ALLOCATED_IDLE,
    GPU_FREE_BUSY: GPU_ALLOCATED_BUSY,
    HOLDER_UNKNOWN_IDLE: GPU_ALLOCATED_IDLE,
    HOLDER_UNKNOWN_BUSY: GPU_ALLOCATED_BUSY,
}
# Where the agent cannot tell who holds a GPU, "free" is a guess: drawn apart (issue 26).
_HOLDER_UNKNOWN = {GPU_FREE_IDLE: HOLDER_UNKNOWN_IDLE, GPU_FREE_BUSY: HOLDER_UNKNOWN_BUSY}


def gpu_nodes(allocatable: Mapping[str, int], agent_nodes: Iterable[str], dra_nodes: Iterable[str] = ()) -> list[str]:
    """Every GPU node, by name: allocatable GPUs in the inventory, DRA GPUs, or data from an agent."""
    names = {name for name, count in allocatable.items() if count > 0}
    names.update(agent_nodes)
    names.update(dra_nodes)
    return sorted(names)


def node_row(name: str, inputs: FleetInputs) -> dict[str, Any]:
    """One node: its data state and one cell per GPU, [index, state, utilization %, memory used %],
    then, where known, why it is unhealthy or degraded, who holds it, and the SM activity % that
    judged it (else utilization did)."""
    summary = inputs.summary(name)
    devices = inputs.dra_devices(name)
    allocatable = inputs.allocatable.get(name, 0) or len(devices)
    row: dict[str, Any] = {"node": name, "data": "none", "ageSeconds": None}
    if summary is None:
        # Nothing from the agent: the allocatable GPUs, each unknown.
        row["gpus"] = [[i, UNKNOWN, None, None] for i in range(allocatable)]
    else:
        age = data_age(summary.received_at, inputs.now)
        row["ageSeconds"] = round(age, 1)
        if not is_fresh(summary.received_at, inputs.now, inputs.stale_after_s):  # as the decisions judge it
            row["data"] = "stale"
            row["gpus"] = [[cell[0], UNKNOWN, None, None] for cell in summary.gpus]
        else:
            row["data"] = "fresh"
            unknown_holders = summary.free_gpus is None  # allocation not read from the kubelet
            row["gpus"] = [
                [
                    i,
                    _HOLDER_UNKNOWN.get(state, state) if unknown_holders else state,
                    util,
                    None if mem is None else round(mem, 1),
                ]
                for i, state, util, mem in summary.gpus
            ]
            _reasons(row["gpus"], summary)
            for position, namespaces in summary.held_by:  # sixth element: who holds it
                if position < len(row["gpus"]):
                    cell = row["gpus"][position]
                    cell.extend([None] * (5 - len(cell)))
                    cell.append(namespaces)
            # Seventh element: the SM activity that judged it instead of its utilization (idle_rule.py).
            for position, sm in enumerate(summary.sm_active):
                if sm is not None and position < len(row["gpus"]):
                    cell = row["gpus"][position]
                    cell.extend([None] * (6 - len(cell)))
                    cell.append(round(sm, 2))
            if not summary.gpus and summary.node_error:  # NVML gave no GPU at all
                row["gpus"] = [[i, GPU_UNHEALTHY, None, None] for i in range(allocatable)]
        _describe(row, summary)
    if devices:
        _dra(row, summary, devices, inputs.claimed_on(name))
    published = inputs.published(name)
    if published is not None:
        _published(row, summary, devices, published)
    _hardware(row, inputs.facts(name))
    return row


def _published(row: dict[str, Any], summary: NodeSummary | None, devices: NodeDevices, found: NodePublished) -> None:
    """What other schedulers see of the node: `published.taints` the device taint keys that stand,
    by device (a busy one's cell says why: "tainted: busy-outside-kubernetes"), and a device-plugin
    node's GPUsUsable condition."""
    standing = {t.device: t.key for t in found.taints if t.stands}
    out: dict[str, Any] = {"taints": standing}
    if found.status is not None:
        out["condition"] = {"status": found.status.status, "message": found.status.message}
    row["published"] = out
    positions = summary.positions if summary is not None and row["data"] == "fresh" else None
    if positions is None or not standing:
        return
    cells = row["gpus"]
    for ref, device in devices:
        key = standing.get(ref[2])
        at = positions.position(device.uuid, device.name)
        if key != BUSY_KEY or at is None or at >= len(cells):
            continue
        cell = cells[at]
        cell.extend([None] * (5 - len(cell)))
        cell[4] = "tainted: " + key.rpartition("/")[2]


def _reasons(cells: list[list[Any]], summary: NodeSummary) -> None:
    """Why each unhealthy or degraded GPU is so ("xid-79", "gpu-is-lost", "ecc-uncorrected",
    "thermal-slowdown": state/gpu_health.py), as a fifth element of its cell; known for nodes of
    whole GPUs at their indexes (summary.positions)."""
    positions = summary.positions
    if positions is None:
        return
    for position, _unhealthy, problem in positions.problems:
        if position < len(cells):
            cells[position].append(problem)


def _dra(row: dict[str, Any], summary: NodeSummary | None, devices: NodeDevices, held: AbstractSet[DeviceRef]) -> None:
    claimed = tainted = 0
    positions = summary.positions if summary is not None and row["data"] == "fresh" else None
    cells = row["gpus"]
    for ref, device in devices:
        is_claimed, is_tainted = ref in held, not device.allocatable
        claimed += is_claimed
        tainted += is_tainted and not is_claimed
        at = positions.position(device.uuid, device.name) if positions is not None else None
        if at is None or at >= len(cells):
            continue
        cell = cells[at]
        if is_claimed:
            cell[1] = _CLAIMED.get(cell[1], cell[1])
        elif is_tainted:
            cell[1] = GPU_UNHEALTHY
            if len(cell) == 4:
                cell.append("dra-device-taint")
        elif device.taints and cell[1] in _CLAIMED:  # marked only (effect None): usable, ranked lower
            cell[1] = GPU_DEGRADED
    row["dra"] = {"devices": len(devices), "claimed": claimed, "tainted": tainted}


def _describe(row: dict[str, Any], summary: NodeSummary) -> None:
    row["allocation"] = summary.allocation
    if summary.node_error:
        row["error"] = summary.node_error
    if summary.idle_by_namespace and row["data"] == "fresh":
        row["allocatedIdleByNamespace"] = dict(summary.idle_by_namespace)


def _hardware(row: dict[str, Any], facts: tuple[GpuFacts, ...] | None) -> None:
    if not facts:
        return
    models = sorted({f.name for f in facts if f.name})
    if models:
        row["model"] = " + ".join(models)
    totals = {f.memory_total_bytes for f in facts}
    if len(totals) == 1 and (total := next(iter(totals))):
        row["gpuMemoryGiB"] = round(total / _GIB, 1)


class FleetAccumulator:
    """The page's document, node by node (so a caller can build it in slices). `row_out` turns
    each row into what the document holds (the server encodes each row as it is made, so the
    final encoding is a copy of bytes, not one long hold of the event loop)."""

    def __init__(self, inputs: FleetInputs, row_out: Callable[[dict[str, Any]], Any] = lambda row: row) -> None:
        self.inputs = inputs
        self._row_out = row_out
        self._groups: dict[str | None, dict[str, Any]] = {name: _group(name) for name in sorted(inputs.class_names)}
        self._groups[None] = _group(None)
        self._totals = _group(None)
        self._domains: dict[str, dict[str, Any]] = {}  # value -> {domain, nodes, gpus, counts by state}

    def add(self, name: str) -> None:
        row = node_row(name, self.inputs)
        cells = row["gpus"]
        counts = [0] * len(STATES)
        for cell in cells:
            counts[cell[1]] += 1
        out = self._row_out(row)
        for cls in self.inputs.classes_by_node.get(name, ()) or (None,):
            group = self._groups.get(cls)
            if group is None:
                group = self._groups[cls] = _group(cls)
            _count(group, counts, len(cells))
            group["rows"].append(out)
        _count(self._totals, counts, len(cells))
        value = self.inputs.domain_of.get(name)
        if value is not None:
            domain = self._domains.get(value)
            if domain is None:
                domain = self._domains[value] = _group(None)
            _count(domain, counts, len(cells))

    def domains(self) -> dict[str, Any]:
        """Per domain of the first group level: its GPU nodes, idle GPUs (`idle_counts`: what a group
        can get there, the holder-unknown ones apart), and the groups whose room is held there; most
        idle GPUs offered first."""
        level, held = self.inputs.domain_level, self.inputs.groups_held
        ranked = []
        for value, domain in self._domains.items():
            idle = idle_counts(domain["counts"])
            groups = held.get(f"{level}={value}", ())
            row = {
                "domain": value,
                "nodes": domain["nodes"],
                "gpus": domain["gpus"],
                "freeIdleGpus": idle.free,
                "holderUnknownIdleGpus": idle.holder_unknown,
                "groupsHeld": [{"group": g, "membersHeld": n} for g, n in groups],
            }
            ranked.append((-idle.offered, value, row))
        ranked.sort(key=lambda r: r[:2])
        return {"level": level, "domains": [row for _, _, row in ranked]}

    def result(self) -> dict[str, Any]:
        rule = self.inputs.rule
        groups = [g for cls, g in self._groups.items() if cls is not None]
        if self._groups[None]["nodes"]:
            groups.append(self._groups[None])  # the unclassified group last, shown only when it has nodes
        return {
            "states": list(STATES),
            "stateText": list(STATE_TEXT),
            "idleStates": list(IDLE_STATES),
            "staleAfterSeconds": self.inputs.stale_after_s,
            "idleRule": {
                "maxUtilizationPercent": rule.max_utilization_percent,
                "maxMemoryUsedPercent": rule.max_memory_used_percent,
                "maxSmActivePercent": rule.max_sm_active_percent,
            },
            "totals": {k: v for k, v in self._totals.items() if k not in ("class", "rows")},
            "classes": groups,
            "domains": self.domains(),
        }


def waiting_row(w: Waiting, now: float) -> dict[str, Any]:
    """A pod waiting for GPUs, as the page's "pods waiting for GPUs" panel lists it."""
    return {
        "pod": w.pod,
        "gpus": w.gpus,
        "waitingSeconds": round(now - w.since),
        "lastFilterSecondsAgo": round(now - w.last),
        "filterCalls": w.calls,
        "nodes": w.nodes,
        "verdict": w.verdict,
        "reasons": [{"code": code, "sentence": sentence, "nodes": n} for code, sentence, n in w.reasons],
    }


def history_sample(doc: Mapping[str, Any]) -> Sample:
    """What the fleet history keeps of one document: the page's own totals (its idle GPUs by
    `idle_counts`, allocated-idle and unhealthy GPUs) and the number of pods its waiting panel
    lists. When no GPU has data (every GPU unknown, or no GPU node yet) the GPU counts are unknown
    (None), not 0."""
    totals = doc["totals"]
    counts = totals["counts"]
    waiting = len(doc["waiting"])
    if totals["gpus"] - counts["unknown"] <= 0:
        return Sample(None, None, None, None, waiting)
    idle = idle_counts(counts)
    return Sample(idle.free, idle.holder_unknown, counts["allocated-idle"], counts["unhealthy"], waiting)


def _group(name: str | None) -> dict[str, Any]:
    return {"class": name, "nodes": 0, "gpus": 0, "counts": dict.fromkeys(STATES, 0), "rows": []}


def _count(group: dict[str, Any], counts: list[int], gpus: int) -> None:
    group["nodes"] += 1
    group["gpus"] += gpus
    totals = group["counts"]
    for state, n in zip(STATES, counts, strict=False):
        if n:
            totals[state] += n


def build(inputs: FleetInputs, nodes: Iterable[str]) -> dict[str, Any]:
    """The whole document at once (tests; the server builds it in slices: fleet_page.py)."""
    acc = FleetAccumulator(inputs)
    for name in nodes:
        acc.add(name)
    return acc.result()
