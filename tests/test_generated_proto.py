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
    written = _generator().generate(tmp_path)
    assert len(written) == 3
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
