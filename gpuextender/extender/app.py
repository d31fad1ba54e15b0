"""gpu-extender's wiring: `build` makes every part from the settings, `Extender.run` starts them,
serves until SIGTERM/SIGINT (or the ingest process dies), and stops what was started in reverse.

The parts, by stage: the inventory (files, or the Kubernetes list+watch: imported only with
--kubernetes, the client is ~35 MiB), the bound-pod ledger, the GPU state the agents' reports
feed (through the ingest process, or in this process with --ingest-in-process), the scheduler
API with the fleet page, and the metrics that read them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import ssl
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import grpc
from aiohttp import web

from gpuextender import __version__
from gpuextender.common.layered_config import describe_sources
from gpuextender.common.netaddr import HostPort, bound_address
from gpuextender.common.serving_tls import ServingCertificate
from gpuextender.extender.ingest.agent_identity import Authenticator
from gpuextender.extender.ingest.server import start_ingest_server
from gpuextender.extender.ingest.token_review import TokenReviewer, reviewer_for
from gpuextender.extender.inventory.files import FileInventorySource
from gpuextender.extender.model.kube_objects import (
    COSCHEDULING_POD_GROUP,
    JOBSET_JOB,
    KINDS,
    NODE,
    PENDING_POD,
    POD,
    POD_DISRUPTION_BUDGET,
    RESOURCE_CLAIM,
    VOLCANO_POD_GROUP,
    WORKLOAD_POD_GROUP,
    InventorySink,
    KindInfo,
)
from gpuextender.extender.model.pod_gpus import may_request
from gpuextender.extender.model.pod_group import COSCHEDULING, JOBSET, VOLCANO, WORKLOAD, group_key, read_group
from gpuextender.extender.observe.device_taints_metrics import DeviceTaintsCollector
from gpuextender.extender.observe.dra_devices import DraDevicesCollector
from gpuextender.extender.observe.loop_lag import LoopLag
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.observe.reclaim_metrics import ReclaimCollector
from gpuextender.extender.observe.silent_nodes import SilentNodesCollector, SilentNodesWarning
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi, build_app, listen_backlog, new_runner
from gpuextender.extender.scheduler.peer_sender import PeerSender
from gpuextender.extender.scheduler.peer_wire import new_instance_id
from gpuextender.extender.settings import CLEANUP_ON_EXIT_TIMEOUT_S, RECLAIM_LABEL, ExtenderConfig
from gpuextender.extender.state.claim_ledger import ClaimLedger
from gpuextender.extender.state.cleanup_plan import CleanupReport, exit_status, lines
from gpuextender.extender.state.device_taints import LEASE_NAME, TaintWriterStatus
from gpuextender.extender.state.disruption_budgets import DisruptionBudgets
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.group_book import GroupBook
from gpuextender.extender.state.idle_holders import ReclaimStatus
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import ViewBuilder
from gpuextender.extender.state.pending_members import PendingMembers
from gpuextender.extender.state.pod_groups import PodGroups
from gpuextender.extender.state.pod_ledger import PodLedger
from gpuextender.extender.state.publication import ChangeFeed, Publication, PublishInputs
from gpuextender.extender.ui.fleet_page import add_routes as add_fleet_page
from gpuextender.extender.workers.port_guard import hold_port
from gpuextender.extender.workers.supervisor import IngestStartError, IngestWorkers, sync_known_nodes

if TYPE_CHECKING:
    from gpuextender.extender.inventory.device_taint_writer import DeviceTaintWriter
    from gpuextender.extender.inventory.kube_watch import KubeInventorySource
    from gpuextender.extender.inventory.reclaim_writer import ReclaimWriter
    from gpuextender.extender.scheduler.pod_binder import PodBinder

log = logging.getLogger("gpu_extender")

# Above kube-scheduler's Go client idle timeout (90 s), so the server never closes
# a kept-alive connection just as the scheduler reuses it.
KEEPALIVE_TIMEOUT_S = 120.0


POD_GROUP_KINDS = {
    WORKLOAD: WORKLOAD_POD_GROUP,
    COSCHEDULING: COSCHEDULING_POD_GROUP,
    VOLCANO: VOLCANO_POD_GROUP,
    JOBSET: JOBSET_JOB,
}


class StartupError(Exception):
    """Start-up cannot go on; the message is the one line the user sees."""


def http_app(api: SchedulerApi) -> web.Application:
    """The scheduler API's routes, and the fleet page's unless --no-fleet-page."""
    return build_app(api, add_fleet_page if api.settings.fleet_page else None)


@dataclass
class Extender:
    """Every part of a running extender; made by `build`, started and stopped by `run`."""

    config: ExtenderConfig
    store: InventoryStore
    ledger: PodLedger
    state: GpuState
    metrics: ExtenderMetrics
    views: ViewBuilder
    api: SchedulerApi
    silent_nodes: SilentNodesWarning
    certificate: ServingCertificate | None
    file_source: FileInventorySource | None
    claims: ClaimLedger = field(default_factory=ClaimLedger)
    kube: KubeParts | None = None  # with --kubernetes
    peers: PeerSender | None = None  # with --peers
    argv: Sequence[str] = ()
    _background: list[asyncio.Task[None]] = field(default_factory=list)
    _grpc_server: grpc.aio.Server | None = None
    _ingest: IngestWorkers | None = None
    _runner: web.AppRunner | None = None
    _exit_code: int = 0
    _told_to_stop: bool = False

    async def run(self) -> int:
        """Serve until told to stop; 0, or 1 when the ingest process died under us."""
        stop = asyncio.Event()
        try:  # whatever fails on the way up (a port in use), what was started is stopped again
            self._start_inventory()
            grpc_port = await self._start_ingest(stop)
            http_bound = await self._start_http()
            _tune_gc()
            self.api.set_serving(True)
            self._log_started(http_bound, grpc_port)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            self._start_housekeeping()
            await stop.wait()
            log.info("shutting down")
            self._told_to_stop = self._exit_code == 0  # a signal, not the ingest process gone
        finally:
            await self._stop()
        return self._exit_code

    def _task(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._background.append(asyncio.create_task(coro, name=name))

    def _start_inventory(self) -> None:
        if self.file_source is not None:
            self.file_source.load()  # the first list, before we answer anything
            self._task(self.file_source.run(), "inventory files")
        elif self.kube is not None:  # /readyz stays 503 until every kind (pods too) is listed once
            for name, watch in self.kube.watches:
                self._task(watch.run(), name)
            if self.kube.taint_writer is not None:
                self._task(self.kube.taint_writer.run(), "device taint writer")
        else:
            for kind in KINDS:  # no inventory source: nothing to wait for
                self.store.replace_all(kind.kind, [])
            self.ledger.replace_all(POD.kind, [])
        if not self.claims.synced and self.kube is None:  # files without claims, or no source
            self.claims.replace_all(RESOURCE_CLAIM.kind, [])

    @property
    def _has_inventory(self) -> bool:
        return self.file_source is not None or self.kube is not None

    @property
    def _taint_writer(self) -> DeviceTaintWriter | None:
        return self.kube.taint_writer if self.kube is not None else None

    @property
    def _authenticator(self) -> Authenticator | None:
        return self.kube.reviewer if self.kube is not None else None

    async def _start_ingest(self, stop: asyncio.Event) -> int:
        """The agents' gRPC port, here or in the ingest process; returns the port bound."""
        store = self.store
        if self.config.ingest_in_process:
            # With an inventory source, a node it does not list is "unknown" (kept for a bounded few);
            # before the first list every node is (only agents racing a new replica's first list).
            known_node = (lambda name: store.get(NODE.kind, name) is not None) if self._has_inventory else None
            self._grpc_server, port = await start_ingest_server(
                self.config, self.state, self.metrics.ingest, self.certificate, self._authenticator, known_node
            )
            return port
        addr = self.config.grpc_addr
        guard = hold_port(addr.host, addr.port)  # OSError: taken (a second extender, another program)
        ingest = self._ingest = IngestWorkers(self.argv, self.config.ingest_workers, guard, self.state)
        self.metrics.add(ingest.worker_metrics, ingest.worker_metrics.refresh)
        node_names = (
            (lambda: frozenset(o["metadata"]["name"] for o in store.objects(NODE.kind)))
            if self._has_inventory
            else None
        )
        try:
            await ingest.start(node_names() if node_names else None)
        except IngestStartError as exc:
            raise StartupError(str(exc)) from None

        def ingest_gone() -> None:
            self._exit_code = 1
            stop.set()

        self._task(ingest.run(ingest_gone), "ingest workers")
        if node_names is not None:
            self._task(sync_known_nodes(ingest, node_names), "known nodes")
        return ingest.port

    async def _start_http(self) -> str:
        runner = new_runner(http_app(self.api), access_log=None, keepalive_timeout=KEEPALIVE_TIMEOUT_S)
        await runner.setup()
        self._runner = runner
        ssl_context = self.certificate.ssl_context() if self.certificate is not None else None
        addr = self.config.http_addr
        await web.TCPSite(runner, addr.host, addr.port, ssl_context=ssl_context, backlog=listen_backlog()).start()
        return ", ".join(bound_address(a) for a in runner.addresses)

    def _start_housekeeping(self) -> None:
        config = self.config
        if self.peers is not None:
            self._task(self.peers.run(), "peers")
        self._task(LoopLag(self.metrics.registry).run(), "event loop lag")
        forgot = self._ingest.send_forgot if self._ingest is not None else None
        self._task(_forget_departed(self.state, config.forget_after_s, forgot), "forget")
        # Agents report every second or so: a GPU node still silent after the stale bound (or the
        # readiness grace) is worth a warning; looked at again every stale bound (at least 5 s).
        stale_after_s = config.api.policy.stale_after_s
        first_look_s = max(stale_after_s, config.api.readiness_grace_s)
        self._task(self.silent_nodes.run(first_look_s, max(5.0, stale_after_s)), "silent nodes")

    def _log_started(self, http_bound: str, grpc_port: int) -> None:
        config = self.config
        policy = config.api.policy
        grpc_bound = str(HostPort(config.grpc_addr.host, grpc_port))
        if self.file_source is not None:
            counts = ", ".join(f"{n} {k}" for k, n in self.store.counts().items() if n)
            inventory = f"{config.inventory} ({counts})"
        else:
            inventory = "Kubernetes API (list+watch)" if self.kube is not None else "none"
        log.info(
            "gpu-extender %s: scheduler API on %s://%s%s/{filter,prioritize}, agents on grpc://%s; idle = util < %g%% "
            "and memory < %g%%; stale after %gs (%s); no fit: %s; GPU resources: %s; inventory: %s",
            __version__,
            "https" if self.certificate else "http",
            http_bound,
            config.api.path_prefix,
            grpc_bound,
            config.idle_rule.max_utilization_percent,
            config.idle_rule.max_memory_used_percent,
            policy.stale_after_s,
            policy.stale_policy,
            policy.no_fit_policy,
            ",".join(config.api.gpu_resources),
            inventory,
            extra={"address": http_bound},
        )
        if config.sources:
            log.info("settings from the environment or the config file: %s", describe_sources(config.sources))
        log.info("security: %s", security_summary(config))

    async def _stop(self) -> None:
        self.api.set_serving(False)
        led = False
        if self._told_to_stop:
            try:
                led = await clean_up_on_exit(self._taint_writer, self.config)
            except Exception:  # a bug here must not keep the rest from stopping
                log.exception("cleanup on exit failed: `gpu-extender cleanup` removes what is left")
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if led and self._taint_writer is not None:  # the election has stopped: nothing renews the Lease now
            await self._taint_writer.release_lease()
        if self._grpc_server is not None:
            await self._grpc_server.stop(grace=1.0)
        if self._ingest is not None:
            await self._ingest.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self.kube is not None:
            if self.kube.reviewer is not None:
                await self.kube.reviewer.close()
            await self.kube.binder.close()


async def build(
    config: ExtenderConfig,
    store: InventoryStore,
    ledger: PodLedger,
    file_source: FileInventorySource | None,
    certificate: ServingCertificate | None,
    argv: Sequence[str] = (),
    *,
    claims: ClaimLedger | None = None,
) -> Extender:
    """Every part, connected; nothing started yet (the Kubernetes client connects here). Each part
    is given what it reads when it is made: the sources first, what reads them after."""
    claims = claims if claims is not None else ClaimLedger()
    state = GpuState(config.idle_rule)
    metrics = ExtenderMetrics(state, store, ingest_here=config.ingest_in_process, ledger=ledger)
    views = ViewBuilder(store, config.api.gpu_resources, on_invalid=metrics.count_invalid_object)
    kube = (
        await _connect_kubernetes(config, store, ledger, claims, state, views, metrics) if config.kubernetes else None
    )
    sources = ClusterSources(
        ledger=ledger,
        claims=claims,  # DRA devices claims hold: not allocatable any more (dra_inventory.py)
        inventory_ready=lambda: store.ready and ledger.synced and claims.synced,
    )
    if kube is not None:
        sources = kube.sources(sources)
    peers = _peer_sender(config)
    api = SchedulerApi(state, metrics, config.api, inventory=lambda: views.current, sources=sources, peers=peers)
    if kube is not None:
        kube.release_holds_into(api.groups)
    views.on_rebuild(api.classes.classes_by_node)  # class membership follows each rebuild, not the next request
    # Sharing no agent can tell, read off each Node's allocatable (gpu_summary.with_inferred_sharing).
    state.read_allocatable(lambda node: views.current.allocatable_gpus.get(node))
    views.on_rebuild(lambda _view: state.allocatable_changed())
    metrics.add(SilentNodesCollector(state, lambda: views.current))
    metrics.add(
        DraDevicesCollector(
            lambda: views.current, claims, state.reported, stale_after_s=config.api.policy.stale_after_s
        )
    )
    return Extender(
        config=config,
        store=store,
        ledger=ledger,
        state=state,
        metrics=metrics,
        views=views,
        api=api,
        silent_nodes=SilentNodesWarning(state, lambda: views.current),
        certificate=certificate,
        file_source=file_source,
        claims=claims,
        kube=kube,
        peers=peers,
        argv=argv,
    )


def _peer_sender(config: ExtenderConfig) -> PeerSender | None:
    """--peers: HTTPS to each peer where this replica serves HTTPS, its certificate checked against
    --peers-ca (or --tls-ca) for the name of its --peers entry (flags.py made sure one is there)."""
    if not config.peers:
        return None
    context = None
    if config.peers_ca is not None:
        try:
            context = ssl.create_default_context(cafile=str(config.peers_ca))
        except (OSError, ssl.SSLError) as exc:
            raise StartupError(f"--peers-ca {config.peers_ca}: {exc}") from None
    return PeerSender(config.peers, new_instance_id(), ssl_context=context)


@dataclass(frozen=True)
class KubeParts:
    """What --kubernetes adds, made before the parts that read it: the watches (the inventory's
    first), the PodGroups and PodDisruptionBudgets they keep, the TokenReviewer, the binder and the
    leader's writers."""

    watches: tuple[tuple[str, KubeInventorySource], ...]  # (task name, watch)
    group_sinks: dict[str, PodGroups]
    budgets: DisruptionBudgets
    pending: PendingMembers
    reviewer: TokenReviewer | None
    binder: PodBinder
    taint_writer: DeviceTaintWriter | None

    def sources(self, base: ClusterSources) -> ClusterSources:
        """`base` with what the cluster adds: PodGroups, PodDisruptionBudgets, the binder and what
        the leader publishes."""
        sinks = self.group_sinks
        writer = self.taint_writer
        return replace(
            base,
            pod_groups=lambda source, namespace, name: (
                sink.spec(namespace, name) if (sink := sinks.get(source)) is not None else None
            ),
            budgets=self.budgets,
            pending_members=self.pending.count,
            binder=self.binder,
            published=writer.publication.node if writer is not None else base.published,
        )

    def release_holds_into(self, book: GroupBook) -> None:
        """A deleted PodGroup's hold goes with it."""
        for source, sink in self.group_sinks.items():
            sink.on_delete(partial(_pod_group_deleted, book, source))


async def _connect_kubernetes(
    config: ExtenderConfig,
    store: InventoryStore,
    ledger: PodLedger,
    claims: ClaimLedger,
    state: GpuState,
    views: ViewBuilder,
    metrics: ExtenderMetrics,
) -> KubeParts:
    # Imported only when used: kubernetes-asyncio adds ~35 MiB to the extender's RSS.
    from gpuextender.extender.inventory.kube_watch import KubeInventorySource
    from gpuextender.extender.kube.connection import KubeConfigError, load_kube_config
    from gpuextender.extender.scheduler.pod_binder import PodBinder

    try:
        connection = await load_kube_config(config.kubeconfig)
    except KubeConfigError as exc:
        raise StartupError(str(exc)) from None

    def watch(sink: InventorySink, kinds: tuple[KindInfo, ...] = KINDS, **options: Any) -> KubeInventorySource:
        return KubeInventorySource(sink, connection, kinds=kinds, on_restart=metrics.count_watch_restart, **options)

    resources = config.api.gpu_resources
    # PodGroups of the group sources that keep a group's size in an object (model/pod_group.py),
    # read-only, each into its own sink; an API not served is one log line and that source off.
    sinks = {source: PodGroups(source) for source in POD_GROUP_KINDS}
    budgets = DisruptionBudgets()  # read-only: the preempt verb counts the ones its added victims break
    pending = PendingMembers()  # groups' members not yet bound: room held only for members that exist
    watches = (
        ("inventory watch", watch(store)),
        # Bound, unfinished pods (POD's field selector), into the ledger only: their churn never
        # rebuilds the view. A relist keeps only the items that name a GPU resource.
        (
            "bound pods watch",
            watch(ledger, (POD,), list_filter=lambda _kind, pod: may_request(pod, resources)),
        ),
        # ResourceClaims (DRA), into the claim ledger only, like pods: they churn with claim pods.
        ("resource claims watch", watch(claims, (RESOURCE_CLAIM,))),
        *((f"{kind.group} PodGroups watch", watch(sinks[source], (kind,))) for source, kind in POD_GROUP_KINDS.items()),
        ("PodDisruptionBudgets watch", watch(budgets, (POD_DISRUPTION_BUDGET,))),
        # Unbound pending pods, of which only multi-pod groups' members are kept, counted.
        (
            "pending group members watch",
            watch(pending, (PENDING_POD,), list_filter=lambda _kind, pod: read_group(pod).ref is not None),
        ),
    )
    return KubeParts(
        watches,
        sinks,
        budgets,
        pending,
        await reviewer_for(config, connection),
        PodBinder(connection),  # the bind verb creates Bindings (pods/binding) with the same credentials
        _taint_writer(config, connection, store, claims, state, views, ledger, metrics)
        if config.device_taints == "on"
        else None,
    )


def _taint_writer(
    config: ExtenderConfig,
    connection: Any,
    store: InventoryStore,
    claims: ClaimLedger,
    state: GpuState,
    views: ViewBuilder,
    ledger: PodLedger,
    metrics: ExtenderMetrics,
) -> DeviceTaintWriter:
    """--device-taints on: the leader's writer of DeviceTaintRules, and of the node conditions,
    taints, Events and reclaims it is asked for."""
    from gpuextender.extender.inventory.device_taint_writer import AlsoWritten, DeviceTaintWriter, WriterPace
    from gpuextender.extender.inventory.idle_events import IdleEventWriter
    from gpuextender.extender.inventory.node_status_writer import NodeStatusWriter

    publish = config.publish
    feed = ChangeFeed()
    state.on_offered_change(feed.node_changed)

    def inputs() -> PublishInputs:
        view = views.current
        synced = claims.synced
        return PublishInputs(
            view.dra,
            view.allocatable_gpus,
            state.reported,
            claims.allocated_on if synced else None,
            claims.holders_on if synced else None,
            config.api.policy.stale_after_s,
            changed=feed.drain(view.dra, view.allocatable_gpus, claims.version, claims.nodes_changed_since),
            claims_version_of=claims.node_version,
        )

    status = TaintWriterStatus()
    nodes = (
        NodeStatusWriter(
            lambda name: store.get(NODE.kind, name),
            status,
            taint=publish.node_taint,
            taint_key=publish.node_taint_key,
            taint_effect=publish.node_taint_effect,
        )
        if publish.node_conditions or publish.node_taint
        else None
    )
    events = (
        IdleEventWriter(
            status,
            window_s=publish.idle_window_s,
            node_uid=lambda name: str(((store.get(NODE.kind, name) or {}).get("metadata") or {}).get("uid") or ""),
            claim_uid=lambda key: c.uid if (c := claims.claim(key)) is not None else "",
        )
        if publish.idle_events
        else None
    )
    writer = DeviceTaintWriter(
        connection,
        Publication(
            config.device_taint_after_s,
            publish.busy_hold_s,
            health_clear_s=config.device_taint_clear_after_s,
            busy=publish.busy_taints,
            idle_window_s=publish.idle_window_s,
        ),
        inputs,
        namespace=config.leader_namespace,
        also=AlsoWritten(nodes, events, _reclaim_writer(config, store, ledger, state, metrics)),
        status=status,
        pace=WriterPace(writes_per_s=publish.writes_per_s),
    )
    metrics.add(DeviceTaintsCollector(writer.status))
    return writer


def _reclaim_writer(
    config: ExtenderConfig, store: InventoryStore, ledger: PodLedger, state: GpuState, metrics: ExtenderMetrics
) -> ReclaimWriter | None:
    """--reclaim dry-run or on: the leader's reclaim pass (inventory/reclaim_writer.py), and its metrics."""
    publish = config.publish
    if publish.reclaim == "off":
        return None
    from gpuextender.extender.inventory.reclaim_writer import ReclaimWriter

    status = ReclaimStatus()
    metrics.add(ReclaimCollector(status))
    return ReclaimWriter(
        status,
        dry_run=publish.reclaim == "dry-run",
        label=RECLAIM_LABEL,
        min_runtime_s=publish.reclaim_min_runtime_s,
        window_s=publish.idle_window_s,
        stale_after_s=config.api.policy.stale_after_s,
        gpu_resources=config.api.gpu_resources,
        summaries=lambda: state.offered_summaries,
        pods_on=ledger.pods_on,
        node_object=lambda name: store.get(NODE.kind, name),
    )


def _pod_group_deleted(book: GroupBook, source: str, namespace: str, name: str) -> None:
    book.deleted(group_key(source, namespace, name))


def security_summary(config: ExtenderConfig) -> str:
    """One line saying which of TLS, mTLS and agent authentication are on."""
    tls = config.tls
    if tls is None:
        parts = ["TLS off (plain HTTP and gRPC)"]
    else:
        parts = [f"TLS on for HTTPS and gRPC ({tls.cert}, reloaded when it changes)"]
        parts.append(
            f"mTLS on: agents need a client certificate signed by {tls.client_ca}"
            if tls.client_ca
            else "mTLS off (no --tls-ca)"
        )
    auth = config.agent_auth
    if auth.mode == "tokenreview":
        parts.append(
            f"agent auth: TokenReview (service account {auth.service_account}, audience {auth.audience!r}, "
            f"token bound to the reporting node, re-checked every {auth.reauth_after_s:g}s)"
            + ("" if tls else "; tokens travel in cleartext: add --tls-cert/--tls-key")
        )
    else:
        parts.append(
            "agent auth: none"
            + ("" if tls and tls.client_ca else " (any client that reaches the gRPC port can report for any node)")
        )
    return "; ".join(parts)


async def clean_up_on_exit(writer: DeviceTaintWriter | None, config: ExtenderConfig) -> bool:
    """--cleanup-on-exit, on SIGTERM/SIGINT: the leader of the device-taint Lease removes what the
    extender wrote (inventory/cleanup.py) while it still holds the Lease, for at most
    CLEANUP_ON_EXIT_TIMEOUT_S, and logs what it removed. True when this replica led (it gives the
    Lease up once its writer has stopped)."""
    publish = config.publish
    if writer is None or not publish.cleanup_on_exit:
        return False
    from gpuextender.extender.inventory.cleanup import remove_writes

    report = CleanupReport(publish.node_taint_key)

    async def work(api_client: Any, version: str | None) -> None:
        await remove_writes(api_client, version, report)

    try:
        led = await asyncio.wait_for(writer.finish(work), CLEANUP_ON_EXIT_TIMEOUT_S)
    except TimeoutError:  # the work was cancelled: its report is read as it stands
        report = replace(
            report, stopped=f"out of time after {CLEANUP_ON_EXIT_TIMEOUT_S:g}s: `gpu-extender cleanup` removes the rest"
        )
        led = True  # only a leader works that long
    if not led:
        log.info(
            "cleanup on exit: this replica does not hold the Lease %s/%s: the leader removes the writes",
            config.leader_namespace,
            LEASE_NAME,
        )
        return False
    say = log.info if exit_status(report) == 0 else log.warning
    for line in lines(report):
        say("cleanup on exit: %s", line)
    return True


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


async def _forget_departed(
    state: GpuState, forget_after_s: float, forgot: Callable[[list[str]], None] | None = None
) -> None:
    while True:
        await asyncio.sleep(min(60.0, forget_after_s / 4))
        gone = state.forget_older_than(time.monotonic() - forget_after_s)
        for name in gone:
            log.info("forgot node %s: no report for %.0fs", name, forget_after_s, extra={"node": name})
        if forgot is not None:
            forgot(gone)
