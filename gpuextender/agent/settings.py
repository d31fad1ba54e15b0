"""gpu-agent's configuration: built once from flags and environment, then passed down."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuextender.agent.rules.health import DEFAULT_IGNORED_XIDS, parse_xid_list
from gpuextender.agent.rules.idle_tracker import DEFAULT_THRESHOLD_PERCENT, DEFAULT_WINDOW_S
from gpuextender.agent.sources.gfd_labels import DEFAULT_PATH as DEFAULT_GFD_LABELS
from gpuextender.agent.sources.pod_resources import DEFAULT_SOCKET as DEFAULT_POD_RESOURCES
from gpuextender.common.cli import HelpFormatter, add_version
from gpuextender.common.dial import DialError, DialSettings, checked_dial_settings
from gpuextender.common.discovery import DEFAULT_RESOLVE_INTERVAL_S, resolve_interval_problem, service_address
from gpuextender.common.layered_config import SettingsError, epilog, parse_layered
from gpuextender.common.logs import FORMATS, LEVELS
from gpuextender.common.netaddr import AddressError, HostPort, parse_host_port

ENV_PREFIX = "GPU_AGENT_"
# Where the running agent answers --clear-xid; the shipped DaemonSet's too (an emptyDir at
# /tmp/gpu-agent, this directory made 0700 inside it), so `kubectl exec POD -- gpu-agent --clear-xid N`
# needs no flag.
DEFAULT_CONTROL_DIR = Path("/tmp/gpu-agent/control")
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class ConfigError(ValueError):
    """A flag or environment value is wrong; the message says which and why."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    node_name: str
    extenders: tuple[str, ...]
    interval_s: float
    heartbeat_s: float
    metrics_addr: HostPort
    fake_scenario: Path | None
    reconnect_initial_s: float
    reconnect_max_s: float
    log_level: str
    extender_service: HostPort | None = None
    resolve_interval_s: float = DEFAULT_RESOLVE_INTERVAL_S
    dial: DialSettings = DialSettings()
    # -- 0.2 health
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    health_events: bool = True  # run the NVML event thread (XIDs, DBE, ...)
    gpm: bool = True  # read NVML GPM (SM activity, ...) where the GPU supports it
    control_dir: Path = DEFAULT_CONTROL_DIR  # where --clear-xid requests are answered
    clear_xids: tuple[str, ...] = ()  # one-shot mode: ask the running agent to clear these GPUs, exit
    # -- 0.2 allocation and metrics
    pod_resources_socket: Path | None = Path(DEFAULT_POD_RESOURCES)  # None: do not ask the kubelet
    gfd_labels_file: Path | None = Path(DEFAULT_GFD_LABELS)  # None: read no GFD labels
    dcgm_names: bool = True
    idle_threshold_percent: float = DEFAULT_THRESHOLD_PERCENT
    idle_window_s: float = DEFAULT_WINDOW_S
    log_format: str = "text"
    # Settings that came from the environment or the config file (dest -> source), for the start-up log.
    sources: tuple[tuple[str, str], ...] = ()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-agent",
        description=(
            "Per-node GPU agent for kube-gpu-extender. Reads every GPU through NVML each "
            "interval, serves Prometheus metrics, and streams full node snapshots over gRPC "
            "to every gpu-extender replica: those given with --extender, and every address of the "
            "headless Service given with --extender-service."
        ),
        formatter_class=HelpFormatter,
        epilog=epilog(ENV_PREFIX, "--interval", "2") + " Besides, --node-name falls back to $NODE_NAME (the "
        "downward API's spec.nodeName) and --extender to $GPU_AGENT_EXTENDERS (the older name of $GPU_AGENT_EXTENDER).",
    )
    add_version(p)
    p.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="YAML file of settings: the long flags without '--' as keys (interval: 2, "
        "extender: [extender-0:9090]); flags and GPU_AGENT_* variables override it",
    )
    g = p.add_argument_group(
        "sampling and streaming", "which node this is, how often it samples, which extenders it streams to"
    )
    g.add_argument(
        "--node-name",
        help="Kubernetes Node name of this node (default: $NODE_NAME, set it from the downward API: spec.nodeName)",
    )
    g.add_argument(
        "--extender",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="gpu-extender gRPC address; repeat once per replica (default: comma-separated $GPU_AGENT_EXTENDER)",
    )
    g.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="NVML sample interval")
    g.add_argument(
        "--heartbeat",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="stream a report when something the extenders decide with changed (health, allocation, "
        "a GPU turning busy or idle under their idle rule, ...) and otherwise at most this long "
        "apart (never longer than a third of the extender's --stale-after, which its acks say), "
        "as a light heartbeat (the readings only) to an extender that takes them; "
        "/metrics keeps every sample. 0: stream every sample (also what happens while an "
        "extender older than 0.3 is streamed to)",
    )
    g.add_argument(
        "--metrics-addr",
        default="0.0.0.0:9402",
        metavar="HOST:PORT",
        help="where /metrics, /healthz and /readyz are served",
    )
    g.add_argument(
        "--fake",
        metavar="SCENARIO.yaml",
        type=Path,
        help="simulate GPUs from a scenario file instead of loading libnvidia-ml: a YAML mapping "
        "with a `gpus:` list, each GPU with its name, memory, utilization pattern over time and "
        "injected NVML errors (format: docs/scenarios.md; examples/demo/scenarios); edits to "
        "the file while the agent runs change the simulated GPUs",
    )
    g = p.add_argument_group("reconnects and discovery")
    g.add_argument(
        "--reconnect-initial-backoff",
        type=float,
        default=0.2,
        metavar="SECONDS",
        help="first delay before reopening a broken extender stream",
    )
    g.add_argument(
        "--reconnect-max-backoff",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="longest delay between attempts (doubling, with jitter, up to this)",
    )
    g.add_argument(
        "--extender-service",
        metavar="HOST:PORT",
        help="DNS name of the extenders' headless Service; one stream per address it resolves to, "
        "re-resolved every --resolve-interval (default: $GPU_AGENT_EXTENDER_SERVICE)",
    )
    g.add_argument(
        "--resolve-interval",
        type=float,
        default=DEFAULT_RESOLVE_INTERVAL_S,
        metavar="SECONDS",
        help="how often --extender-service is resolved again (replicas come and go)",
    )
    g = p.add_argument_group("security", "TLS to the extenders and the token sent with each stream")
    g.add_argument(
        "--tls-ca",
        type=Path,
        metavar="PATH",
        help="TLS to every extender, verifying its certificate against this CA (PEM); re-read on every reconnect",
    )
    g.add_argument(
        "--tls-cert",
        type=Path,
        metavar="PATH",
        help="client certificate for mTLS (PEM, with --tls-key); re-read on every reconnect",
    )
    g.add_argument("--tls-key", type=Path, metavar="PATH", help="private key of --tls-cert (PEM)")
    g.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="name expected in the extender's certificate (agents dial the pod IPs of the headless "
        "Service, so pass the Service's DNS name here)",
    )
    g.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help="projected ServiceAccount token sent as `authorization: Bearer` on each stream; "
        "re-read on every (re)connect (the kubelet rotates it)",
    )
    g = p.add_argument_group("health and NVML readings")
    g.add_argument(
        "--ignore-xids",
        default=",".join(map(str, sorted(DEFAULT_IGNORED_XIDS))),
        metavar="LIST",
        help="comma-separated XIDs that do not make a GPU unhealthy: the application errors NVIDIA's "
        "device plugin also ignores; an empty string ignores none",
    )
    g.add_argument(
        "--health-events",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="watch NVML events (critical XIDs, double-bit ECC, GPU unavailable, recovery actions) on a "
        "thread and report at once; without it no XID is seen, the per-sample health reads remain",
    )
    g.add_argument(
        "--gpm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read NVML's GPU Performance Monitoring each sample where the GPU supports it (Hopper "
        "and later): SM activity and occupancy, tensor and DRAM activity, reported to the extenders "
        "(for --idle-max-sm-active) and served as DCGM_FI_PROF_*; about 2 ms per GPU per sample "
        "on an H100 and an H200. --no-gpm if DCGM's profiling runs on the node and you want it alone on the counters",
    )
    g.add_argument(
        "--clear-xid",
        action="append",
        default=[],
        metavar="GPU",
        help="run in the agent's container (kubectl exec POD -- gpu-agent --clear-xid 3): ask the running "
        "agent to lift the quarantine of GPU (an index, a GPU-<uuid>, or 'all') that critical XIDs and "
        "other events put it in, print its answer and exit; repeatable. A quarantine lasts until "
        "cleared so, or until the agent restarts (kubectl delete pod): XIDs are only known since the "
        "agent started",
    )
    g.add_argument(
        "--control-dir",
        type=Path,
        default=DEFAULT_CONTROL_DIR,
        metavar="PATH",
        help="private directory (created 0700) where the running agent answers --clear-xid requests; "
        "both sides must use the same one (the shipped DaemonSet uses this default, so "
        "`kubectl exec POD -- gpu-agent --clear-xid N` needs no flag)",
    )
    g = p.add_argument_group("allocation", "which pod holds which GPU (the kubelet) and how GPUs are shared (GFD)")
    g.add_argument(
        "--pod-resources-socket",
        default=DEFAULT_POD_RESOURCES,
        metavar="PATH",
        help="the kubelet's PodResources socket: each sample asks it which containers hold which GPU "
        "(List) and which device IDs it hands out (GetAllocatableResources). Mount its directory, not "
        "the file (deploy/components/kubelet-allocation, on in the shipped deploy/). Unreadable: "
        "allocation is reported unknown, said once in the log. '' turns it off",
    )
    g.add_argument(
        "--gfd-labels-file",
        default=DEFAULT_GFD_LABELS,
        metavar="PATH",
        help="GPU Feature Discovery's labels file for node-feature-discovery (key=value lines); only "
        "nvidia.com/gpu.replicas, .sharing-strategy, .product and .count are read, again when it "
        "changes. Missing: no labels. '' turns it off",
    )
    g = p.add_argument_group("metrics")
    g.add_argument(
        "--dcgm-names",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also serve the GPU readings under NVIDIA dcgm-exporter's metric names and labels "
        "(DCGM_FI_DEV_GPU_UTIL{gpu,UUID,Hostname,pod,...}), so its dashboards and alerts work "
        "unchanged",
    )
    g.add_argument(
        "--idle-threshold",
        type=float,
        default=DEFAULT_THRESHOLD_PERCENT,
        metavar="PERCENT",
        help="for gpu_agent_pod_idle_gpus: a GPU is idle while its utilization is at or under this; "
        "unknown utilization is never idle",
    )
    g.add_argument(
        "--idle-window",
        type=float,
        default=DEFAULT_WINDOW_S,
        metavar="SECONDS",
        help="gpu_agent_pod_idle_gpus counts a pod's GPU once it has been idle this long while the pod "
        "held it (allocated but idle: the waste to hunt)",
    )
    g = p.add_argument_group("logs")
    g.add_argument("--log-level", default="info", choices=LEVELS)
    g.add_argument(
        "--log-format",
        default="text",
        choices=FORMATS,
        help="text: one line per event; json: one JSON object per line with the structured fields "
        "(node, peer, reason) as keys",
    )
    return p


def _clear_targets(values: Sequence[str]) -> tuple[str, ...]:
    targets: list[str] = []
    for value in values:
        value = value.strip()
        if not (value == "all" or value.isdigit() or (value.startswith("GPU-") and len(value) > 4)):
            raise ConfigError(f"--clear-xid {value!r}: expected a GPU index, a GPU-<uuid> or 'all'")
        targets.append(value)
    return tuple(dict.fromkeys(targets))


def _dial(args: argparse.Namespace) -> DialSettings:
    try:
        return checked_dial_settings(args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name, args.token_file)
    except DialError as exc:
        raise ConfigError(str(exc)) from None


def _extender_service(text: str) -> HostPort | None:
    if not text.strip():
        return None
    service = service_address(text)
    if isinstance(service, str):
        raise ConfigError(service)
    return service


def build_config(argv: Sequence[str] | None, env: Mapping[str, str]) -> AgentConfig:
    """Flags over GPU_AGENT_* variables over --config's file over defaults (common/layered_config.py)."""
    try:
        # --clear-xid is a one-shot command, not a setting: only the command line gives it.
        layered = parse_layered(
            build_parser, sys.argv[1:] if argv is None else argv, env, ENV_PREFIX, not_settings=("clear_xid",)
        )
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None
    args = layered.args
    clear_xids = _clear_targets(args.clear_xid)
    node_name = args.node_name or env.get("NODE_NAME", "")
    if not node_name and not clear_xids:  # the one-shot --clear-xid needs no node name
        raise ConfigError("no node name: pass --node-name or set NODE_NAME (downward API spec.nodeName)")
    if node_name and not _NODE_NAME.match(node_name):
        raise ConfigError(f"node name {node_name!r} is not a valid Kubernetes node name")
    try:
        ignored_xids = parse_xid_list(args.ignore_xids)
    except ValueError as exc:
        raise ConfigError(f"--ignore-xids: {exc}") from None
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
    if not 0 <= args.heartbeat <= 60:
        raise ConfigError(f"--heartbeat {args.heartbeat} must be within 0..60 seconds (0: every sample)")
    if not 0 < args.reconnect_initial_backoff <= args.reconnect_max_backoff:
        raise ConfigError("need 0 < --reconnect-initial-backoff <= --reconnect-max-backoff")
    try:
        metrics_addr = parse_host_port(args.metrics_addr)
    except AddressError as exc:
        raise ConfigError(f"--metrics-addr {exc}") from None
    service = _extender_service(args.extender_service or "")
    if (problem := resolve_interval_problem(args.resolve_interval)) is not None:
        raise ConfigError(problem)
    if not 0 <= args.idle_threshold <= 100:
        raise ConfigError(f"--idle-threshold {args.idle_threshold} must be within 0..100 percent")
    if not 0 <= args.idle_window <= 7 * 86400:
        raise ConfigError(f"--idle-window {args.idle_window} must be within 0..604800 seconds")
    return AgentConfig(
        node_name=node_name,
        extenders=tuple(dict.fromkeys(extenders)),
        interval_s=args.interval,
        heartbeat_s=args.heartbeat,
        metrics_addr=metrics_addr,
        fake_scenario=args.fake,
        reconnect_initial_s=args.reconnect_initial_backoff,
        reconnect_max_s=args.reconnect_max_backoff,
        log_level=args.log_level,
        extender_service=service,
        resolve_interval_s=args.resolve_interval,
        dial=_dial(args),
        ignored_xids=ignored_xids,
        health_events=args.health_events,
        gpm=args.gpm,
        control_dir=args.control_dir,
        clear_xids=clear_xids,
        pod_resources_socket=Path(args.pod_resources_socket) if args.pod_resources_socket.strip() else None,
        gfd_labels_file=Path(args.gfd_labels_file) if args.gfd_labels_file.strip() else None,
        dcgm_names=args.dcgm_names,
        idle_threshold_percent=args.idle_threshold,
        idle_window_s=args.idle_window,
        log_format=args.log_format,
        sources=tuple((d, src) for d, src in layered.sources.items() if src != "flag"),
    )
