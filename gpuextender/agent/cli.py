"""`gpu-agent`: wires NVML (real or fake), the sample loop, metrics and the extender streams."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpuextender import __version__
from gpuextender.agent.settings import AgentConfig, ConfigError, build_config
from gpuextender.agent.sources.nvml_events import request_clear
from gpuextender.common.layered_config import describe_sources
from gpuextender.common.logs import configure_logging
from gpuextender.common.netaddr import HostPort

# What only the serving agent needs is imported after the one-shot mode: `kubectl exec POD --
# gpu-agent --clear-xid N` runs beside the agent, inside the container's memory limit, and needs
# neither prometheus_client nor the sample loop (~5.5 MiB less RSS). The fake NVML and
# PyYAML are imported for --fake only (~1.6 MiB the agent on a real node never holds).
# bench/agent_imports.py measures both.
if TYPE_CHECKING:
    from gpuextender.agent.export.metrics import AgentMetrics
    from gpuextender.agent.model.readings import NodeSample
    from gpuextender.agent.sources.nvml_reader import NvmlReader

log = logging.getLogger("gpu_agent")


def _fail(message: str) -> int:
    print(f"gpu-agent: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = build_config(argv, os.environ)
    except ConfigError as exc:
        return _fail(str(exc))
    configure_logging(config.log_level, config.log_format)
    if config.clear_xids:  # one-shot: `kubectl exec POD -- gpu-agent --clear-xid N`
        return request_clear(config.control_dir, config.clear_xids)
    from prometheus_client import disable_created_metrics

    from gpuextender.agent.export.metrics import AgentMetrics
    from gpuextender.agent.sources.nvml_reader import NvmlReader, NvmlUnavailable

    disable_created_metrics()  # *_created series only add noise to every scrape (none exists yet)
    if config.fake_scenario is not None:
        from gpuextender.agent.fakes.scenario import ScenarioError, ScenarioFile, load_scenario

        try:
            scenario = load_scenario(config.fake_scenario)
        except ScenarioError as exc:
            return _fail(str(exc))
        from gpuextender.agent.fakes.nvml import FakeNvmlLibrary, install

        follow = ScenarioFile(config.fake_scenario, scenario)
        install(FakeNvmlLibrary(scenario, uuid_seed=config.node_name, follow=follow))
        log.info("fake NVML from %s: %d simulated GPU(s)", config.fake_scenario, len(scenario.gpus))
    metrics = AgentMetrics(
        config.node_name,
        dcgm_names=config.dcgm_names,
        idle_threshold_percent=config.idle_threshold_percent,
        idle_window_s=config.idle_window_s,
    )
    # The fake's PCI bus IDs are not this machine's devices: no sysfs NUMA fallback for it.
    reader = NvmlReader(
        on_error=metrics.count_nvml_error,
        sysfs_root=None if config.fake_scenario is not None else Path("/sys"),
        gpm=config.gpm,
    )
    try:
        reader.start()
    except NvmlUnavailable as exc:
        return _fail(str(exc))
    try:
        return asyncio.run(_serve(config, reader, metrics))
    except OSError as exc:  # e.g. metrics port in use
        return _fail(f"cannot serve on {config.metrics_addr}: {exc.strerror or exc}")
    finally:
        reader.close()


def _allocation_enricher(config: AgentConfig) -> tuple[Callable[[NodeSample], None], Callable[[], None]]:
    """Per sample: GFD's sharing labels, then who holds which GPU per the kubelet (it reads the
    labels). Returns (enrich, close)."""
    from gpuextender.agent.sources.gfd_labels import GfdLabelsFile
    from gpuextender.agent.sources.pod_resources import PodAttribution

    gfd = GfdLabelsFile(str(config.gfd_labels_file)) if config.gfd_labels_file is not None else None
    kubelet = PodAttribution(str(config.pod_resources_socket)) if config.pod_resources_socket is not None else None

    def enrich(sample: NodeSample) -> None:
        sample.sharing_labels = gfd.current() if gfd is not None else {}
        if kubelet is not None:
            kubelet.annotate(sample)

    return enrich, (kubelet.close if kubelet is not None else lambda: None)


async def _serve(config: AgentConfig, reader: NvmlReader, metrics: AgentMetrics) -> int:
    from gpuextender.agent.export.http_get_server import GetServer
    from gpuextender.agent.export.http_routes import routes
    from gpuextender.agent.report.gate import ReportGate
    from gpuextender.agent.report.latest import LatestReport
    from gpuextender.agent.rules.health import HealthEnricher, HealthPolicy
    from gpuextender.agent.sampling.sample_loop import SampleLoop
    from gpuextender.agent.sources.nvml_events import ClearRequests, EventStore, NvmlEventWatcher
    from gpuextender.agent.stream.stream_set import StreamSet
    from gpuextender.agent.stream.streamer import ExtenderStream
    from gpuextender.common.backoff import Backoff
    from gpuextender.common.discovery import ServiceWatch
    from gpuextender.common.heap import trim_c_heap

    latest = LatestReport()
    gate = ReportGate(config.heartbeat_s)
    allocation, close_allocation = _allocation_enricher(config)
    store = EventStore(ignored_xids=config.ignored_xids)
    health = HealthEnricher(HealthPolicy(ignored_xids=config.ignored_xids), store.snapshot)
    sampler = SampleLoop(
        reader,
        latest,
        metrics,
        node_name=config.node_name,
        interval_s=config.interval_s,
        agent_version=__version__,
        enrichers=[allocation, health],  # health last: it sees everything else of the sample
        gate=gate,
    )
    watcher: NvmlEventWatcher | None = None
    if config.health_events:
        # A critical event wakes the sample loop: the extender hears of it within a sample's time.
        watcher = NvmlEventWatcher(
            store,
            on_event=lambda _event: sampler.wake_now(),
            clear_requests=ClearRequests(config.control_dir),
            on_clear=sampler.wake_now,
        )
        watcher.start()
    # Metrics-only mode (no extender to ack a report): /readyz needs NVML alone.
    has_extenders = bool(config.extenders) or config.extender_service is not None
    http = GetServer(routes(metrics, sampler, require_ack=has_extenders))
    await http.start(config.metrics_addr.host, config.metrics_addr.port)
    log.info(
        "gpu-agent %s for node %s: metrics on http://%s/metrics, sampling every %.2fs, streaming %s, extenders: %s",
        __version__,
        config.node_name,
        HostPort(config.metrics_addr.host, http.port),
        config.interval_s,
        f"on change with a heartbeat of at most {config.heartbeat_s:g}s" if config.heartbeat_s else "every sample",
        _extenders_summary(config),
    )
    if config.sources:
        log.info("settings from the environment or the config file: %s", describe_sources(config.sources))
    log.info("stream security: %s", _security_summary(config))
    trim_c_heap()  # everything is imported and set up: what start-up freed goes back to the kernel

    def make_stream(target: str) -> ExtenderStream:
        return ExtenderStream(
            target,
            latest,
            metrics,
            backoff=Backoff(config.reconnect_initial_s, config.reconnect_max_s),
            ack_timeout_s=max(10.0, 5 * config.interval_s),
            on_requested_interval=sampler.set_interval,
            dial=config.dial,
            gate=gate,
        )

    streams = StreamSet(make_stream, static=config.extenders)
    tasks = [
        asyncio.create_task(sampler.run(), name="sampler"),
        asyncio.create_task(streams.run(), name="extender streams"),
    ]
    if config.extender_service is not None:
        watch = ServiceWatch(config.extender_service, config.resolve_interval_s, streams.set_resolved)
        tasks.append(asyncio.create_task(watch.run(), name="extender service"))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    exit_code = 0
    for task in done:
        if task is not stopper and task.exception() is not None:
            log.error("%s stopped unexpectedly", task.get_name(), exc_info=task.exception())
            exit_code = 1
    log.info("shutting down")
    for task in [stopper, *tasks]:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    if watcher is not None:
        await asyncio.to_thread(watcher.stop)  # at most one event-wait timeout (~1 s)
    close_allocation()
    await http.close()
    return exit_code


def _extenders_summary(config: AgentConfig) -> str:
    parts = list(config.extenders)
    if config.extender_service is not None:
        parts.append(f"every address of {config.extender_service} (resolved every {config.resolve_interval_s:g}s)")
    return ", ".join(parts) or "none (metrics only)"


def _security_summary(config: AgentConfig) -> str:
    dial = config.dial
    if not dial.tls:
        tls = "plaintext (no --tls-ca)"
    else:
        tls = f"TLS, extender certificate checked against {dial.tls_ca}"
        if dial.tls_server_name:
            tls += f" for the name {dial.tls_server_name!r}"
        elif config.extender_service is not None:
            tls += " for each pod IP (no --tls-server-name: the certificate must list them)"
        tls += f", client certificate {dial.tls_cert}" if dial.client_cert else ", no client certificate"
    token = f"; bearer token from {dial.token_file}" if dial.token_file else "; no token"
    if dial.token_file and not dial.tls:
        token += " (sent in cleartext: add --tls-ca)"
    return tls + token


if __name__ == "__main__":
    sys.exit(main())
