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
from tests.kube.scene import H100, NODE_LABEL, Scene, holder

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
XID_79 = [{"at_s": 0.0, "gpus": [0, 1], "xid": 79}]


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


def deleting(world: Scene) -> set[str]:
    """The pods of the test's namespace marked for deletion (evicted), by name."""
    pods = world.kube.get(f"/api/v1/namespaces/{world.ns}/pods")["items"]
    return {p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")}


@contextmanager
def kubelet_for_victims(world: Scene, holders: dict[str, list[dict[str, Any]]] | None = None) -> Iterator[set[str]]:
    """What the kubelets would do for evicted pods, in their order: a pod marked for deletion has
    its containers stopped, so its GPUs leave its node's fake kubelet list (`holders`) at once; a
    second later (the agent has reported it) its object goes; a pod that holds no GPU goes at once.
    Yields the names of the pods it saw marked."""
    held = holders if holders is not None else {}
    gone: set[str] = set()
    released: dict[str, float] = {}
    stop = threading.Event()

    def play() -> None:
        while not stop.wait(0.2):
            marked = deleting(world)
            for node, listed in held.items():
                left = [h for h in listed if h["name"] not in marked]
                if len(left) != len(listed):
                    world.set_pods(node, left)
                    held[node] = left
                    released.update((h["name"], time.monotonic()) for h in listed if h["name"] in marked)
            for name in marked:
                gone.add(name)
                since = released.get(name)
                if since is None or time.monotonic() - since >= 1.0:
                    world.kube.delete(f"/api/v1/namespaces/{world.ns}/pods/{name}", grace_seconds=0)

    thread = threading.Thread(target=play, name="kubelet-for-victims", daemon=True)
    thread.start()
    try:
        yield gone
    finally:
        stop.set()
        thread.join(10)


def fleet(
    world: Scene,
    cheap: str,
    dear: str,
    with_extender: bool,
    binary: str,
    good: int = 2,
    labels: dict[str, dict[str, str]] | None = None,
    extra_args: tuple[str, ...] = (),
) -> dict[str, list[dict[str, Any]]]:
    """Issue 51's fleet: `busy` (GPUs 0-3 busy outside Kubernetes, no pod on them: kube-scheduler
    counts them free), `failing` (GPUs 0-1 raised XID 79) and `good` healthy nodes `good-<i>`, of
    8 GPUs each; every other GPU held by a 4-GPU pod (`cheap` on busy and failing, `dear` on the
    good ones) as the fake kubelets list them. `labels`: more node labels by short name. Agents and
    the extender (or kube-scheduler alone, with `extra_args`) started. Returns the holders by node."""
    nodes = {
        "busy": world.node("busy", H100, idle=4, busy=4, labels=(labels or {}).get("busy")),
        "failing": world.node("failing", H100, idle=8, events=XID_79, labels=(labels or {}).get("failing")),
    }
    for i in range(good):
        nodes[f"good-{i}"] = world.node(f"good-{i}", H100, idle=8, labels=(labels or {}).get(f"good-{i}"))
    holders: dict[str, list[dict[str, Any]]] = {}
    for short, node in nodes.items():
        halves = [(4, 8)] if short == "busy" else [(0, 4), (4, 8)]
        klass = cheap if short in ("busy", "failing") else dear
        holders[node] = [
            holder(f"{short}-{lo}", *({"gpu": g} for g in range(lo, hi)), namespace=world.ns) for lo, hi in halves
        ]
        world.kubelet(node, holders[node])
        for h in holders[node]:
            gpu_pod(world, h["name"], 4, klass, node)
    if with_extender:
        ext = world.extender("--stale-after", "3")
        for node in nodes.values():
            world.agent(node, ext)
        world.wait_idle(ext, nodes["busy"], 0)
        world.wait_idle(ext, nodes["failing"], 0)
        world.scheduler(ext, binary=binary, extra_args=extra_args)
    else:
        world.scheduler_alone(binary=binary, extra_args=extra_args)
    return holders


def drop_classes(world: Scene, *classes: str) -> None:
    for klass in classes:
        world.kube.delete(f"{PRIORITY_CLASSES}/{klass}", grace_seconds=None)
