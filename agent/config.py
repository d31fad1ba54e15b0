"""gpu-agent's configuration: built once from flags and environment, then passed down."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuextender.cli import HelpFormatter
from gpuextender.logs import LEVELS
from gpuextender.netaddr import AddressError, HostPort, parse_host_port

_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class ConfigError(ValueError):
    """A flag or environment value is wrong; the message says which and why."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    node_name: str
    extenders: tuple[str, ...]
    interval_s: float
    metrics_addr: HostPort
    fake_scenario: Path | None
    reconnect_initial_s: float
    reconnect_max_s: float
    log_level: str


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-agent",
        description=(
            "Per-node GPU agent for kube-gpu-extender. Reads every GPU through NVML each "
            "interval, serves Prometheus metrics, and streams full node snapshots over gRPC "
            "to every gpu-extender replica given with --extender."
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument("--node-name", help="Kubernetes Node name of this node (default: $NODE_NAME, "
                   "set it from the downward API: spec.nodeName)")  # fmt: skip
    p.add_argument("--extender", action="append", default=[], metavar="HOST:PORT",
                   help="gpu-extender gRPC address; repeat once per replica "
                   "(default: comma-separated $GPU_AGENT_EXTENDERS)")  # fmt: skip
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="NVML sample interval")
    p.add_argument("--metrics-addr", default="0.0.0.0:9402", metavar="HOST:PORT",
                   help="where /metrics and /healthz are served")  # fmt: skip
    p.add_argument("--fake", metavar="SCENARIO.yaml", type=Path,
                   help="simulate GPUs from a scenario file instead of loading libnvidia-ml "
                   "(see agent/fake_scenario.py for the format)")  # fmt: skip
    p.add_argument("--reconnect-initial-backoff", type=float, default=0.2, metavar="SECONDS",
                   help="first delay before reopening a broken extender stream")  # fmt: skip
    p.add_argument("--reconnect-max-backoff", type=float, default=5.0, metavar="SECONDS",
                   help="longest delay between attempts (doubling, with jitter, up to this)")  # fmt: skip
    p.add_argument("--log-level", default="info", choices=LEVELS)
    return p


def build_config(argv: Sequence[str] | None, env: Mapping[str, str]) -> AgentConfig:
    args = build_parser().parse_args(argv)
    node_name = args.node_name or env.get("NODE_NAME", "")
    if not node_name:
        raise ConfigError("no node name: pass --node-name or set NODE_NAME (downward API spec.nodeName)")
    if not _NODE_NAME.match(node_name):
        raise ConfigError(f"node name {node_name!r} is not a valid Kubernetes node name")
    extenders = list(args.extender)
    if not extenders and env.get("GPU_AGENT_EXTENDERS"):
        extenders = [e.strip() for e in env["GPU_AGENT_EXTENDERS"].split(",") if e.strip()]
    for target in extenders:
        try:
            parse_host_port(target)
        except AddressError as exc:
            raise ConfigError(f"--extender {exc}") from None
    if not 0.05 <= args.interval <= 60:
        raise ConfigError(f"--interval {args.interval} must be within 0.05..60 seconds")
    if not 0 < args.reconnect_initial_backoff <= args.reconnect_max_backoff:
        raise ConfigError("need 0 < --reconnect-initial-backoff <= --reconnect-max-backoff")
    try:
        metrics_addr = parse_host_port(args.metrics_addr)
    except AddressError as exc:
        raise ConfigError(f"--metrics-addr {exc}") from None
    return AgentConfig(
        node_name=node_name,
        extenders=tuple(dict.fromkeys(extenders)),
        interval_s=args.interval,
        metrics_addr=metrics_addr,
        fake_scenario=args.fake,
        reconnect_initial_s=args.reconnect_initial_backoff,
        reconnect_max_s=args.reconnect_max_backoff,
        log_level=args.log_level,
    )
