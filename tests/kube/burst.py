"""A burst of one-GPU pods on a fleet whose GPUs are partly busy outside Kubernetes (issue 16),
with the real kube-scheduler and the real gpu-extender; shared by tests/kube/test_burst.py and
bench/bench_burst.py.

The fleet: `nodes` Ready nodes of 8 GPUs; a third fully idle, a third with 2-6 GPUs busy, a
third with 7 busy, from work kube-scheduler cannot see (its own count says 8 free everywhere).
The agents are simulated in this process: one real report per node over a real TLS gRPC channel
(allocation unknown, as on a node whose kubelet the agent cannot read), with --stale-after long
enough that the data stays fresh through the burst. No kubelet runs: a bound pod stays Pending
and no agent ever attributes it, so only the extender's ledger keeps its GPU counted.

`misplaced`: pods bound, in binding order, to a node whose idle GPUs minus the GPUs of the pods
already bound there were fewer than the pod needed while another node still had room.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import grpc

from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.control_plane import GPU, wait_for
from tests.harness import Proc, metric
from tests.kube.scene import EXTENDER_NAME, H100, NODE_LABEL, Scene

GIB = 1024**3
GPUS_PER_NODE = 8


def busy_gpus(i: int) -> int:
    """Node i's GPUs busy outside Kubernetes: 0, 2..6 or 7, a third each."""
    return (0, 2 + (i // 3) % 5, 7)[i % 3]


def gpu_uuid(node: str, index: int) -> str:
    """The UUID of a simulated GPU: what a DRA test's ResourceSlice publishes as its `uuid`."""
    return f"GPU-{node}-{index}"


def node_report(node: str, busy: int, sequence: int = 1, *, busy_last: bool = False) -> pb.NodeReport:
    """`busy` GPUs busy: the first ones, or with `busy_last` the last ones. Each GPU carries its DRA
    name (gpu-<index>: the simulated minor is the index)."""
    report = pb.NodeReport(node_name=node, sequence=sequence, agent_version="burst", driver_version="550.127.05")
    report.sample_time.seconds = int(time.time())
    for index in range(GPUS_PER_NODE):
        hot = index >= GPUS_PER_NODE - busy if busy_last else index < busy
        report.gpus.add(
            index=index,
            uuid=gpu_uuid(node, index),
            dra_device=f"gpu-{index}",
            name=H100["product"],
            healthy=True,
            utilization_gpu_percent=90 if hot else 2,
            memory_total_bytes=80 * GIB,
            memory_used_bytes=(64 if hot else 1) * GIB,
        )
    return report


async def send_reports(
    target: str, ca_pem: bytes, busy: dict[str, int], busy_last: frozenset[str] = frozenset()
) -> None:
    """One short stream per node (the extender ties a stream to one node), 16 at a time; the nodes
    in `busy_last` have their last GPUs busy (node_report)."""
    credentials = grpc.ssl_channel_credentials(root_certificates=ca_pem)
    options = [("grpc.ssl_target_name_override", EXTENDER_NAME)]
    async with grpc.aio.secure_channel(target, credentials, options=options) as channel:
        stub = pb_grpc.GpuStateServiceStub(channel)
        gate = asyncio.Semaphore(16)

        async def one(node: str, n: int) -> None:
            async with gate:
                call = stub.StreamNodeReports(timeout=30)
                await call.write(node_report(node, n, busy_last=node in busy_last))
                ack = await call.read()
                await call.done_writing()
                assert ack is not grpc.aio.EOF and ack.status == pb.ReportAck.ACCEPTED, (node, ack)
                await call.code()

        await asyncio.gather(*(one(node, n) for node, n in busy.items()))


@dataclass
class BurstResult:
    pods: int
    nodes: int
    seconds: float  # first binding to last, from the pods' creation to all bound
    misplaced: list[str] = field(default_factory=list)  # "pod -> node (left, needed)" lines
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def pods_per_s(self) -> float:
        return self.pods / self.seconds if self.seconds > 0 else 0.0


def start_fleet(world: Scene, nodes: int, *extender_flags: str) -> tuple[Proc, dict[str, int]]:
    """The nodes, the extender (its data loaded for every node) and the busy GPUs per node."""
    busy = create_nodes(world, nodes)
    return start_extender(world, busy, *extender_flags), busy


def create_nodes(world: Scene, nodes: int) -> dict[str, int]:
    """The fleet's Nodes; the GPUs busy outside Kubernetes per node."""
    busy = {}
    for i in range(nodes):
        name = f"{world.ns}-n{i:03d}"
        world.kube.create_node(name, GPUS_PER_NODE, {NODE_LABEL: world.ns, "nvidia.com/gpu.product": H100["label"]})
        world.nodes.append(name)
        busy[name] = busy_gpus(i)
    return busy


def start_extender(world: Scene, busy: dict[str, int], *extender_flags: str, http_port: int | None = None) -> Proc:
    """An extender (one replica of several, when called again) with its data loaded for every node."""
    nodes = len(busy)
    ext = world.extender("--stale-after", "3600", "--forget-after", "7200", *extender_flags, http_port=http_port)
    world.wait_inventory(ext, "Node", nodes)
    asyncio.run(send_reports(f"127.0.0.1:{ext.ports['grpc']}", world.ca.cert_pem.bytes(), busy))
    wait_for("GPU data for every node", lambda: metric(world.scrape(ext), "gpu_extender_nodes_with_data") == nodes, 30)
    return ext


def create_pods(world: Scene, count: int, first: int = 0) -> None:
    for i in range(first, first + count):
        world.kube.create(
            f"/api/v1/namespaces/{world.ns}/pods",
            {
                "metadata": {"name": f"p{i:03d}"},
                "spec": {
                    "schedulerName": "gpu-scheduler",
                    "nodeSelector": {NODE_LABEL: world.ns},
                    "containers": [
                        {"name": "main", "image": "registry.example/llm:1", "resources": {"limits": {GPU: "1"}}}
                    ],
                },
            },
        )


def bound_pods(world: Scene) -> list[dict[str, Any]]:
    items = world.kube.get(f"/api/v1/namespaces/{world.ns}/pods")["items"]
    return [p for p in items if p["spec"].get("nodeName")]


def judge(world: Scene, busy: dict[str, int], count: int, timeout: float, started: float) -> BurstResult:
    """Wait for every pod to be bound; check each placement in binding order."""
    wait_for(f"{count} pods bound", lambda: len(bound_pods(world)) == count or None, timeout)
    seconds = time.monotonic() - started
    return BurstResult(count, len(busy), seconds, misplaced(bound_pods(world), busy))


def misplaced(pods: list[dict[str, Any]], busy: dict[str, int]) -> list[str]:
    """The module docstring's misplaced pods among the bound `pods` ("pod -> node (left, needed)")."""
    # No kubelet touches a pod after its binding: its resourceVersion is the binding's revision.
    ordered = sorted(pods, key=lambda p: int(p["metadata"]["resourceVersion"]))
    left = {node: GPUS_PER_NODE - n for node, n in busy.items()}
    found = []
    for p in ordered:
        node = p["spec"]["nodeName"]
        room_elsewhere = any(n >= 1 for other, n in left.items() if other != node)
        if left[node] < 1 and room_elsewhere:
            found.append(f"{p['metadata']['name']} -> {node} ({left[node]} idle left, 1 needed)")
        left[node] -= 1
    return found


def room_left(pods: list[dict[str, Any]], busy: dict[str, int]) -> dict[str, int]:
    """Per node with room for one more one-GPU pod: its idle GPUs less the bound `pods` there."""
    left = {node: GPUS_PER_NODE - n for node, n in busy.items()}
    for node, n in spread(pods).items():
        left[node] = left.get(node, 0) - n
    return {node: n for node, n in left.items() if n >= 1}


def extender_counters(world: Scene, ext: Proc) -> dict[str, float]:
    samples = world.scrape(ext)
    names = [
        "gpu_extender_binding_races_total",
        "gpu_extender_binding_waits_total",
        "gpu_extender_binding_wait_expired_total",
        "gpu_extender_bound_pods",
    ]
    found = {name: metric(samples, name) for name in names}
    for result in ("bound", "error"):
        found[f"binds_{result}"] = metric(samples, "gpu_extender_binds_total", result=result)
    return {k: v for k, v in found.items() if v is not None}


def spread(pods: list[dict[str, Any]]) -> Counter[str]:
    return Counter(p["spec"]["nodeName"] for p in pods)
