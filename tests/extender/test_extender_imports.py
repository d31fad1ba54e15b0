"""What the extender's two processes import: their idle RSS is mostly the code they load.

The ingest process serves the agents' gRPC port and nothing else: no HTTP server (aiohttp), no
Kubernetes client, no decision, scheduler or page code (pyproject's import contracts say the same
of every import statement; these check what a fresh interpreter really loads). The extender loads
the Kubernetes client (~35 MiB) only with --kubernetes: only four modules import it, and app.py
imports them only then. Each check imports in a fresh interpreter, as the process would."""

from __future__ import annotations

import pkgutil

import gpuextender.extender
from tests.imports import loaded, modules_after_importing

KUBERNETES_CLIENTS = (
    "gpuextender.extender.inventory.kube_watch",
    "gpuextender.extender.kube.connection",
    "gpuextender.extender.scheduler.pod_binder",  # its client is kube.connection's
    "gpuextender.extender.inventory.device_taint_writer",
    "gpuextender.extender.inventory.node_status_writer",
    "gpuextender.extender.inventory.idle_events",
    "gpuextender.extender.inventory.reclaim_writer",
)
NEVER_IN_INGEST = (
    "aiohttp",
    "kubernetes_asyncio",
    "yaml",
    "gpuextender.extender.decide",
    "gpuextender.extender.scheduler",
    "gpuextender.extender.ui",
    "gpuextender.extender.app",
    "gpuextender.extender.cli",
    "gpuextender.extender.inventory",
    "gpuextender.agent",
)


# What an ingest worker may load of the extender (issue 37 item 4): serving, checking and
# summarizing reports (issue 36: the workers summarize), never the live state, the inventory
# model (OME, DRA) or the extender's own metrics. A module added here is a decision, not a drift.
INGEST_MAY_LOAD = {
    "gpuextender.extender",
    "gpuextender.extender.flags",
    "gpuextender.extender.settings",
    "gpuextender.extender.workers",
    "gpuextender.extender.workers.worker_main",
    "gpuextender.extender.workers.summary_store",
    "gpuextender.extender.workers.frame_loops",
    "gpuextender.extender.ingest",
    "gpuextender.extender.ingest.agent_identity",
    "gpuextender.extender.workers.frames",
    "gpuextender.extender.ingest.limits",
    "gpuextender.extender.ingest.report_checks",
    "gpuextender.extender.ingest.server",
    "gpuextender.extender.ingest.service",
    "gpuextender.extender.ingest.token_review",  # loads the Kubernetes client only to make a reviewer
    "gpuextender.extender.workers.worker_args",
    "gpuextender.extender.observe",
    "gpuextender.extender.observe.ingest_metrics",
    "gpuextender.extender.model",
    "gpuextender.extender.model.gpu_facts",
    "gpuextender.extender.model.pod_group",  # flags: --group-topology-levels' check
    "gpuextender.extender.model.pod_key",
    "gpuextender.extender.model.untrusted",
    "gpuextender.extender.state",
    "gpuextender.extender.state.facts_reader",
    "gpuextender.extender.state.gpu_health",
    "gpuextender.extender.state.gpu_summary",
    "gpuextender.extender.state.gpu_topology",
    "gpuextender.extender.state.summary_codec",
    "gpuextender.extender.state.summary_refresh",
    "gpuextender.extender.state.report_shape_pb2",  # a full report less its readings (summary_refresh)
}


def test_the_ingest_process_loads_grpc_and_no_http_kubernetes_or_decisions() -> None:
    modules = modules_after_importing("gpuextender.extender.workers.worker_main")
    assert {
        "grpc",
        "prometheus_client",
        "gpuextender.extender.ingest.service",
    } <= modules  # the check sees real imports
    assert loaded(modules, NEVER_IN_INGEST) == []
    assert set(loaded(modules, ("gpuextender.extender",))) == INGEST_MAY_LOAD


def test_without_kubernetes_no_module_of_the_extender_loads_the_kubernetes_client() -> None:
    everything = sorted(
        m.name
        for m in pkgutil.walk_packages(gpuextender.extender.__path__, "gpuextender.extender.")
        if m.name not in KUBERNETES_CLIENTS and m.name != "gpuextender.extender.__main__"
    )
    assert "gpuextender.extender.app" in everything and "gpuextender.extender.ui.explain_cli" in everything
    modules = modules_after_importing(*everything)
    assert {"aiohttp", "grpc", "gpuextender.extender.decide.decision"} <= modules
    assert loaded(modules, ("kubernetes_asyncio",)) == []


def test_each_kubernetes_client_module_does_load_it() -> None:
    """The other side of the check above: these are the ones that need the client."""
    for name in (*KUBERNETES_CLIENTS[:3], "gpuextender.extender.inventory.device_taint_writer"):
        assert loaded(modules_after_importing(name), ("kubernetes_asyncio",)), name
