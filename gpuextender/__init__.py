"""kube-gpu-extender: the one import package. `gpuextender.agent` (the node agent),
`gpuextender.extender` (the scheduler extender), `gpuextender.v1` (the gRPC contract)
and `gpuextender.common` (helpers both programs use: backoff, CLI, logging,
addresses, credential files)."""

from importlib.metadata import PackageNotFoundError, version

try:
    # From the installed distribution's metadata: one version, set in pyproject.toml.
    __version__ = version("kube-gpu-extender")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
