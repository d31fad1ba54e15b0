"""Issue 51, items 2-3 on the real control plane: the shipped configuration's `preemptVerb` checks
kube-scheduler's preemption against the GPUs, on kube-scheduler v1.35.4 and kube-scheduler-1.36.

The issue's fleet, 4 nodes of 8 GPUs here (the least eviction set is the same as with 6): every GPU
kube-scheduler counts is held by low-priority 4-GPU pods, except on `busy`, whose GPUs 0-3 are busy
outside Kubernetes (no pod holds them: kube-scheduler counts them free); `failing`'s GPUs 0-1 raised
XID 79 (the agent quarantines them); `good-0` and `good-1` are healthy.

- Single pods: a 4-GPU and an 8-GPU pod of a high PriorityClass, created at once. The least that
  places them on usable GPUs: 3 pods, 12 GPUs (4 GPUs of `failing` are healthy, `busy` has none to
  give). kube-scheduler alone binds the 4-GPU pod to `busy`'s busy GPUs, evicting nothing.
- The cheapest victims on bad GPUs: one 8-GPU pod (priority 100); the pods on `busy` and `failing`
  are the cheapest (10), those on the good nodes 50. kube-scheduler's dry run prefers the cheapest;
  the preempt verb drops `busy` (4 GPUs usable after) and `failing` (6 healthy) before anything is
  evicted: 2 pods, 8 GPUs, on a good node. kube-scheduler alone evicts on `failing` first.

No kubelet runs: tests/kube/preemption.py plays its part for the victims."""

from __future__ import annotations

import pytest

from tests.harness import wait_until
from tests.kube.preemption import drop_classes, fleet, gpu_pod, kubelet_for_victims, priority_class
from tests.kube.scene import Scene

V135, V136 = "kube-scheduler", "kube-scheduler-1.36"


SINGLE_CASES = [(True, V135), (True, V136), (False, V135)]
IDS = ["gpu-extender-1.35", "gpu-extender-1.36", "kube-scheduler-alone-1.35"]


@pytest.mark.parametrize(("with_extender", "binary"), SINGLE_CASES, ids=IDS)
def test_single_high_priority_pods_evict_the_least_and_land_on_usable_gpus(
    world: Scene, with_extender: bool, binary: str
) -> None:
    low, high = priority_class(world, "low", 10), priority_class(world, "high", 1000)
    try:
        holders = fleet(world, low, low, with_extender, binary)
        with kubelet_for_victims(world, holders) as gone:
            gpu_pod(world, "four", 4, high)
            if not with_extender:
                # kube-scheduler alone: `busy`'s 4 "free" GPUs, busy outside Kubernetes; nothing evicted for it.
                # (The 8-GPU pod comes after: created at once, it may be queued first and preempt on
                # `busy`, sending the 4-GPU pod elsewhere: a race of kube-scheduler's queue, not the point.)
                four = world.bound("four", timeout=120)
                assert four == f"{world.ns}-busy", four
                print(f"\nkube-scheduler alone ({binary}): 4-GPU pod on {four} (busy GPUs); evicted {sorted(gone)}")
                return
            gpu_pod(world, "eight", 8, high)
            four = world.bound("four", timeout=120)
            eight = world.bound("eight", timeout=120)
        print(f"\ngpu-extender ({binary}): 4-GPU pod on {four}, 8-GPU pod on {eight}; evicted {sorted(gone)}")
        assert four != f"{world.ns}-busy" and eight not in (f"{world.ns}-busy", f"{world.ns}-failing")
        assert four != eight
        if four == f"{world.ns}-failing":  # its 4 healthy GPUs: the pod holding GPUs 4-7 was the victim
            assert "failing-4" in gone and "failing-0" not in gone, gone
        assert len(gone) == 3, gone  # 3 pods, 12 GPUs: the least
        assert not any(name.startswith("busy-") for name in gone), gone
    finally:
        drop_classes(world, low, high)


@pytest.mark.parametrize(("with_extender", "binary"), SINGLE_CASES, ids=IDS)
def test_the_cheapest_victims_on_busy_or_failing_gpus_are_never_evicted_for_nothing(
    world: Scene, with_extender: bool, binary: str
) -> None:
    cheap, dear = priority_class(world, "cheap", 10), priority_class(world, "dear", 50)
    high = priority_class(world, "high", 100)
    try:
        holders = fleet(world, cheap, dear, with_extender, binary)
        with kubelet_for_victims(world, holders) as gone:
            gpu_pod(world, "eight", 8, high)
            if not with_extender:
                # Its first candidate: `failing`'s (or `busy`'s) priority-10 pods.
                wait_until("kube-scheduler alone evicts the cheapest pods", lambda: gone, timeout=60)
                print(f"\nkube-scheduler alone ({binary}): first evicted {sorted(gone)}")
                assert all(name.startswith(("failing-", "busy-")) for name in gone), gone
                return
            eight = world.bound("eight", timeout=120)
        print(f"\ngpu-extender ({binary}): 8-GPU pod on {eight}; evicted {sorted(gone)}")
        assert eight in (f"{world.ns}-good-0", f"{world.ns}-good-1"), eight
        short = eight.removeprefix(f"{world.ns}-")
        assert gone == {f"{short}-0", f"{short}-4"}, gone  # 2 pods, 8 GPUs; none of priority 10
    finally:
        drop_classes(world, cheap, dear, high)
