"""kube-gpu-extender's shared namespace: the gRPC contract (`gpuextender.v1`) and
the few helpers both programs use (addresses, logging)."""

__version__ = "0.1.0"
