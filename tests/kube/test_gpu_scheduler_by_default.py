"""deploy/components/gpu-scheduler-by-default on a real kube-apiserver (v1.36, which serves
MutatingAdmissionPolicy as admissionregistration.k8s.io/v1): in a namespace labelled
gpu-extender.io/scheduler=gpu-scheduler, a pod that requests nvidia.com/gpu and names no scheduler
gets `schedulerName: gpu-scheduler`; a pod without GPUs, one that names its own scheduler, and any
pod of an unlabelled namespace are left as they are. Pods are created with dryRun=All (admission
runs in full, nothing is stored)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.control_plane import Kube, KubeError, wait_for
from tests.harness import ROOT

COMPONENT = ROOT / "deploy/components/gpu-scheduler-by-default/mutating-admission-policy.yaml"
LABEL = {"gpu-extender.io/scheduler": "gpu-scheduler"}
_names = itertools.count(1)


def pod(gpus: int | None, scheduler: str | None = None) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {"limits": {"cpu": "1"}}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.example/cuda:12", "resources": resources}]
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{next(_names)}"}, "spec": spec}


def admitted(kube: Kube, namespace: str, obj: dict[str, Any]) -> str:
    """The schedulerName the API server would store for `obj` (admission run, nothing stored)."""
    answer = kube.create(f"/api/v1/namespaces/{namespace}/pods?dryRun=All", obj)
    return str(answer["spec"]["schedulerName"])


@pytest.fixture
def policy(control_plane: tuple[Any, Kube]) -> Iterator[Kube]:
    _, kube = control_plane
    docs = [d for d in yaml.safe_load_all(COMPONENT.read_text()) if d]
    kube.apply_yaml(docs)
    for name in ("opted-in", "not-opted-in"):
        try:
            kube.create_namespace(name)
        except KubeError as exc:
            if exc.status != 409:
                raise
    kube.merge_patch("/api/v1/namespaces/opted-in", {"metadata": {"labels": LABEL}})
    try:
        yield kube
    finally:
        for doc in reversed(docs):
            plural = (
                "mutatingadmissionpolicies"
                if doc["kind"] == "MutatingAdmissionPolicy"
                else "mutatingadmissionpolicybindings"
            )
            kube.delete(f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}")


def test_gpu_pods_of_opted_in_namespaces_get_the_gpu_scheduler(policy: Kube) -> None:
    kube = policy
    # The API server's policy informer takes a moment to see a new policy and binding.
    wait_for(
        "the policy to take effect",
        lambda: admitted(kube, "opted-in", pod(1)) == "gpu-scheduler",
        timeout=30.0,
    )
    assert admitted(kube, "opted-in", pod(8)) == "gpu-scheduler"
    assert admitted(kube, "opted-in", pod(None)) == "default-scheduler"  # no GPUs: not ours to place
    assert admitted(kube, "opted-in", pod(1, "volcano")) == "volcano"  # a scheduler it chose stays
    assert admitted(kube, "opted-in", pod(1, "default-scheduler")) == "gpu-scheduler"  # the default is no choice
    assert admitted(kube, "not-opted-in", pod(1)) == "default-scheduler"  # no label: untouched
