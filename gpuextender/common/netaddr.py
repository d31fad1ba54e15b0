"""Parsing of `host:port` listen and dial addresses given on the command line."""

from __future__ import annotations

from dataclasses import dataclass


class AddressError(ValueError):
    """An address flag that is not `host:port` with a port in 0..65535."""


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_host_port(text: str, *, default_host: str = "0.0.0.0") -> HostPort:
    """Parse `host:port`, `:port` (default host) or `[v6]:port`."""
    raw = text.strip()
    if raw.startswith("["):
        host, sep, rest = raw[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise AddressError(f"{text!r}: expected [IPv6]:PORT")
        port_text = rest[1:]
    else:
        host, sep, port_text = raw.rpartition(":")
        if not sep:
            raise AddressError(f"{text!r}: expected HOST:PORT (e.g. 0.0.0.0:8888)")
    try:
        port = int(port_text)
    except ValueError:
        raise AddressError(f"{text!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise AddressError(f"{text!r}: port {port} is outside 0..65535")
    return HostPort(host or default_host, port)


def bound_address(sockname: object) -> str:
    """A listening socket's address (`getsockname()`: (host, port) or (host, port, flow, scope)) as
    host:port, so the log shows the real port where `:0` was asked for."""
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        return str(HostPort(str(sockname[0]), int(sockname[1])))
    return str(sockname)
