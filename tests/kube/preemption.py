"""The parts of a preemption scene on the real control plane (tests/kube/test_preemption.py,
tests/kube/test_preempt_verb.py): PriorityClasses, GPU pods of a class, and a stand-in for the
kubelets' part in an eviction."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.control_plane import GPU
from tests.kube.scene import NODE_LABEL, Scene

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
