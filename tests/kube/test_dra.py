"""GPUs that come through DRA, with the real control plane (issue 24): kube-apiserver v1.36.2 serving
resource.k8s.io/v1, kube-scheduler-1.36 (DRA-backed extended resources on by default) from the shipped
configuration, the real gpu-extender watching DeviceClasses, ResourceSlices and ResourceClaims, and a
gpu-agent on fake NVML.

The node `dra` lists no nvidia.com/gpu in its allocatable; a ResourceSlice publishes its 8 GPUs as
NVIDIA's DRA driver does (gpu-7 tainted NoSchedule, XID 79), and DeviceClass maps them to
nvidia.com/gpu (extendedResourceName). A claim pod holds gpu-0 and gpu-1. Then the node's agent goes
silent past --stale-after: before issue 24, gpu-extender failed the node "too few GPUs
(InsufficientGPUs)" (`idle 0, healthy 0/0, data stale`) and a 1-GPU pod stayed Pending; now the node
offers its 5 unclaimed, untainted devices (counted "just enough", as any node without fresh data)."""

from __future__ import annotations

import copy

from tests.extender.dra_objects import device_class, gpu_slice
from tests.harness import metric, wait_until
from tests.kube.scene import H100, NODE_LABEL, Scene

DRA = "/apis/resource.k8s.io/v1"


def test_a_dra_node_whose_agent_went_silent_still_takes_gpu_pods(world: Scene) -> None:
    kube, ns = world.kube, world.ns
    class_name = f"{ns}-gpu"
    kube.create(f"{DRA}/deviceclasses", device_class(class_name))
    world.dra_objects.append(f"{DRA}/deviceclasses/{class_name}")
    n = world.node("dra", H100, 8, dra=True)
    published = copy.deepcopy(gpu_slice(n, 8, tainted=(7,)))
    kube.create(f"{DRA}/resourceslices", published)
    world.dra_objects.append(f"{DRA}/resourceslices/{published['metadata']['name']}")

    ext = world.extender("--stale-after", "2")
    agent = world.agent(n, ext)
    world.wait_idle(ext, n, 8)
    world.wait_inventory(ext, "ResourceSlice", 1)
    world.scheduler(ext, binary="kube-scheduler-1.36")

    # A pod holding 2 devices through a claim it names (it never reaches the extender: no
    # managed resource); the allocator takes gpu-0 and gpu-1, first fit.
    kube.create(
        f"{DRA}/namespaces/{ns}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "two"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": 2},
                        }
                    ]
                }
            },
        },
    )
    kube.create(
        f"/api/v1/namespaces/{ns}/pods",
        {
            "metadata": {"name": "holder"},
            "spec": {
                "schedulerName": "gpu-scheduler",
                "nodeSelector": {NODE_LABEL: ns},
                "resourceClaims": [{"name": "gpus", "resourceClaimName": "two"}],
                "containers": [
                    {"name": "main", "image": "registry.example/llm:1", "resources": {"claims": [{"name": "gpus"}]}}
                ],
            },
        },
    )
    assert world.bound("holder") == n
    claim = kube.get(f"{DRA}/namespaces/{ns}/resourceclaims/two")
    held = sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])
    assert held == ["gpu-0", "gpu-1"]

    # The agent goes silent; past --stale-after its data is stale.
    agent.stop()
    wait_until(
        f"{n}: agent data older than --stale-after",
        lambda: (metric(world.scrape(ext), "gpu_extender_node_data_age_seconds", node=n) or 0) > 2.5,
        timeout=20,
    )
    world.pod("one", 1)
    assert world.bound("one") == n  # before: Pending, "too few GPUs (InsufficientGPUs)"
    mine = kube.pod(ns, "one")["status"].get("extendedResourceClaimStatus")
    assert mine and mine.get("resourceClaimName"), "kube-scheduler gave nvidia.com/gpu through DRA"
