"""Issue 16's acceptance: a burst of 300 one-GPU pods on 100 nodes whose GPUs are partly busy
outside Kubernetes, placed by the real kube-scheduler from the shipped gpu-scheduler config and
the real gpu-extender: no pod lands on a node whose idle GPUs minus those of the pods already
bound there were fewer than it needed while another node had room (tests/kube/burst.py). Once as
shipped (the extender sees bindings in its pod watch), once with the optional bind verb."""

from __future__ import annotations

import time

import pytest

from tests.kube.burst import create_pods, extender_counters, judge, start_fleet
from tests.kube.scene import Scene

NODES, PODS = 100, 300


@pytest.mark.slow
@pytest.mark.parametrize("bind_verb", [False, True], ids=["shipped-pod-watch", "bind-verb"])
def test_a_burst_never_counts_the_same_idle_gpu_twice(
    world: Scene, bind_verb: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    ext, busy = start_fleet(world, NODES)
    assert sum(8 - n for n in busy.values()) > PODS  # room for every pod: any misplacement is the extender's
    create_pods(world, PODS)  # all pending before the scheduler starts: one burst
    started = time.monotonic()
    world.scheduler(ext, **({"bindVerb": "bind"} if bind_verb else {}))
    result = judge(world, busy, PODS, timeout=240, started=started)
    counters = extender_counters(world, ext)
    with capsys.disabled():
        print(
            f"\nburst ({'bind verb' if bind_verb else 'pod watch'}): {PODS} pods on {NODES} nodes in "
            f"{result.seconds:.1f} s ({result.pods_per_s:.1f} pods/s), misplaced {len(result.misplaced)}; {counters}"
        )
    assert result.misplaced == [], "\n".join(result.misplaced)
    assert counters["gpu_extender_bound_pods"] == PODS
    assert counters["gpu_extender_binding_races_total"] == 0  # no filter decided before a binding it needed
    assert counters["binds_bound"] == (PODS if bind_verb else 0) and counters["binds_error"] == 0
