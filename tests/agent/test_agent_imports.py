"""What the gpu-agent process imports: its RSS is mostly the code it loads (bench/agent_imports.py).

The agent on a node loads none of the extender's side (gpuextender.extender, kubernetes_asyncio,
orjson), nor what only `--fake` needs (PyYAML, the fake NVML), nor aiohttp (~9 MiB; the agent's
own GET server replaces it) nor importlib.metadata (~0.8 MiB; the version is a literal); the
`--clear-xid` one-shot, which runs
beside the agent inside its container's memory limit, loads none of the serving side either.
Each check imports in a fresh interpreter, as the process would."""

from __future__ import annotations

import pkgutil

import gpuextender.agent
from tests.imports import loaded, modules_after_importing

NEVER_IN_THE_AGENT = (
    "gpuextender.extender",
    "kubernetes_asyncio",
    "orjson",
    "yaml",
    "aiohttp",
    "importlib.metadata",
    "gpuextender.agent.fakes.nvml",
    "gpuextender.agent.fakes.scenario",
    "gpuextender.agent.fakes.kubelet",
)
SERVING_ONLY = (
    "prometheus_client",
    "gpuextender.agent.export.http_routes",
    "gpuextender.agent.export.http_get_server",
    "gpuextender.agent.sampling.sample_loop",
    "gpuextender.agent.stream.streamer",
    "gpuextender.agent.fakes.nvml",
)


def test_the_agents_modules_pull_in_neither_the_extender_nor_the_fakes() -> None:
    agent = sorted(
        m.name
        for m in pkgutil.walk_packages(gpuextender.agent.__path__, "gpuextender.agent.")
        if not m.name.startswith("gpuextender.agent.fakes") and m.name != "gpuextender.agent.__main__"
    )
    assert "gpuextender.agent.cli" in agent and "gpuextender.agent.export.http_routes" in agent
    modules = modules_after_importing(*agent)
    assert {"prometheus_client", "grpc", "pynvml", "asyncio"} <= modules  # the check sees real imports
    assert loaded(modules, NEVER_IN_THE_AGENT) == []


def test_the_clear_xid_one_shot_loads_no_serving_side() -> None:
    modules = modules_after_importing("gpuextender.agent.cli")
    assert loaded(modules, NEVER_IN_THE_AGENT + SERVING_ONLY) == []
