"""GPUs a pod needs, counted like kube-scheduler counts them."""

from __future__ import annotations

import pytest

from extender.bad_request import BadRequest
from extender.pod_gpus import gpus_requested, parse_count

GPU = ("nvidia.com/gpu",)


def c(requests: dict | None = None, limits: dict | None = None, **extra) -> dict:
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "resources": resources, **extra}


def pod(containers: list, init: list | None = None) -> dict:
    spec: dict = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (pod([c({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "2"})]), 2),
        (pod([c(limits={"nvidia.com/gpu": "4"})]), 4),  # limits only: requests default to limits
        (pod([c({"nvidia.com/gpu": "1"}), c({"nvidia.com/gpu": "3"})]), 4),  # containers add up
        (pod([c({"cpu": "4"})]), 0),
        (pod([c()]), 0),
        ({"metadata": {}}, 0),  # no spec at all
        (pod([c({"nvidia.com/gpu": "1"})], init=[c({"nvidia.com/gpu": "4"})]), 4),  # init runs alone: max
        (pod([c({"nvidia.com/gpu": "2"})], init=[c({"nvidia.com/gpu": "1"}, restartPolicy="Always")]), 3),  # sidecar adds
        (pod([c({"nvidia.com/gpu": "1"})], init=[c({"nvidia.com/gpu": "1"}, restartPolicy="Always"),
                                                  c({"nvidia.com/gpu": "4"})]), 5),  # init after a sidecar
        (pod([c({"nvidia.com/gpu": 2})]), 2),  # a JSON number is accepted too
        (pod([c({"nvidia.com/gpu": "2000m"})]), 2),
    ],
)  # fmt: skip
def test_gpus_requested(p: dict, expected: int) -> None:
    assert gpus_requested(p, GPU) == expected


def test_several_gpu_resource_names_add_up() -> None:
    p = pod([c({"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "2"})])
    assert gpus_requested(p, ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")) == 3
    assert gpus_requested(p, ("nvidia.com/mig-1g.10gb",)) == 2


@pytest.mark.parametrize(
    ("value", "expected"), [("0", 0), ("8", 8), ("1k", 1000), ("1Ki", 1024), ("3e0", 3), ("1000m", 1)]
)
def test_parse_count(value: str, expected: int) -> None:
    assert parse_count(value, "x") == expected


@pytest.mark.parametrize("value", ["two", "0.5", "-1", "500m", "1Zi", "", True, None, [1]])
def test_parse_count_refuses(value: object) -> None:
    with pytest.raises(BadRequest) as info:
        parse_count(value, "where")
    assert info.value.message.startswith("where: ")


@pytest.mark.parametrize(
    "p",
    [
        {"spec": []},
        {"spec": {"containers": "main"}},
        {"spec": {"containers": [3]}},
        {"spec": {"containers": [{"resources": []}]}},
        {"spec": {"containers": [{"resources": {"limits": "nvidia.com/gpu=1"}}]}},
    ],
)
def test_wrong_shapes_are_bad_requests(p: dict) -> None:
    with pytest.raises(BadRequest) as info:
        gpus_requested(p, GPU)
    assert info.value.code == "wrong_type"
