"""`gpu-extender relay`'s flags: its own (the extender replicas it forwards to, its /metrics), read
into RelaySettings and DialSettings, then gpu-extender's for its agents' side (flags.py)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from gpuextender.common.cli import HelpFormatter
from gpuextender.common.dial import DialError, DialSettings, checked_dial_settings
from gpuextender.common.discovery import DEFAULT_RESOLVE_INTERVAL_S, resolve_interval_problem, service_address
from gpuextender.common.netaddr import AddressError, parse_host_port
from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.settings import ExtenderConfig


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
        "--resolve-interval",
        type=float,
        default=DEFAULT_RESOLVE_INTERVAL_S,
        metavar="SECONDS",
        help="see --extender-service (0.1..3600)",
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
    if settings.extender_service and isinstance(service := service_address(settings.extender_service), str):
        raise ConfigError(service)
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
