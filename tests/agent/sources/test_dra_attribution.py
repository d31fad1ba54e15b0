"""GPUs DRA allocated, as the kubelet's PodResources API lists them (dynamic_resources: claim and
device name, no UUID): the fake kubelet on a real unix socket serves them, the agent maps each
device name of NVIDIA's DRA driver to its GPU by NVML minor number, and the report and the dcgm
series carry the claim (issue 24, deliverable 5)."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.fakes.kubelet import FakeClaim, FakeKubelet, FakeKubeletError, fake_gpu_uuid, parse_state
from gpuextender.agent.model.dra_names import DraDeviceName, gpu_device_name, name_form, parse_device_name
from gpuextender.agent.model.readings import (
    ALLOCATION_KUBELET,
    GpuReading,
    MigReading,
    NodeSample,
)
from gpuextender.agent.report.encode import sample_to_report
from gpuextender.agent.sources import pod_resources as pr
from gpuextender.agent.sources.pod_resources import PodAttribution, PodResourcesClient, PodResourcesLimits
from gpuextender.extender.ingest import report_checks
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.agent.fake_gpus import H100, restored_pynvml, start_reader

NODE = "dra-node-1"
GPU = "nvidia.com/gpu"


@pytest.fixture
def sock() -> Iterator[str]:
    path = Path(tempfile.mkdtemp(prefix="gx-dra-", dir="/tmp"))  # unix socket paths must stay short
    yield str(path / "kubelet.sock")
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(sock: str) -> Iterator[FakeKubelet]:
    with FakeKubelet(sock, uuid_seed=NODE) as fake:
        yield fake


def sample(minors: list[int]) -> NodeSample:
    """GPUs whose NVML minor numbers are not their indexes (as on a node whose /dev/nvidiaN were
    numbered in another order): a mapping by index would pick the wrong GPU."""
    gpus = [GpuReading(index=i, uuid=fake_gpu_uuid(NODE, i), minor_number=m) for i, m in enumerate(minors)]
    return NodeSample(sample_time=1.0, duration_s=0.01, gpus=gpus)


def claim_pod(name: str, claim: str, devices: list[object], **extra: object) -> dict[str, object]:
    return {
        "namespace": "llm",
        "name": name,
        "containers": [{"name": "engine", "claims": [{"claim": claim, "devices": devices, **extra}]}],
    }


def holders(gpu: GpuReading | MigReading) -> list[tuple[str, ...]]:
    return [
        (h.pod, h.container, h.resource_name, h.device_id, h.dra_claim_namespace, h.dra_claim_name, h.dra_pool)
        for h in gpu.holders
    ]


def test_device_names_follow_nvidias_driver() -> None:
    assert gpu_device_name(0) == "gpu-0" and gpu_device_name(13) == "gpu-13"
    assert gpu_device_name(None) == "" and gpu_device_name(-1) == ""
    assert parse_device_name("gpu-0") == DraDeviceName(0)
    assert parse_device_name("gpu-12") == DraDeviceName(12)
    # The driver's names hold the profile without dots (a device name may hold none): name_form.
    assert parse_device_name("gpu-3-mig-1g10gb-19-4") == DraDeviceName(3, "1g10gb", 19, 4)
    assert parse_device_name("gpu-0-mig-1g12gb-me-20-0") == DraDeviceName(0, "1g12gb-me", 20, 0)
    assert parse_device_name("gpu-3-mig-1g.10gb-19-4") == DraDeviceName(3, "1g.10gb", 19, 4)
    assert [name_form(p) for p in ("1g.10gb", "1g.12gb+me", "1c.2g.20gb", "7g.80gb", "4g.95GB")] == [
        "1g10gb",
        "1g12gb-me",
        "1c2g20gb",
        "7g80gb",
        "4g95gb",
    ]
    for other in ("gpu", "gpu-", "gpu-01", "gpu-x", "GPU-0", "gpu-0 ", "nic-0", "gpu-0-mig-1g.10gb-19"):
        assert parse_device_name(other) is None, other
    # A name longer than a DNS label is no device name the API allows, whatever it says.
    at = "gpu-" + "1" * 6 + "-mig-" + "a" * 32 + "-1-1"
    assert len(at) <= 63 and parse_device_name(at) is not None
    assert parse_device_name("gpu-1-mig-" + "a" * 60 + "-1-1") is None


def test_claims_become_holders_of_the_gpu_with_that_minor_number(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.load(
        {
            "allocatable": {GPU: []},
            "pods": [
                claim_pod("vllm-0", "vllm-0-gpus", ["gpu-2", "gpu-0"]),
                # Two pods sharing one claim hold the same device: both are holders, the GPU is held once.
                claim_pod("vllm-1", "shared", ["gpu-1"]),
                claim_pod("vllm-2", "shared", ["gpu-1"]),
            ],
        }
    )
    s = sample([2, 0, 1])  # index 0 is /dev/nvidia2, index 1 is /dev/nvidia0, index 2 is /dev/nvidia1
    result = PodAttribution(sock).annotate(s)
    assert (s.allocation_source, result.unmatched_device_ids) == (ALLOCATION_KUBELET, ())
    assert holders(s.gpus[0]) == [("vllm-0", "engine", "gpu.nvidia.com", "gpu-2", "llm", "vllm-0-gpus", NODE)]
    assert holders(s.gpus[1]) == [("vllm-0", "engine", "gpu.nvidia.com", "gpu-0", "llm", "vllm-0-gpus", NODE)]
    assert [h[0] for h in holders(s.gpus[2])] == ["vllm-1", "vllm-2"]
    # A DRA holder is no device-plugin evidence of time-slicing: sharing stays unknown here.
    assert [g.sharing_mode for g in s.gpus] == ["", "", ""]

    kubelet.release("llm", "vllm-0")
    PodAttribution(sock).annotate(s)
    assert [len(g.holders) for g in s.gpus] == [0, 0, 2]


def test_the_report_carries_each_gpus_dra_name_and_the_claim(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.load({"pods": [claim_pod("vllm-0", "c0", [{"gpu": 1}])]})
    s = sample([1, 0])
    PodAttribution(sock).annotate(s)
    report = pb.NodeReport.FromString(
        sample_to_report(s, node_name=NODE, sequence=1, agent_version="0.4.0").SerializeToString()
    )
    assert [(g.uuid, g.dra_device) for g in report.gpus] == [
        (fake_gpu_uuid(NODE, 0), "gpu-1"),
        (fake_gpu_uuid(NODE, 1), "gpu-0"),
    ]
    (held,) = report.gpus[0].holders
    assert (held.resource_name, held.device_id, held.dra_claim_namespace, held.dra_claim_name, held.dra_pool) == (
        "gpu.nvidia.com",
        "gpu-1",
        "llm",
        "c0",
        NODE,
    )
    assert report_checks.report_problem(report, None) is None
    # The minor unknown (NotSupported): no name, rather than a guess from the index.
    s.gpus[1].minor_number = None
    assert sample_to_report(s, node_name=NODE, sequence=2, agent_version="0.4.0").gpus[1].dra_device == ""


def test_the_real_reader_reads_the_minor_number_from_nvml() -> None:
    with restored_pynvml():
        reader, _ = start_reader({"gpus": [{**H100, "count": 3}]})
        try:
            readings = reader.sample().gpus
        finally:
            reader.close()
    assert [(g.index, g.minor_number) for g in readings] == [(0, 0), (1, 1), (2, 2)]


def test_mig_devices_map_to_the_one_instance_of_their_profile(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.load(
        {
            "pods": [
                claim_pod("small", "c1", ["gpu-0-mig-1g10gb-19-4"]),
                claim_pod("engine", "c3", ["gpu-0-mig-1g12gb-me-20-0"]),
                claim_pod("twin", "c2", ["gpu-1-mig-1g10gb-19-0"]),
            ]
        }
    )
    s = sample([0, 1])
    s.gpus[0].mig_instances = [
        MigReading("MIG-a", "1g.10gb", 9, 0),
        MigReading("MIG-b", "3g.40gb", 2, 0),
        MigReading("MIG-e", "1g.12gb+me", 20, 0),
    ]
    # Two instances of one profile: NVML gives the agent no placement to tell them apart.
    s.gpus[1].mig_instances = [MigReading("MIG-c", "1g.10gb", 9, 0), MigReading("MIG-d", "1g.10gb", 10, 0)]
    result = PodAttribution(sock).annotate(s)
    assert [h[0] for h in holders(s.gpus[0].mig_instances[0])] == ["small"]
    assert [h[0] for h in holders(s.gpus[0].mig_instances[2])] == ["engine"]
    assert s.gpus[0].holders == [] and s.gpus[0].mig_instances[1].holders == []
    assert all(m.holders == [] for m in s.gpus[1].mig_instances)
    assert result.unmatched_device_ids == (f"gpu.nvidia.com/{NODE}/gpu-1-mig-1g10gb-19-0",)


def test_other_drivers_and_unknown_names(kubelet: FakeKubelet, sock: str, caplog: pytest.LogCaptureFixture) -> None:
    kubelet.load(
        {
            "pods": [
                claim_pod("nic", "c1", ["eth-0"], driver="net.example.com"),
                claim_pod("odd", "c2", ["gpu-9"]),  # no GPU has minor 9
            ]
        }
    )
    s = sample([0])
    with caplog.at_level(logging.WARNING):
        result = PodAttribution(sock).annotate(s)
    assert result.unmatched_device_ids == (f"gpu.nvidia.com/{NODE}/gpu-9",)
    assert s.gpus[0].holders == [] and s.allocation_source == ALLOCATION_KUBELET
    assert sum("gpu-9" in r.getMessage() for r in caplog.records) == 1
    answer = PodResourcesClient(sock).fetch()
    assert [c.device for c in answer.claims] == ["gpu-9"]  # the NIC's device is not ours to read


def test_dra_devices_count_toward_the_device_bound(kubelet: FakeKubelet, sock: str) -> None:
    limit = PodResourcesLimits().max_device_ids
    kubelet.load(
        {
            "pods": [
                {"name": "plugin", "containers": [{"name": "c", "devices": {GPU: [f"GPU-{i}" for i in range(10)]}}]},
                claim_pod("dra", "c", [f"gpu-{i}" for i in range(limit - 10)]),
            ]
        }
    )
    answer = PodResourcesClient(sock).fetch()
    assert answer.problem == "" and len(answer.claims) == limit - 10
    kubelet.allocate_claim("llm", "one-more", "c", FakeClaim("llm", "c", ("gpu-0",), pool=NODE))
    answer = PodResourcesClient(sock).fetch()
    assert (answer.problem, answer.claims) == (pr.PROBLEM_TOO_MANY_DEVICES, ())
    # Another driver's devices are not bounded here: they are skipped unread.
    kubelet.load({"pods": [claim_pod("nics", "c", [f"vf{i}" for i in range(limit + 1)], driver="net.example.com")]})
    assert PodResourcesClient(sock).fetch().problem == ""


@pytest.mark.parametrize(
    ("field", "limit"),
    [
        ("namespace", pr.MAX_NAMESPACE_CHARS),
        ("claim", pr.MAX_CLAIM_NAME_CHARS),
        ("pool", pr.MAX_POOL_NAME_CHARS),
    ],
)
def test_claim_names_longer_than_kubernetes_allows_make_the_answer_invalid(
    kubelet: FakeKubelet, sock: str, field: str, limit: int
) -> None:
    def problem_with(length: int) -> str:
        claim = {"claim": "c", "namespace": "llm", "pool": NODE, "devices": ["gpu-0"]}
        claim[field] = "x" * length
        kubelet.load({"pods": [{"name": "p", "containers": [{"name": "c", "claims": [claim]}]}]})
        return PodResourcesClient(sock).fetch().problem

    assert problem_with(limit) == ""
    assert problem_with(limit + 1) == pr.PROBLEM_INVALID_ANSWER


def test_a_device_name_longer_than_a_dns_label_is_dropped(kubelet: FakeKubelet, sock: str) -> None:
    at, over = "g" * 63, "g" * 64
    kubelet.load({"pods": [claim_pod("p", "c", [at, over, "gpu-0"])]})
    answer = PodResourcesClient(sock).fetch()
    assert [c.device for c in answer.claims] == [at, "gpu-0"] and answer.dropped_device_ids == 1


def test_the_extender_bounds_what_a_dra_holder_carries() -> None:
    def report(**holder: str) -> pb.NodeReport:
        gpu = pb.GpuSample(index=0, uuid="GPU-1", healthy=True, dra_device=holder.pop("dra_device", "gpu-0"))
        gpu.holders.add(namespace="llm", pod="p", container="c", resource_name="gpu.nvidia.com", **holder)
        return pb.NodeReport(node_name="n1", gpus=[gpu])

    limits = {
        "dra_claim_namespace": report_checks.MAX_NAMESPACE_CHARS,
        "dra_claim_name": report_checks.MAX_CLAIM_NAME_CHARS,
        "dra_pool": report_checks.MAX_DRA_POOL_CHARS,
        "device_id": report_checks.MAX_DEVICE_ID_CHARS,
        "dra_device": report_checks.MAX_DRA_DEVICE_CHARS,
    }
    for field, limit in limits.items():
        assert report_checks.report_problem(report(**{field: "x" * limit}), None) is None, field
        problem = report_checks.report_problem(report(**{field: "x" * (limit + 1)}), None)
        assert problem is not None and field in problem, field
    # The agent's bounds are the extender's.
    assert pr.MAX_CLAIM_NAME_CHARS == report_checks.MAX_CLAIM_NAME_CHARS
    assert pr.MAX_POOL_NAME_CHARS == report_checks.MAX_DRA_POOL_CHARS


def test_dcgm_series_of_a_dra_gpu_carry_dcgm_exporters_dra_labels(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.load({"pods": [claim_pod("vllm-0", "c0", ["gpu-0"])]})
    s = sample([0, 1])
    for g in s.gpus:
        g.temperature_celsius = 40
    PodAttribution(sock).annotate(s)
    metrics = AgentMetrics(NODE)
    metrics.observe_sample(s)
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())}
    by_gpu = {x.labels["gpu"]: x.labels for x in families["DCGM_FI_DEV_GPU_TEMP"].samples}
    assert {k: v for k, v in by_gpu["0"].items() if k.startswith("dra_") or k in ("pod", "namespace")} == {
        "pod": "vllm-0",
        "namespace": "llm",
        "dra_claim_name": "c0",
        "dra_claim_namespace": "llm",
        "dra_driver_name": "gpu.nvidia.com",
        "dra_pool_name": NODE,
        "dra_device_name": "gpu-0",
    }
    assert not any(k.startswith("dra_") for k in by_gpu["1"]) and by_gpu["1"]["pod"] == ""


def test_fake_kubelet_claim_scenario_errors_say_where() -> None:
    with pytest.raises(FakeKubeletError, match=r"pods\[0\].containers\[0\].claims\[0\]: unknown key"):
        parse_state({"pods": [{"name": "p", "containers": [{"name": "c", "claims": [{"claim": "x", "gpus": 1}]}]}]})
    with pytest.raises(FakeKubeletError, match=r"claims\[0\].devices\[0\]"):
        parse_state(
            {"pods": [{"name": "p", "containers": [{"name": "c", "claims": [{"claim": "x", "devices": [1]}]}]}]}
        )
    state = parse_state({"pods": [claim_pod("p", "c", [{"gpu": 3}])]}, uuid_seed=NODE)
    assert state.pods[0].containers[0].claims == [FakeClaim("llm", "c", ("gpu-3",), "gpu.nvidia.com", NODE)]
