"""GPU topology read once at NVML init through the real pynvml: scripted NVLinks and PCIe relations
come back as GpuLink (a < b) and on the wire; NVSwitch fabrics count; unknown stays unknown."""

from __future__ import annotations

from collections.abc import Iterator

import pynvml
import pytest

from gpuextender.agent.model.readings import GpuLink
from gpuextender.agent.report.encode import sample_to_report
from gpuextender.agent.sources.nvml_reader import bus_key
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.agent.fake_gpus import H100, Clock, install_fake, restored_pynvml, start_reader


@pytest.fixture(autouse=True)
def _restore_pynvml() -> Iterator[None]:
    with restored_pynvml():
        yield


def test_nvlinks_and_pcie_relations_round_trip() -> None:
    clock = Clock()
    reader, _ = start_reader(
        {
            "gpus": [{**H100, "count": 4}],
            "topology": {
                "pcie": "system",
                "pcie_groups": [{"gpus": [0, 1, 2], "relation": "node"}, {"gpus": [0, 1], "relation": "single"}],
                "nvlinks": [{"gpus": [0, 1], "links": 4}, {"gpus": [3, 2], "links": 2}, {"gpus": [2, 3], "links": 1}],
            },
            "errors": [
                {"call": "nvmlDeviceGetTopologyCommonAncestor", "error": "Unknown", "after_s": 1},
                {"call": "nvmlDeviceGetNvLinkState", "error": "Unknown", "after_s": 1},
            ],
        },
        clock,
    )
    expected = [
        GpuLink(0, 1, 4, "single"),
        GpuLink(0, 2, 0, "node"),
        GpuLink(0, 3, 0, "system"),
        GpuLink(1, 2, 0, "node"),
        GpuLink(1, 3, 0, "system"),
        GpuLink(2, 3, 3, "system"),
    ]
    assert reader.topology() == expected
    clock.t = 2.0  # the topology calls fail from now on: a sample that read them again would differ
    sample = reader.sample()
    assert sample.topology == reader.sample().topology == expected  # repeated in every sample, read once
    report = sample_to_report(sample, node_name="n1", sequence=1, agent_version="t")
    assert [(k.a, k.b, k.nvlinks, k.pcie) for k in report.topology.links] == [
        (0, 1, 4, pb.PCIE_SINGLE),
        (0, 2, 0, pb.PCIE_NODE),
        (0, 3, 0, pb.PCIE_SYSTEM),
        (1, 2, 0, pb.PCIE_NODE),
        (1, 3, 0, pb.PCIE_SYSTEM),
        (2, 3, 3, pb.PCIE_SYSTEM),
    ]


def test_every_pcie_relation_name_maps() -> None:
    for name in ("internal", "single", "multiple", "hostbridge", "node", "system"):
        reader, _ = start_reader({"gpus": [{**H100, "count": 2}], "topology": {"pcie": name}})
        assert reader.topology() == [GpuLink(0, 1, 0, name)]
        reader.close()


def test_an_nvswitch_fabric_gives_every_pair_the_smaller_link_count() -> None:
    # HGX H100: 8 GPUs, 18 links each into the NVSwitches; nvidia-smi topo shows NV18 for every pair.
    reader, _ = start_reader({"gpus": [{**H100, "count": 8}], "topology": {"pcie": "node", "nvswitch_links": 18}})
    topology = reader.topology()
    assert topology is not None and len(topology) == 28
    assert {(link.nvlinks, link.pcie) for link in topology} == {(18, "node")}


def test_no_topology_support_is_unknown_not_empty() -> None:
    reader, _ = start_reader({"gpus": [{**H100, "count": 2}]})  # NotSupported everywhere
    assert reader.topology() is None
    sample = reader.sample()
    assert sample.topology is None
    assert not sample_to_report(sample, node_name="n1", sequence=1, agent_version="t").HasField("topology")


def test_a_single_gpu_has_a_known_empty_topology() -> None:
    reader, _ = start_reader({"gpus": [H100], "topology": {"pcie": "system"}})
    assert reader.topology() == []
    reader, _ = start_reader({"gpus": [H100]})
    assert reader.topology() == []  # no pair to relate: nothing unknown either


def test_nvlinks_without_pcie_relation_still_count() -> None:
    reader, _ = start_reader(
        {
            "gpus": [{**H100, "count": 3}],
            "topology": {"nvlinks": [{"gpus": [0, 2], "links": 6}]},
            "errors": [{"call": "nvmlDeviceGetTopologyCommonAncestor", "error": "NotSupported"}],
        }
    )
    assert reader.topology() == [GpuLink(0, 2, 6, "")]  # pairs NVML could not relate at all are left out


def test_topology_errors_leave_facts_unknown_and_are_not_gpu_errors() -> None:
    errors: list[tuple[str, str]] = []
    reader, _ = start_reader(
        {
            "gpus": [{**H100, "count": 2}],
            "topology": {"pcie": "single", "nvlinks": [{"gpus": [0, 1], "links": 2}]},
            "errors": [{"call": "nvmlDeviceGetNvLinkState", "error": "Unknown"}],
        },
        errors=errors,
    )
    assert reader.topology() == [GpuLink(0, 1, 0, "single")]
    assert errors == [] and all(g.healthy for g in reader.sample().gpus)


def test_topology_is_read_again_after_the_driver_comes_back() -> None:
    clock = Clock()
    reader, _ = start_reader(
        {
            "gpus": [{**H100, "count": 2}],
            "topology": {"pcie": "hostbridge"},
            "errors": [{"call": "nvmlDeviceGetMemoryInfo", "error": "DriverNotLoaded", "for_s": 1}],
        },
        clock,
    )
    sample = reader.sample()
    assert sample.node_error == "DriverNotLoaded" and sample.topology is None
    clock.t = 2.0
    assert reader.sample().topology == [GpuLink(0, 1, 0, "hostbridge")]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("00000000:18:00.0", (0, 0x18, 0, 0)),
        ("0000:18:00.0", (0, 0x18, 0, 0)),
        ("0001:C1:1f.7", (1, 0xC1, 0x1F, 7)),
        ("nonsense", None),
        ("", None),
    ],
)
def test_bus_key(text: str, key: tuple[int, int, int, int] | None) -> None:
    assert bus_key(text) == key


def test_fake_nvlink_calls_behave_like_nvml() -> None:
    install_fake(
        {"gpus": [{**H100, "count": 2}], "topology": {"nvlinks": [{"gpus": [0, 1], "links": 2}], "nvswitch_links": 1}}
    )
    pynvml.nvmlInit()
    h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert [pynvml.nvmlDeviceGetNvLinkState(h0, link) for link in range(4)] == [1, 1, 1, 0]
    assert pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h0, 0).busId == "00000000:28:00.0"
    assert pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h0, 2) == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetNvLinkState(h0, 18)  # past the GPU's last link
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h0, 3)  # an inactive link has no remote end
    pynvml.nvmlShutdown()
