"""Placements made by the real kube-scheduler, started from the shipped gpu-scheduler config, calling
the real gpu-extender over HTTPS; Nodes come from the apiserver's watch, GPU state from real
gpu-agents on fake NVML. Each assertion reads the node the pod was bound to, or the pod's
PodScheduled condition as kube-scheduler wrote it.

No kubelet runs, so a bound pod stays Pending and the extender counts its GPUs from its ledger of
bound pods (these agents cannot read a kubelet: a pod counts until it is Running). The test plays
the workload starting as a kubelet and the GPUs would show it: the pod Running, the node's scenario
file edited (its agent follows it); it waits until the extender has the new idle count before the
next pod."""

from __future__ import annotations

import yaml

from tests.harness import ROOT, Proc
from tests.kube.scene import A100_40, H100, Scene, copy_ome_objects


def start(world: Scene, *extender_flags: str, nodes: dict[str, tuple[dict, int, int]]) -> tuple[Proc, dict[str, str]]:
    """The extender, one node + agent per entry (name: (gpu, idle, busy)), the gpu-scheduler; returns
    the extender and the nodes' full names."""
    names = {short: world.node(short, gpu, idle, busy) for short, (gpu, idle, busy) in nodes.items()}
    ext = world.extender("--stale-after", "3", *extender_flags)
    for short, (_, idle, _) in nodes.items():
        world.agent(names[short], ext)
        world.wait_idle(ext, names[short], idle)
    world.scheduler(ext)
    return ext, names


def workload_starts(world: Scene, ext: Proc, node: str, gpu: dict, idle: int, busy: int, *pods: str) -> None:
    for pod in pods:  # what the kubelet writes once the containers run
        world.kube.merge_patch(f"/api/v1/namespaces/{world.ns}/pods/{pod}/status", {"status": {"phase": "Running"}})
    world.set_gpus(node, gpu, idle, busy)
    world.wait_idle(ext, node, idle)


def test_pods_land_only_where_enough_gpus_are_idle(world: Scene) -> None:
    ext, n = start(world, nodes={"idle": (H100, 8, 0), "busy": (H100, 0, 8), "half": (H100, 4, 4)})
    # 6 GPUs: only the all-idle node has them idle (kube-scheduler alone sees 8 free on all three).
    assert world.bound(world.pod("six", 6)) == n["idle"]
    workload_starts(world, ext, n["idle"], H100, 2, 6, "six")
    # 4 GPUs: only `half` has 4 idle now; the busy node never gets a pod while idle GPUs exist.
    assert world.bound(world.pod("four", 4)) == n["half"]
    workload_starts(world, ext, n["half"], H100, 0, 8, "four")
    assert world.bound(world.pod("two", 2)) == n["idle"]


def test_nothing_fits_and_reject_keeps_the_pod_pending_with_the_extenders_reason(world: Scene) -> None:
    _ext, n = start(world, "--no-fit-policy", "reject", nodes={"busy": (H100, 0, 8), "half": (H100, 4, 4)})
    message = world.unschedulable(world.pod("six", 6))
    # kube-scheduler counts identical reasons together: both nodes fail for the same one.
    assert "0/" in message and "2 gpu-extender: too few idle GPUs (InsufficientIdleGPUs)" in message, message
    assert world.node_of("six") is None
    # The same extender still places what fits.
    assert world.bound(world.pod("four", 4)) == n["half"]
    assert world.node_of("six") is None


def test_spread_sends_successive_pods_to_the_most_idle_nodes(world: Scene) -> None:
    ext, n = start(world, nodes={"a": (H100, 8, 0), "b": (H100, 8, 0), "c": (H100, 6, 2)})
    first = world.bound(world.pod("p1", 2))
    assert first in (n["a"], n["b"])  # 8 idle beats 6
    workload_starts(world, ext, first, H100, 6, 2, "p1")
    second = world.bound(world.pod("p2", 2))
    assert second in (n["a"], n["b"]) and second != first  # the other 8-idle node
    workload_starts(world, ext, second, H100, 6, 2, "p2")
    workload_starts(world, ext, n["c"], H100, idle=8, busy=0)  # c's workload ended
    assert world.bound(world.pod("p3", 2)) == n["c"]


def test_binpack_fills_one_node_first(world: Scene) -> None:
    ext, n = start(world, "--node-strategy", "binpack", nodes={"a": (H100, 8, 0), "b": (H100, 8, 0), "c": (H100, 8, 0)})
    first = world.bound(world.pod("p1", 2))
    idle = 6
    workload_starts(world, ext, first, H100, idle, 8 - idle, "p1")
    for i in (2, 3, 4):  # the node with the fewest idle GPUs that still fit, until it is full
        assert world.bound(world.pod(f"p{i}", 2)) == first
        idle -= 2
        workload_starts(world, ext, first, H100, idle, 8 - idle, f"p{i}")
    fifth = world.bound(world.pod("p5", 2))
    assert fifth != first and fifth in n.values()


def test_a_dead_agents_node_is_rejected_after_the_ttl_when_fail_closed(world: Scene) -> None:
    ext, n = start(
        world,
        "--stale-policy",
        "fail-closed",
        "--no-fit-policy",
        "reject",
        nodes={"a": (H100, 8, 0), "b": (H100, 4, 4)},
    )
    next(p for p in world.procs.procs if p.name == f"agent-{n['a']}").stop()
    world.wait_idle(ext, n["a"], 8)  # the last report is still held...
    _wait_stale(world, ext, n["a"])
    message = world.unschedulable(world.pod("six", 6))  # ...and refused once older than 3 s
    assert "gpu-extender: node GPU data is stale (StaleGPUData)" in message, message
    assert "gpu-extender: too few idle GPUs (InsufficientIdleGPUs)" in message, message
    assert world.bound(world.pod("two", 2)) == n["b"]  # a fresh node still takes what fits


def test_a_dead_agents_node_is_used_only_when_no_fresh_node_fits_when_fail_open(world: Scene) -> None:
    ext, n = start(world, nodes={"a": (H100, 8, 0), "b": (H100, 4, 4)})  # fail-open is the default
    next(p for p in world.procs.procs if p.name == f"agent-{n['a']}").stop()
    world.wait_idle(ext, n["a"], 8)
    _wait_stale(world, ext, n["a"])
    assert world.bound(world.pod("two", 2)) == n["b"]  # b is fresh and fits: the silent node is not used
    assert world.bound(world.pod("six", 6)) == n["a"]  # nothing fresh fits: assumed data lets it through


def _wait_stale(world: Scene, ext: Proc, node: str) -> None:
    from tests.harness import metric, wait_until

    wait_until(
        f"{node}'s data older than the 3 s TTL",
        lambda: (metric(world.scrape(ext), "gpu_extender_node_data_age_seconds", node=node) or 0) > 3.5,
    )


def ome_docs(kind: str, *names: str) -> list[dict]:
    found = [
        doc
        for path in sorted((ROOT / "examples/ome").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] == kind and doc["metadata"]["name"] in names
    ]
    assert len(found) == len(names), (kind, names)
    return found


def test_ome_objects_in_the_apiserver_steer_engine_pods_and_leave_routers_alone(world: Scene) -> None:
    ext, n = start(world, nodes={"h100": (H100, 4, 4), "a100": (A100_40, 8, 0)})
    # Every class the runtime lists exists: one that does not would abort the policy step, as in
    # OME (no class: the pod is class-neutral). Only the H100 and A100-40 ones have nodes here.
    copy_ome_objects(
        world.kube,
        [
            *ome_docs("AcceleratorClass", "nvidia-h100-80gb", "nvidia-a100-40gb", "nvidia-a100-80gb", "nvidia-l40s"),
            *ome_docs("ClusterServingRuntime", "vllm-llama-small"),
            *ome_docs("ClusterBaseModel", "llama-3-1-8b-instruct"),
            *ome_docs("InferenceService", "llama-8b-pinned-a100", "llama-8b-most-capable"),
        ],
        world.ns,
    )
    world.wait_inventory(ext, "InferenceService", 2)
    world.wait_inventory(ext, "AcceleratorClass", 4)

    def ome_pod(name: str, isvc: str, component: str) -> str:
        labels = {"ome.io/inferenceservice": isvc, "component": component, "serving-runtime": "vllm-llama-small"}
        return world.pod(name, 1, labels=labels)

    # MostCapable picks the H100 class although the A100 node has twice the idle GPUs.
    assert world.bound(ome_pod("capable-engine", "llama-8b-most-capable", "engine")) == n["h100"]
    # An explicit class on the InferenceService.
    assert world.bound(ome_pod("pinned-engine", "llama-8b-pinned-a100", "engine")) == n["a100"]
    # A router pod of the same InferenceService is not an engine: no class applies, spread picks the A100s.
    assert world.bound(ome_pod("router", "llama-8b-most-capable", "router")) == n["a100"]
