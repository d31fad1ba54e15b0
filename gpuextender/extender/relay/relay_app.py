"""The gpu-relay's parts, built and run: the agents' side (the extender's IngestService over a
ForwardStore, forward_store.py), one Upstream per extender replica (upstream.py), its probes
(http_probes.py) and its series (observe/relay_metrics.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable

from gpuextender.common.dial import DialSettings
from gpuextender.common.discovery import ServiceWatch
from gpuextender.common.log_once import OncePer
from gpuextender.common.netaddr import parse_host_port
from gpuextender.common.serving_tls import ServingCertificate
from gpuextender.extender.ingest.agent_identity import Authenticator
from gpuextender.extender.ingest.limits import MAX_AGENT_REPORT_BYTES
from gpuextender.extender.ingest.server import ingest_service, serve_ingest
from gpuextender.extender.ingest.service import REPEAT_REFUSAL_S, IngestService
from gpuextender.extender.ingest.token_review import reviewer_for
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.observe.relay_metrics import RelayMetrics
from gpuextender.extender.relay.forward_store import ForwardStore
from gpuextender.extender.relay.http_probes import start_probes
from gpuextender.extender.relay.relay_flags import RelaySettings
from gpuextender.extender.relay.upstream import Upstream
from gpuextender.extender.settings import ExtenderConfig
from gpuextender.v1 import gpu_state_pb2 as pb

log = logging.getLogger("gpu_extender.relay")


class Relay:
    """The agents' side (an IngestService over a ForwardStore) and one Upstream per replica."""

    def __init__(
        self,
        store: ForwardStore,
        service: IngestService,
        dial: DialSettings,
        metrics: IngestMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.service, self._dial = store, service, dial
        self.upstreams: dict[str, tuple[Upstream, asyncio.Task[None]]] = {}
        self._agent_acks: dict[str, pb.ReportAck] = {}
        self.answered = False  # a replica has answered this relay since start (http_probes: /readyz)
        self._followed = b""
        self._should_log = OncePer(REPEAT_REFUSAL_S, clock)  # a line a minute per node
        self.metrics = RelayMetrics(
            metrics.registry,
            connected=lambda: sum(1 for u, _ in self.upstreams.values() if u.connected),
            found=lambda: len(self.upstreams),
            nodes=lambda: len(store),
        )

    def set_targets(self, targets: frozenset[str]) -> None:
        for target in set(self.upstreams) - targets:
            _, task = self.upstreams.pop(target)
            task.cancel()
        for target in sorted(targets - set(self.upstreams)):
            upstream = Upstream(target, self.store, self._dial, self.on_ack)
            self.upstreams[target] = (upstream, asyncio.create_task(upstream.run(), name=f"relay to {target}"))

    def on_ack(self, target: str, ack: pb.RelayAck | None) -> None:
        if ack is None:
            self._agent_acks.pop(target, None)
        else:
            self.answered = True
            for refusal in ack.refused:
                self.metrics.refused.inc()
                self.store.refused(refusal.node_name, refusal.reason)
                self._log_refusal(target, refusal)
            if ack.HasField("agent_ack"):
                self._agent_acks[target] = ack.agent_ack
        self._follow()

    def readiness(self) -> tuple[bool, str]:
        found = len(self.upstreams)
        reached = sum(1 for u, _ in self.upstreams.values() if u.connected)
        if self.answered:
            return True, f"ready: {reached} of {found} extender replica(s) found with a stream open"
        return False, f"not ready: no extender replica has answered this relay yet ({found} found; see the log)"

    def _follow(self) -> None:
        """The agents' acks say what the replicas say; light heartbeats only if every one takes them."""
        if not self._agent_acks:
            return
        fields = pb.ReportAck()
        fields.CopyFrom(next(reversed(self._agent_acks.values())))
        fields.light_heartbeats = all(ack.light_heartbeats for ack in self._agent_acks.values())
        followed = fields.SerializeToString()
        if followed != self._followed:
            self._followed = followed
            self.service.follow_ack(fields)
            log.info(
                "agents' acks follow the extenders now: light heartbeats %s",
                "on" if fields.light_heartbeats else "off",
            )

    def _log_refusal(self, target: str, refusal: pb.RelayRefusal) -> None:
        if not self._should_log(refusal.node_name):
            return
        log.warning(
            "extender %s refused report %d of node %r: %s",
            target,
            refusal.sequence,
            refusal.node_name,
            refusal.reason,
            extra={"node": refusal.node_name, "peer": target},
        )

    async def close(self) -> None:
        tasks = [task for _, task in self.upstreams.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def serve(
    config: ExtenderConfig,
    settings: RelaySettings,
    dial: DialSettings,
    certificate: ServingCertificate | None,
    stop: asyncio.Event | None = None,
) -> int:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread (tests)
            loop.add_signal_handler(sig, stop.set)
    reviewer = await reviewer_for(config)
    authenticator: Authenticator | None = reviewer
    store = ForwardStore(config.idle_rule)
    metrics = IngestMetrics()
    # No inventory here: every node is taken; what is held is bounded by the agents connected.
    service = ingest_service(config, store, metrics, authenticator, None)
    relay = Relay(store, service, dial, metrics)
    server, port = await serve_ingest(
        service, config, certificate, authenticator is not None, max_message_bytes=MAX_AGENT_REPORT_BYTES
    )
    probes = None
    if settings.metrics_addr:
        try:
            probes = await start_probes(parse_host_port(settings.metrics_addr), metrics.registry, relay.readiness)
        except OSError:
            await server.stop(None)
            raise
    static = frozenset(str(parse_host_port(target)) for target in settings.extender)
    watch_task: asyncio.Task[None] | None = None
    relay.set_targets(static)
    if settings.extender_service:
        service_addr = parse_host_port(settings.extender_service, default_host="")
        watch = ServiceWatch(
            service_addr, settings.resolve_interval, lambda targets: relay.set_targets(targets | static), logger=log
        )
        watch_task = asyncio.create_task(watch.run(), name="resolve extenders")
    log.info(
        "relay listening for agents on port %d, forwarding to %s",
        port,
        ", ".join([*sorted(static), *([settings.extender_service] if settings.extender_service else [])]),
    )
    try:
        await stop.wait()
    finally:
        if watch_task is not None:
            watch_task.cancel()
        await server.stop(grace=1.0)
        await relay.close()
        if probes is not None:
            await probes.cleanup()
        if reviewer is not None:
            await reviewer.close()
    return 0
