"""Issue 51, item 1 through the scheduler verbs: when no node fits, the no-fit fallback is held
back for a pod that may preempt a lower-priority GPU pod on one of the nodes it would pass, so
kube-scheduler's preemption runs instead of binding the pod to GPUs busy outside Kubernetes; it
stays for pods preemption cannot help (equal priority, `preemptionPolicy: Never`). explain, the
CLI and the metric say which happened."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest

from gpuextender.extender.model.pod_priority import INT32_MAX
from gpuextender.extender.scheduler.wire import ExtenderArgs
from gpuextender.extender.ui.explain_cli import render
from tests.extender.builders import gpu, report
from tests.extender.scheduler.test_groups import Cluster, failures, single_pod


def prioritized(name: str, gpus: int, priority: int | None, policy: str | None = None) -> dict[str, Any]:
    pod = single_pod(name, gpus)
    if priority is not None:
        pod["spec"]["priority"] = priority
    if policy is not None:
        pod["spec"]["preemptionPolicy"] = policy
    return pod


def cluster_with_holder(holder_priority: int | None) -> Cluster:
    """n0: 8 GPUs its agent reads busy, 4 of them held by a bound pod of `holder_priority`."""
    cluster = Cluster({"n0": (None, 0, 8)})
    cluster.bind(prioritized("low", 4, holder_priority), "n0")
    return cluster


def preemptible_calls(cluster: Cluster) -> float:
    text = generate_latest(cluster.api.metrics.registry).decode()
    (line,) = [x for x in text.splitlines() if x.startswith("gpu_extender_filter_preemptible_total ")]
    return float(line.split()[1])


@pytest.mark.parametrize(("mine", "theirs"), [(1000, 999), (1, None), (0, -1), (INT32_MAX, INT32_MAX - 1)])
def test_a_pod_above_a_gpu_holder_gets_its_failures_so_kube_scheduler_preempts(mine: int, theirs: int | None) -> None:
    cluster = cluster_with_holder(theirs)
    answer = cluster.filter(prioritized("high", 4, mine))
    # Failed softly (FailedNodes, not FailedAndUnresolvableNodes): kube-scheduler's preemption may help.
    assert answer["NodeNames"] == [] and set(answer["FailedNodes"]) == {"n0"}
    assert not answer["FailedAndUnresolvableNodes"]
    assert preemptible_calls(cluster) == 1.0
    explained = cluster.api.explain(ExtenderArgs(prioritized("high", 4, mine), ["n0"], None))
    assert explained["fallback"] is False
    assert explained["preemption"] == {"priority": mine, "mayPreempt": True, "nodesWithLowerPriorityGPUPods": 1}
    assert "kube-scheduler may preempt lower-priority GPU pods on 1 node(s)" in render(explained)


@pytest.mark.parametrize(
    ("mine", "theirs", "policy"),
    [
        (1000, 1000, None),  # equal: kube-scheduler never evicts an equal-priority pod
        (999, 1000, None),
        (None, None, None),  # both 0: the default
        (1000, 0, "Never"),  # may not preempt at all
    ],
)
def test_the_fallback_stays_where_preemption_cannot_help(
    mine: int | None, theirs: int | None, policy: str | None
) -> None:
    cluster = cluster_with_holder(theirs)
    answer = cluster.filter(prioritized("high", 4, mine, policy))
    assert answer["NodeNames"] == ["n0"] and not failures(answer)  # pass-all, as before
    assert preemptible_calls(cluster) == 0.0
    explained = cluster.api.explain(ExtenderArgs(prioritized("high", 4, mine, policy), ["n0"], None))
    assert explained["fallback"] is True and explained["preemption"]["nodesWithLowerPriorityGPUPods"] == 0
    assert explained["preemption"]["mayPreempt"] is (policy != "Never")


def test_only_the_nodes_the_fallback_would_pass_count_and_a_fit_keeps_its_pass() -> None:
    """A lower-priority holder on a node that fits changes nothing (the pod passes there); one on a
    node with a failing GPU (unresolvable: never passed by the fallback) holds nothing back."""
    cluster = Cluster({"free": (None, 8, 0), "busy": (None, 0, 8)})
    cluster.bind(prioritized("low", 4, 0), "busy")
    assert cluster.filter(prioritized("high", 4, 1000))["NodeNames"] == ["free"]
    assert preemptible_calls(cluster) == 0.0

    broken = Cluster({"lost": (None, 0, 0), "busy": (None, 0, 8)})
    broken.state.ingest(report("lost", [gpu(i, 0, 1, healthy=False) for i in range(8)]), broken.clock.now)
    broken.bind(prioritized("low", 4, 0), "lost")  # below the pod, but on GPUs no eviction repairs
    answer = broken.filter(prioritized("high", 4, 1000))
    assert answer["NodeNames"] == ["busy"] and set(answer["FailedAndUnresolvableNodes"]) == {"lost"}
    assert preemptible_calls(broken) == 0.0
