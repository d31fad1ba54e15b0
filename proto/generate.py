"""Regenerate the committed Python modules for the gRPC contract.

Usage: python proto/generate.py [OUT_DIR]

Writes <name>_pb2.py, <name>_pb2.pyi and <name>_pb2_grpc.py next to each .proto of
PROTO_FILES in the package: our contract gpuextender/v1/gpu_state.proto and our copy of the
kubelet's PodResources API, gpuextender/podresources/v1/api.proto; <name>_pb2.py and .pyi for
MESSAGE_FILES: the extender's view of a report less its readings (or under OUT_DIR, which
tests use to check the committed files are current). Needs the pinned grpcio-tools from the `dev`
extra, so that the same
input always produces the same bytes.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

# The .protos ship inside the package; a path below the include root is its protobuf name
# (gpuextender/v1/gpu_state.proto), which the generated code imports by.
PROTO_ROOT = Path(__file__).resolve().parent.parent
PROTO_FILES = ["gpuextender/v1/gpu_state.proto", "gpuextender/podresources/v1/api.proto"]
# Messages only (no service: no _pb2_grpc.py): the extender's own, never on the wire.
MESSAGE_FILES = ["gpuextender/extender/state/report_shape.proto"]


def generate(out_dir: Path = PROTO_ROOT) -> list[Path]:
    """Run protoc (from grpcio-tools) and return the files it wrote."""
    from grpc_tools import protoc  # build-time only dependency

    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = resources.files("grpc_tools") / "_proto"
    common = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
    ]
    for args in ([*common, f"--grpc_python_out={out_dir}", *PROTO_FILES], [*common, *MESSAGE_FILES]):
        rc = protoc.main(args)
        if rc != 0:
            raise RuntimeError(f"protoc failed with exit code {rc}: {' '.join(args)}")
    written = []
    for proto in PROTO_FILES + MESSAGE_FILES:
        stem = proto.removesuffix(".proto")
        suffixes = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py") if proto in PROTO_FILES else ("_pb2.py", "_pb2.pyi")
        written += [out_dir / f"{stem}{suffix}" for suffix in suffixes]
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT
    for path in generate(target):
        print(f"wrote {path}")
