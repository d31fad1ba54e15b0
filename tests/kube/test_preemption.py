"""Issue 51, item 1 on the real control plane: the no-fit fallback never pre-empts preemption.

Two nodes of 8 GPUs, every GPU kube-scheduler counts taken or taken in fact: `busy` has GPUs 0-3
busy outside Kubernetes (no pod holds them: kube-scheduler counts them free) and 4-7 held by
low-priority pods; `full` has all 8 held by low-priority pods. A high-priority 4-GPU pod fits on
no node's free, idle GPUs. Before, the shipped `pass-all` fallback passed both soft failures and
kube-scheduler, counting 4 free on `busy`, bound the pod to the busy GPUs without preempting
anything. Now the extender holds the fallback back (a lower-priority GPU pod is on the nodes it
would pass): kube-scheduler preempts, on `full` (on `busy` its own count needs no victim, and
kube-scheduler 1.35 keeps no candidate without victims), the victims' GPUs come free, and the pod
binds there. No pod of `busy` is evicted, and no more than the pod needs on `full`.

No kubelet runs: a loop of the test's plays its part for the victims (a pod marked for deletion
releases its GPUs from the fake kubelet's list, then its object goes, as a kubelet does it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.control_plane import GPU
from tests.kube.scene import H100, NODE_LABEL, Scene, holder

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


def priority_class(world: Scene, name: str, value: int) -> str:
    full = f"{world.ns}-{name}"
    world.kube.create(
        PRIORITY_CLASSES, {"metadata": {"name": full}, "value": value, "preemptionPolicy": "PreemptLowerPriority"}
    )
    return full


def gpu_pod(world: Scene, name: str, gpus: int, klass: str, node: str | None = None) -> dict[str, Any]:
    """A pod of PriorityClass `klass`, bound to `node` when given (as kube-scheduler left it)."""
    spec: dict[str, Any] = {
        "schedulerName": "gpu-scheduler",
        "priorityClassName": klass,
        "nodeSelector": {NODE_LABEL: world.ns},
        "containers": [{"name": "main", "image": "registry.example/llm:1", "resources": {"limits": {GPU: str(gpus)}}}],
    }
    if node is not None:
        spec["nodeName"] = node
    return world.kube.create(f"/api/v1/namespaces/{world.ns}/pods", {"metadata": {"name": name}, "spec": spec})


@contextmanager
def kubelet_for_victims(world: Scene, holders: dict[str, list[dict[str, Any]]]) -> Iterator[set[str]]:
    """What the kubelets would do for evicted pods, in their order: a pod marked for deletion has
    its containers stopped, so its GPUs leave its node's fake kubelet list at once; a second later
    (the agent has reported it) its object goes. Yields the names of the pods it saw marked."""
    gone: set[str] = set()
    released: dict[str, float] = {}
    stop = threading.Event()

    def play() -> None:
        while not stop.wait(0.2):
            pods = world.kube.get(f"/api/v1/namespaces/{world.ns}/pods")["items"]
            deleting = {p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")}
            for node, listed in holders.items():
                left = [h for h in listed if h["name"] not in deleting]
                if len(left) != len(listed):
                    world.set_pods(node, left)
                    holders[node] = left
                    released.update((h["name"], time.monotonic()) for h in listed if h["name"] in deleting)
            for name in deleting:
                gone.add(name)
                if time.monotonic() - released.get(name, time.monotonic()) >= 1.0:
                    world.kube.delete(f"/api/v1/namespaces/{world.ns}/pods/{name}", grace_seconds=0)

    thread = threading.Thread(target=play, name="kubelet-for-victims", daemon=True)
    thread.start()
    try:
        yield gone
    finally:
        stop.set()
        thread.join(10)


@pytest.mark.parametrize("with_extender", [True, False], ids=["gpu-extender", "kube-scheduler-alone"])
def test_a_high_priority_pod_preempts_instead_of_landing_on_gpus_busy_outside_kubernetes(
    world: Scene, with_extender: bool
) -> None:
    """Beside it, the same fleet under the shipped gpu-scheduler profile without its extender: what
    kube-scheduler alone does (the 4 busy GPUs, nothing evicted)."""
    low = priority_class(world, "low", 10)
    high = priority_class(world, "high", 1000)
    try:
        busy = world.node("busy", H100, idle=4, busy=4)  # GPUs 0-3 at 90 %: no pod holds them
        full = world.node("full", H100, idle=8)
        holders = {
            busy: [holder(f"low-busy-{g}", {"gpu": g}, namespace=world.ns) for g in range(4, 8)],
            full: [holder(f"low-full-{g}", {"gpu": g}, namespace=world.ns) for g in range(8)],
        }
        for node, listed in holders.items():
            world.kubelet(node, listed)
            for h in listed:
                gpu_pod(world, h["name"], 1, low, node)
        if with_extender:
            ext = world.extender("--stale-after", "3")  # the shipped no-fit policy: pass-all
            for node in holders:
                world.agent(node, ext)
            for node in holders:
                world.wait_idle(ext, node, 0)
            world.scheduler(ext)
        else:
            world.scheduler_alone()

        with kubelet_for_victims(world, holders) as gone:
            gpu_pod(world, "important", 4, high)
            assert world.bound("important", timeout=90) == (full if with_extender else busy)
        if with_extender:
            assert gone and all(name.startswith("low-full-") for name in gone), gone
            assert len(gone) == 4, gone  # the 4 GPUs it needs, 1 GPU a victim: the least
        else:
            assert gone == set(), gone  # on the busy GPUs, nothing evicted
    finally:
        for klass in (low, high):
            world.kube.delete(f"{PRIORITY_CLASSES}/{klass}", grace_seconds=None)
