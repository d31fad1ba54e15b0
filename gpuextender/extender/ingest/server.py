"""The gRPC server agents stream to: its options, and starting it with the ingest service
configured from the extender's flags.

Used by the extender itself (--ingest-in-process) and by its ingest process (workers/worker_main.py).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from gpuextender.common.serving_tls import ServingCertificate
from gpuextender.extender.ingest.agent_identity import Authenticator, RelayReviewing
from gpuextender.extender.ingest.limits import MAX_REPORT_BYTES
from gpuextender.extender.ingest.service import (
    REAUTH_GRACE_S,
    AgentTerms,
    Gate,
    IngestLimits,
    IngestService,
    ReportStore,
    add_to_server,
)
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.settings import ExtenderConfig


def grpc_options(
    config: ExtenderConfig, authenticating: bool, shared_port: bool = False, max_message_bytes: int = MAX_REPORT_BYTES
) -> list[tuple[str, int]]:
    """`shared_port`: one of several ingest workers on the port the extender holds (port_guard.py).
    `max_message_bytes`: a relay takes reports it can forward whole (relay/forward_store.py)."""
    options: list[tuple[str, int]] = [
        # Agents ping every 20 s to notice dead peers; allow it even between reports.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        # Far above a real report (~2 KB for 8 GPUs), below what one client may make us parse
        # and hold (ingest/limits.py's MAX_REPORT_BYTES says what fits).
        ("grpc.max_receive_message_length", max_message_bytes),
        # Keep each stream's HTTP/2 window at its initial 64 KiB: with BDP probing it grows
        # until a client that writes without waiting for acks had ~270 MB buffered here while
        # the ingest paced it (limits.ReportPacer). Agents send ~2 KB a second.
        ("grpc.http2.bdp_probe", 0),
        # grpc sets SO_REUSEPORT by default: a second extender on the same --grpc-addr would start
        # without a word and take a share of the agents' streams. Off: it fails to bind, and says
        # so. The ingest workers share the port on purpose; the extender's PortGuard refuses others.
        ("grpc.so_reuseport", 1 if shared_port else 0),
    ]
    if authenticating:  # re-authenticate every agent now and then (service.py)
        age_s = config.agent_auth.reauth_after_s
        options += [
            ("grpc.max_connection_age_ms", int(age_s * 1000)),
            ("grpc.max_connection_age_grace_ms", int(min(REAUTH_GRACE_S, age_s) * 1000)),
        ]
    return options


async def start_ingest_server(
    config: ExtenderConfig,
    store: ReportStore,
    metrics: IngestMetrics,
    certificate: ServingCertificate | None,
    authenticator: Authenticator | None,
    known_node: Callable[[str], bool] | None,
    shared_port: bool = False,
) -> tuple[grpc.aio.Server, int]:
    """A started server on --grpc-addr and the port it bound (the real one for `:0`), its reports
    stored into `store`; OSError when the address cannot be bound. `known_node`: is the node in
    the inventory (None: no inventory source). `shared_port`: see grpc_options."""
    service = ingest_service(config, store, metrics, authenticator, known_node)
    return await serve_ingest(service, config, certificate, authenticator is not None, shared_port)


def ingest_service(
    config: ExtenderConfig,
    store: ReportStore,
    metrics: IngestMetrics,
    authenticator: Authenticator | None,
    known_node: Callable[[str], bool] | None,
) -> IngestService:
    """The service as --grpc-addr's flags say; relays' tokens are reviewed like the agents' where
    --relay-service-account names their account."""
    relay_account = config.agent_auth.relay_service_account
    relay_authenticator = (
        authenticator.for_relays(relay_account)
        if relay_account is not None and isinstance(authenticator, RelayReviewing)
        else None
    )
    return IngestService(
        store,
        metrics,
        terms=AgentTerms(config.requested_agent_interval_ms, config.api.policy.stale_after_s),
        gate=Gate(authenticator, relay_authenticator),
        limits=IngestLimits(config.max_clock_skew_s, known_node, config.max_unknown_nodes),
    )


async def serve_ingest(
    service: IngestService,
    config: ExtenderConfig,
    certificate: ServingCertificate | None,
    authenticating: bool,
    shared_port: bool = False,
    max_message_bytes: int = MAX_REPORT_BYTES,
) -> tuple[grpc.aio.Server, int]:
    """`service` started on --grpc-addr; the server and the port it bound (see start_ingest_server)."""
    server = grpc.aio.server(options=grpc_options(config, authenticating, shared_port, max_message_bytes))
    add_to_server(service, server)
    target = str(config.grpc_addr)
    try:
        if certificate is not None:
            bound = server.add_secure_port(target, certificate.grpc_credentials())
        else:
            bound = server.add_insecure_port(target)
    except RuntimeError:  # grpcio raises instead of returning 0 for a port in use
        bound = 0
    if bound == 0:
        raise OSError(f"gRPC address {target} is not available")
    await server.start()
    return server, bound
