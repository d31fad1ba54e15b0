"""Benchmark: placement quality of gpu-extender against kube-scheduler alone (issue 12 item 7).

What it measures: a simulated GPU fleet (bench/placement_sim.py: fleet, seeded
trace, ground truth, metrics; its docstring defines "free idle healthy" and every
metric) is scheduled by replaying kube-scheduler's steps for a stream of pods,
once per variant:
- `none`: kube-scheduler alone. A node fits when its allocatable minus allocated
  `nvidia.com/gpu` covers the request; among fitting nodes NodeResourcesFit
  LeastAllocated picks the most free GPUs (ties: seeded RNG);
- `spread`, `binpack`, `random`, `cost`: the real `gpu-extender` with that
  `--node-strategy`, a fresh process per variant (`--stale-after 3` by default,
  `--inventory` with the fleet's Nodes and one AcceleratorClass per product with
  an hourly cost, nodeCacheCapable: true, i.e. `NodeNames`). Per pod:
  kube-scheduler's own fit check, then POST /filter with the nodes that pass it,
  then (when more than one node passed; with one, kube-scheduler takes it without
  scoring) POST /prioritize with what filter passed; the highest score wins (a
  node missing from the compact answer scores 0; ties: seeded RNG). Only the
  extender's score ranks nodes (kube-scheduler's own Score plugins are left out,
  so the extender's ranking is what is judged), and every feasible node is
  scored (no percentageOfNodesToScore sampling).
Then "bind": the simulation records the allocation. If nothing is placeable the
pod is pending and tried again after the next `retry_after` pods, at most
`max_retries` times, then given up.

GPU state reaches the extender through the real gRPC contract: one long-lived
StreamNodeReports stream per node (as an agent keeps one), a full 0.2 NodeReport
per send (holders with ALLOCATION_KUBELET, health states, sharing, NVLink/PCIe
topology, utilization and memory readings). A node's agent reports again right
after a pod is bound there and whenever its GPUs change, and every live agent
re-sends at least every `stale_after / 3` seconds; dead agents stop (their data
goes stale after `--stale-after`). Before the first pod the bench waits
`stale_after` + 0.5 s, so agents dead from the start are stale from the first
decision. `none` runs on a virtual clock (5 ms per decision) with the same rules.

Figures are placement quality. `none` repeats exactly for a seed; the extender
variants within a few pods (when a dying agent's data turns stale, and so which
decisions see it stale, is real time). The latency column is context only
(a 2-core machine shared with other work). A full run takes ~1 minute.

Run: `.venv/bin/python bench/bench_placement.py [--quick] [--nodes N] [--pods N]
[--seed S] [--variant NAME ...] [--json PATH]`.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import yaml

from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (
    OUT_DIR,
    REPO_ROOT,
    BenchError,
    ExtenderAddrs,
    exit_on_sigterm,
    extender_process,
    machine_facts,
    scrape,
    wait_http_ok,
)
from placement_sim import (
    DEGRADED,
    METRIC_HEADER,
    METRIC_LEGEND,
    PRODUCTS,
    UNHEALTHY,
    Metrics,
    Node,
    PodSpec,
    SimConfig,
    Simulation,
    least_allocated,
    metric_cells,
    nvlink_pairs,
    pcie_relation,
    pct,
    pick_highest,
)

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "extender-requests"
VARIANTS = ("none", "spread", "binpack", "random", "cost")
JSON_HEADERS = {"Content-Type": "application/json"}
GPU_RESOURCE = "nvidia.com/gpu"
NAMESPACE = "bench"
VIRTUAL_STEP_S = 0.005  # the `none` variant's clock advance per decision
SEND_CONCURRENCY = 64
_PCIE = {"single": pb.PCIE_SINGLE, "hostbridge": pb.PCIE_HOSTBRIDGE, "system": pb.PCIE_SYSTEM}
_HEALTH = {"HEALTHY": pb.HEALTH_HEALTHY, DEGRADED: pb.HEALTH_DEGRADED, UNHEALTHY: pb.HEALTH_UNHEALTHY}


# -- what an agent would send -------------------------------------------------------


def node_report(sim: Simulation, node: Node, sequence: int, wall: float) -> pb.NodeReport:
    """The full 0.2 NodeReport of the node's agent now."""
    sharing = "time-slicing" if node.replicas > 1 else "none"
    report = pb.NodeReport(
        node_name=node.name,
        sequence=sequence,
        agent_version="bench-placement",
        driver_version="550.127.05",
        allocation_source=pb.ALLOCATION_KUBELET,
        sharing_labels={"nvidia.com/gpu.replicas": str(node.replicas), "nvidia.com/gpu.sharing-strategy": sharing},
    )
    report.sample_time.seconds = int(wall)
    report.sample_time.nanos = int((wall - int(wall)) * 1e9)
    product = node.product
    for gpu, utilization, memory_percent in sim.gpu_readings(node):
        g = report.gpus.add(
            index=gpu.index,
            uuid=gpu.uuid,
            name=product.nvml_name,
            pci_bus_id=f"00000000:{0x18 + 0x10 * gpu.index:02X}:00.0",
            healthy=gpu.healthy,
            health=_HEALTH[gpu.health],
        )
        g.compute_capability.major, g.compute_capability.minor = product.compute_capability
        reserved = 512 * 1024**2
        used = int(product.memory_bytes * memory_percent / 100)
        g.memory_total_bytes = product.memory_bytes
        g.memory_used_bytes = used
        g.memory_reserved_bytes = reserved
        g.memory_free_bytes = max(0, product.memory_bytes - reserved - used)
        g.utilization_gpu_percent = utilization
        g.utilization_memory_percent = utilization // 2
        g.temperature_celsius = 34 + utilization * 2 // 5
        g.power_watts = 70.0 + 6.2 * utilization
        g.numa_node = 0 if gpu.index < len(node.gpus) // 2 else 1
        if gpu.health == UNHEALTHY:
            g.unhealthy_reasons.append("XidCritical")
            g.health_reasons.append("XidCritical")
        elif gpu.health == DEGRADED:
            g.health_reasons.append("ThermalSlowdown")
        g.sharing.mode = pb.SHARING_TIME_SLICING if node.replicas > 1 else pb.SHARING_EXCLUSIVE
        g.sharing.replicas = node.replicas
        for replica, pod in enumerate(gpu.holders):
            device_id = f"{gpu.uuid}::{replica}" if node.replicas > 1 else gpu.uuid
            g.holders.add(
                namespace=NAMESPACE, pod=pod, container="main", resource_name=GPU_RESOURCE, device_id=device_id
            )
    report.topology.SetInParent()
    nvlinked = nvlink_pairs(node)
    for a in range(len(node.gpus)):
        for b in range(a + 1, len(node.gpus)):
            report.topology.links.add(
                a=a, b=b, nvlinks=product.nvlinks if (a, b) in nvlinked else 0, pcie=_PCIE[pcie_relation(node, a, b)]
            )
    return report


def inventory_objects(fleet: Sequence[Node]) -> list[dict[str, Any]]:
    """The Nodes (allocatable nvidia.com/gpu, GFD product label) and one AcceleratorClass per product."""
    objects: list[dict[str, Any]] = []
    for p in PRODUCTS:
        objects.append(
            {
                "apiVersion": "ome.io/v1beta1",
                "kind": "AcceleratorClass",
                "metadata": {"name": f"bench-{p.key}"},
                "spec": {
                    "vendor": "nvidia",
                    "model": p.key,
                    "discovery": {"nodeSelector": {"nvidia.com/gpu.product": p.gfd_product}},
                    "capabilities": {
                        "memoryGB": f"{p.memory_bytes // 1024**3}Gi",
                        "computeCapability": "{}.{}".format(*p.compute_capability),
                    },
                    "resources": [{"name": GPU_RESOURCE, "quantity": "1"}],
                    "cost": {"perHour": f"{p.cost_per_hour:.2f}"},
                },
            }
        )
    for n in fleet:
        labels = {
            "kubernetes.io/hostname": n.name,
            "nvidia.com/gpu.product": n.product.gfd_product,
            "nvidia.com/gpu.count": str(len(n.gpus)),
            "nvidia.com/gpu.replicas": str(n.replicas),
        }
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": n.name, "labels": labels},
                "status": {
                    "allocatable": {GPU_RESOURCE: str(n.allocatable), "cpu": "96", "memory": "1Ti", "pods": "110"},
                    "capacity": {GPU_RESOURCE: str(n.allocatable), "cpu": "96", "memory": "1Ti", "pods": "110"},
                },
            }
        )
    return objects


# -- agents over gRPC ---------------------------------------------------------------


class Agents:
    """One long-lived StreamNodeReports stream per node, like one gpu-agent each."""

    def __init__(self, sim: Simulation, channel: grpc.aio.Channel, clock: Callable[[], float]) -> None:
        self.sim = sim
        self.stub = pb_grpc.GpuStateServiceStub(channel)
        self.clock = clock
        self.calls: dict[str, Any] = {}
        self.sequence: dict[str, int] = {}
        self.gate = asyncio.Semaphore(SEND_CONCURRENCY)
        self.sent = 0

    async def send(self, node: Node) -> None:
        async with self.gate:
            call = self.calls.get(node.name)
            if call is None:
                call = self.calls[node.name] = self.stub.StreamNodeReports()
            seq = self.sequence[node.name] = self.sequence.get(node.name, 0) + 1
            report = node_report(self.sim, node, seq, time.time())
            node.dirty = False
            await call.write(report)
            ack = await call.read()
            if ack is grpc.aio.EOF or ack.status != pb.ReportAck.ACCEPTED or ack.sequence != seq:
                raise BenchError(f"report {seq} for {node.name} not accepted: {ack!r}")
            node.last_report_at = self.clock()
            self.sent += 1

    async def send_all(self, nodes: Sequence[Node]) -> None:
        await asyncio.gather(*(self.send(n) for n in nodes))

    async def hang_up(self, node: Node) -> None:
        """The agent died: its stream ends, its reports stop."""
        call = self.calls.pop(node.name, None)
        if call is not None:
            await call.done_writing()

    async def close(self) -> None:
        for name in list(self.calls):
            call = self.calls.pop(name)
            call.cancel()


# -- the extender as kube-scheduler calls it ----------------------------------------


@dataclass(slots=True)
class VerbTimes:
    filter_ms: list[float] = field(default_factory=list)
    prioritize_ms: list[float] = field(default_factory=list)


def load_pod_template() -> dict[str, Any]:
    pod = json.loads((FIXTURES / "filter-request-nodecache-true.json").read_text())["Pod"]
    pod["metadata"].pop("managedFields", None)
    pod["metadata"]["namespace"] = NAMESPACE
    return pod


def pod_object(template: dict[str, Any], pod: PodSpec) -> dict[str, Any]:
    obj = copy.deepcopy(template)
    obj["metadata"]["name"] = pod.name
    obj["metadata"]["uid"] = pod.uid
    resources = obj["spec"]["containers"][0]["resources"]
    resources["requests"][GPU_RESOURCE] = resources["limits"][GPU_RESOURCE] = str(pod.gpus)
    return obj


async def _post(session: aiohttp.ClientSession, url: str, payload: dict[str, Any]) -> Any:
    body = json.dumps(payload, separators=(",", ":")).encode()
    async with session.post(url, data=body, headers=JSON_HEADERS) as resp:
        raw = await resp.read()
        if resp.status != 200:
            raise BenchError(f"POST {url}: HTTP {resp.status}: {raw[:300]!r}")
    return json.loads(raw)


def extender_chooser(
    session: aiohttp.ClientSession, addrs: ExtenderAddrs, rng: random.Random, times: VerbTimes
) -> Callable[[PodSpec, list[Node]], Awaitable[Node | None]]:
    template = load_pod_template()
    filter_url, prioritize_url = f"{addrs.base_url}/filter", f"{addrs.base_url}/prioritize"

    async def choose(pod: PodSpec, candidates: list[Node]) -> Node | None:
        if not candidates:  # kube-scheduler's own filters left nothing: no extender call
            return None
        obj = pod_object(template, pod)
        by_name = {n.name: n for n in candidates}
        t0 = time.perf_counter()
        doc = await _post(session, filter_url, {"Pod": obj, "Nodes": None, "NodeNames": list(by_name)})
        times.filter_ms.append((time.perf_counter() - t0) * 1000)
        if not isinstance(doc, dict) or doc.get("Error"):
            raise BenchError(f"filter answered {str(doc)[:300]}")
        passed = doc.get("NodeNames") or []
        if any(n not in by_name for n in passed):
            raise BenchError(f"filter passed nodes it was not sent: {passed[:5]}")
        if len(passed) <= 1:  # nothing: pending; one: kube-scheduler takes it without scoring
            return by_name[passed[0]] if passed else None
        t1 = time.perf_counter()
        scores = await _post(session, prioritize_url, {"Pod": obj, "Nodes": None, "NodeNames": passed})
        times.prioritize_ms.append((time.perf_counter() - t1) * 1000)
        got = {e["Host"]: e["Score"] for e in scores}  # compact answer: a missing node scored 0
        return pick_highest(((by_name[n], int(got.get(n, 0))) for n in passed), rng)

    return choose


# -- one variant --------------------------------------------------------------------


@dataclass(slots=True)
class VariantResult:
    variant: str
    metrics: dict[str, Any]
    filter_mean_ms: float | None
    prioritize_mean_ms: float | None
    decision_mean_ms: float | None
    reports_sent: int
    wall_s: float


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def simulate(
    cfg: SimConfig,
    stale_after: float,
    choose: Callable[[PodSpec, list[Node]], Awaitable[Node | None]],
    sim: Simulation,
    clock: Callable[[], float],
    publish: Callable[[Sequence[Node]], Awaitable[None]],
    hang_up: Callable[[Node], Awaitable[None]],
    wait: Callable[[float], Awaitable[None]],
    step: Callable[[], None],
) -> Metrics:
    """The replay loop shared by every variant."""
    refresh = stale_after / 3
    await publish(sim.fleet)  # every agent reports once
    await wait(stale_after + 0.5)  # agents dead from the start are stale from the first pod
    dead: set[str] = set()
    while not sim.finished():
        pods = sim.begin_tick()
        for node in sim.fleet:
            if not node.agent_alive and node.name not in dead:
                dead.add(node.name)
                await hang_up(node)
        now = clock()
        await publish(
            [
                n
                for n in sim.fleet
                if n.agent_alive and (n.dirty or n.last_report_at is None or now - n.last_report_at >= refresh)
            ]
        )
        for pod in pods:
            step()
            candidates = sim.candidates(pod)
            t0 = time.perf_counter()
            choice = await choose(pod, candidates)
            latency = (time.perf_counter() - t0) * 1000 if candidates else None
            sim.place(pod, choice, candidates, clock(), latency)
            if choice is not None and choice.agent_alive:
                await publish([choice])  # the kubelet's allocation shows in the agent's next report
    return sim.finish()


async def run_none(cfg: SimConfig, stale_after: float) -> VariantResult:
    started = time.perf_counter()
    sim = Simulation(cfg, stale_after)
    clock = VirtualClock()
    rng = random.Random(f"{cfg.seed}-choose-none")

    async def choose(pod: PodSpec, candidates: list[Node]) -> Node | None:
        return least_allocated(candidates, rng)

    async def publish(nodes: Sequence[Node]) -> None:
        for n in nodes:
            n.last_report_at = clock.now
            n.dirty = False

    async def hang_up(node: Node) -> None:
        return None

    async def wait(seconds: float) -> None:
        clock.now += seconds

    def step() -> None:
        clock.now += VIRTUAL_STEP_S

    m = await simulate(cfg, stale_after, choose, sim, clock, publish, hang_up, wait, step)
    return VariantResult("none", summarize(m), None, None, None, 0, time.perf_counter() - started)


async def run_extender(cfg: SimConfig, stale_after: float, strategy: str, inventory: Path) -> VariantResult:
    started = time.perf_counter()
    process, addrs = extender_process(
        f"extender-placement-{strategy}",
        [
            "--stale-after",
            str(stale_after),
            "--inventory",
            str(inventory),
            "--node-strategy",
            strategy,
            "--random-seed",
            str(cfg.seed),
        ],
    )
    sim = Simulation(cfg, stale_after)
    rng = random.Random(f"{cfg.seed}-choose-{strategy}")
    times = VerbTimes()
    with process:
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
            await wait_http_ok(session, f"{addrs.base_url}/readyz", process)
            async with grpc.aio.insecure_channel(addrs.grpc_target) as channel:
                await asyncio.wait_for(channel.channel_ready(), timeout=10)
                agents = Agents(sim, channel, time.monotonic)
                try:
                    m = await simulate(
                        cfg,
                        stale_after,
                        extender_chooser(session, addrs, rng, times),
                        sim,
                        time.monotonic,
                        agents.send_all,
                        agents.hang_up,
                        asyncio.sleep,
                        process.check_alive,
                    )
                finally:
                    await agents.close()
            have = (await scrape(session, f"{addrs.base_url}/metrics")).get("gpu_extender_nodes_with_data")
            if have != float(cfg.nodes):
                raise BenchError(f"the extender holds data for {have} nodes, expected {cfg.nodes}")
    lat = m.decision_latency_ms
    return VariantResult(
        strategy,
        summarize(m),
        _mean(times.filter_ms),
        _mean(times.prioritize_ms),
        _mean(lat),
        agents.sent,
        time.perf_counter() - started,
    )


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(m: Metrics) -> dict[str, Any]:
    d = asdict(m)
    d.pop("decision_latency_ms")
    d["short_pct"] = pct(m.short, m.placed)
    d["stale_pct"] = pct(m.stale, m.placed)
    d["nvlink_pct"] = pct(m.nvlink, m.placed_multi)
    return d


def run(cfg: SimConfig, variants: Sequence[str], stale_after: float) -> list[VariantResult]:
    results: list[VariantResult] = []
    inventory = OUT_DIR / "placement-inventory.yaml"
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    inventory.write_text(yaml.safe_dump_all(inventory_objects(Simulation(cfg, stale_after).fleet), sort_keys=False))
    for variant in variants:
        print(f"  {variant}: {cfg.pods} pods on {cfg.nodes} nodes...", file=sys.stderr, flush=True)
        if variant == "none":
            result = asyncio.run(run_none(cfg, stale_after))
        else:
            result = asyncio.run(run_extender(cfg, stale_after, variant, inventory))
        print(f"  {variant}: done in {result.wall_s:.1f}s", file=sys.stderr, flush=True)
        results.append(result)
    return results


def format_table(results: Sequence[VariantResult]) -> str:
    head = f"{'variant':<8} {METRIC_HEADER} {'mean ms':>8}"
    lines = [head, "-" * len(head)]
    for r in results:
        ms = f"{r.decision_mean_ms:8.2f}" if r.decision_mean_ms is not None else f"{'-':>8}"
        lines.append(f"{r.variant:<8} {metric_cells(r.metrics)} {ms}")
    return "\n".join(lines)


LEGEND = f"""\
{METRIC_LEGEND}
mean ms:   filter + prioritize per decision, client side (context only)
targets (issue 12): 0 % on the first three, no more pending than `none`"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 60-node, 240-pod smoke run")
    parser.add_argument("--nodes", type=int, help="fleet size (default 500)")
    parser.add_argument("--pods", type=int, help="pods in the stream (default 2000)")
    parser.add_argument("--seed", type=int, default=SimConfig().seed)
    parser.add_argument("--stale-after", type=float, default=3.0, help="the extender's --stale-after (seconds)")
    parser.add_argument("--variant", action="append", choices=VARIANTS, help="run only this variant (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    nodes = args.nodes or (60 if args.quick else SimConfig().nodes)
    pods = args.pods or (240 if args.quick else SimConfig().pods)
    if nodes < 2 or pods < 1 or args.stale_after <= 0:
        parser.error("need --nodes >= 2, --pods >= 1 and a positive --stale-after")
    cfg = SimConfig(nodes=nodes, pods=pods, seed=args.seed)
    variants = list(dict.fromkeys(args.variant or VARIANTS))
    started = time.perf_counter()
    try:
        results = run(cfg, variants, args.stale_after)
    except BenchError as exc:
        print(f"bench_placement: FAILED: {exc}", file=sys.stderr)
        return 1
    print(
        f"{cfg.nodes} nodes, {cfg.pods} pods, seed {cfg.seed}, --stale-after {args.stale_after:g}s "
        f"({time.perf_counter() - started:.0f}s)"
    )
    print(format_table(results))
    print(LEGEND)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "config": asdict(cfg),
            "stale_after_s": args.stale_after,
            "machine": machine_facts(),
            "legend": LEGEND.splitlines(),
            "results": [asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
