"""Rules of model/pod_request.py that mutation testing (mutmut) found no test holding, each test
failing on a one-line change: the pod's node-strategy annotation chooses its strategy, and an
unknown one is logged (pod, annotation, value, the strategies, the default) and the default used; a
configuration of MIG resources only needs no whole GPU, and one of no resource reads no container."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gpuextender.extender.model.pod_request import STRATEGY_ANNOTATION, read_pod

GPU = ("nvidia.com/gpu",)


def pod(strategy: str) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "annotations": {STRATEGY_ANNOTATION: strategy}}, "spec": {}}


def test_the_annotation_chooses_the_strategy() -> None:
    assert read_pod(pod("binpack"), GPU, "spread", "seed").strategy == "binpack"


def test_an_unknown_strategy_is_logged_and_the_default_used(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gpu_extender.http"):
        assert read_pod(pod("fastest"), GPU, "spread", "seed").strategy == "spread"
    assert [r.getMessage() for r in caplog.records] == [
        "pod ns/p: gpu-extender.io/node-strategy='fastest' is not one of spread, binpack, cost, random; using spread"
    ]


def test_a_mig_only_configuration_needs_no_whole_gpu() -> None:
    p = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}}
    read = read_pod(p, ("nvidia.com/mig-1g.10gb",), "spread", "seed")
    assert (read.gpus_needed, read.mig_needed) == (0, (("1g.10gb", 1),))


def test_with_no_gpu_resource_configured_the_containers_are_not_read() -> None:
    # Nothing counted, nothing refused: a mistyped container list is read only for a configured resource.
    assert read_pod({"spec": {"containers": "x"}}, (), "spread", "seed").gpus_needed == 0
