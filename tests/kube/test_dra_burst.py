"""Issue 24's mixed-fleet acceptance, on the real control plane: half the nodes give their GPUs
through DRA (no nvidia.com/gpu allocatable; a ResourceSlice of 8 GPUs as NVIDIA's driver publishes
them, each device's uuid the one its agent reports), half through the device plugin; a third of
all GPUs busy outside Kubernetes (DRA cannot see that). A burst of claim pods (one GPU each, from a
ResourceClaimTemplate that the real kube-controller-manager turns into claims) and nvidia.com/gpu
pods (which kube-scheduler-1.36 may also serve from DRA devices: DeviceClass extendedResourceName)
is placed by kube-scheduler-1.36 from the shipped gpu-scheduler configuration and the real
gpu-extender.

Judged per pod, in binding order: no pod lands on a node whose free idle GPUs were fewer than it
needed while another node had room. A node's free idle GPUs: on a device-plugin node its idle GPUs
less the pods bound there; on a DRA node its idle devices that no claim had been given yet (read
from each claim's status.allocation: the allocator picks devices first fit, and a busy device it
hands out takes nothing idle away). Every pod is bound: the fleet has room for all."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from tests.control_plane import GPU, wait_for
from tests.extender.dra_objects import device_class, gpu_slice
from tests.harness import Proc, http, metric
from tests.kube.burst import GPUS_PER_NODE, extender_counters, gpu_uuid, send_reports
from tests.kube.scene import H100, NODE_LABEL, Scene

DRA = "/apis/resource.k8s.io/v1"
NODES = 48  # even: DRA, device plugin, DRA, ...
CLAIM_PODS = NODE_PODS = 110
BUSY = (0, 3, 5)  # per node, in turn: a third of all GPUs (8 of 24)


@pytest.mark.slow
def test_a_mixed_burst_of_claim_pods_and_gpu_pods_goes_where_gpus_are_free_and_idle(
    world: Scene, capsys: pytest.CaptureFixture[str]
) -> None:
    kube, ns = world.kube, world.ns
    world.schedulers.append(world.plane.controller_manager(name=f"kube-controller-manager-{ns}"))
    class_name = f"{ns}-gpu"
    kube.create(f"{DRA}/deviceclasses", device_class(class_name))
    world.dra_objects.append(f"{DRA}/deviceclasses/{class_name}")

    busy: dict[str, int] = {}
    dra_nodes: set[str] = set()
    busy_last: set[str] = set()
    for i in range(NODES):
        name = f"{ns}-n{i:02d}"
        dra = i % 2 == 0
        kube.create_node(
            name, None if dra else GPUS_PER_NODE, {NODE_LABEL: ns, "nvidia.com/gpu.product": H100["label"]}
        )
        world.nodes.append(name)
        busy[name] = BUSY[(i // 2) % 3]
        if dra:
            dra_nodes.add(name)
            if (i // 2) % 2:  # busy GPUs first (the allocator's first fit hands them out) or last
                busy_last.add(name)
            published = gpu_slice(name, GPUS_PER_NODE, uuid_of=lambda m, node=name: gpu_uuid(node, m))
            kube.create(f"{DRA}/resourceslices", published)
            world.dra_objects.append(f"{DRA}/resourceslices/{published['metadata']['name']}")
    idle = sum(GPUS_PER_NODE - n for n in busy.values())
    assert idle > CLAIM_PODS + NODE_PODS  # room for every pod: any misplacement is the extender's
    assert 3 * sum(busy.values()) == NODES * GPUS_PER_NODE

    ext = world.extender("--stale-after", "3600", "--forget-after", "7200")
    world.wait_inventory(ext, "Node", NODES)
    world.wait_inventory(ext, "ResourceSlice", len(dra_nodes))
    asyncio.run(send_reports(f"127.0.0.1:{ext.ports['grpc']}", world.ca.cert_pem.bytes(), busy, frozenset(busy_last)))
    wait_for("GPU data for every node", lambda: metric(world.scrape(ext), "gpu_extender_nodes_with_data") == NODES, 30)

    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": 1},
                        }
                    ]
                }
            }
        },
    }
    kube.create(f"{DRA}/namespaces/{ns}/resourceclaimtemplates", template)
    for i in range(max(CLAIM_PODS, NODE_PODS)):  # interleaved, all pending before the scheduler starts
        if i < CLAIM_PODS:
            create_pod(world, f"claim-{i:03d}", claim=True)
        if i < NODE_PODS:
            create_pod(world, f"gpu-{i:03d}", claim=False)
    # The controller-manager makes each claim pod's claim (kube-scheduler waits for it); a filter
    # whose claim the extender's watch has not delivered yet waits for it (http_api._claims_seen).
    claims_path = f"{DRA}/namespaces/{ns}/resourceclaims"
    wait_for(f"{CLAIM_PODS} claims made", lambda: len(kube.get(claims_path)["items"]) == CLAIM_PODS or None, 60)

    started = time.monotonic()
    world.scheduler(ext, binary="kube-scheduler-1.36")
    pods = CLAIM_PODS + NODE_PODS
    wait_for(f"{pods} pods bound", lambda: len(bound(world)) == pods or None, 300)
    seconds = time.monotonic() - started
    misplaced, served = judge(world, busy, dra_nodes, busy_last)
    counters = extender_counters(world, ext)
    with capsys.disabled():
        print(
            f"\nmixed DRA burst: {pods} pods ({CLAIM_PODS} claim, {NODE_PODS} nvidia.com/gpu, of which "
            f"{served['dra-extended']} served by DRA) on {NODES} nodes in {seconds:.1f} s "
            f"({pods / seconds:.1f} pods/s), misplaced {len(misplaced)}; {served}; {counters}"
        )
    assert misplaced == [], "\n".join(misplaced) + "\n" + explained(world, ext, misplaced)
    assert served["claim"] == CLAIM_PODS and served["claim"] + served["dra-extended"] + served["device-plugin"] == pods
    # Every binding was heard, claim pods and pods DRA served included (their bindings close the gate).
    assert counters["gpu_extender_bound_pods"] == pods


def explained(world: Scene, ext: Proc, misplaced: list[str]) -> str:
    """What the extender says now of the nodes the misplaced pods went to, for a one-GPU pod."""
    nodes = sorted({line.split(" -> ")[1].split(" ")[0] for line in misplaced})
    pod = {
        "metadata": {"name": "probe", "namespace": world.ns, "uid": "probe"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: "1"}}}]},
    }
    body = json.dumps({"Pod": pod, "NodeNames": nodes}).encode()
    status, raw = http("POST", world.url(ext) + "/explain", body, ssl_context=world.client_tls)
    rows = json.loads(raw)["nodes"] if status == 200 else []
    keep = ("node", "verdict", "reason", "idleGpus", "gpus", "data", "boundPods", "boundPodsPendingGpus")
    return "\n".join(json.dumps({k: r.get(k) for k in keep}) for r in rows)


def create_pod(world: Scene, name: str, *, claim: bool) -> None:
    container: dict[str, Any] = {"name": "main", "image": "registry.example/llm:1"}
    spec: dict[str, Any] = {"schedulerName": "gpu-scheduler", "nodeSelector": {NODE_LABEL: world.ns}}
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    else:
        container["resources"] = {"limits": {GPU: "1"}}
    world.kube.create(
        f"/api/v1/namespaces/{world.ns}/pods", {"metadata": {"name": name}, "spec": {**spec, "containers": [container]}}
    )


def bound(world: Scene) -> list[dict[str, Any]]:
    items = world.kube.get(f"/api/v1/namespaces/{world.ns}/pods")["items"]
    return [p for p in items if p["spec"].get("nodeName")]


def judge(
    world: Scene, busy: dict[str, int], dra_nodes: set[str], busy_last: set[str]
) -> tuple[list[str], dict[str, int]]:
    """The module docstring's check, pod by pod in binding order; and how each pod got its GPU."""
    claims = {c["metadata"]["name"]: c for c in world.kube.get(f"{DRA}/namespaces/{world.ns}/resourceclaims")["items"]}
    # No kubelet touches a pod after its binding: its resourceVersion is the binding's revision.
    pods = sorted(bound(world), key=lambda p: int(p["metadata"]["resourceVersion"]))
    idle_devices: dict[str, set[str]] = {}
    left: dict[str, int] = {}
    for node, n in busy.items():
        hot = range(GPUS_PER_NODE - n, GPUS_PER_NODE) if node in busy_last else range(n)
        idle_devices[node] = {f"gpu-{i}" for i in range(GPUS_PER_NODE) if i not in hot}
        left[node] = GPUS_PER_NODE - n

    def room(node: str) -> int:
        return len(idle_devices[node]) if node in dra_nodes else left[node]

    misplaced: list[str] = []
    served = {"claim": 0, "dra-extended": 0, "device-plugin": 0}
    for p in pods:
        name, node = p["metadata"]["name"], p["spec"]["nodeName"]
        if room(node) < 1 and any(room(other) >= 1 for other in busy if other != node):
            misplaced.append(f"{name} -> {node} (no free idle GPU left there, 1 needed)")
        status = p.get("status", {})
        claim_names = [s["resourceClaimName"] for s in status.get("resourceClaimStatuses", [])]
        extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        if extended:
            claim_names.append(extended)
        if claim_names:
            served["claim" if name.startswith("claim-") else "dra-extended"] += 1
            for claim in claim_names:
                for result in claims[claim]["status"]["allocation"]["devices"]["results"]:
                    assert result["pool"] == node, (name, node, result)
                    idle_devices[node].discard(result["device"])
        else:
            assert node not in dra_nodes, f"{name} on DRA node {node} without a claim"
            served["device-plugin"] += 1
            left[node] -= 1
    return misplaced, served
