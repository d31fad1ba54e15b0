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

import pytest

from tests.kube.preemption import PRIORITY_CLASSES, gpu_pod, kubelet_for_victims, priority_class
from tests.kube.scene import H100, Scene, holder


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
