"""Issue 51, item 5 on the real control plane: preemption for a pod whose GPUs come through a DRA
ResourceClaim, kube-scheduler-1.36 (v1.36.2) alone and from the shipped gpu-scheduler configuration
with the real gpu-extender (`preemptVerb: preempt`, no managedResources: claim pods reach it).

Two DRA nodes, each a ResourceSlice of 4 GPUs whose uuids are their agents' GPUs; on `failing`,
GPUs 0-1 raised XID 79 (the agent quarantines them; no device taint: `--device-taints off`, as
before `--device-taint-after` or on a cluster without DeviceTaintRules); `good` is healthy.

- Every device held by low-priority claim pods: kube-scheduler's DynamicResources plugin has no
  RemovePod, so its dry run never frees a victim's claim: no candidate, nothing evicted, the pod
  stays Pending with the allocator's reason, alone and with the extender (which is not asked).
- Every device free, but each node's host port held by a low-priority pod (`failing`'s the
  cheapest): kube-scheduler alone evicts on `failing` and gives the pod its failing GPUs; with the
  extender, the preempt verb drops `failing` (too few healthy GPUs whatever is evicted) and the pod
  lands on `good`, evicting only `good`'s port holder.

No kubelet runs: `kubelet_for_victims` removes each pod marked for deletion (the victims hold no
GPU a fake kubelet lists)."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from gpuextender.agent.fakes.kubelet import fake_gpu_uuid
from tests.extender.dra_objects import device_class, gpu_slice
from tests.harness import Proc, metric
from tests.kube.preemption import deleting, drop_classes, kubelet_for_victims, priority_class
from tests.kube.scene import H100, NODE_LABEL, Scene
from tests.kube.test_dra import claim

DRA = "/apis/resource.k8s.io/v1"
V136 = "kube-scheduler-1.36"
XID_79 = [{"at_s": 0.0, "gpus": [0, 1], "xid": 79}]
PORT = 9000
CASES = [True, False]
IDS = ["gpu-extender", "kube-scheduler-alone"]


def dra_fleet(world: Scene, with_extender: bool) -> tuple[str, dict[str, str]]:
    """The class, the two DRA nodes, their agents and the extender (or kube-scheduler alone).
    Returns the class name and {short name: node}."""
    kube = world.kube
    klass = f"{world.ns}-gpu"
    kube.create(f"{DRA}/deviceclasses", device_class(klass))
    world.dra_objects.append(f"{DRA}/deviceclasses/{klass}")
    nodes = {
        "failing": world.node("failing", H100, 4, dra=True, events=XID_79),
        "good": world.node("good", H100, 4, dra=True),
    }
    for node in nodes.values():
        published = gpu_slice(node, 4, uuid_of=partial(fake_gpu_uuid, node))
        kube.create(f"{DRA}/resourceslices", published)
        world.dra_objects.append(f"{DRA}/resourceslices/{published['metadata']['name']}")
    return klass, nodes


def start(world: Scene, nodes: dict[str, str], with_extender: bool) -> Proc | None:
    if with_extender:
        ext = world.extender("--stale-after", "3", "--device-taints", "off")
        for node in nodes.values():
            world.agent(node, ext)
        world.wait_inventory(ext, "ResourceSlice", 2)
        world.wait_idle(ext, nodes["failing"], 2)  # GPUs 0-1 quarantined
        world.wait_idle(ext, nodes["good"], 4)
        world.scheduler(ext, binary=V136)
        return ext
    world.scheduler_alone(binary=V136)
    return None


def pod(
    world: Scene, name: str, priority: str, *, claim_name: str = "", node: str = "", port: bool = False
) -> dict[str, Any]:
    """A pod of PriorityClass `priority`: using ResourceClaim `claim_name`, holding host port PORT,
    bound to `node` when given (as kube-scheduler and the kubelet left it)."""
    container: dict[str, Any] = {"name": "main", "image": "registry.example/llm:1"}
    spec: dict[str, Any] = {
        "schedulerName": "gpu-scheduler",
        "priorityClassName": priority,
        "nodeSelector": {NODE_LABEL: world.ns},
        "containers": [container],
    }
    if claim_name:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim_name}]
        container["resources"] = {"claims": [{"name": "gpus"}]}
    if port:
        container["ports"] = [{"containerPort": PORT, "hostPort": PORT}]
    if node:
        spec["nodeName"] = node
    return world.kube.create(f"/api/v1/namespaces/{world.ns}/pods", {"metadata": {"name": name}, "spec": spec})


def hold_devices(world: Scene, name: str, klass: str, node: str, devices: list[str], priority: str) -> None:
    """A low-priority pod bound to `node` whose claim holds `devices`, allocated and reserved for it
    as kube-scheduler leaves it."""
    claim(world, name, klass, len(devices))
    created = pod(world, name, priority, claim_name=name, node=node)
    results = [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": d} for d in devices]
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    status = {
        "allocation": {"devices": {"results": results}, "nodeSelector": selector},
        "reservedFor": [{"resource": "pods", "name": name, "uid": created["metadata"]["uid"]}],
    }
    world.kube.merge_patch(f"{DRA}/namespaces/{world.ns}/resourceclaims/{name}/status", {"status": status})


@pytest.mark.parametrize("with_extender", CASES, ids=IDS)
def test_no_preemption_frees_a_claim_for_a_claim_pod(world: Scene, with_extender: bool) -> None:
    low, high = priority_class(world, "low", 10), priority_class(world, "high", 1000)
    try:
        klass, nodes = dra_fleet(world, with_extender)
        for short, node in nodes.items():
            hold_devices(world, f"hold-{short}", klass, node, [f"gpu-{i}" for i in range(4)], low)
        start(world, nodes, with_extender)
        claim(world, "want", klass, 1)
        pod(world, "want", high, claim_name="want")
        message = world.unschedulable("want", timeout=60)
        who = "gpu-extender" if with_extender else "kube-scheduler alone"
        print(
            f"\n{who} ({V136}), every device held by low-priority claim pods: Pending: {message!r}; "
            f"evicted {sorted(deleting(world))}"
        )
        assert "cannot allocate all claims" in message, message
        # DynamicResources' Filter fails the nodes UnschedulableAndUnresolvable (statusUnschedulable),
        # so DefaultPreemption does not even dry-run them; its own PostFilter frees only claims
        # reserved for no pod or for this one.
        assert "still not schedulable" in message and "Preemption is not helpful for scheduling" in message, message
        assert deleting(world) == set()  # decided: the condition is written after preemption ran
        assert not world.kube.pod(world.ns, "want")["status"].get("nominatedNodeName")
    finally:
        drop_classes(world, low, high)


@pytest.mark.parametrize("with_extender", CASES, ids=IDS)
def test_a_claim_pod_never_evicts_for_failing_devices_with_the_extender(world: Scene, with_extender: bool) -> None:
    cheap, dear = priority_class(world, "cheap", 10), priority_class(world, "dear", 50)
    high = priority_class(world, "high", 100)
    try:
        klass, nodes = dra_fleet(world, with_extender)
        pod(world, "port-failing", cheap, node=nodes["failing"], port=True)
        pod(world, "port-good", dear, node=nodes["good"], port=True)
        ext = start(world, nodes, with_extender)
        claim(world, "four", klass, 4)
        with kubelet_for_victims(world) as gone:
            pod(world, "four", high, claim_name="four", port=True)
            landed = world.bound("four", timeout=60)
        allocated = world.kube.get(f"{DRA}/namespaces/{world.ns}/resourceclaims/four")["status"]["allocation"]
        devices = sorted(r["device"] for r in allocated["devices"]["results"])
        who = "gpu-extender" if with_extender else "kube-scheduler alone"
        print(
            f"\n{who} ({V136}), devices free, host ports held: claim pod on {landed} {devices}; evicted {sorted(gone)}"
        )
        if not with_extender:
            # Its cheapest candidate: `failing`, whose GPUs 0-1 fail; the allocator hands them out.
            assert (landed, gone) == (nodes["failing"], {"port-failing"})
            assert {"gpu-0", "gpu-1"} <= set(devices)
            return
        assert (landed, gone) == (nodes["good"], {"port-good"})
        assert "port-failing" not in deleting(world)
        # The preempt verb answered: `failing` dropped (too few healthy GPUs), `good` kept.
        assert ext is not None
        samples = world.scrape(ext)
        counted = {a: metric(samples, "gpu_extender_preemption_nodes_total", action=a) for a in ("kept", "dropped")}
        assert counted == {"kept": 1, "dropped": 1}, counted
    finally:
        drop_classes(world, cheap, dear, high)
