"""kube-gpu-extender: the one import package. `gpuextender.agent` (the node agent),
`gpuextender.extender` (the scheduler extender), `gpuextender.v1` (the gRPC contract)
and `gpuextender.common` (helpers both programs use: backoff, CLI, logging,
addresses, credential files)."""

# The project's one version: pyproject.toml takes it from here (tool.setuptools.dynamic).
__version__ = "0.1.0"
