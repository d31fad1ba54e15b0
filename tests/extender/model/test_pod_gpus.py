"""GPUs a pod needs, counted like kube-scheduler counts them."""

from __future__ import annotations

import pytest

from gpuextender.extender.model.pod_gpus import (
    MAX_CONTAINERS,
    MAX_EXPONENT,
    MAX_GPU_COUNT,
    MAX_QUANTITY_CHARS,
    gpus_requested,
    parse_count,
    pod_ref,
)
from gpuextender.extender.model.untrusted import InvalidInput

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
        (
            pod([c({"nvidia.com/gpu": "2"})], init=[c({"nvidia.com/gpu": "1"}, restartPolicy="Always")]),
            3,
        ),  # sidecar adds
        (
            pod(
                [c({"nvidia.com/gpu": "1"})],
                init=[c({"nvidia.com/gpu": "1"}, restartPolicy="Always"), c({"nvidia.com/gpu": "4"})],
            ),
            5,
        ),  # init after a sidecar
        (pod([c({"nvidia.com/gpu": 2})]), 2),  # a JSON number is accepted too
        (pod([c({"nvidia.com/gpu": "2000m"})]), 2),
    ],
)
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
    with pytest.raises(InvalidInput) as info:
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
    with pytest.raises(InvalidInput) as info:
        gpus_requested(p, GPU)
    assert info.value.code == "wrong_type"


# -- bounds (issue 8): checked before any arithmetic, each tested on both sides of its value --------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2147483648", MAX_GPU_COUNT),  # 2**31 exactly
        (MAX_GPU_COUNT, MAX_GPU_COUNT),  # as a JSON number
        ("2Gi", MAX_GPU_COUNT),
        ("2.147483648e9", MAX_GPU_COUNT),
        ("2147483648000m", MAX_GPU_COUNT),
        ("0" * (MAX_QUANTITY_CHARS - 1) + "8", 8),  # 64 characters
        (f"0e{MAX_EXPONENT}", 0),
        (f"0e-{MAX_EXPONENT}", 0),
        ("1000000000n", 1),
        ("1000000u", 1),
        ("-0", 0),
        ("+4", 4),
        ("5.", 5),
    ],
    ids=lambda v: repr(v)[:24],
)
def test_quantities_at_the_bounds_are_accepted(value: object, expected: int) -> None:
    assert parse_count(value, "x") == expected


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("2147483649", "too_many_gpus"),  # 2**31 + 1
        (MAX_GPU_COUNT + 1, "too_many_gpus"),
        ("2049Mi", "too_many_gpus"),
        ("2.147483649e9", "too_many_gpus"),
        ("1E", "too_many_gpus"),  # a bare E is exa (10**18), not an exponent
        ("8Ei", "too_many_gpus"),
        (2**64 - 1, "too_many_gpus"),
        ("0" * MAX_QUANTITY_CHARS + "8", "bad_quantity"),  # 65 characters
        (f"0e{MAX_EXPONENT + 1}", "bad_quantity"),
        (f"0e-{MAX_EXPONENT + 1}", "bad_quantity"),
        ("1e3k", "bad_quantity"),  # Kubernetes allows one suffix: SI or exponent, not both
        ("1e999999", "bad_quantity"),  # once a million-digit integer built per container (26 s)
        ("1e999999Ei", "bad_quantity"),  # once decimal.Overflow: a 500
        ("9" * 5000, "bad_quantity"),  # once an integer str() refuses to print: a broken log line
    ],
    ids=lambda v: repr(v)[:24],
)
def test_quantities_past_the_bounds_are_refused(value: object, code: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_count(value, "where")
    assert info.value.code == code
    assert len(info.value.message) < 200, info.value.message  # never the whole input


@pytest.mark.parametrize(
    "value",
    ["x" * 100_000, "1" + "0" * 4400, 10**5000, [[0] * 1000], {"k": "v" * 10_000}],
    ids=["100k-chars", "4401-digits", "int-5001-digits", "list", "object"],
)
def test_refusals_never_echo_an_unbounded_value(value: object) -> None:
    """A YAML inventory can hold a 5,000-digit integer; str() of it raises (Python's 4,300 limit)."""
    with pytest.raises(InvalidInput) as info:
        parse_count(value, "where")
    message = info.value.message
    assert message.startswith("where: ") and len(message) < 200, message
    str(message)


def _gpus(*amounts: object) -> dict:
    return pod([c({"nvidia.com/gpu": a}) for a in amounts])


def test_the_pod_total_is_bounded_at_2_31() -> None:
    assert gpus_requested(_gpus(2**30, "1Gi"), GPU) == MAX_GPU_COUNT
    with pytest.raises(InvalidInput) as info:
        gpus_requested(_gpus(2**30, "1Gi", 1), GPU)
    assert info.value.code == "too_many_gpus" and "2147483649" in info.value.message
    # Sidecars count beside the app containers.
    sidecar = pod([c({"nvidia.com/gpu": "1Gi"})], init=[c({"nvidia.com/gpu": 2**30}, restartPolicy="Always")])
    assert gpus_requested(sidecar, GPU) == MAX_GPU_COUNT
    sidecar["spec"]["initContainers"][0]["resources"]["requests"]["nvidia.com/gpu"] = 2**30 + 1
    with pytest.raises(InvalidInput):
        gpus_requested(sidecar, GPU)


def test_containers_per_pod_are_bounded() -> None:
    """containers and initContainers together; past the bound nothing is parsed."""
    at_bound = pod([c({"nvidia.com/gpu": "1"})] * (MAX_CONTAINERS - 1), init=[c({"nvidia.com/gpu": "1"})])
    assert gpus_requested(at_bound, GPU) == MAX_CONTAINERS - 1
    over = pod([c({"nvidia.com/gpu": "1"})] * MAX_CONTAINERS, init=[c({"nvidia.com/gpu": "1e999999"})])
    with pytest.raises(InvalidInput) as info:
        gpus_requested(over, GPU)
    assert info.value.code == "too_many_containers"


def test_pod_ref_is_bounded() -> None:
    assert pod_ref({"metadata": {"namespace": "ns", "name": "p"}}) == "ns/p"
    assert pod_ref({"metadata": {"namespace": ["x"] * 10_000, "name": 7}}) == "?/?"
    long = pod_ref({"metadata": {"namespace": "n" * 253, "name": "p" * 100_000}})
    assert long == "n" * 253 + "/" + "p" * 253 + "..."
