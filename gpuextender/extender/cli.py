"""`gpu-extender`: wires the GPU state, gRPC ingest, the scheduler HTTP API and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence

import grpc
from aiohttp import web
from prometheus_client import disable_created_metrics
from gpuextender import __version__
from gpuextender.common.layered_config import describe_sources
from gpuextender.common.logs import configure_logging
from gpuextender.common.netaddr import HostPort, bound_address

from gpuextender.extender.settings import ConfigError, ExtenderConfig, build_config
from gpuextender.extender.ingest.agent_identity import Authenticator
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.scheduler.http_api import SchedulerApi, build_app, listen_backlog, new_runner
from gpuextender.extender.ingest.relay import IngestProcess, IngestStartError, sync_known_nodes
from gpuextender.extender.ingest.server import start_ingest_server
from gpuextender.extender.inventory.files import FileInventorySource, InventoryPathError
from gpuextender.extender.model.kube_objects import KINDS, NODE, POD
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import ViewBuilder
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.model.pod_gpus import may_request
from gpuextender.extender.state.pod_ledger import PodLedger
from gpuextender.common.serving_tls import ServingCertificate, TlsLoadError
from gpuextender.extender.observe.silent_nodes import SilentNodesCollector, SilentNodesWarning

log = logging.getLogger("gpu_extender")

# Above kube-scheduler's Go client idle timeout (90 s), so the server never closes
# a kept-alive connection just as the scheduler reuses it.
KEEPALIVE_TIMEOUT_S = 120.0


class _StartupError(Exception):
    """Start-up cannot go on; the message is the one line the user sees."""


def _fail(message: str) -> int:
    print(f"gpu-extender: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["explain"]:
        from gpuextender.extender.ui.explain_cli import main as explain_main

        return explain_main(argv[1:])
    disable_created_metrics()  # *_created series only add noise to every scrape
    try:
        config = build_config(argv)
    except ConfigError as exc:
        return _fail(str(exc))
    configure_logging(config.log_level, config.log_format)
    store = InventoryStore()
    ledger = PodLedger(config.api.gpu_resources)  # bound GPU pods, kept apart from the store (pod_ledger.py)
    source: FileInventorySource | None = None
    if config.inventory is not None:
        try:
            source = FileInventorySource(config.inventory, store, pods=ledger)
        except InventoryPathError as exc:
            return _fail(str(exc))
    certificate: ServingCertificate | None = None
    if config.tls is not None:
        try:
            certificate = ServingCertificate(config.tls)
        except TlsLoadError as exc:
            return _fail(str(exc))
    try:
        return asyncio.run(_serve(config, store, ledger, source, certificate, argv))
    except _StartupError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot listen: {exc.strerror or exc}")


async def _serve(
    config: ExtenderConfig,
    store: InventoryStore,
    ledger: PodLedger,
    source: FileInventorySource | None,
    certificate: ServingCertificate | None,
    argv: Sequence[str] = (),
) -> int:
    kube_watch = None
    pod_source = None
    authenticator: Authenticator | None = None
    reviewer = None
    state = GpuState(config.idle_rule)
    metrics = ExtenderMetrics(state, store, ingest_here=config.ingest_in_process, ledger=ledger)
    if config.kubernetes:
        # Imported only when used: kubernetes-asyncio adds ~35 MiB to the extender's RSS.
        from gpuextender.extender.inventory.kube_watch import KubeConfigError, KubeInventorySource, load_kube_config

        try:
            connection = await load_kube_config(config.kubeconfig)
        except KubeConfigError as exc:
            raise _StartupError(str(exc)) from None
        kube_watch = KubeInventorySource(store, connection, on_restart=metrics.count_watch_restart)
        # Bound, unfinished pods (POD's field selector), into the ledger only: their churn never
        # rebuilds the view. A relist keeps only the items that name a GPU resource.
        resources = config.api.gpu_resources
        pod_source = KubeInventorySource(ledger, connection, kinds=(POD,), on_restart=metrics.count_watch_restart,
                                         list_filter=lambda _kind, pod: may_request(pod, resources))  # fmt: skip
        if config.agent_auth.mode == "tokenreview":
            from gpuextender.extender.ingest.token_review import TokenReviewer

            assert config.agent_auth.service_account is not None  # config guarantees it
            reviewer = TokenReviewer(connection, config.agent_auth.service_account, config.agent_auth.audience)
            authenticator = reviewer

    views = ViewBuilder(store, config.api.gpu_resources, on_invalid=metrics.count_invalid_object)
    api = SchedulerApi(state, metrics, config.api, inventory=lambda: views.current)
    views.on_rebuild(api.classes.classes_by_node)  # class membership follows each rebuild, not the next request
    metrics.registry.register(SilentNodesCollector(state, lambda: views.current))
    silent_nodes = SilentNodesWarning(state, lambda: views.current)
    api.count_bound_pods(ledger)
    binder = None
    if config.kubernetes:  # the bind verb creates Bindings (pods/binding) with the same credentials
        from gpuextender.extender.scheduler.pod_binder import PodBinder

        binder = api.bindings.binder = PodBinder(connection)
    api.inventory_ready = lambda: store.ready and ledger.synced
    background: list[asyncio.Task[None]] = []
    grpc_server: grpc.aio.Server | None = None
    ingest_process: IngestProcess | None = None
    exit_code = 0
    runner: web.AppRunner | None = None
    try:  # whatever fails on the way up (a port in use), what was started is stopped again
        if source is not None:
            source.load()  # the first list, before we answer anything
            background.append(asyncio.create_task(source.run(), name="inventory files"))
        elif kube_watch is not None:  # /readyz stays 503 until every kind (pods too) is listed once
            background.append(asyncio.create_task(kube_watch.run(), name="inventory watch"))
            assert pod_source is not None
            background.append(asyncio.create_task(pod_source.run(), name="bound pods watch"))
        else:
            for kind in KINDS:  # no inventory source: nothing to wait for
                store.replace_all(kind.kind, [])
            ledger.replace_all(POD.kind, [])

        stop = asyncio.Event()
        has_inventory = source is not None or kube_watch is not None
        if config.ingest_in_process:
            # With an inventory source, a node it does not list is "unknown" (kept for a bounded few);
            # before the first list every node is (only agents racing a new replica's first list).
            known_node = (lambda name: store.get(NODE.kind, name) is not None) if has_inventory else None
            grpc_server, grpc_port = await start_ingest_server(config, state, metrics, certificate, authenticator,
                                                               known_node)  # fmt: skip
        else:
            assert metrics.relayed is not None  # ingest_here=False
            ingest_process = IngestProcess(argv, state, metrics.relayed)
            node_names = (lambda: frozenset(o["metadata"]["name"] for o in store.objects(NODE.kind))
                          ) if has_inventory else None  # fmt: skip
            try:
                await ingest_process.start(node_names() if node_names else None)
            except IngestStartError as exc:
                raise _StartupError(str(exc)) from None

            def ingest_gone() -> None:
                nonlocal exit_code
                exit_code = 1
                stop.set()

            grpc_port = ingest_process.port
            background.append(asyncio.create_task(ingest_process.run(ingest_gone), name="ingest relay"))
            if node_names is not None:
                background.append(asyncio.create_task(sync_known_nodes(ingest_process, node_names),
                                                      name="known nodes"))  # fmt: skip

        app_runner = new_runner(build_app(api), access_log=None, keepalive_timeout=KEEPALIVE_TIMEOUT_S)
        await app_runner.setup()
        runner = app_runner
        ssl_context = certificate.ssl_context() if certificate is not None else None
        await web.TCPSite(runner, config.http_addr.host, config.http_addr.port, ssl_context=ssl_context,
                          backlog=listen_backlog()).start()  # fmt: skip
        _tune_gc()
        api.serving = True
        policy = config.api.policy
        http_bound = ", ".join(bound_address(a) for a in runner.addresses)
        grpc_bound = str(HostPort(config.grpc_addr.host, grpc_port))
        log.info(
            "gpu-extender %s: scheduler API on %s://%s%s/{filter,prioritize}, agents on grpc://%s; idle = util < %g%% "
            "and memory < %g%%; stale after %gs (%s); no fit: %s; GPU resources: %s; inventory: %s",
            __version__, "https" if certificate else "http", http_bound, config.api.path_prefix,
            grpc_bound, config.idle_rule.max_utilization_percent, config.idle_rule.max_memory_used_percent,
            policy.stale_after_s, policy.stale_policy, policy.no_fit_policy,
            ",".join(config.api.gpu_resources),
            f"{config.inventory} ({', '.join(f'{n} {k}' for k, n in store.counts().items() if n)})"
            if source else ("Kubernetes API (list+watch)" if kube_watch else "none"),
            extra={"address": http_bound},
        )  # fmt: skip
        if config.sources:
            log.info("settings from the environment or the config file: %s", describe_sources(config.sources))
        log.info("security: %s", security_summary(config))

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        forgot = ingest_process.send_forgot if ingest_process is not None else None
        background.append(asyncio.create_task(_forget_departed(state, config.forget_after_s, forgot), name="forget"))
        # Agents report every second or so: a GPU node still silent after the stale bound (or the
        # readiness grace) is worth a warning; looked at again every stale bound (at least 5 s).
        stale_after_s = config.api.policy.stale_after_s
        first_look_s = max(stale_after_s, config.api.readiness_grace_s)
        background.append(asyncio.create_task(silent_nodes.run(first_look_s, max(5.0, stale_after_s)),
                                              name="silent nodes"))  # fmt: skip
        await stop.wait()
        log.info("shutting down")
    finally:
        api.serving = False
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if grpc_server is not None:
            await grpc_server.stop(grace=1.0)
        if ingest_process is not None:
            await ingest_process.stop()
        if runner is not None:
            await runner.cleanup()
        if reviewer is not None:
            await reviewer.close()
        if binder is not None:
            await binder.close()
    return exit_code


def security_summary(config: ExtenderConfig) -> str:
    """One line saying which of TLS, mTLS and agent authentication are on."""
    tls = config.tls
    if tls is None:
        parts = ["TLS off (plain HTTP and gRPC)"]
    else:
        parts = [f"TLS on for HTTPS and gRPC ({tls.cert}, reloaded when it changes)"]
        parts.append(f"mTLS on: agents need a client certificate signed by {tls.client_ca}" if tls.client_ca
                     else "mTLS off (no --tls-ca)")  # fmt: skip
    auth = config.agent_auth
    if auth.mode == "tokenreview":
        parts.append(f"agent auth: TokenReview (service account {auth.service_account}, audience {auth.audience!r}, "
                     f"token bound to the reporting node, re-checked every {auth.reauth_after_s:g}s)" + ("" if tls else "; tokens travel in cleartext: add "
                                                             "--tls-cert/--tls-key"))  # fmt: skip
    else:
        parts.append("agent auth: none" + ("" if tls and tls.client_ca else
                                             " (any client that reaches the gRPC port can report for any node)"))
    return "; ".join(parts)


def _tune_gc() -> None:
    """Keep garbage-collector pauses off the scheduler's latency.

    A 5,000-node call creates >10,000 short-lived objects, which used to trigger a
    full collection every few calls, each scanning every object the process owns
    (~30 ms on 2 cores): the p99. Everything alive after start-up (modules,
    config, inventory) is frozen out of those scans, and young collections run
    less often. Request objects are freed by reference counting anyway.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)


async def _forget_departed(state: GpuState, forget_after_s: float,
                           forgot: Callable[[list[str]], None] | None = None) -> None:  # fmt: skip
    while True:
        await asyncio.sleep(min(60.0, forget_after_s / 4))
        gone = state.forget_older_than(time.monotonic() - forget_after_s)
        for name in gone:
            log.info("forgot node %s: no report for %.0fs", name, forget_after_s, extra={"node": name})
        if forgot is not None:
            forgot(gone)


if __name__ == "__main__":
    sys.exit(main())
