"""Issue 51, item 6 on the real control plane: reclaim, opt-in. Four device-plugin nodes of 2 GPUs,
each held whole by one pod whose GPUs stay idle (the agents simulated in this process, reading the
kubelet: real NodeReports over the real TLS gRPC stream), the pods Running for 2 hours:

- `a` (opted-in namespace): a waiting 2-GPU pod may run only on its node: evicted;
- `b` (opted-in namespace): the same, but a PodDisruptionBudget with maxUnavailable 0 covers it:
  the Eviction API refuses (429), it stays, refused_by_pdb;
- `c` (a namespace without the label): a waiting pod needs its node: it stays;
- `d` (opted-in namespace): no waiting pod needs its node: it stays.

First with --reclaim=dry-run: `a` and `b` are reported (Events, the metric), nothing is evicted;
then --reclaim=on. --idle-window 10 and --reclaim-min-runtime 60 keep it short. The waiting pods
are marked Unschedulable as kube-scheduler marks a pod it found no room for (every GPU it counts
is held)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.control_plane import wait_for
from tests.harness import Proc, metric
from tests.kube.scene import EXTENDER_NAME, H100, NODE_LABEL, Scene

GIB = 1024**3
WINDOW = 10.0
LEASE = "/apis/coordination.k8s.io/v1/namespaces/gpu-extender/leases/gpu-extender-device-taints"
PER_NODE = "reclaim-test/node"
STARTED = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 7200))


def report(node: str, holder: str, sequence: int) -> pb.NodeReport:
    """Both GPUs of `node` held by the pod `holder` (namespace/name), idle."""
    r = pb.NodeReport(node_name=node, sequence=sequence, agent_version="reclaim", driver_version="550.127.05")
    r.sample_time.seconds = int(time.time())
    r.allocation_source = pb.ALLOCATION_KUBELET
    namespace, _, name = holder.partition("/")
    for index in range(2):
        g = r.gpus.add(
            index=index,
            uuid=f"GPU-{node}-{index}",
            name=H100["product"],
            healthy=True,
            utilization_gpu_percent=1,
            memory_total_bytes=80 * GIB,
            memory_used_bytes=1 * GIB,
        )
        g.holders.add(namespace=namespace, pod=name, container="main", device_id=g.uuid)
    return r


def send(world: Scene, ext: Proc, holders: dict[str, str]) -> None:
    async def run() -> None:
        credentials = grpc.ssl_channel_credentials(root_certificates=world.ca.cert_pem.bytes())
        options = [("grpc.ssl_target_name_override", EXTENDER_NAME)]
        async with grpc.aio.secure_channel(f"127.0.0.1:{ext.ports['grpc']}", credentials, options=options) as channel:
            stub = pb_grpc.GpuStateServiceStub(channel)
            for node, holder in holders.items():
                call = stub.StreamNodeReports(timeout=30)
                await call.write(report(node, holder, int(time.time())))
                ack = await call.read()
                await call.done_writing()
                assert ack is not grpc.aio.EOF and ack.status == pb.ReportAck.ACCEPTED, (node, ack)
                await call.code()

    asyncio.run(run())


def pod_body(name: str, node_selector: dict[str, str], node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gpu-scheduler",
        "nodeSelector": node_selector,
        "containers": [
            {"name": "main", "image": "registry.example/llm:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": spec}


def set_status(world: Scene, namespace: str, name: str, status: dict[str, Any]) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/status"
    world.kube.request("PUT", path, {**world.kube.get(path), "status": status})


def holder_pod(world: Scene, namespace: str, name: str, node: str) -> None:
    """Bound to `node`, Running and Ready for 2 hours (what its kubelet would report)."""
    world.kube.create(f"/api/v1/namespaces/{namespace}/pods", pod_body(name, {NODE_LABEL: world.ns}, node))
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": STARTED}
    set_status(world, namespace, name, {"phase": "Running", "startTime": STARTED, "conditions": [ready]})


def waiting_pod(world: Scene, name: str, node: str) -> None:
    """A 2-GPU pod that may run on `node` only, marked Unschedulable as kube-scheduler marks it."""
    world.kube.create(f"/api/v1/namespaces/{world.ns}/pods", pod_body(name, {PER_NODE: node}))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": now}
    set_status(world, world.ns, name, {"phase": "Pending", "conditions": [condition]})


def marked(world: Scene, namespace: str, name: str) -> bool:
    return bool(world.kube.pod(namespace, name)["metadata"].get("deletionTimestamp"))


def reasons(world: Scene, namespace: str, reason: str) -> set[str]:
    listed = world.kube.get(f"/api/v1/namespaces/{namespace}/events?fieldSelector=reason%3D{reason}")
    return {e["involvedObject"]["name"] for e in listed["items"]}


def extender(world: Scene, mode: str) -> Proc:
    world.kube.delete(LEASE, grace_seconds=None)  # the last replica's: the next leads at once
    return world.extender(
        "--stale-after",
        "3600",
        "--forget-after",
        "7200",
        "--idle-window",
        f"{WINDOW:g}",
        f"--reclaim={mode}",
        "--reclaim-min-runtime",
        "60",
    )


@pytest.mark.slow
def test_reclaim_evicts_an_opted_in_idle_holder_exactly_where_a_waiting_pod_needs_it(world: Scene) -> None:
    kube, ns = world.kube, world.ns
    off = f"{ns}-off"
    kube.create_namespace(off)
    try:
        kube.merge_patch(f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {"gpu-extender.io/reclaim": "enabled"}}})
        nodes = {n: f"{ns}-{n}" for n in "abcd"}
        for name in nodes.values():
            kube.create_node(name, 2, {NODE_LABEL: ns, PER_NODE: name})
            world.nodes.append(name)
        owners = {"a": ns, "b": ns, "c": off, "d": ns}
        for n, node in nodes.items():
            holder_pod(world, owners[n], n, node)
        for n in "abc":
            waiting_pod(world, f"wait-{n}", nodes[n])
        kube.create(
            f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
            {"metadata": {"name": "keep-b"}, "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "b"}}}},
        )
        holders = {node: f"{owners[n]}/{n}" for n, node in nodes.items()}

        ext = extender(world, "dry-run")
        world.wait_inventory(ext, "Node", len(kube.get("/api/v1/nodes")["items"]))
        started = time.monotonic()
        send(world, ext, holders)
        counted = lambda outcome: metric(world.scrape(ext), "gpu_extender_reclaim_evictions_total", outcome=outcome)  # noqa: E731
        wait_for("two dry-run reports", lambda: counted("dry_run") == 2 or None, WINDOW + 30)
        assert time.monotonic() - started >= WINDOW  # not before the window
        assert reasons(world, ns, "GPUsReclaimDryRun") == {"a", "b"}
        assert not any(marked(world, owners[n], n) for n in "abcd")  # dry run: nothing evicted
        assert counted("evicted") == 0 and counted("refused_by_pdb") == 0
        assert metric(world.scrape(ext), "gpu_extender_reclaim_idle_pods") == 4
        ext.stop()

        ext = extender(world, "on")
        world.wait_inventory(ext, "Node", len(kube.get("/api/v1/nodes")["items"]))
        send(world, ext, holders)
        wait_for("a evicted", lambda: marked(world, ns, "a") or None, WINDOW + 30)
        wait_for("b refused", lambda: counted("refused_by_pdb") == 1 or None, 15)
        assert counted("evicted") == 1 and counted("dry_run") == 0
        assert not marked(world, ns, "b")  # the budget held
        assert not marked(world, off, "c")  # no label
        assert not marked(world, ns, "d")  # no waiting pod needs it
        assert reasons(world, ns, "GPUsReclaimed") == {"a"}
        assert reasons(world, ns, "GPUsReclaimRefused") == {"b"}
        assert reasons(world, off, "GPUsReclaimDryRun") | reasons(world, off, "GPUsReclaimed") == set()
        message = kube.get(f"/api/v1/namespaces/{ns}/events?fieldSelector=reason%3DGPUsReclaimed")["items"][0][
            "message"
        ]
        assert f"read idle for over 10s (the idle rule); the waiting pod {ns}/wait-a (priority 0) needs 2" in message
    finally:
        kube.delete_pods(off)
        kube.delete(f"/api/v1/namespaces/{off}", grace_seconds=None)
