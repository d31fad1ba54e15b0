"""Placement-quality simulation core (pure: no I/O, no clock, no processes).

A seeded, repeatable GPU fleet, a seeded trace of what happens to it while a
stream of pods is scheduled, the ground truth of every GPU, and the placement
metrics. `bench/bench_placement.py` drives it against the real `gpu-extender`
(processes, gRPC, HTTP); the "no extender" chooser lives here.

Fleet (`make_fleet`): H100 8-GPU and A100 8-GPU boxes (NVLink between every
pair), L40S 4-GPU boxes (PCIe only). A few L40S nodes use time-slicing with 4
replicas: their Node allocatable is 4x their GPU count. Some GPUs are already
held at the start by pre-existing pods (same placement for every variant), some
are busy outside Kubernetes, a few are UNHEALTHY or DEGRADED.

Trace (`make_trace`, one tick per arriving pod; identical for every variant
because nothing in it depends on where pods went):
- pods: mostly 1 GPU, some 2, 4 and 8; each has a lifetime in ticks (or runs
  to the end), a start-up of 1-3 ticks during which its GPUs still read idle,
  and maybe a point after which it goes quiet (allocated but idle);
- GPUs that become busy outside Kubernetes for a while (no holders, but busy);
- GPUs that fail (UNHEALTHY) or degrade;
- agents that die: their node keeps working, its reports stop.

Ground truth, per GPU (what the bench knows and the extender may not):
- *allocated*: the simulation bound a pod's device there (Node allocatable
  minus allocated is what kube-scheduler's NodeResourcesFit sees);
- *healthy*: health is not UNHEALTHY. DEGRADED counts as healthy ("usable,
  prefer others" in the 0.2 contract). The device plugin is assumed not to
  notice these failures, so Node allocatable never shrinks;
- *busy*: the GPU's readings fail the extender's default idle rule
  (`IdleRule()`: utilization >= 30 % or memory used >= 50 %); an active pod or
  work outside Kubernetes makes it busy, a starting or quiet pod does not.

**Free idle healthy capacity** of a node (the unit the metrics count) = the
number of device slots no pod holds on GPUs that are healthy and not busy. On
an exclusive node a slot is a whole GPU; on a time-slicing node each GPU has
`replicas` slots, and a slot is free idle healthy when its GPU is healthy and
not busy, whoever holds its other slots. So a GPU allocated to a quiet pod is
idle but NOT free: it never counts. For the NVLink metric, a node "has a
connected set of size k" when k distinct GPUs, each with a free idle healthy
slot, are pairwise joined by NVLink.

*Fresh data*: the node's last report reached the extender no more than
`stale_after` seconds ago (the driver records when each report was acked).

The kubelet's device choice on the chosen node is the best case (free idle
healthy GPUs first, then the lowest index), so only the node choice is judged.

Metrics (`Metrics`), each decided at the moment of the decision, before the
bind, against the kube-scheduler candidates (nodes whose allocatable minus
allocated covers the request):
- short: placed on a node whose free idle healthy capacity < request while a
  candidate with fresh data had enough;
- stale: placed on a node without fresh data while a candidate with fresh data
  and enough free idle healthy capacity existed;
- nvlink: a multi-GPU pod placed on a node with no NVLink-connected set of the
  requested size among its free idle healthy GPUs while a candidate with fresh
  data had one;
- pending with capacity: a pod given up on (after its bounded retries) although
  at one of its attempts a candidate with fresh data had enough free idle
  healthy capacity;
- end-state fragmentation: nodes with >= 8 free idle healthy GPUs, and free
  (unallocated) slots stranded on nodes with 1-3 free slots.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpuextender.common.idle_rule import IdleRule

IDLE = IdleRule()  # the extender's defaults: --idle-max-utilization 30, --idle-max-memory 50
HEALTHY, DEGRADED, UNHEALTHY = "HEALTHY", "DEGRADED", "UNHEALTHY"
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class Product:
    key: str
    nvml_name: str  # what NVML reports
    gfd_product: str  # GPU Feature Discovery's nvidia.com/gpu.product label
    gpus: int
    memory_bytes: int
    nvlinks: int  # active NVLink links between every pair; 0: PCIe only
    compute_capability: tuple[int, int]
    cost_per_hour: float


H100 = Product("h100", "NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", 8, 80 * GIB, 18, (9, 0), 5.12)
A100 = Product("a100", "NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", 8, 80 * GIB, 12, (8, 0), 3.40)
L40S = Product("l40s", "NVIDIA L40S", "NVIDIA-L40S", 4, 48 * GIB, 0, (8, 9), 1.60)
PRODUCTS = (H100, A100, L40S)
TIME_SLICING_REPLICAS = 4


@dataclass(slots=True)
class Gpu:
    index: int
    uuid: str
    replicas: int  # 1: exclusive
    health: str = HEALTHY
    holders: list[str] = field(default_factory=list)  # pod names, one entry per held slot
    outside_until: int = -1  # busy outside Kubernetes until this tick (exclusive)
    jitter: float = 0.0  # repeatable per-GPU variation of the readings, in [0, 1)

    @property
    def healthy(self) -> bool:
        return self.health != UNHEALTHY

    def free_slots(self) -> int:
        return self.replicas - len(self.holders)


@dataclass(slots=True)
class Node:
    name: str
    product: Product
    gpus: list[Gpu]
    replicas: int  # 1, or TIME_SLICING_REPLICAS
    agent_alive: bool = True
    last_report_at: float | None = None  # driver's clock when the extender acked the last report
    allocated: int = 0  # slots held by pods (what kube-scheduler counts)
    dirty: bool = True  # the agent's next report differs from the last one sent
    _fih: tuple[int, int] | None = None  # cache: (free idle healthy slots, largest NVLink set)

    @property
    def allocatable(self) -> int:
        return len(self.gpus) * self.replicas

    @property
    def kube_free(self) -> int:
        return self.allocatable - self.allocated

    def changed(self) -> None:
        self._fih = None
        self.dirty = True

    def fresh(self, now: float, stale_after: float) -> bool:
        return self.last_report_at is not None and now - self.last_report_at <= stale_after


@dataclass(frozen=True, slots=True)
class PodSpec:
    name: str
    uid: str
    gpus: int
    arrival: int  # tick
    lifetime: int | None  # ticks from bind to finish; None: runs to the end
    startup: int  # ticks after bind during which its GPUs still read idle
    quiet_after: int | None  # ticks after bind after which it goes idle (still allocated)


@dataclass(slots=True)
class Running:
    spec: PodSpec
    node: str
    slots: list[int]  # GPU index per held slot
    bound_at: int


@dataclass(frozen=True, slots=True)
class Event:
    tick: int
    kind: str  # outside | fail | degrade | agent_dies
    node: int  # fleet index
    gpu: int = 0
    duration: int = 0


@dataclass(frozen=True, slots=True)
class SimConfig:
    nodes: int = 500
    pods: int = 2000
    seed: int = 20261122
    retry_after: int = 5  # a pending pod is tried again after this many further pods
    max_retries: int = 3  # then it is given up (counted as left pending)


# -- readings -----------------------------------------------------------------


def gpu_state(gpu: Gpu, tick: int, running: dict[str, Running]) -> str:
    """What the GPU is doing: busy (outside or an active pod), quiet (held, idle) or free."""
    if tick < gpu.outside_until:
        return "busy"
    held = False
    for pod_name in gpu.holders:
        held = True
        r = running[pod_name]
        age = tick - r.bound_at
        quiet = age < r.spec.startup or (r.spec.quiet_after is not None and age >= r.spec.quiet_after)
        if not quiet:
            return "busy"
    return "quiet" if held else "free"


def readings(gpu: Gpu, state: str, product: Product) -> tuple[int, float]:
    """(utilization %, memory used %) an agent would report, repeatable per GPU and state."""
    j = gpu.jitter
    if not gpu.healthy:
        return 0, 0.5 + j  # an unhealthy GPU reads idle: only its health says otherwise
    if state == "busy":
        return 55 + int(45 * j), 52.0 + 40.0 * j
    if state == "quiet":
        return int(8 * j), 1.0 + 11.0 * j
    return int(4 * j), 0.3 + 1.5 * j


def is_busy(utilization: int, memory_percent: float) -> bool:
    return utilization >= IDLE.max_utilization_percent or memory_percent >= IDLE.max_memory_used_percent


# -- fleet and trace ----------------------------------------------------------


def node_name(i: int) -> str:
    return f"gpu-{i:04d}"


def make_fleet(cfg: SimConfig) -> list[Node]:
    rng = random.Random(f"{cfg.seed}-fleet")
    fleet: list[Node] = []
    for i in range(cfg.nodes):
        product = rng.choices(PRODUCTS, weights=(0.4, 0.3, 0.3))[0]
        replicas = TIME_SLICING_REPLICAS if product is L40S and rng.random() < 0.12 else 1
        gpus = [
            Gpu(g, f"GPU-{rng.getrandbits(128):032x}"[:40], replicas, jitter=rng.random()) for g in range(product.gpus)
        ]
        for gpu in gpus:
            roll = rng.random()
            if roll < 0.01:
                gpu.health = UNHEALTHY
            elif roll < 0.03:
                gpu.health = DEGRADED
        fleet.append(Node(node_name(i), product, gpus, replicas))
    return fleet


def pod_size(rng: random.Random) -> int:
    return rng.choices((1, 2, 4, 8), weights=(70, 15, 10, 5))[0]


def _pod(rng: random.Random, name: str, arrival: int, horizon: int, size: int) -> PodSpec:
    lifetime = None if rng.random() < 0.3 else rng.randint(max(1, horizon // 10), max(2, horizon))
    quiet = rng.randint(5, max(6, horizon // 2)) if rng.random() < 0.25 else None
    return PodSpec(
        name, f"00000000-0000-4000-8000-{rng.getrandbits(48):012x}", size, arrival, lifetime, rng.randint(1, 3), quiet
    )


def make_pods(cfg: SimConfig) -> list[PodSpec]:
    rng = random.Random(f"{cfg.seed}-pods")
    return [_pod(rng, f"pod-{i:05d}", i, cfg.pods, pod_size(rng)) for i in range(cfg.pods)]


def make_trace(cfg: SimConfig, fleet: Sequence[Node]) -> list[Event]:
    """Events by tick; independent of placement, so every variant sees the same trace."""
    rng = random.Random(f"{cfg.seed}-trace")
    events: list[Event] = []

    def any_gpu() -> tuple[int, int]:
        n = rng.randrange(len(fleet))
        return n, rng.randrange(len(fleet[n].gpus))

    # Agents that are dead from the start (reported once, then silent) and a few that die later.
    for n in rng.sample(range(len(fleet)), max(1, len(fleet) // 50)):
        events.append(Event(0, "agent_dies", n))
    for _ in range(max(1, len(fleet) // 100)):
        events.append(
            Event(
                rng.randrange(cfg.pods // 4, max(cfg.pods // 4 + 1, cfg.pods * 3 // 4)),
                "agent_dies",
                rng.randrange(len(fleet)),
            )
        )
    # Work outside Kubernetes: some from the start, more arriving over time.
    total_gpus = sum(len(n.gpus) for n in fleet)
    for _ in range(total_gpus * 6 // 100):
        n, g = any_gpu()
        events.append(Event(0, "outside", n, g, rng.randint(cfg.pods // 4, cfg.pods)))
    for tick in range(cfg.pods):
        if rng.random() < 0.15:
            n, g = any_gpu()
            events.append(Event(tick, "outside", n, g, rng.randint(20, max(21, cfg.pods // 3))))
        if rng.random() < 0.004:
            n, g = any_gpu()
            events.append(Event(tick, "fail", n, g))
        if rng.random() < 0.004:
            n, g = any_gpu()
            events.append(Event(tick, "degrade", n, g))
    events.sort(key=lambda e: e.tick)
    return events


# -- metrics ------------------------------------------------------------------


@dataclass(slots=True)
class Metrics:
    attempts: int = 0
    placed: int = 0
    placed_multi: int = 0
    short: int = 0  # placed where free idle healthy capacity was short while a candidate had enough
    stale: int = 0  # placed on a node without fresh data while a fresh candidate had enough
    nvlink: int = 0  # multi-GPU pod placed without an NVLink set while a candidate had one
    nvlink_possible: int = 0  # multi-GPU placements where some candidate had an NVLink set
    pending_attempts: int = 0  # attempts that placed nothing
    pending_attempts_with_capacity: int = 0
    given_up: int = 0  # pods left pending at the end
    given_up_with_capacity: int = 0
    decision_latency_ms: list[float] = field(default_factory=list)  # per attempt (driver's measure)
    # end state
    nodes_fit_8: int = 0  # nodes with >= 8 free idle healthy GPUs
    free_slots: int = 0  # unallocated slots in the fleet
    stranded_slots: int = 0  # unallocated slots on nodes with 1-3 of them
    free_idle_healthy: int = 0


def pct(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0


# -- the simulation -----------------------------------------------------------


class Simulation:
    """Step by step: `begin_tick()` applies the tick's trace and returns the pods to
    try; for each, `candidates(pod)` (kube-scheduler's fit), a chooser's decision,
    then `place(pod, node, candidates, now)`. Done when `finished()`."""

    def __init__(
        self,
        cfg: SimConfig,
        stale_after: float = 3.0,
        *,
        fleet: list[Node] | None = None,
        pods: list[PodSpec] | None = None,
        events: list[Event] | None = None,
    ) -> None:
        """The seeded fleet, pods and trace of `cfg`; or hand-made ones (then nothing is prefilled)."""
        self.cfg = cfg
        self.stale_after = stale_after
        hand_made = fleet is not None
        self.fleet = fleet if fleet is not None else make_fleet(cfg)
        self.by_name = {n.name: n for n in self.fleet}
        self.pods = pods if pods is not None else make_pods(cfg)
        self.events = events if events is not None else make_trace(cfg, self.fleet)
        self.tick = -1
        self.running: dict[str, Running] = {}
        self.metrics = Metrics()
        self._next_event = 0
        self._retries: dict[int, list[tuple[PodSpec, int]]] = {}  # due tick -> (pod, tries so far)
        self._had_capacity: set[str] = set()  # pods not placed at an attempt with capacity
        self._pending_specs: dict[str, PodSpec] = {}  # pods waiting for a retry
        self._due_tries: dict[str, int] = {}  # retries due this tick: pod -> tries so far
        if not hand_made:
            self._prefill()

    # -- state changes --

    def _prefill(self) -> None:
        """Pre-existing pods, placed the same way for every variant (~35 % of the slots)."""
        rng = random.Random(f"{self.cfg.seed}-prefill")
        target = sum(n.allocatable for n in self.fleet) * 35 // 100
        held, i = 0, 0
        while held < target and i < 20 * len(self.fleet):
            size = pod_size(rng)
            node = self.fleet[rng.randrange(len(self.fleet))]
            pod = _pod(rng, f"pre-{i:05d}", -1, self.cfg.pods, size)
            i += 1
            if node.kube_free >= size:
                self._bind(PodSpec(pod.name, pod.uid, size, -1, pod.lifetime, 0, pod.quiet_after), node, -100)
                held += size

    def bind(self, pod: PodSpec, node: Node, tick: int) -> None:
        """Bind without judging (a hand-made or pre-existing state)."""
        self._bind(pod, node, tick)

    def _bind(self, pod: PodSpec, node: Node, tick: int) -> None:
        """The kubelet's device choice (best case): free idle healthy slots first, then the lowest index."""
        order = sorted(node.gpus, key=lambda g: (not self._gpu_fih(g), g.index))
        slots: list[int] = []
        for gpu in order:
            while gpu.free_slots() > 0 and len(slots) < pod.gpus:
                gpu.holders.append(pod.name)
                slots.append(gpu.index)
            if len(slots) == pod.gpus:
                break
        assert len(slots) == pod.gpus, f"{pod.name} bound to {node.name} without room"
        node.allocated += pod.gpus
        self.running[pod.name] = Running(pod, node.name, slots, tick)
        node.changed()

    def _finish(self, name: str) -> None:
        r = self.running.pop(name)
        node = self.by_name[r.node]
        for g in r.slots:
            node.gpus[g].holders.remove(name)
        node.allocated -= r.spec.gpus
        node.changed()

    def begin_tick(self) -> list[PodSpec]:
        """Advance one tick: finish pods, apply the trace; return the pods to try now (arrival, then retries)."""
        self.tick += 1
        t = self.tick
        for name, r in list(self.running.items()):
            if r.spec.lifetime is not None and t - r.bound_at >= r.spec.lifetime:
                self._finish(name)
            else:  # readings change at start-up end and when going quiet
                age = t - r.bound_at
                if age == r.spec.startup or (r.spec.quiet_after is not None and age == r.spec.quiet_after):
                    self.by_name[r.node].changed()
        while self._next_event < len(self.events) and self.events[self._next_event].tick <= t:
            self._apply(self.events[self._next_event])
            self._next_event += 1
        for node in self.fleet:  # outside work that ended this tick
            if any(g.outside_until == t for g in node.gpus):
                node.changed()
        due = [self.pods[t]] if t < len(self.pods) else []
        self._due_tries = {p.name: tries for p, tries in self._retries.pop(t, [])}
        return due + [self._pending_specs[name] for name in self._due_tries]

    def _apply(self, e: Event) -> None:
        node = self.fleet[e.node]
        gpu = node.gpus[e.gpu]
        if e.kind == "agent_dies":
            node.agent_alive = False
            return
        if e.kind == "outside":
            gpu.outside_until = max(gpu.outside_until, e.tick + e.duration)
        elif e.kind == "fail":
            gpu.health = UNHEALTHY
        elif e.kind == "degrade" and gpu.health == HEALTHY:
            gpu.health = DEGRADED
        node.changed()

    def finished(self) -> bool:
        return self.tick >= len(self.pods) - 1 and not self._retries

    # -- ground truth --

    def _gpu_fih(self, gpu: Gpu) -> bool:
        """Does this GPU offer a free idle healthy slot?"""
        if not gpu.healthy or gpu.free_slots() <= 0:
            return False
        return gpu_state(gpu, self.tick, self.running) != "busy"

    def capacity(self, node: Node) -> tuple[int, int]:
        """(free idle healthy slots, largest NVLink-connected set of GPUs with such a slot)."""
        if node._fih is None:
            good = [g for g in node.gpus if self._gpu_fih(g)]
            slots = sum(g.free_slots() for g in good)
            node._fih = (slots, largest_nvlink_set(node, [g.index for g in good]))
        return node._fih

    def gpu_readings(self, node: Node) -> list[tuple[Gpu, int, float]]:
        """(gpu, utilization %, memory used %) as the node's agent would report them now."""
        return [(g, *readings(g, gpu_state(g, self.tick, self.running), node.product)) for g in node.gpus]

    def candidates(self, pod: PodSpec) -> list[Node]:
        """kube-scheduler's own fit: allocatable minus allocated nvidia.com/gpu covers the request."""
        return [n for n in self.fleet if n.kube_free >= pod.gpus]

    # -- a decision --

    def place(
        self, pod: PodSpec, choice: Node | None, candidates: Sequence[Node], now: float, latency_ms: float | None = None
    ) -> None:
        """Judge the decision against the ground truth at this moment, then bind (or queue a retry)."""
        m = self.metrics
        m.attempts += 1
        if latency_ms is not None:
            m.decision_latency_ms.append(latency_ms)
        k = pod.gpus
        caps = {n.name: self.capacity(n) for n in candidates}
        enough = [n for n in candidates if caps[n.name][0] >= k]
        fresh_enough = any(n.fresh(now, self.stale_after) for n in enough)
        if choice is None:
            m.pending_attempts += 1
            if fresh_enough:
                m.pending_attempts_with_capacity += 1
                self._had_capacity.add(pod.name)
            tries = self._due_tries.get(pod.name, 0)
            if tries < self.cfg.max_retries:
                self._pending_specs[pod.name] = pod
                self._retries.setdefault(self.tick + self.cfg.retry_after, []).append((pod, tries + 1))
            else:
                m.given_up += 1
                m.given_up_with_capacity += pod.name in self._had_capacity
            return
        assert choice.kube_free >= k, f"{choice.name} cannot take {pod.name}"
        m.placed += 1
        have, nvlink_set = self.capacity(choice)
        if have < k and fresh_enough:  # as for nvlink: a dead agent's capacity is not known to exist
            m.short += 1
        if not choice.fresh(now, self.stale_after) and fresh_enough:
            m.stale += 1
        if k > 1:
            m.placed_multi += 1
            # Only a node with fresh data counts: a dead agent's NVLink set is not known to exist.
            if any(caps[n.name][1] >= k and n.fresh(now, self.stale_after) for n in candidates):
                m.nvlink_possible += 1
                if nvlink_set < k:
                    m.nvlink += 1
        self._pending_specs.pop(pod.name, None)
        self._bind(pod, choice, self.tick)

    def finish(self) -> Metrics:
        """Give up on whatever is still queued and measure the end state."""
        for queued in self._retries.values():
            for pod, _ in queued:
                self.metrics.given_up += 1
                self.metrics.given_up_with_capacity += pod.name in self._had_capacity
        self._retries.clear()
        m = self.metrics
        m.nodes_fit_8 = sum(1 for n in self.fleet if self.capacity(n)[0] >= 8)
        m.free_slots = sum(n.kube_free for n in self.fleet)
        m.stranded_slots = sum(n.kube_free for n in self.fleet if 0 < n.kube_free < 4)
        m.free_idle_healthy = sum(self.capacity(n)[0] for n in self.fleet)
        return m


def largest_nvlink_set(node: Node, indexes: Sequence[int]) -> int:
    """Size of the largest set of these GPUs that are pairwise NVLink-connected (a clique)."""
    if not indexes:
        return 0
    if node.product.nvlinks > 0:  # every pair is joined on these boxes
        return len(indexes)
    links = nvlink_pairs(node)
    best = 1
    for size in range(2, len(indexes) + 1):
        if any(all(p in links for p in itertools.combinations(c, 2)) for c in itertools.combinations(indexes, size)):
            best = size
        else:
            break
    return best


def nvlink_pairs(node: Node) -> set[tuple[int, int]]:
    """(a, b), a < b, joined by NVLink: every pair on NVLink boxes, none on PCIe ones."""
    if node.product.nvlinks <= 0:
        return set()
    return set(itertools.combinations(range(len(node.gpus)), 2))


def pcie_relation(node: Node, a: int, b: int) -> str:
    """How two GPUs of the node reach each other over PCIe (two GPUs per switch, two switches per socket)."""
    if a // 2 == b // 2:
        return "single"
    if a // 4 == b // 4:
        return "hostbridge"
    return "system"


# -- the "no extender" chooser ------------------------------------------------


def least_allocated(candidates: Sequence[Node], rng: random.Random) -> Node | None:
    """kube-scheduler alone: NodeResourcesFit LeastAllocated on nvidia.com/gpu, i.e. the most
    free GPUs by allocation count; ties broken by the seeded `rng`."""
    if not candidates:
        return None
    best = max(n.kube_free for n in candidates)
    return rng.choice([n for n in candidates if n.kube_free == best])


def pick_highest(scores: Iterable[tuple[Node, int]], rng: random.Random) -> Node | None:
    """kube-scheduler's selectHost: the highest score, ties broken at random (seeded)."""
    rows = list(scores)
    if not rows:
        return None
    best = max(s for _, s in rows)
    return rng.choice([n for n, s in rows if s == best])


def run_without_extender(cfg: SimConfig, clock_step: float = 0.01, report_every: float = 1.0) -> Metrics:
    """The whole simulation with the "no extender" chooser and a fake clock: live agents
    report every `report_every` seconds of it (for the freshness ground truth)."""
    sim = Simulation(cfg)
    rng = random.Random(f"{cfg.seed}-choose-none")
    now = 0.0
    while not sim.finished():
        for pod in sim.begin_tick():
            now += clock_step
            for node in sim.fleet:
                if node.agent_alive and (node.last_report_at is None or now - node.last_report_at >= report_every):
                    node.last_report_at = now
            candidates = sim.candidates(pod)
            sim.place(pod, least_allocated(candidates, rng), candidates, now)
        if not sim.pods or sim.tick > len(sim.pods) + cfg.retry_after * (cfg.max_retries + 1):
            break
    return sim.finish()


# -- the report columns both placement benches print ---------------------------------

METRIC_HEADER = (
    f"{'placed':>6} {'short %':>8} {'stale %':>8} {'nvlink %':>9} {'pending':>7} {'pend+cap':>8} "
    f"{'8-GPU nodes':>11} {'stranded':>8} {'free idle':>9}"
)
METRIC_LEGEND = """\
short %:   placed on a node with fewer free idle healthy GPUs than requested while a fresh candidate had enough
stale %:   placed on a node without fresh data while a fresh candidate had enough free idle healthy GPUs
nvlink %:  multi-GPU pods placed without an NVLink-connected free idle set of that size while a fresh candidate had one
pending:   pods given up after their retries; pend+cap: of those, ones that met capacity on a fresh node
8-GPU nodes / stranded / free idle: at the end, nodes with >= 8 free idle healthy GPUs, free slots on
           nodes with 1-3 free, free idle healthy slots in the fleet"""


def metric_cells(m: dict[str, float]) -> str:
    """One row's METRIC_HEADER columns from a summarized Metrics (bench_placement.summarize)."""
    return (
        f"{m['placed']:>6} {m['short_pct']:>8.1f} {m['stale_pct']:>8.1f} {m['nvlink_pct']:>9.1f} "
        f"{m['given_up']:>7} {m['given_up_with_capacity']:>8} {m['nodes_fit_8']:>11} {m['stranded_slots']:>8} "
        f"{m['free_idle_healthy']:>9}"
    )
