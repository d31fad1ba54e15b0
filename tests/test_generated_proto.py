"""The committed protobuf/gRPC modules must be exactly what the .proto generates."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT

pytest.importorskip("grpc_tools", reason="grpcio-tools (the dev/test extra) regenerates the modules")


def _generator():
    spec = importlib.util.spec_from_file_location("proto_generate", ROOT / "proto" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["proto_generate"] = module
    spec.loader.exec_module(module)
    return module


def test_committed_modules_match_the_proto(tmp_path: Path) -> None:
    generator = _generator()
    written = generator.generate(tmp_path)
    assert len(written) == 3 * len(generator.PROTO_FILES) + 2 * len(generator.MESSAGE_FILES)
    assert {p.relative_to(tmp_path).as_posix() for p in written} >= {
        "gpuextender/v1/gpu_state_pb2.py",
        "gpuextender/podresources/v1/api_pb2_grpc.py",
        "gpuextender/extender/state/report_shape_pb2.py",
    }
    assert not (tmp_path / "gpuextender/extender/state/report_shape_pb2_grpc.py").exists()
    for fresh in written:
        committed = ROOT / fresh.relative_to(tmp_path)
        assert committed.exists(), f"{committed} is missing: run ./dev.sh proto"
        assert committed.read_bytes() == fresh.read_bytes(), f"{committed} is out of date: run ./dev.sh proto"


def test_optional_readings_have_presence() -> None:
    from gpuextender.v1 import gpu_state_pb2 as pb

    gpu = pb.GpuSample(index=0)
    assert not gpu.HasField("utilization_gpu_percent")
    gpu.utilization_gpu_percent = 0
    assert gpu.HasField("utilization_gpu_percent")  # zero is a reading, not "absent"
    assert pb.DESCRIPTOR.package == "gpuextender.v1"


# The kubelet's PodResources v1 (k8s.io/kubelet pkg/apis/podresources/v1/api.proto): every
# message and field our copy keeps, with upstream's number, type and cardinality. A renumbered
# field would still compile and pass our own round trips, and read the wrong data from a real kubelet.
KUBELET_FIELDS = {
    "ListPodResourcesRequest": {},
    "ListPodResourcesResponse": {"pod_resources": (1, "PodResources", True)},
    "PodResources": {
        "name": (1, "string", False),
        "namespace": (2, "string", False),
        "containers": (3, "ContainerResources", True),
    },
    "ContainerResources": {
        "name": (1, "string", False),
        "devices": (2, "ContainerDevices", True),
        "dynamic_resources": (5, "DynamicResource", True),
    },
    # Upstream removed DynamicResource's field 1 (class_name) in 1.31: claim_name starts at 2.
    "DynamicResource": {
        "claim_name": (2, "string", False),
        "claim_namespace": (3, "string", False),
        "claim_resources": (4, "ClaimResource", True),
    },
    "ClaimResource": {
        "cdi_devices": (1, "CDIDevice", True),
        "driver_name": (2, "string", False),
        "pool_name": (3, "string", False),
        "device_name": (4, "string", False),
    },
    "CDIDevice": {"name": (1, "string", False)},
    "ContainerDevices": {
        "resource_name": (1, "string", False),
        "device_ids": (2, "string", True),
        "topology": (3, "TopologyInfo", False),
    },
    "TopologyInfo": {"nodes": (1, "NUMANode", True)},
    "NUMANode": {"ID": (1, "int64", False)},
    "AllocatableResourcesRequest": {},
    "AllocatableResourcesResponse": {"devices": (1, "ContainerDevices", True)},
}


def test_pod_resources_copy_is_wire_compatible_with_the_kubelet() -> None:
    from google.protobuf.descriptor import FieldDescriptor

    from gpuextender.podresources.v1 import api_pb2

    scalar = {FieldDescriptor.TYPE_STRING: "string", FieldDescriptor.TYPE_INT64: "int64"}

    def kind(field: FieldDescriptor) -> str:
        return field.message_type.name if field.type == FieldDescriptor.TYPE_MESSAGE else scalar[field.type]

    assert api_pb2.DESCRIPTOR.package == "v1"
    fields = {
        name: {f.name: (f.number, kind(f), f.is_repeated) for f in message.fields}
        for name, message in api_pb2.DESCRIPTOR.message_types_by_name.items()
    }
    assert fields == KUBELET_FIELDS
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    methods = {m.name: (m.input_type.name, m.output_type.name) for m in service.methods}
    assert methods == {
        "List": ("ListPodResourcesRequest", "ListPodResourcesResponse"),
        "GetAllocatableResources": ("AllocatableResourcesRequest", "AllocatableResourcesResponse"),
    }
