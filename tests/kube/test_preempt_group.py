"""Issue 51, item 4 on the real control plane: a high-priority group preempts in one domain.

The fleet of tests/kube/preemption.py with 4 good nodes, in NVLink cliques of 2 nodes
(nvidia.com/gpu.clique): {busy, failing}, {good-0, good-1}, {good-2, good-3}. Every GPU
kube-scheduler counts is held by low-priority 4-GPU pods. The group: a LeaderWorkerSet of 2
members of 8 GPUs of a high PriorityClass, with the clique affinity LWS users write. The least
eviction set that places it whole on usable GPUs: one good clique's 4 pods, 16 GPUs.

Without the group rule, each member preempts for itself: the first in one clique, the second
(its affinity is met by no bound member yet) in another, and the group, which no clique then
holds, preempts again. With it, the first member's preempt call keeps only the cheapest domain
and holds it for the group; the second preempts inside it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.control_plane import GPU
from tests.kube.groups import CLIQUE, LWS_GROUP_KEY, lws_affinity
from tests.kube.preemption import drop_classes, fleet, kubelet_for_victims, priority_class
from tests.kube.scene import NODE_LABEL, Scene

V135, V136 = "kube-scheduler", "kube-scheduler-1.36"
CLIQUES = {"busy": "c.0", "failing": "c.0", "good-0": "c.1", "good-1": "c.1", "good-2": "c.2", "good-3": "c.2"}


def lws_member(world: Scene, name: str, index: int, size: int, gpus: int, klass: str) -> None:
    """Member `index` of LeaderWorkerSet `name`, as LWS writes it (labels, size, clique affinity)."""
    world.kube.create(
        f"/api/v1/namespaces/{world.ns}/pods",
        {
            "metadata": {
                "name": f"{name}-{index}",
                "labels": {
                    "leaderworkerset.sigs.k8s.io/name": name,
                    "leaderworkerset.sigs.k8s.io/group-index": "0",
                    LWS_GROUP_KEY: f"{name}-key",
                    "leaderworkerset.sigs.k8s.io/worker-index": str(index),
                },
                "annotations": {"leaderworkerset.sigs.k8s.io/size": str(size)},
            },
            "spec": {
                "schedulerName": "gpu-scheduler",
                "priorityClassName": klass,
                "nodeSelector": {NODE_LABEL: world.ns},
                "affinity": lws_affinity(name),
                "containers": [
                    {"name": "main", "image": "registry.example/llm:1", "resources": {"limits": {GPU: str(gpus)}}}
                ],
            },
        },
    )


CASES = [(True, V135), (True, V136), (False, V135)]
IDS = ["gpu-extender-1.35", "gpu-extender-1.36", "kube-scheduler-alone-1.35"]


@pytest.mark.parametrize(("with_extender", "binary"), CASES, ids=IDS)
def test_a_high_priority_group_preempts_the_least_in_one_domain(world: Scene, with_extender: bool, binary: str) -> None:
    low, high = priority_class(world, "low", 10), priority_class(world, "high", 1000)
    try:
        labels = {short: {CLIQUE: f"{world.ns}.{clique}"} for short, clique in CLIQUES.items()}
        holders: dict[str, list[dict[str, Any]]] = fleet(world, low, low, with_extender, binary, good=4, labels=labels)
        with kubelet_for_victims(world, holders) as gone:
            for index in range(2):
                lws_member(world, "lws", index, 2, 8, high)
            nodes = [world.bound(f"lws-{index}", timeout=150) for index in range(2)]
        shorts = [n.removeprefix(f"{world.ns}-") for n in nodes]
        who = "gpu-extender" if with_extender else "kube-scheduler alone"
        print(f"\n{who} ({binary}): the group on {shorts}; evicted {len(gone)} pods: {sorted(gone)}")
        assert len(set(shorts)) == 2, shorts
        if not with_extender:
            # Never better than the least on usable GPUs: fewer evictions only where a member lands on
            # busy or failing GPUs (seen: 3 pods, the group on busy and failing; 5 pods; the issue
            # measured 6). Its clique affinity does not keep two members bound at once together.
            assert len(gone) >= 4 or {"busy", "failing"} & set(shorts), (gone, shorts)
            return
        assert len({CLIQUES[s] for s in shorts}) == 1, shorts  # whole, in one clique
        assert all(s.startswith("good-") for s in shorts), shorts  # never on busy or failing GPUs
        assert gone == {f"{s}-{lo}" for s in shorts for lo in (0, 4)}, gone  # 4 pods, 16 GPUs: the least
    finally:
        drop_classes(world, low, high)
