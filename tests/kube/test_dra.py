"""GPUs that come through DRA, with the real control plane (issue 24): kube-apiserver v1.36.2 serving
resource.k8s.io/v1, kube-scheduler-1.36 (DRA-backed extended resources on by default) from the shipped
configuration, the real gpu-extender watching DeviceClasses, ResourceSlices and ResourceClaims, and a
gpu-agent on fake NVML.

The node `dra` lists no nvidia.com/gpu in its allocatable; a ResourceSlice publishes its 8 GPUs as
NVIDIA's DRA driver does (gpu-7 tainted NoSchedule, XID 79), and DeviceClass maps them to
nvidia.com/gpu (extendedResourceName). A claim pod holds gpu-0 and gpu-1: with fresh agent data the
node offers 5 GPUs, not the 8 its agent reads idle (the issue's failure 3). Then the node's agent goes
silent past --stale-after: before issue 24, gpu-extender failed the node "too few GPUs
(InsufficientGPUs)" (`idle 0, healthy 0/0, data stale`) and a 1-GPU pod stayed Pending (failure 2);
now the node offers its 5 unclaimed, untainted devices (counted "just enough", as any node without
fresh data). Failure 1 (claim pods never reach the extender) is the second test."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from gpuextender.agent.fakes.kubelet import fake_gpu_uuid
from tests.extender.dra_objects import (
    allocated_claim,
    device_class,
    gpu_slice,
    mig_claim,
    mig_class,
    mig_device,
    resource_slice,
)
from tests.harness import Proc, http, metric, parse_metrics, wait_until
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

    # A pod holding 2 devices through a claim it names; the allocator takes gpu-0 and gpu-1, first fit.
    claim_pod(world, "holder", "two", class_name, 2)
    assert world.bound("holder") == n
    claim = kube.get(f"{DRA}/namespaces/{ns}/resourceclaims/two")
    held = sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])
    assert held == ["gpu-0", "gpu-1"]

    # Failure 3: with fresh agent data (all 8 read idle: the claim's pod never starts here), the 2
    # claimed devices and the tainted one are not offered: 5, not 8.
    wait_until(f"{n}: 5 GPUs offered to a new pod", lambda: explained(world, ext, n)["idleGpus"] == 5, timeout=20)
    assert explained(world, ext, n)["data"] == "fresh"

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


def claim(world: Scene, name: str, device_class: str, gpus: int) -> None:
    """A ResourceClaim for `gpus` whole GPUs of `device_class`."""
    request = {
        "name": "gpus",
        "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": gpus},
    }
    world.kube.create(
        f"{DRA}/namespaces/{world.ns}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [request]}},
        },
    )


def claim_pod(world: Scene, pod: str, claim_name: str, device_class: str, gpus: int) -> None:
    """A ResourceClaim for `gpus` whole GPUs of `device_class`, and a pod of gpu-scheduler using it."""
    claim(world, claim_name, device_class, gpus)
    world.kube.create(
        f"/api/v1/namespaces/{world.ns}/pods",
        {
            "metadata": {"name": pod},
            "spec": {
                "schedulerName": "gpu-scheduler",
                "nodeSelector": {NODE_LABEL: world.ns},
                "resourceClaims": [{"name": "gpus", "resourceClaimName": claim_name}],
                "containers": [
                    {"name": "main", "image": "registry.example/llm:1", "resources": {"claims": [{"name": "gpus"}]}}
                ],
            },
        },
    )


def test_claim_pods_reach_the_extender_and_go_where_the_gpus_are_idle(world: Scene) -> None:
    """Two DRA nodes kube-scheduler's allocator finds equally able to give 3 GPUs: `idle` (8 idle) and
    `busy` (6 of 8 busy outside Kubernetes, which DRA cannot see). The shipped gpu-scheduler lists no
    managedResources, so the claim pods reach the extender, which fails `busy` (2 idle < 3): both
    land on `idle`. (With managedResources, as shipped before, they never reached it.)"""
    kube, ns = world.kube, world.ns
    class_name = f"{ns}-gpu"
    kube.create(f"{DRA}/deviceclasses", device_class(class_name))
    world.dra_objects.append(f"{DRA}/deviceclasses/{class_name}")
    nodes = {"idle": world.node("idle", H100, 8, dra=True), "busy": world.node("busy", H100, 2, 6, dra=True)}
    ext = world.extender()
    for node in nodes.values():
        published = gpu_slice(node, 8)
        kube.create(f"{DRA}/resourceslices", published)
        world.dra_objects.append(f"{DRA}/resourceslices/{published['metadata']['name']}")
        world.agent(node, ext)
    world.wait_idle(ext, nodes["idle"], 8)
    world.wait_idle(ext, nodes["busy"], 2)
    world.wait_inventory(ext, "ResourceSlice", 2)
    world.scheduler(ext, binary="kube-scheduler-1.36")
    calls = metric(world.scrape(ext), "gpu_extender_requests_total", verb="filter", code="200") or 0
    for i in range(2):
        claim_pod(world, f"three-{i}", f"three-{i}", class_name, 3)
        assert world.bound(f"three-{i}") == nodes["idle"]
    assert (metric(world.scrape(ext), "gpu_extender_requests_total", verb="filter", code="200") or 0) >= calls + 2


def explained(world: Scene, ext: Proc, node: str) -> dict[str, Any]:
    """/explain's row for `node`, for a pod asking one nvidia.com/gpu."""
    pod = {
        "metadata": {"name": "probe", "namespace": world.ns, "uid": "probe"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    body = json.dumps({"Pod": pod, "NodeNames": [node]}).encode()
    status, raw = http("POST", world.url(ext) + "/explain", body, ssl_context=world.client_tls)
    assert status == 200, raw[:300]
    return {r["node"]: r for r in json.loads(raw)["nodes"]}[node]


def test_the_agent_on_a_dra_node_attributes_claimed_gpus_to_their_pods(world: Scene) -> None:
    """The real gpu-agent on a DRA node reads the kubelet's dynamic_resources (a fake kubelet speaking
    the real PodResources API): the claim's pod holds gpu-2 and gpu-3 (idle: allocated-but-idle,
    the waste platform teams hunt), its DCGM series carry the claim as dcgm-exporter labels them, and
    the extender joins each agent GPU to its slice device by UUID: of the 6 devices no claim holds,
    gpu-0 and gpu-1 are busy outside Kubernetes, so 4 are offered, GPU by GPU."""
    kube, ns = world.kube, world.ns
    class_name = f"{ns}-gpu"
    kube.create(f"{DRA}/deviceclasses", device_class(class_name))
    world.dra_objects.append(f"{DRA}/deviceclasses/{class_name}")
    n = world.node("dra", H100, 6, 2, dra=True)  # GPUs 0, 1 busy; 2..7 idle
    published = gpu_slice(n, 8, uuid_of=lambda minor: fake_gpu_uuid(n, minor))
    kube.create(f"{DRA}/resourceslices", published)
    world.dra_objects.append(f"{DRA}/resourceslices/{published['metadata']['name']}")
    # The claim as kube-scheduler leaves it (allocated, reserved for its pod); no scheduler runs here.
    claim = allocated_claim("two", n, ["gpu-2", "gpu-3"], namespace=ns)
    status = claim.pop("status")
    claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = class_name
    kube.create(f"{DRA}/namespaces/{ns}/resourceclaims", claim)
    kube.merge_patch(f"{DRA}/namespaces/{ns}/resourceclaims/two/status", {"status": status})
    server = {
        "name": "server",
        "containers": [{"name": "engine", "claims": [{"claim": "two", "devices": ["gpu-2", "gpu-3"]}]}],
    }
    world.kubelet(n, [{**server, "namespace": ns}], allocatable={})

    ext = world.extender()
    agent = world.agent(n, ext)
    world.wait_inventory(ext, "ResourceSlice", 1)
    wait_until(
        f"{n}: 2 allocated-but-idle GPUs",
        lambda: metric(world.scrape(ext), "gpu_extender_node_allocated_idle_gpus", node=n) == 2,
        timeout=20,
    )
    row = explained(world, ext, n)
    assert row["idleGpus"] == 4
    states = {d["device"]: (d["claim"], d["agent"]) for d in row["draDevices"]}
    assert states == {
        "gpu-0": (None, "free, busy"),
        "gpu-1": (None, "free, busy"),
        "gpu-2": (f"{ns}/two", "held, idle"),
        "gpu-3": (f"{ns}/two", "held, idle"),
        **{f"gpu-{i}": (None, "free, idle") for i in range(4, 8)},
    }
    status_code, raw = http("GET", f"http://127.0.0.1:{agent.ports['metrics']}/metrics")
    assert status_code == 200
    temps = [dict(labels) for name, labels in parse_metrics(raw.decode()) if name == "DCGM_FI_DEV_GPU_TEMP"]
    labels = {series["gpu"]: series for series in temps}
    assert (labels["2"]["pod"], labels["2"]["dra_claim_name"], labels["2"]["dra_device_name"]) == (
        "server",
        "two",
        "gpu-2",
    )
    assert labels["2"]["dra_pool_name"] == n and "dra_claim_name" not in labels["0"]


def test_a_mig_claim_pod_goes_where_its_profile_is_free_and_its_claim_is_counted(world: Scene) -> None:
    """MIG devices through DRA: four nodes whose slices publish three 1g.10gb devices each, as NVIDIA's
    driver names them; on `mig-b`, `mig-c` and `mig-d` the agent reads two of the instances in use
    (outside Kubernetes, which DRA cannot see). A claim for two 1g.10gb devices of a
    `mig.nvidia.com`-style class, its profile in the request's selector: kube-scheduler's allocator
    finds every node able (it would pick one of four at random), the extender fails the three busy
    ones (1 free), so the pod lands on `mig-a`; then `mig-a` offers 1, not the 3 its agent reads free
    (the claim's pod never starts here)."""
    kube, ns = world.kube, world.ns
    class_name = f"{ns}-mig"
    kube.create(f"{DRA}/deviceclasses", mig_class(class_name))
    world.dra_objects.append(f"{DRA}/deviceclasses/{class_name}")
    ext = world.extender()
    nodes = {}
    for name, busy in (("mig-a", 0), ("mig-b", 2), ("mig-c", 2), ("mig-d", 2)):
        n = nodes[name] = world.node(name, H100, 1, dra=True)
        instances = [{"profile": "1g.10gb", "count": 1, "memory_used_percent": 80}] * busy
        instances += [{"profile": "1g.10gb", "count": 3 - busy, "memory_used_percent": 0}]
        spec = yaml.safe_load(world.scenario_files[n].read_text())
        spec["gpus"][0]["mig"] = instances
        world.scenario_files[n].write_text(yaml.safe_dump(spec))
        published = resource_slice(n, [mig_device(0, "1g.10gb", placement=i) for i in range(3)])
        kube.create(f"{DRA}/resourceslices", published)
        world.dra_objects.append(f"{DRA}/resourceslices/{published['metadata']['name']}")
        world.agent(n, ext)
    world.wait_inventory(ext, "ResourceSlice", 4)
    for name, free in (("mig-a", 3), ("mig-b", 1), ("mig-c", 1), ("mig-d", 1)):
        wait_until(
            f"{nodes[name]}: {free} free 1g.10gb instances",
            lambda n=nodes[name], f=free: mig_row(world, ext, n)["migDevicesFree"] == {"1g.10gb": f},
            timeout=20,
        )
    world.scheduler(ext, binary="kube-scheduler-1.36")
    calls = metric(world.scrape(ext), "gpu_extender_requests_total", verb="filter", code="200") or 0
    claim = mig_claim("two", 2, device_class=class_name, namespace=ns)
    del claim["metadata"]["uid"]
    kube.create(f"{DRA}/namespaces/{ns}/resourceclaims", claim)
    kube.create(
        f"/api/v1/namespaces/{ns}/pods",
        {
            "metadata": {"name": "mig-pod"},
            "spec": {
                "schedulerName": "gpu-scheduler",
                "nodeSelector": {NODE_LABEL: ns},
                "resourceClaims": [{"name": "mig", "resourceClaimName": "two"}],
                "containers": [
                    {"name": "main", "image": "registry.example/llm:1", "resources": {"claims": [{"name": "mig"}]}}
                ],
            },
        },
    )
    assert world.bound("mig-pod") == nodes["mig-a"]
    assert (metric(world.scrape(ext), "gpu_extender_requests_total", verb="filter", code="200") or 0) > calls
    wait_until(
        f"{nodes['mig-a']}: 1 free 1g.10gb device left to offer",
        lambda: mig_row(world, ext, nodes["mig-a"])["migDevicesFree"] == {"1g.10gb": 1},
        timeout=20,
    )
    devices = mig_row(world, ext, nodes["mig-a"])["draMigDevices"]
    assert sorted(d["claim"] or "" for d in devices) == ["", f"{ns}/two", f"{ns}/two"]


def mig_row(world: Scene, ext: Proc, node: str) -> dict[str, Any]:
    """/explain's row for `node` (its MIG devices per profile are the node's, whatever the pod asks)."""
    pod = {
        "metadata": {"name": "probe", "namespace": world.ns, "uid": "probe"},
        "spec": {"containers": [{"name": "c"}]},
    }
    body = json.dumps({"Pod": pod, "NodeNames": [node]}).encode()
    status, raw = http("POST", world.url(ext) + "/explain", body, ssl_context=world.client_tls)
    assert status == 200, raw[:300]
    return {r["node"]: r for r in json.loads(raw)["nodes"]}[node]
