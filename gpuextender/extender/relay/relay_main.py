"""`gpu-extender relay`: agents stream to it as to an extender; it forwards what it accepted to
every extender replica, many nodes per message (docs/relay.md).

Why: each agent connection costs an extender ~42 KB in plaintext and ~89 KB over TLS in gRPC
alone (bench/RESULTS.md), before any state of ours: ~1.1-1.8 GB at 20,000 agents, and each
replica pays it. Relays take the agents' connections (scaled out as a Deployment of their own);
a replica then holds one stream per relay and pays per node only for what it keeps of it.

The agent-facing side is the extender's own: the same flags (--grpc-addr, --tls-*, --agent-*,
the report limits), the same checks, pacing and acks (ingest/service.py over
forward_store.ForwardStore). The acks tell the agents what the replicas said in their last
answer (idle rule, stale_after, light heartbeats, which only when every replica takes them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from prometheus_client import Counter, Gauge, disable_created_metrics

from gpuextender.common.cli import HelpFormatter
from gpuextender.common.dial import DialError, DialSettings, checked_dial_settings
from gpuextender.common.discovery import ServiceWatch, resolve_interval_problem
from gpuextender.common.logs import configure_logging
from gpuextender.common.netaddr import AddressError, parse_host_port
from gpuextender.common.serving_tls import ServingCertificate, TlsLoadError, serving_certificate
from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.ingest.agent_identity import Authenticator
from gpuextender.extender.ingest.report_checks import MAX_REPORT_BYTES
from gpuextender.extender.ingest.server import ingest_service, serve_ingest
from gpuextender.extender.ingest.service import REPEAT_REFUSAL_S, IngestService, OncePer
from gpuextender.extender.ingest.token_review import reviewer_for
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.relay.forward_store import WRAP_BYTES, ForwardStore
from gpuextender.extender.relay.http_probes import start_probes
from gpuextender.extender.relay.upstream import Upstream
from gpuextender.extender.settings import ExtenderConfig
from gpuextender.v1 import gpu_state_pb2 as pb

log = logging.getLogger("gpu_extender.relay")

# An agent's report must fit a message to the extender with its wrapping (forward_store.Pending.take).
MAX_AGENT_REPORT_BYTES = MAX_REPORT_BYTES - WRAP_BYTES


class RelaySettings(argparse.Namespace):
    extender: list[str]
    extender_service: str | None
    resolve_interval: float
    metrics_addr: str
    extender_tls_ca: str | None
    extender_tls_cert: str | None
    extender_tls_key: str | None
    extender_tls_server_name: str | None
    extender_token_file: str | None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-extender relay",
        description="Serve agents' report streams in front of gpu-extender and forward what is accepted "
        "to every extender replica, many nodes per message: each replica holds one stream per relay "
        "instead of one per agent (docs/relay.md). Every other flag is gpu-extender's own for its "
        "agents' side (--grpc-addr, --tls-cert/--tls-key/--tls-ca, --agent-auth, "
        "--agent-service-account, --agent-token-audience, --agent-reauth-interval, --kubernetes, "
        "--max-clock-skew, --log-level, --log-format: `gpu-extender --help`).",
        formatter_class=HelpFormatter,
        allow_abbrev=False,  # an abbreviation here must not take one of gpu-extender's flags
    )
    g = p.add_argument_group("the extender replicas")
    g.add_argument(
        "--extender-service",
        metavar="HOST:PORT",
        help="DNS name of the extenders' headless Service and its gRPC port: one stream per address it "
        "resolves to, re-resolved every --resolve-interval",
    )
    g.add_argument(
        "--extender",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="an extender to forward to as given (repeatable; with or instead of --extender-service)",
    )
    g.add_argument(
        "--resolve-interval", type=float, default=15.0, metavar="SECONDS", help="see --extender-service (0.1..3600)"
    )
    g.add_argument("--extender-tls-ca", metavar="PATH", help="TLS to the extenders, verified against this CA")
    g.add_argument("--extender-tls-cert", metavar="PATH", help="client certificate for extenders that ask (mTLS)")
    g.add_argument("--extender-tls-key", metavar="PATH", help="its key")
    g.add_argument(
        "--extender-tls-server-name",
        metavar="NAME",
        help="name expected in the extenders' certificate (pod IPs are dialled: pass the Service's DNS name)",
    )
    g.add_argument(
        "--extender-token-file",
        metavar="PATH",
        help="the relay's projected ServiceAccount token, sent on each stream (extenders with --agent-auth "
        "tokenreview take relays of their --relay-service-account only); re-read on every reconnect",
    )
    p.add_argument(
        "--metrics-addr",
        default="0.0.0.0:9091",
        metavar="HOST:PORT",
        help="Prometheus /metrics (the gpu_extender_* ingest metrics of its agents' side, gpu_relay_*), /healthz "
        "and /readyz (ready once an extender replica has answered this relay); empty: none",
    )
    return p


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
        registry = metrics.registry
        self.connected = Gauge(
            "gpu_relay_extenders_connected", "Extender replicas with a relay stream open.", registry=registry
        )
        self.connected.set_function(lambda: sum(1 for u, _ in self.upstreams.values() if u.connected))
        # Against gpu_relay_extenders_connected: a replica found but not streamed to gets none of
        # this relay's agents' reports (the GPURelayExtendersUnreached alert).
        Gauge(
            "gpu_relay_extenders",
            "Extender replicas the relay found through --extender-service (it streams to each).",
            registry=registry,
        ).set_function(lambda: len(self.upstreams))
        Gauge("gpu_relay_nodes", "Nodes whose reports the relay holds.", registry=registry).set_function(
            lambda: len(store)
        )
        self.refused = Counter(
            "gpu_relay_refused_reports",
            "Reports the relay forwarded that an extender replica refused (the agent is told at its next heartbeat).",
            registry=registry,
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
                self.refused.inc()
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


def parse(argv: Sequence[str]) -> tuple[RelaySettings, ExtenderConfig, DialSettings]:
    """The relay's own flags, then gpu-extender's for the agents' side; ConfigError says what is wrong."""
    settings, rest = build_parser().parse_known_args(list(argv), namespace=RelaySettings())
    if not settings.extender and not settings.extender_service:
        raise ConfigError("relay: name the extenders: --extender-service HOST:PORT or --extender HOST:PORT")
    addresses = [("--extender", target) for target in settings.extender]
    if settings.metrics_addr:
        addresses.append(("--metrics-addr", settings.metrics_addr))
    for flag, value in addresses:
        try:
            parse_host_port(value)
        except AddressError as exc:
            raise ConfigError(f"{flag} {exc}") from None
    if settings.extender_service:
        try:
            service = parse_host_port(settings.extender_service, default_host="")
        except AddressError as exc:
            raise ConfigError(f"--extender-service {exc}") from None
        if not service.host or service.port == 0:
            raise ConfigError(
                f"--extender-service {settings.extender_service!r}: expected the Service's DNS name and gRPC "
                "port, e.g. gpu-extender-agents.gpu-extender.svc:9090"
            )
    if (problem := resolve_interval_problem(settings.resolve_interval)) is not None:
        raise ConfigError(problem)
    try:
        dial = checked_dial_settings(
            _path(settings.extender_tls_ca),
            _path(settings.extender_tls_cert),
            _path(settings.extender_tls_key),
            settings.extender_tls_server_name,
            _path(settings.extender_token_file),
            flag_prefix="--extender-",
        )
    except DialError as exc:
        raise ConfigError(str(exc)) from None
    return settings, build_config(rest), dial


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def main(argv: Sequence[str]) -> int:
    disable_created_metrics()
    try:
        settings, config, dial = parse(argv)
        certificate = serving_certificate(config.tls)
    except (ConfigError, TlsLoadError) as exc:
        print(f"gpu-extender relay: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level, config.log_format)
    try:
        return asyncio.run(serve(config, settings, dial, certificate))
    except OSError as exc:
        print(f"gpu-extender relay: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 2
