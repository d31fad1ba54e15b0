"""Per-node GPU summary, computed once when a report arrives (never per request).

Idle rule (from the LLM inference autotuner): a GPU is idle when it is healthy,
its utilization is below `max_utilization_percent` AND its memory used is below
`max_memory_used_percent` of its total. A reading the GPU does not provide (e.g.
utilization on a MIG-enabled GPU) does not count against idleness; the other
reading decides.

Counts are in units of the GPU resource a pod requests, as the device plugin
advertises them: one per whole GPU, `replicas` per GPU shared by time-slicing or
MPS (a node with 8 GPUs and replicas 4 advertises and is counted as 32). Per GPU:
- units:     replicas when shared (time-slicing, MPS; 1 when the agent does not
             know), 1 when exclusive or unknown; a MIG-enabled GPU's capacity is
             its MIG instances (other resources), so it offers 0 whole-GPU units.
- free:      allocation known (the agent read the kubelet): units minus the
             distinct device IDs its holders hold (an exclusive GPU with any holder
             is not free); allocation unknown (agent before 0.2, kubelet not
             readable): all its units, the idle readings alone decide (today's rule).
- available: free units of a healthy GPU that is idle by the rule above. For a
             shared GPU the readings judge the whole physical GPU: its free
             replicas count only while it is idle enough.
A node's idle_gpus is the sum of available units; degraded_idle_gpus is the part of
it on GPUs the agent reports DEGRADED (usable, ranked lower: see whole_gpus.py).
Allocated-but-idle GPUs (held by a pod, idle by the rule) are counted per node and
per namespace of their holders: the waste platform teams hunt. MIG instances are
counted per profile (mig_devices matches `nvidia.com/mig-<profile>` requests to them:
on a healthy GPU in MIG mode, free when no pod holds the instance where allocation
is known, idle when its memory used is below the threshold). How well the
available whole GPUs connect (NVLink, PCIe switch, NUMA node) is looked up per set
size in gpu_topology's per-topology table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuextender.common.idle_rule import IdleRule, mig_instance_is_idle, sm_active_of
from gpuextender.extender.model.pod_key import pod_key
from gpuextender.extender.state.gpu_health import problem_of
from gpuextender.extender.state.gpu_topology import tier_for, tiers_for_mask, topology_key
from gpuextender.v1 import gpu_state_pb2 as pb

# Set sizes whose quality class is precomputed per report: up to 64 GPUs (or replicas) per pod.
QUALITY_SIZES = 65
# The most replicas per GPU read off a Node's allocatable (as many as an agent may report).
MAX_INFERRED_REPLICAS = 64
_TIME_SLICING, _MPS, _MIG, _DEGRADED = pb.SHARING_TIME_SLICING, pb.SHARING_MPS, pb.SHARING_MIG, pb.HEALTH_DEGRADED
ALLOCATION_FROM_KUBELET = "kubelet"
ALLOCATION_BEFORE_0_2 = "unknown (agent before 0.2)"

# Each GPU's state as the rules above see it (NodeSummary.gpus: the fleet page's cells), first
# match wins: unhealthy; degraded (healthy but DEGRADED); held by a pod (allocation known) and
# busy or idle by the idle rule; else free and busy or idle. Allocation unknown: every GPU is
# free, as the decision counts it. A shared GPU with any replica held counts as allocated.
GPU_FREE_IDLE, GPU_FREE_BUSY, GPU_ALLOCATED_BUSY, GPU_ALLOCATED_IDLE, GPU_DEGRADED, GPU_UNHEALTHY = range(6)
GPU_STATE_NAMES = ("free, idle", "free, busy", "held, busy", "held, idle", "degraded", "unhealthy")
# (NVML index, state, utilization %, memory used %); a reading NVML did not give: None.
GpuCell = tuple[int, int, int | None, float | None]


@dataclass(frozen=True, slots=True)
class GpuPositions:
    """A node's whole GPUs by report position (bit i: report.gpus[i]), for joining them to the
    node's DRA devices (dra_inventory.capped): each GPU's UUID and DRA name, which are available
    (healthy, idle, held by no container), which of those are degraded, which are healthy and held
    by no container, and the topology that ranks a subset of them."""

    uuids: tuple[str, ...]
    dra_names: tuple[str, ...]
    available: int
    degraded: int
    unheld: int
    topology_key: bytes
    # (position, unhealthy: True / degraded: False, why: gpu_health.problem_of) of every GPU that
    # is not healthy; () on a healthy node (the common case costs nothing).
    problems: tuple[tuple[int, bool, str], ...] = ()

    @property
    def busy_outside(self) -> int:
        """The GPUs busy outside Kubernetes, a bit each: healthy, held by no container, not idle. The
        one rule of what the busy taints (device_taints.py) and the GPUsUsable condition
        (node_gpu_status.py) call busy; meaningful where the agent read the kubelet's allocation."""
        return self.unheld & ~self.available

    def position(self, uuid: str, dra_name: str) -> int | None:
        """The report position of the GPU with this UUID or, when `uuid` is "", this DRA name."""
        found = self.uuids if uuid else self.dra_names
        key = uuid or dra_name
        return found.index(key) if key and key in found else None


@dataclass(frozen=True, slots=True)
class NodeSummary:
    node: str
    gpu_count: int  # units (module docstring): whole GPUs, or replicas of shared ones
    healthy_gpus: int  # units on healthy GPUs
    idle_gpus: int  # available units: healthy, idle, and free (not held) when allocation is known
    mean_utilization: float | None  # over GPUs that report utilization
    node_error: str  # NVML unusable on the node (then healthy_gpus is 0)
    sequence: int
    sample_time: float  # Unix seconds, agent clock
    received_at: float  # extender monotonic clock: freshness is judged on our own clock
    # -- from 0.2 agents (defaults: what an older agent's report means)
    free_gpus: int | None = None  # units on healthy GPUs not held by a pod; None: allocation unknown
    degraded_idle_gpus: int = 0  # the part of idle_gpus on DEGRADED GPUs
    allocated_idle_gpus: int = 0  # physical GPUs held by a pod yet idle (allocation known only)
    idle_by_namespace: tuple[tuple[str, int], ...] = ()  # allocated-but-idle GPUs per holder namespace
    allocation: str = ALLOCATION_BEFORE_0_2  # where allocation came from, or why it is unknown
    # Best connection tier per set size of the available whole GPUs (gpu_topology); (): unknown
    # (no topology, shared or MIG GPUs, or GPUs not reported in index order).
    set_tiers: tuple[int, ...] = ()
    mig_gpus: int = 0  # GPUs in MIG mode (they offer MIG devices, never whole GPUs)
    # Per MIG profile ("1g.10gb"): instances on healthy GPUs, and those free (no holder where
    # allocation is known) and idle (memory used below the idle threshold). Sorted by profile.
    mig_instances: tuple[tuple[str, int], ...] = ()
    mig_free: tuple[tuple[str, int], ...] = ()
    # whole_gpus.py's quality class q for a pod of k = 0..min(idle_gpus, 64) GPUs (2 * set tier +
    # degraded-only): computed here, once per report, so ranking a node is one index.
    quality: tuple[int, ...] = (0,)
    # Per GPU in report order (GpuCell): for people (the fleet page), never read by decisions.
    gpus: tuple[GpuCell, ...] = ()
    # Per GPU as `gpus`: the GPM SM activity (percent) that judged it idle or busy instead of its
    # utilization (common/idle_rule.py); None where utilization judged it (no GPM, or the SM rule
    # off) or its health did. (): no GPU was judged by SM activity.
    sm_active: tuple[float | None, ...] = ()
    # (position, "namespace[,namespace...]") of each GPU a pod holds (allocation known): the fleet
    # page's "held by"; namespaces only, as the page shows nothing more of a running pod.
    held_by: tuple[tuple[int, str], ...] = ()
    # "namespace/pod" of every pod holding one of its GPUs or MIG devices (allocation known only):
    # the bound pods the agent already attributes (bound_pods.py counts the others).
    holder_pods: frozenset[str] = frozenset()
    # Units taken off idle_gpus/free_gpus for bound pods not attributed yet (bound_pods.offered).
    bound_pod_units: int = 0
    # ("namespace/pod", units it holds on healthy GPUs, the part of them idle by the rule) per pod
    # holding whole or shared GPUs (allocation known only), sorted: what evicting it gives back
    # (decide/preempt_victims.py) and whether its GPUs sit idle (the cheapest victims first).
    pod_units: tuple[tuple[str, int, int], ...] = ()
    # Every GPU whole and at its index (set_tiers' condition): the GPUs by position; else None.
    positions: GpuPositions | None = None
    # No GPU says how it is shared (no mode, or time-slicing/MPS without a count), none is in MIG
    # mode and allocation is unknown: `with_inferred_sharing` may read the count off allocatable.
    sharing_unknown: bool = False
    inferred_replicas: int = 0  # replicas per GPU read off the node's allocatable (0: none inferred)

    def gpu_state(self, uuid: str, dra_name: str) -> int | None:
        """The GpuCell state of the GPU with this UUID (or, when `uuid` is "", this DRA name); None
        when the GPUs are not known by position or none is that one."""
        at = self.positions.position(uuid, dra_name) if self.positions is not None else None
        return self.gpus[at][1] if at is not None else None


def gpu_units(gpu: pb.GpuSample) -> int:
    """What one physical GPU counts for in the GPU resource (module docstring)."""
    mode = gpu.sharing.mode
    if mode == _TIME_SLICING or mode == _MPS:
        return gpu.sharing.replicas or 1
    return 0 if mode == _MIG else 1


def allocation_of(report: pb.NodeReport) -> str:
    if report.allocation_source == pb.ALLOCATION_KUBELET:
        return ALLOCATION_FROM_KUBELET
    if report.allocation_source == pb.ALLOCATION_UNAVAILABLE:
        return f"unavailable ({report.allocation_problem or 'no reason given'})"
    return ALLOCATION_BEFORE_0_2


def summarize(report: pb.NodeReport, rule: IdleRule, received_at: float) -> NodeSummary:
    known = report.allocation_source == pb.ALLOCATION_KUBELET
    broken = bool(report.node_error)
    max_util, max_mem, max_sm = rule.max_utilization_percent, rule.max_memory_used_percent, rule.max_sm_active_percent
    total = healthy = free = idle = degraded = allocated_idle = 0
    utilizations: list[int] = []
    waste: dict[str, int] = {}
    available_mask = 0  # bit i: report.gpus[i] is an available whole GPU
    degraded_mask = unheld_mask = 0  # bit i: ... available and degraded; healthy and held by no container
    problems: list[tuple[int, bool, str]] = []
    mig_gpus = 0
    mig_all: dict[str, int] = {}
    mig_free: dict[str, int] = {}
    whole = True  # every GPU exclusive (or of an old agent) and at its index: topology applies
    sharing_unknown = True  # no GPU says how it is shared (module docstring: with_inferred_sharing)
    cells: list[GpuCell] = []
    judged_sm: list[float | None] = []  # NodeSummary.sm_active, kept only when one is not None
    by_sm = False
    held_by: list[tuple[int, str]] = []
    pod_units: dict[str, list[int]] = {}  # NodeSummary.pod_units, built per held healthy GPU
    # Runs for every report of every node (bench_extender's ingest): gpu_units() and
    # gpu_is_idle() are inlined, each protobuf field read once (tests/common/test_idle_rule.py holds
    # the copy equal to common/idle_rule.py on generated GPUs).
    for position, gpu in enumerate(report.gpus):
        sharing = gpu.sharing
        mode = sharing.mode
        if mode == _TIME_SLICING or mode == _MPS:
            units = sharing.replicas or 1
            if sharing.replicas:
                sharing_unknown = False
        else:
            units = 0 if mode == _MIG else 1
            if mode:
                sharing_unknown = False
        index = gpu.index
        if units != 1 or index != position:
            whole = False
        total += units
        if broken:
            cells.append((index, GPU_UNHEALTHY, None, None))
            judged_sm.append(None)
            continue
        util = gpu.utilization_gpu_percent if gpu.HasField("utilization_gpu_percent") else None
        if util is not None:
            utilizations.append(util)
        if gpu.HasField("memory_used_bytes") and gpu.memory_total_bytes > 0:
            mem_percent: float | None = 100.0 * gpu.memory_used_bytes / gpu.memory_total_bytes
        else:
            mem_percent = None
        if not gpu.healthy:
            cells.append((index, GPU_UNHEALTHY, util, mem_percent))
            judged_sm.append(None)
            problems.append((position, True, problem_of(gpu)))
            if mode == _MIG:
                mig_gpus += 1
            continue
        if mode == _MIG:
            mig_gpus += 1
            _count_mig(gpu, known, rule, mig_all, mig_free)
        healthy += units
        holders = gpu.holders
        if known and holders:
            # Distinct device IDs: the kubelet lists a device for every container given it.
            held = len({h.device_id for h in holders}) if len(holders) > 1 else 1
            unheld = units - held if units > held else 0
            held_by.append(
                (
                    position,
                    holders[0].namespace if len(holders) == 1 else ",".join(sorted({h.namespace for h in holders})),
                )
            )
        else:
            held, unheld = 0, units
        free += unheld
        if held:
            owners = (
                _units_by_pod(holders, units)
                if len(holders) > 1
                else ((pod_key(holders[0].namespace, holders[0].pod), 1),)
            )
        if unheld:
            unheld_mask |= 1 << position
        sm_active = sm_active_of(gpu.gpm, gpu.HasField("gpm")) if max_sm is not None else None
        judged_sm.append(sm_active)
        if max_sm is not None and sm_active is not None:  # SM activity replaces utilization (idle_rule.py)
            by_sm = True
            busy = sm_active >= max_sm or (mem_percent is not None and mem_percent >= max_mem)
        else:
            busy = (util is not None and util >= max_util) or (mem_percent is not None and mem_percent >= max_mem)
        degraded_gpu = gpu.health == _DEGRADED
        if degraded_gpu:
            problems.append((position, False, problem_of(gpu)))
        state = (
            (GPU_DEGRADED if degraded_gpu else GPU_ALLOCATED_BUSY if busy else GPU_ALLOCATED_IDLE)
            if held
            else (GPU_DEGRADED if degraded_gpu else GPU_FREE_BUSY if busy else GPU_FREE_IDLE)
        )
        cells.append((index, state, util, mem_percent))
        if held:
            for owner, n in owners:
                counts = pod_units.get(owner)
                if counts is None:
                    counts = pod_units[owner] = [0, 0]
                counts[0] += n
                if not busy:
                    counts[1] += n
        if busy:
            continue
        idle += unheld
        if unheld:
            available_mask |= 1 << position
            if degraded_gpu:
                degraded += unheld
                degraded_mask |= 1 << position
        if held:
            allocated_idle += 1
            for namespace in {h.namespace for h in holders}:
                waste[namespace] = waste.get(namespace, 0) + 1
    positions = None
    if whole and not broken and report.gpus:
        key = topology_key(report)
        tiers = tiers_for_mask(key, len(report.gpus), available_mask)
        gpus = report.gpus
        positions = GpuPositions(
            tuple(g.uuid for g in gpus),
            tuple(g.dra_device for g in gpus),
            available_mask,
            degraded_mask,
            unheld_mask,
            key,
            tuple(problems),
        )
    else:
        tiers = ()
    holder_pods = frozenset(_holder_pods(report)) if known else frozenset()
    return NodeSummary(
        node=report.node_name,
        gpu_count=total,
        healthy_gpus=healthy,
        idle_gpus=idle,
        mean_utilization=sum(utilizations) / len(utilizations) if utilizations else None,
        node_error=report.node_error,
        sequence=report.sequence,
        sample_time=report.sample_time.seconds + report.sample_time.nanos / 1e9,
        received_at=received_at,
        free_gpus=free if known else None,
        degraded_idle_gpus=degraded,
        allocated_idle_gpus=allocated_idle,
        idle_by_namespace=tuple(sorted(waste.items())) if waste else (),
        held_by=tuple(held_by),
        allocation=ALLOCATION_FROM_KUBELET if known else allocation_of(report),
        set_tiers=tiers,
        quality=quality_table(idle, degraded, tiers),
        mig_gpus=mig_gpus,
        mig_instances=tuple(sorted(mig_all.items())) if mig_all else (),
        mig_free=tuple(sorted(mig_free.items())) if mig_free else (),
        gpus=tuple(cells),
        sm_active=tuple(judged_sm) if by_sm else (),
        holder_pods=holder_pods,
        pod_units=tuple(sorted((key, n, idle_n) for key, (n, idle_n) in pod_units.items())) if pod_units else (),
        positions=positions,
        sharing_unknown=sharing_unknown and not known and not broken and bool(report.gpus),
    )


def with_inferred_sharing(summary: NodeSummary, allocatable: int | None) -> NodeSummary:
    """A node whose agent cannot tell how its GPUs are shared (no kubelet access, no GFD labels)
    but whose Node advertises a whole multiple of its GPUs (time-slicing advertises GPUs x
    replicas: 32 for 8 GPUs) is counted in those replicas: the allocatable is evidence of sharing,
    and counting 8 would fail every pod of more than 8 replicas on every such node. Only an exact
    multiple of 2..MAX_INFERRED_REPLICAS per GPU; otherwise the summary as it is. Each idle GPU then
    offers all its replicas (allocation is unknown, as for any GPU the agent cannot attribute)."""
    gpus = summary.gpu_count
    if not summary.sharing_unknown or allocatable is None or gpus <= 0 or allocatable <= gpus or allocatable % gpus:
        return summary
    replicas = allocatable // gpus
    if replicas > MAX_INFERRED_REPLICAS:
        return summary
    idle, degraded = summary.idle_gpus * replicas, summary.degraded_idle_gpus * replicas
    return replace(
        summary,
        gpu_count=gpus * replicas,
        healthy_gpus=summary.healthy_gpus * replicas,
        idle_gpus=idle,
        degraded_idle_gpus=degraded,
        set_tiers=(),  # replicas are not GPUs: no topology for sets of them
        quality=quality_table(idle, degraded, ()),
        positions=None,
        inferred_replicas=replicas,
    )


def _units_by_pod(holders: Sequence[pb.Holder], units: int) -> tuple[tuple[str, int], ...]:
    """Units each pod holds of one GPU: its distinct device IDs (replicas) there. A GPU of one unit
    that several pods hold (sharing the agent cannot tell) counts for none of them: evicting one
    does not free it."""
    ids: dict[str, set[str]] = {}
    for h in holders:
        ids.setdefault(pod_key(h.namespace, h.pod), set()).add(h.device_id)
    if units <= 1 and len(ids) > 1:
        return ()
    return tuple((key, len(devices)) for key, devices in ids.items())


def _holder_pods(report: pb.NodeReport) -> set[str]:
    pods = {pod_key(h.namespace, h.pod) for gpu in report.gpus for h in gpu.holders}
    for gpu in report.gpus:
        for inst in gpu.mig_instances:
            pods.update(pod_key(h.namespace, h.pod) for h in inst.holders)
    return pods


def quality_for(k: int, idle: int, degraded: int, tiers: tuple[int, ...]) -> int:
    """whole_gpus.py's quality class q of a k-GPU pod on this node: twice the best connection tier
    of k available whole GPUs (k >= 2), plus 1 when its k GPUs must include degraded ones."""
    return (2 * tier_for(tiers, k) if k > 1 else 0) + (1 if idle - degraded < k else 0)


def quality_table(idle: int, degraded: int, tiers: tuple[int, ...]) -> tuple[int, ...]:
    """q for k = 0..min(idle, QUALITY_SIZES - 1); larger pods are rare: ranked via quality_for()."""
    return tuple(quality_for(k, idle, degraded, tiers) for k in range(min(idle, QUALITY_SIZES - 1) + 1))


def _count_mig(gpu: pb.GpuSample, known: bool, rule: IdleRule, every: dict[str, int], free: dict[str, int]) -> None:
    """A healthy MIG GPU's instances per profile; free ones are unheld (allocation known) and
    idle by memory (NVML gives no per-instance utilization)."""
    for inst in gpu.mig_instances:
        profile = inst.profile
        every[profile] = every.get(profile, 0) + 1
        if known and inst.holders:
            continue
        if mig_instance_is_idle(inst, rule):
            free[profile] = free.get(profile, 0) + 1
