"""model/waiting_pod.py: a pod kube-scheduler marked Unschedulable, and where it may run."""

from __future__ import annotations

from typing import Any

from gpuextender.extender.model.waiting_pod import read_waiting

GPU = ("nvidia.com/gpu",)


def pod(gpus: int = 2, *, reason: str = "Unschedulable", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "w", "namespace": "team", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            "priority": 7,
            **spec,
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": reason}],
        },
    }


def test_an_unschedulable_gpu_pod_is_waiting() -> None:
    w = read_waiting(pod(), GPU)
    assert w is not None
    assert (w.uid, w.key, w.gpus, w.priority, w.created) == ("u1", "team/w", 2, 7, 1767225600.0)


def test_not_waiting_bound_deleted_not_marked_or_no_gpu() -> None:
    assert read_waiting(pod(reason="SchedulerError"), GPU) is None
    assert read_waiting(pod(nodeName="n1"), GPU) is None
    assert read_waiting(pod(gpus=0), GPU) is None
    deleted = pod()
    deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
    assert read_waiting(deleted, GPU) is None
    fresh = pod()
    fresh["status"]["conditions"] = []
    assert read_waiting(fresh, GPU) is None


def test_node_selector_affinity_and_taints() -> None:
    w = read_waiting(pod(nodeSelector={"pool": "a"}), GPU)
    assert w is not None and w.may_run_on({"pool": "a"}, ()) and not w.may_run_on({"pool": "b"}, ())
    term = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    w = read_waiting(pod(affinity=affinity), GPU)
    assert w is not None and w.may_run_on({"gpu": "h100"}, ()) and not w.may_run_on({"gpu": "a100"}, ())
    fields = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = [fields]
    w = read_waiting(pod(affinity=affinity), GPU)
    assert w is not None and not w.may_run_on({"gpu": "h100"}, ())  # not matched here: no node
    taint = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
    w = read_waiting(pod(), GPU)
    assert (
        w is not None and not w.may_run_on({}, [taint]) and w.may_run_on({}, [{**taint, "effect": "PreferNoSchedule"}])
    )
    tolerant = read_waiting(pod(tolerations=[{"key": "gpu", "operator": "Equal", "value": "yes"}]), GPU)
    assert tolerant is not None and tolerant.may_run_on({}, [taint])
    wrong = read_waiting(pod(tolerations=[{"key": "gpu", "operator": "Equal", "value": "no"}]), GPU)
    assert wrong is not None and not wrong.may_run_on({}, [taint])
    anything = read_waiting(pod(tolerations=[{"operator": "Exists"}]), GPU)
    assert anything is not None and anything.may_run_on({}, [taint])
