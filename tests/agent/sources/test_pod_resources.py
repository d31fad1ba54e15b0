"""The PodResources client against the fake kubelet on a real unix socket: attribution, failures,
recovery, bounds, and the fake kubelet itself."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pynvml
import pytest

from gpuextender.agent.fakes.kubelet import FakeKubelet, FakeKubeletError, fake_gpu_uuid, fake_mig_uuid, parse_state
from gpuextender.agent.fakes.nvml import FakeNvmlLibrary, install
from gpuextender.agent.fakes.scenario import ScenarioError, parse_scenario
from gpuextender.agent.model.readings import (
    ALLOCATION_KUBELET,
    ALLOCATION_UNAVAILABLE,
    EXCLUSIVE,
    MIG,
    TIME_SLICING,
    GpuReading,
    MigReading,
    NodeSample,
)
from gpuextender.agent.sources import pod_resources as pr
from gpuextender.agent.sources.allocation import (
    LABEL_REPLICAS,
    LABEL_SHARING_STRATEGY,
    PROBLEM_TOO_MANY_HOLDERS,
    GpuResourceNames,
)
from gpuextender.agent.sources.nvml_reader import NvmlReader
from gpuextender.agent.sources.pod_resources import PodAttribution, PodResourcesClient, PodResourcesLimits
from gpuextender.podresources.v1 import api_pb2
from tests.harness import ROOT

NODE = "node-1"
GPU = "nvidia.com/gpu"
MIG_A = "MIG-aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # pytest's tmp_path can be longer than a unix socket path may be (108 bytes with the NUL).
    path = Path(tempfile.mkdtemp(prefix="gx-pr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sock(sock_dir: Path) -> str:
    return str(sock_dir / "kubelet.sock")


@pytest.fixture
def kubelet(sock: str) -> Iterator[FakeKubelet]:
    with FakeKubelet(sock, uuid_seed=NODE) as fake:
        yield fake


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def sample(gpus: int = 2, *, labels: dict[str, str] | None = None) -> NodeSample:
    readings = [GpuReading(index=i, uuid=fake_gpu_uuid(NODE, i), temperature_celsius=40 + i) for i in range(gpus)]
    return NodeSample(sample_time=1.0, duration_s=0.01, gpus=readings, sharing_labels=labels or {})


def attribution(sock: str, **kwargs: Any) -> PodAttribution:
    return PodAttribution(sock, timeout_s=kwargs.pop("timeout_s", 1.0), **kwargs)


# -- who holds what ---------------------------------------------------------------------


def test_exclusive_gpus(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.load(
        {
            "allocatable": {GPU: [{"gpus": 2}]},
            "pods": [
                {
                    "namespace": "ml",
                    "name": "train",
                    "containers": [{"name": "main", "devices": {GPU: [{"gpu": 1}], "example.com/nic": ["eth1"]}}],
                }
            ],
        }
    )
    s = sample()
    result = attribution(sock).annotate(s)
    assert (s.allocation_source, s.allocation_problem, result.unmatched_device_ids) == (ALLOCATION_KUBELET, "", ())
    assert s.gpus[0].holders == []
    assert [(h.namespace, h.pod, h.container, h.resource_name, h.device_id) for h in s.gpus[1].holders] == [
        ("ml", "train", "main", GPU, kubelet.gpu(1))
    ]
    assert [(g.sharing_mode, g.replicas) for g in s.gpus] == [(EXCLUSIVE, 1)] * 2


def test_time_slicing_replicas_and_allocate_release_while_running(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.load({"allocatable": {"nvidia.com/gpu.shared": [{"gpu": 0, "replicas": 4}, {"gpu": 1, "replicas": 4}]}})
    attr = attribution(sock)
    s = sample()
    attr.annotate(s)
    assert [(g.sharing_mode, g.replicas, g.holders) for g in s.gpus] == [(TIME_SLICING, 4, [])] * 2

    kubelet.allocate("ml", "a", "main", "nvidia.com/gpu.shared", [kubelet.gpu(1, replica=2)])
    kubelet.allocate("ml", "b", "main", "nvidia.com/gpu.shared", [kubelet.gpu(1, replica=3)])
    s = sample()
    attr.annotate(s)
    assert [h.pod for h in s.gpus[1].holders] == ["a", "b"]
    assert s.gpus[1].holders[0].device_id == f"{fake_gpu_uuid(NODE, 1)}::2"

    kubelet.release("ml", "a")
    s = sample()
    attr.annotate(s)
    assert [h.pod for h in s.gpus[1].holders] == ["b"]


def test_mig_instances(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.load(
        {
            "allocatable": {"nvidia.com/mig-1g.10gb": [MIG_A]},
            "pods": [{"name": "infer", "containers": [{"name": "c", "devices": {"nvidia.com/mig-1g.10gb": [MIG_A]}}]}],
        }
    )
    s = sample()
    s.gpus[0].mig_instances = [MigReading(MIG_A, "1g.10gb", 9, 0)]
    attribution(sock).annotate(s)
    assert [(h.namespace, h.pod) for h in s.gpus[0].mig_instances[0].holders] == [("default", "infer")]
    assert s.gpus[0].holders == [] and (s.gpus[0].sharing_mode, s.gpus[0].replicas) == (MIG, 0)


def test_fake_kubelet_gpu_references_are_the_fake_nvml_uuids(kubelet: FakeKubelet, sock: str) -> None:
    """A scenario's `gpu: 1` is the GPU that gpu-agent --fake reports as index 1 on the same node."""
    saved = pynvml.nvmlLib
    try:
        install(
            FakeNvmlLibrary(
                parse_scenario({"gpus": [{"product": "NVIDIA L4", "memory_gib": 24, "count": 3}]}), uuid_seed=NODE
            )
        )
        reader = NvmlReader()
        reader.start()
        try:
            s = reader.sample()
        finally:
            reader.close()
    finally:
        with pynvml.libLoadLock:
            pynvml.nvmlLib = saved
            pynvml._nvmlGetFunctionPointer_cache.clear()
    assert [g.uuid for g in s.gpus] == [fake_gpu_uuid(NODE, i) for i in range(3)]
    kubelet.load({"pods": [{"name": "p", "containers": [{"name": "c", "devices": {GPU: [{"gpu": 2}]}}]}]})
    attribution(sock).annotate(s)
    assert [len(g.holders) for g in s.gpus] == [0, 0, 1]


def test_fake_kubelet_mig_references_are_the_fake_nvml_mig_uuids() -> None:
    try:
        scenario = parse_scenario(
            {
                "gpus": [
                    {
                        "product": "NVIDIA A100-SXM4-40GB",
                        "memory_gib": 40,
                        "count": 2,
                        "mig": [{"profile": "3g.20gb", "count": 2}],
                    }
                ]
            }
        )
    except ScenarioError:
        pytest.skip("this fake NVML simulates no MIG devices")
    saved = pynvml.nvmlLib
    try:
        install(FakeNvmlLibrary(scenario, uuid_seed=NODE))
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(1)
        uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, s)) for s in (0, 1)]
        pynvml.nvmlShutdown()
    finally:
        with pynvml.libLoadLock:
            pynvml.nvmlLib = saved
            pynvml._nvmlGetFunctionPointer_cache.clear()
    assert uuids == [fake_mig_uuid(NODE, 1, s, "3g.20gb") for s in (0, 1)]
    state = parse_state(
        {
            "pods": [
                {
                    "name": "p",
                    "containers": [
                        {
                            "name": "c",
                            "devices": {"nvidia.com/mig-3g.20gb": [{"gpu": 1, "mig": 1, "profile": "3g.20gb"}]},
                        }
                    ],
                }
            ]
        },
        uuid_seed=NODE,
    )
    assert state.pods[0].containers[0].devices["nvidia.com/mig-3g.20gb"] == [uuids[1]]


def test_fields_a_newer_kubelet_sends_are_skipped(kubelet: FakeKubelet, sock: str) -> None:
    """cpu_ids (pod 4, container 3), memory (pod 5, container 4) and an allocatable's cpu_ids (2)
    are not in our copy of the proto: parsed past, not fatal. A dynamic_resources entry (container
    5) with no devices changes nothing."""
    kubelet.load(
        {
            "pods": [{"name": "p", "containers": [{"name": "c", "devices": {GPU: [{"gpu": 0}]}}]}],
            "allocatable": {GPU: [{"gpus": 2}]},
        }
    )

    def with_unknown_fields(rpc: str, response: Any) -> Any:
        if rpc == "List":
            container = response.pod_resources[0].containers[0].SerializeToString() + bytes(
                [0x1A, 0x02, 0x03, 0x04, 0x22, 0x02, 0x08, 0x10, 0x2A, 0x02, 0x12, 0x00]
            )
            pod = api_pb2.PodResources(name="p", namespace="default").SerializeToString()
            pod += bytes([0x1A, len(container)]) + container + bytes([0x22, 0x01, 0x05])
            return api_pb2.ListPodResourcesResponse.FromString(bytes([0x0A, len(pod)]) + pod)
        return api_pb2.AllocatableResourcesResponse.FromString(response.SerializeToString() + bytes([0x12, 0x01, 0x07]))

    kubelet.response_hook = with_unknown_fields
    s = sample()
    attribution(sock).annotate(s)
    assert s.allocation_source == ALLOCATION_KUBELET and [len(g.holders) for g in s.gpus] == [1, 0]
    assert s.gpus[1].sharing_mode == EXCLUSIVE  # the allocatable answer was read too


# -- failures ---------------------------------------------------------------------------


def test_missing_socket_leaves_the_rest_of_the_sample_intact(sock: str) -> None:
    s = sample(labels={LABEL_SHARING_STRATEGY: "time-slicing", LABEL_REPLICAS: "4"})
    attribution(sock).annotate(s)
    assert (s.allocation_source, s.allocation_problem) == (ALLOCATION_UNAVAILABLE, pr.PROBLEM_SOCKET_MISSING)
    assert [g.temperature_celsius for g in s.gpus] == [40, 41] and all(g.holders == [] for g in s.gpus)
    assert [(g.sharing_mode, g.replicas) for g in s.gpus] == [(TIME_SLICING, 4)] * 2  # from GFD's labels
    assert pr.diagnose_socket(os.path.join(sock, "below-a-missing-dir")) == pr.PROBLEM_SOCKET_MISSING


def test_not_a_socket_and_a_stale_socket(sock: str) -> None:
    Path(sock).write_text("")
    assert PodResourcesClient(sock).fetch().problem == pr.PROBLEM_NOT_A_SOCKET
    os.unlink(sock)
    stale = socket.socket(socket.AF_UNIX)  # bound, never listening: what a crashed kubelet leaves
    stale.bind(sock)
    try:
        assert PodResourcesClient(sock).fetch().problem == pr.PROBLEM_KUBELET_UNAVAILABLE
    finally:
        stale.close()


_AS_NOBODY = """
import os, sys
from gpuextender.agent.sources import pod_resources  # imported while still root
# One call as root first: gRPC imports modules lazily (grpc._channel, ...), and the checkout may sit
# in a directory nobody cannot read (mktemp -d is 0700): only the socket's permissions may decide.
warm = pod_resources.PodResourcesClient(sys.argv[1])
warm.fetch()
warm.close()  # its connection was made as root: the calls below must make their own
os.setgroups([]); os.setgid(65534); os.setuid(65534)
if sys.argv[2] == "lsm":  # an LSM that passes access(2) but denies connect(): only gRPC can tell
    pod_resources.diagnose_socket = lambda path: ""
print(pod_resources.PodResourcesClient(sys.argv[1]).fetch().problem)
"""


def _as_nobody(sock: str, mode: str = "") -> str:
    child = subprocess.run(
        [sys.executable, "-c", _AS_NOBODY, sock, mode], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    if child.returncode != 0 and "Operation not permitted" in child.stderr:
        pytest.skip("root without CAP_SETUID: cannot become another user to test permissions")
    assert child.returncode == 0, child.stderr
    return child.stdout.strip()


def test_permission_denied_on_the_socket(kubelet: FakeKubelet, sock: str, sock_dir: Path) -> None:
    kubelet.load({"pods": []})
    os.chmod(sock_dir, 0o755)
    os.chmod(sock, 0o000)
    if os.geteuid() != 0:
        assert PodResourcesClient(sock).fetch().problem == pr.PROBLEM_PERMISSION_DENIED
        return
    # Root's CAP_DAC_OVERRIDE passes connect() on a mode-000 socket, so the check is honest only
    # as another user: a fresh process that drops to nobody before asking.
    assert PodResourcesClient(sock).fetch().problem == ""
    assert _as_nobody(sock) == pr.PROBLEM_PERMISSION_DENIED
    assert _as_nobody(sock, "lsm") == pr.PROBLEM_PERMISSION_DENIED  # told by gRPC's connect error
    os.chmod(sock, 0o777)
    assert _as_nobody(sock) == ""
    os.chmod(sock_dir, 0o700)  # the directory not searchable: the same code
    assert _as_nobody(sock) == pr.PROBLEM_PERMISSION_DENIED


@pytest.mark.parametrize(
    ("code", "details", "problem"),
    [
        (grpc.StatusCode.UNAVAILABLE, "restarting", pr.PROBLEM_KUBELET_UNAVAILABLE),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit", pr.PROBLEM_RATE_LIMITED),
        (grpc.StatusCode.UNIMPLEMENTED, "", pr.PROBLEM_LIST_UNIMPLEMENTED),
        (grpc.StatusCode.PERMISSION_DENIED, "", pr.PROBLEM_PERMISSION_DENIED),
        (grpc.StatusCode.INTERNAL, "boom", pr.PROBLEM_KUBELET_ERROR),
    ],
)
def test_list_errors_become_problem_codes(
    kubelet: FakeKubelet, sock: str, code: grpc.StatusCode, details: str, problem: str
) -> None:
    kubelet.fail(code, details, rpc="List")
    assert PodResourcesClient(sock).fetch().problem == problem


def test_a_slow_kubelet_is_given_up_on_at_the_deadline(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.delay_s = 1.0
    client = PodResourcesClient(sock, timeout_s=0.2)
    started = time.monotonic()
    assert client.fetch().problem == pr.PROBLEM_KUBELET_UNAVAILABLE
    assert time.monotonic() - started < 0.9
    kubelet.delay_s = 0.0
    assert client.fetch().problem == ""


def test_failing_then_recovering_is_logged_once_each(
    kubelet: FakeKubelet, sock: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gpu_agent.pod_resources")
    attr = attribution(sock)
    attr.annotate(sample())
    kubelet.fail()
    for _ in range(4):
        s = sample()
        attr.annotate(s)
        assert s.allocation_problem == pr.PROBLEM_KUBELET_UNAVAILABLE
    kubelet.stop()  # the kubelet goes away: another problem, but not another warning
    attr.annotate(sample())
    kubelet.heal()
    kubelet.start()
    for _ in range(3):
        s = sample()
        attr.annotate(s)
        assert s.allocation_source == ALLOCATION_KUBELET
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [m for lvl, m in messages if lvl == "WARNING"] == [
        "GPU allocation unknown: kubelet_unavailable (kubelet PodResources at "
        f"{sock}); reported as unavailable until it recovers"
    ]
    infos = [m for lvl, m in messages if lvl == "INFO"]
    assert len(infos) == 2 and infos[0].startswith("GPU allocation from the kubelet")
    assert infos[1].startswith("GPU allocation known again")
    assert [m for lvl, m in messages if lvl == "DEBUG"] == ["GPU allocation still unknown: socket_missing"]


def test_unmatched_ids_are_logged_once(kubelet: FakeKubelet, sock: str, caplog: pytest.LogCaptureFixture) -> None:
    kubelet.load({"pods": [{"name": "p", "containers": [{"name": "c", "devices": {GPU: ["GPU-elsewhere"]}}]}]})
    attr = attribution(sock)
    for _ in range(3):
        assert attr.annotate(sample()).unmatched_device_ids == ("GPU-elsewhere",)
    kubelet.allocate("default", "q", "c", GPU, ["GPU-other"])
    attr.annotate(sample())
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and "'GPU-elsewhere'" in warnings[0] and "'GPU-other'" in warnings[1]
    assert "GPU-elsewhere" not in warnings[1]


# -- GetAllocatableResources -------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "details", "problem"),
    [
        (grpc.StatusCode.UNIMPLEMENTED, "unknown method", pr.PROBLEM_ALLOCATABLE_UNIMPLEMENTED),
        (
            grpc.StatusCode.UNKNOWN,
            "Pod Resources API GetAllocatableResources disabled",
            pr.PROBLEM_ALLOCATABLE_DISABLED,
        ),
    ],
)
def test_a_kubelet_without_get_allocatable_still_gives_allocation(
    kubelet: FakeKubelet,
    sock: str,
    code: grpc.StatusCode,
    details: str,
    problem: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kubelet.load({"pods": [{"name": "p", "containers": [{"name": "c", "devices": {GPU: [{"gpu": 0, "replica": 5}]}}]}]})
    kubelet.fail(code, details, rpc="GetAllocatableResources")
    attr = attribution(sock)
    for _ in range(3):
        s = sample(labels={LABEL_SHARING_STRATEGY: "time-slicing", LABEL_REPLICAS: "8"})
        attr.annotate(s)
        assert s.allocation_source == ALLOCATION_KUBELET and len(s.gpus[0].holders) == 1
        assert (s.gpus[0].sharing_mode, s.gpus[0].replicas) == (TIME_SLICING, 8)  # held ID + labels
    assert attr.client.allocatable_problem == problem
    assert kubelet.calls["GetAllocatableResources"] == 1  # not asked again every sample
    assert sum(problem in r.getMessage() for r in caplog.records) == 1


def test_allocatable_is_asked_again_when_due_after_a_restart_and_for_unknown_held_ids(
    kubelet: FakeKubelet, sock: str
) -> None:
    clock = Clock()
    kubelet.load({"allocatable": {GPU: [{"gpus": 2}]}})
    client = PodResourcesClient(sock, allocatable_refresh_s=60.0, clock=clock)
    client.fetch()
    client.fetch()
    assert kubelet.calls["GetAllocatableResources"] == 1
    clock.t += 59.999
    client.fetch()
    assert kubelet.calls["GetAllocatableResources"] == 1
    clock.t += 0.001
    client.fetch()
    assert kubelet.calls["GetAllocatableResources"] == 2

    # The plugin was reconfigured to time-slicing: a held ID it never listed is a sign.
    kubelet.set_allocatable(GPU, [kubelet.gpu(0, r) for r in range(2)])
    kubelet.allocate("ml", "p", "c", GPU, [kubelet.gpu(0, 1)])
    clock.t += pr.ALLOCATABLE_MIN_GAP_S - 0.001
    assert client.fetch().allocatable == {GPU: (kubelet.gpu(0), kubelet.gpu(1))}  # too soon after the last ask
    clock.t += 0.001
    assert client.fetch().allocatable == {GPU: (kubelet.gpu(0, 0), kubelet.gpu(0, 1))}
    assert kubelet.calls["GetAllocatableResources"] == 3

    kubelet.fail(rpc="List")
    assert client.fetch().allocatable is not None  # the last good answer is kept while List fails
    kubelet.heal()
    client.fetch()
    assert kubelet.calls["GetAllocatableResources"] == 4  # a kubelet that was away is asked again


def test_a_transient_allocatable_error_keeps_the_last_answer(kubelet: FakeKubelet, sock: str) -> None:
    clock = Clock()
    kubelet.load({"allocatable": {GPU: [{"gpus": 1}]}})
    client = PodResourcesClient(sock, allocatable_refresh_s=60.0, clock=clock)
    assert client.fetch().allocatable == {GPU: (kubelet.gpu(0),)}
    kubelet.fail(grpc.StatusCode.INTERNAL, rpc="GetAllocatableResources")
    clock.t += 60
    assert client.fetch().allocatable == {GPU: (kubelet.gpu(0),)}
    assert client.allocatable_problem == pr.PROBLEM_KUBELET_ERROR
    kubelet.heal()
    clock.t += pr.ALLOCATABLE_MIN_GAP_S
    client.fetch()
    assert client.allocatable_problem == ""


# -- bounds: each at its value and one past it --------------------------------------------


def _pods_with_ids(count: int, *, per_container: int = 100) -> dict[str, Any]:
    ids = [f"GPU-{i:036d}" for i in range(count)]
    containers = [
        {"name": f"c{n}", "devices": {GPU: ids[n : n + per_container]}} for n in range(0, count, per_container)
    ]
    return {"pods": [{"name": "big", "containers": containers}]}


def test_device_ids_at_the_bound_are_read_and_one_more_is_refused(kubelet: FakeKubelet, sock: str) -> None:
    limit = PodResourcesLimits().max_device_ids
    assert limit == 10_000
    kubelet.load(_pods_with_ids(limit))
    answer = PodResourcesClient(sock).fetch()
    assert answer.problem == "" and sum(len(a.device_ids) for a in answer.assignments) == limit
    kubelet.allocate("default", "one-more", "c", GPU, ["GPU-x"])
    answer = PodResourcesClient(sock).fetch()
    assert (answer.problem, answer.assignments) == (pr.PROBLEM_TOO_MANY_DEVICES, ())


def test_device_ids_of_other_resources_do_not_count(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.load(
        {
            "pods": [
                {
                    "name": "nics",
                    "containers": [
                        {
                            "name": "c",
                            "devices": {
                                "example.com/vf": [f"vf{i}" for i in range(PodResourcesLimits().max_device_ids + 1)]
                            },
                        }
                    ],
                }
            ]
        }
    )
    assert PodResourcesClient(sock).fetch().problem == ""


def test_pods_and_containers_at_their_bounds(kubelet: FakeKubelet, sock: str) -> None:
    limits = PodResourcesLimits(max_pods=5_000, max_containers=20_000)
    assert limits == PodResourcesLimits()
    kubelet.load({"pods": [{"name": f"p{i}"} for i in range(limits.max_pods)]})
    assert PodResourcesClient(sock).fetch().problem == ""
    kubelet.allocate("default", "one-more", "c", GPU, [])
    assert PodResourcesClient(sock).fetch().problem == pr.PROBLEM_TOO_MANY_PODS

    containers = [{"name": f"c{i}"} for i in range(limits.max_containers // 4)]
    kubelet.load({"pods": [{"name": f"p{i}", "containers": containers} for i in range(4)]})
    assert PodResourcesClient(sock).fetch().problem == ""
    kubelet.allocate("default", "p3", "one-more", GPU, [])
    assert PodResourcesClient(sock).fetch().problem == pr.PROBLEM_TOO_MANY_CONTAINERS


def test_device_id_length_at_the_bound_is_kept_and_longer_ones_dropped(
    kubelet: FakeKubelet, sock: str, caplog: pytest.LogCaptureFixture
) -> None:
    limit = PodResourcesLimits().max_device_id_chars
    at, over = "G" * limit, "G" * (limit + 1)
    kubelet.load({"pods": [{"name": "p", "containers": [{"name": "c", "devices": {GPU: [at, over, {"gpu": 0}]}}]}]})
    answer = PodResourcesClient(sock).fetch()
    assert answer.assignments[0].device_ids == (at, kubelet.gpu(0)) and answer.dropped_device_ids == 1
    attr = attribution(sock)
    s = sample()
    assert attr.annotate(s).unmatched_device_ids == (at,)
    attr.annotate(s)
    assert len(s.gpus[0].holders) == 1
    assert sum("longer than 256" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(
    ("field", "limit"),
    [
        ("namespace", pr.MAX_NAMESPACE_CHARS),
        ("name", pr.MAX_POD_NAME_CHARS),
        ("container", pr.MAX_CONTAINER_NAME_CHARS),
        ("resource", pr.MAX_RESOURCE_NAME_CHARS),
    ],
)
def test_names_longer_than_kubernetes_allows_make_the_answer_invalid(
    kubelet: FakeKubelet, sock: str, field: str, limit: int
) -> None:
    def answer_with(length: int) -> str:
        names = {"namespace": "ns", "name": "pod", "container": "c", "resource": GPU}
        names[field] = "x" * length
        kubelet.load(
            {
                "pods": [
                    {
                        "namespace": names["namespace"],
                        "name": names["name"],
                        "containers": [{"name": names["container"], "devices": {names["resource"]: [{"gpu": 0}]}}],
                    }
                ]
            }
        )
        client = PodResourcesClient(sock, is_gpu_resource=GpuResourceNames(["*"]))
        return client.fetch().problem

    assert answer_with(limit) == ""
    assert answer_with(limit + 1) == pr.PROBLEM_INVALID_ANSWER


def test_message_size_at_the_bound_is_read_and_one_byte_more_refused(kubelet: FakeKubelet, sock: str) -> None:
    limit = PodResourcesLimits().max_message_bytes
    assert limit == 4 * 1024 * 1024

    def answer_of(size: int) -> str:
        filler = api_pb2.ListPodResourcesResponse(
            pod_resources=[
                api_pb2.PodResources(
                    containers=[
                        api_pb2.ContainerResources(
                            devices=[api_pb2.ContainerDevices(resource_name="example.com/blob", device_ids=[""])]
                        )
                    ]
                )
            ]
        )
        ids = filler.pod_resources[0].containers[0].devices[0].device_ids
        for _ in range(3):  # the nested length prefixes grow with the blob: converge on `size`
            ids[0] = "b" * (len(ids[0]) + size - filler.ByteSize())
        assert filler.ByteSize() == size
        kubelet.response_hook = lambda rpc, response: filler if rpc == "List" else response
        return PodResourcesClient(sock).fetch().problem

    assert answer_of(limit) == ""
    assert answer_of(limit + 1) == pr.PROBLEM_ANSWER_TOO_LARGE


def test_allocatable_ids_at_the_bound_are_read_and_one_more_makes_them_unknown(kubelet: FakeKubelet, sock: str) -> None:
    limit = PodResourcesLimits().max_device_ids
    kubelet.set_allocatable(GPU, [f"{kubelet.gpu(0)}::{r}" for r in range(limit)])
    client = PodResourcesClient(sock)
    assert client.fetch().allocatable is not None and client.allocatable_problem == ""
    kubelet.set_allocatable("nvidia.com/gpu.shared", ["one-more"])
    client = PodResourcesClient(sock)
    answer = client.fetch()
    assert (answer.problem, answer.allocatable, client.allocatable_problem) == ("", None, pr.PROBLEM_TOO_MANY_DEVICES)


def test_too_many_holders_for_the_extender_is_reported_unknown(kubelet: FakeKubelet, sock: str) -> None:
    replicas = 65
    kubelet.load(
        {
            "allocatable": {GPU: [{"gpu": 0, "replicas": replicas}]},
            "pods": [
                {"name": f"p{r}", "containers": [{"name": "c", "devices": {GPU: [{"gpu": 0, "replica": r}]}}]}
                for r in range(replicas)
            ],
        }
    )
    s = sample()
    attribution(sock).annotate(s)
    assert (s.allocation_source, s.allocation_problem) == (ALLOCATION_UNAVAILABLE, PROBLEM_TOO_MANY_HOLDERS)
    # 65 replicas are also past the extender's replica bound: reported as unknown (0).
    assert (s.gpus[0].sharing_mode, s.gpus[0].replicas, s.gpus[0].holders) == (TIME_SLICING, 0, [])


def test_a_bug_in_the_client_does_not_stop_sampling(sock: str, caplog: pytest.LogCaptureFixture) -> None:
    class Broken(PodResourcesClient):
        def fetch(self) -> Any:
            raise RuntimeError("bug")

    attr = PodAttribution(sock, client=Broken(sock))
    for _ in range(2):
        s = sample()
        attr.annotate(s)
        assert s.allocation_problem == pr.PROBLEM_AGENT_ERROR
    assert sum(r.levelname == "ERROR" for r in caplog.records) == 1


# -- the fake kubelet ---------------------------------------------------------------------


def test_fake_kubelet_scenarios_resolve_references() -> None:
    pods = [{"name": "p", "containers": [{"name": "c", "devices": {GPU: [{"gpu": 1, "replica": 0}]}}]}]
    state = parse_state(
        {"allocatable": {GPU: [{"gpus": 2, "replicas": 2}, "GPU-literal"]}, "pods": pods}, uuid_seed="n"
    )
    u0, u1 = fake_gpu_uuid("n", 0), fake_gpu_uuid("n", 1)
    assert state.allocatable[GPU] == [f"{u0}::0", f"{u0}::1", f"{u1}::0", f"{u1}::1", "GPU-literal"]
    assert state.pods[0].namespace == "default" and state.pods[0].containers[0].devices[GPU] == [f"{u1}::0"]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"pod": []}, "unknown top-level key"),
        ({"pods": [{"containers": []}]}, "pods[0]: expected a mapping with a name"),
        (
            {"pods": [{"name": "p", "containers": [{"name": "c", "devices": {GPU: [{"gpu": -1}]}}]}]},
            "pods[0].containers[0].devices.nvidia.com/gpu[0].gpu: expected a whole number",
        ),
        ({"pods": [{"name": "p", "containers": [{"name": "c", "devices": {GPU: [{"gpus": 2}]}}]}]}, "unknown key"),
        ({"allocatable": {GPU: [{"gpu": 0, "replica": 1, "replicas": 2}]}}, "exclude each other"),
        ({"allocatable": {GPU: "GPU-x"}}, "expected a list of devices"),
        ({"allocatable": {GPU: [{"gpu": 0, "mig": 1}]}}, "a MIG device is"),
    ],
)
def test_fake_kubelet_scenario_errors_say_where(document: Any, message: str) -> None:
    with pytest.raises(FakeKubeletError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_state(document)


def test_fake_kubelet_runs_alone_and_follows_its_scenario_file(sock_dir: Path) -> None:
    scenario = sock_dir / "kubelet.yaml"
    scenario.write_text("pods: []\nallocatable:\n  nvidia.com/gpu: [{gpus: 2}]\n")
    sock = str(sock_dir / "k.sock")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuextender.agent.fakes.kubelet",
            "--socket",
            sock,
            "--scenario",
            str(scenario),
            "--node",
            NODE,
        ],
        cwd=ROOT,
    )
    try:
        client = PodResourcesClient(sock)
        deadline = time.monotonic() + 30
        while (answer := client.fetch()).problem and time.monotonic() < deadline:
            time.sleep(0.05)
        assert answer.problem == "" and answer.assignments == ()
        scenario.write_text("pods:\n- name: p\n  containers:\n  - name: c\n    devices: {nvidia.com/gpu: [{gpu: 1}]}\n")
        while not (answer := client.fetch()).assignments and time.monotonic() < deadline:
            time.sleep(0.05)
        assert answer.assignments[0].device_ids == (fake_gpu_uuid(NODE, 1),)
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
    assert not os.path.exists(sock)
