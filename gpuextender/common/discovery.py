"""Finding every extender replica through its headless Service.

kube-scheduler may call any replica, so each one needs every node's data: the
agent (or a relay: extender/relay/) resolves the headless Service's name (one A/AAAA record per ready pod)
every `interval_s` and keeps one stream per address. The set logic is pure
(`targets_for`, `diff_targets`); `ServiceWatch` is the loop around it, with
the resolver injectable so tests can make a name resolve to several loopback
extenders. A failed resolution keeps the current set: a DNS hiccup must not
cut the streams to replicas that are still there.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass

from gpuextender.common.netaddr import AddressError, HostPort, parse_host_port

log = logging.getLogger("gpu_agent.discovery")

Resolver = Callable[[str, int], Awaitable[Iterable[str]]]

# How often a Service's name may be resolved again (--resolve-interval, the agent's and the relay's):
# often enough to follow a rollout, never a busy loop of DNS queries.
RESOLVE_INTERVAL_BOUNDS_S = (0.1, 3600.0)
DEFAULT_RESOLVE_INTERVAL_S = 15.0  # replicas come and go; each agent and relay asks this often


def resolve_interval_problem(seconds: float) -> str | None:
    """Why `seconds` is no --resolve-interval (NaN included), or None."""
    low, high = RESOLVE_INTERVAL_BOUNDS_S
    if low <= seconds <= high:
        return None
    return f"--resolve-interval {seconds} must be within {low:g}..{high:g} seconds"


def service_address(text: str) -> HostPort | str:
    """An --extender-service value (the agent's and the relay's) read: the headless Service's DNS name
    and gRPC port, else why it is none (one line that names the flag)."""
    try:
        service = parse_host_port(text, default_host="")
    except AddressError as exc:
        return f"--extender-service {exc}"
    if not service.host or service.port == 0:
        return (
            f"--extender-service {text!r}: expected the Service's DNS name and gRPC port, "
            "e.g. gpu-extender-agents.gpu-extender.svc:9090"
        )
    return service


@dataclass(frozen=True, slots=True)
class TargetChange:
    added: tuple[str, ...]
    removed: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)


def targets_for(addresses: Iterable[str], port: int) -> frozenset[str]:
    """Resolved IP addresses → gRPC dial targets (`10.0.0.5:9090`, `[fd00::5]:9090`)."""
    return frozenset(str(HostPort(address.split("%", 1)[0], port)) for address in addresses if address)


def diff_targets(current: Collection[str], wanted: Collection[str]) -> TargetChange:
    """Which streams to start and which to cancel, in a stable (sorted) order."""
    return TargetChange(tuple(sorted(set(wanted) - set(current))), tuple(sorted(set(current) - set(wanted))))


async def resolve_with_loop(host: str, port: int) -> list[str]:
    """The event loop's getaddrinfo (a thread): what a headless Service name resolves to now."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(sockaddr[0]) for *_, sockaddr in infos]


class ServiceWatch:
    def __init__(
        self,
        service: HostPort,
        interval_s: float,
        on_targets: Callable[[frozenset[str]], None],
        *,
        resolve: Resolver = resolve_with_loop,
        logger: logging.Logger = log,
    ) -> None:
        self.service = service
        self._interval_s = interval_s
        self._on_targets = on_targets
        self._resolve = resolve
        self._log = logger
        self.targets: frozenset[str] = frozenset()
        self.resolutions = 0  # successful ones

    async def run(self) -> None:
        failing = False
        while True:
            try:
                addresses = await self._resolve(self.service.host, self.service.port)
                targets = targets_for(addresses, self.service.port)
                if not targets:
                    raise OSError("no addresses")
            except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError
                if not failing:  # once per outage
                    self._log.warning(
                        "cannot resolve extender service %s (%s); keeping the %d stream(s) I have, retrying every %gs",
                        self.service,
                        exc,
                        len(self.targets),
                        self._interval_s,
                    )
                    failing = True
            else:
                if failing:
                    self._log.info("extender service %s resolves again", self.service)
                    failing = False
                self.resolutions += 1
                change = diff_targets(self.targets, targets)
                if change or self.resolutions == 1:
                    self._log.info(
                        "extender service %s: %d replica(s)%s%s",
                        self.service,
                        len(targets),
                        f", new: {', '.join(change.added)}" if change.added else "",
                        f", gone: {', '.join(change.removed)}" if change.removed else "",
                    )
                self.targets = targets
                self._on_targets(targets)
            await asyncio.sleep(self._interval_s)
