"""The extender's allocation, time-slicing and NVLink rules, with real pods binding (issue 12): the
real kube-scheduler from the shipped gpu-scheduler config calls the real gpu-extender over HTTPS;
each node has a gpu-agent on fake NVML that reads a fake kubelet's PodResources (which pod holds
which GPU). Each assertion reads the node kube-scheduler bound the pod to, or the reason it
wrote on a pod it could not place.

The GPUs the fake kubelets hold belong to no pod in the apiserver, so kube-scheduler's own count
(the Node's allocatable nvidia.com/gpu minus its bound pods' requests) sees them free: every pod
here fits every node by that count, and only the extender tells the nodes apart. Each scene is
built so that an extender without the rule under test would send the pod elsewhere (or nowhere),
not merely to either node at random: the node the rule rejects or ranks last is the one with more
idle GPUs by the idle readings alone, which is what spread (the default strategy) would pick.

A bound pod stays Pending (no kubelet runs it): the test plays its workload starting by adding it
to the node's fake kubelet, and waits until the extender has the new count before the next pod."""

from __future__ import annotations

from typing import Any

from tests.control_plane import GPU
from tests.harness import Proc
from tests.kube.scene import H100, Scene, holder

FLAGS = ("--stale-after", "3")
# No-fit fallback off: pass-all would let kube-scheduler choose among nodes that fail softly
# (InsufficientFreeGPUs is soft), and a pod could then land right by chance.
REJECT = (*FLAGS, "--no-fit-policy", "reject")


def start(world: Scene, ext: Proc, idle: dict[str, int]) -> None:
    """An agent per node (after its fake kubelet), each node's idle count in the extender, then the
    gpu-scheduler."""
    for node in idle:
        world.agent(node, ext)
    for node, count in idle.items():
        world.wait_idle(ext, node, count)
    world.scheduler(ext)


def gpus(*indexes: int) -> list[dict[str, int]]:
    return [{"gpu": i} for i in indexes]


def test_gpus_held_by_pods_are_not_free_however_quiet(world: Scene) -> None:
    """`held`: 8 quiet GPUs, 6 held by pods that do nothing (2 free). `free`: 2 GPUs held and busy,
    6 quiet and free. By the idle readings alone `held` has 8 idle GPUs to `free`'s 6: spread would
    send a 3-GPU pod there; kube-scheduler counts 8 free on both."""
    held = world.node("held", H100, idle=8)
    free = world.node("free", H100, idle=6, busy=2)  # GPUs 0-1 busy
    idlers = [holder(f"idle-{g}", {"gpu": g}, namespace="team-a") for g in range(6)]
    workers = [holder("train-0", *gpus(0, 1), namespace="team-b")]
    world.kubelet(held, idlers)
    world.kubelet(free, workers)
    ext = world.extender(*REJECT)
    start(world, ext, {held: 2, free: 6})

    assert world.bound(world.pod("three", 3)) == free
    world.set_pods(free, [*workers, holder("three", *gpus(2, 3, 4), namespace=world.ns)])  # still quiet
    world.wait_idle(ext, free, 3)

    # 4 GPUs: 2 free on `held`, 3 on `free`; kube-scheduler alone counts 8 and 5.
    message = world.unschedulable(world.pod("waits", 4))
    assert "2 gpu-extender: too few free GPUs (InsufficientFreeGPUs)" in message, message
    world.kube.delete(f"/api/v1/namespaces/{world.ns}/pods/waits")

    world.set_pods(held, [])  # the idle pods end: their GPUs are free again
    world.wait_idle(ext, held, 8)
    assert world.bound(world.pod("four", 4)) == held


def test_a_time_sliced_node_is_counted_in_replicas(world: Scene) -> None:
    """8 GPUs shared by time-slicing, 4 replicas each: the Node advertises 32. GPUs 0-3 are fully
    held and GPUs 4 and 5 one replica each: 14 replicas free, on 4 GPUs of which only 2 have no
    holder. A 12-replica pod fits only when free replicas are counted (8 GPUs < 12; 2 unheld
    GPUs = 8 replicas < 12)."""
    sliced = world.node("sliced", H100, idle=8, allocatable=32)
    held = [{"gpu": g, "replica": r} for g in range(4) for r in range(4)] + [
        {"gpu": 4, "replica": 0},
        {"gpu": 5, "replica": 0},
    ]
    before = [holder("batch-0", *held, namespace="team-a")]
    world.kubelet(sliced, before, allocatable={GPU: [{"gpus": 8, "replicas": 4}]})
    ext = world.extender(*REJECT)
    start(world, ext, {sliced: 14})

    assert world.bound(world.pod("twelve", 12)) == sliced
    taken = [
        {"gpu": g, "replica": r} for g, rs in ((4, (1, 2, 3)), (5, (1, 2, 3)), (6, range(4)), (7, (0, 1))) for r in rs
    ]
    world.set_pods(sliced, [*before, holder("twelve", *taken, namespace=world.ns)])
    world.wait_idle(ext, sliced, 2)
    # kube-scheduler alone counts 32 - 12 = 20 replicas free; 2 are.
    message = world.unschedulable(world.pod("three", 3))
    assert "gpu-extender: too few free GPUs (InsufficientFreeGPUs)" in message, message
    assert world.bound(world.pod("two", 2)) == sliced


def _islands() -> dict[str, Any]:
    """Two NVLink islands of 4 GPUs (0-3, 4-7), one per NUMA node, nothing between them but PCIe
    across NUMA nodes."""
    nvlinks = [
        {"gpus": [a, b], "links": 4}
        for island in ((0, 1, 2, 3), (4, 5, 6, 7))
        for i, a in enumerate(island)
        for b in island[i + 1 :]
    ]
    return {
        "pcie": "system",
        "nvlinks": nvlinks,
        "pcie_groups": [{"gpus": [0, 1, 2, 3], "relation": "node"}, {"gpus": [4, 5, 6, 7], "relation": "node"}],
    }


def test_a_multi_gpu_pod_goes_where_an_nvlink_island_is_free(world: Scene) -> None:
    """`linked`: GPUs 4-7 held, island 0-3 free. `scattered`: GPUs 3 and 7 held, 6 free, 3 per
    island. A 1-GPU pod goes by spread (6 idle > 4) to `scattered`; with it, 5 free there, 3 at
    most on one island. A 4-GPU pod then binds to `linked` although `scattered` has more free GPUs
    (spread alone, or an extender without topology, would pick `scattered`)."""
    linked = world.node("linked", H100, idle=8, topology=_islands())
    scattered = world.node("scattered", H100, idle=8, topology=_islands())
    world.kubelet(linked, [holder("train-0", *gpus(4, 5, 6, 7), namespace="team-a")])
    others = [holder("train-1", *gpus(3, 7), namespace="team-b")]
    world.kubelet(scattered, others)
    ext = world.extender(*FLAGS)
    start(world, ext, {linked: 4, scattered: 6})

    assert world.bound(world.pod("one", 1)) == scattered
    world.set_pods(scattered, [*others, holder("one", *gpus(2), namespace=world.ns)])  # free: 0, 1 | 4, 5, 6
    world.wait_idle(ext, scattered, 5)
    assert world.bound(world.pod("four", 4)) == linked
