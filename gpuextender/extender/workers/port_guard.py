"""Hold the agents' gRPC port for the ingest workers, and refuse one another program holds.

The workers (workers/worker_main.py) each listen on the same port with SO_REUSEPORT, and the kernel
spreads the agents' connections across them. SO_REUSEPORT would also let a second extender of
the same user join silently and take a share of the streams (issue 26), so the port is first
bound without it: taken by anything, that fails and the extender says so. Then a socket with
SO_REUSEPORT is bound and kept, never listening (the kernel hands connections only to listening
sockets): while the extender runs, a plain bind of the port fails, so a second extender is
refused, and a worker that restarts finds its port still ours. The window between the check
and the hold is a few system calls; two extenders started within it on one host could share.
"""

from __future__ import annotations

import socket
from typing import Any


class PortGuard:
    def __init__(self, sockets: list[socket.socket], port: int) -> None:
        self._sockets = sockets
        self.port = port  # the port bound: the one asked for, or the kernel's choice for 0

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets = []


def hold_port(host: str, port: int) -> PortGuard:
    """Bind every address `host` resolves to on `port` (0: one port the kernel picks for all);
    OSError naming the address when one is taken."""
    addresses = _addresses(host, port)
    plain: list[socket.socket] = []
    try:
        for family, address in addresses:
            sock = _socket(family, address, reuse=False)
            plain.append(sock)
            try:
                sock.bind((address[0], port, *address[2:]))
            except OSError as exc:
                raise OSError(f"gRPC address {_show(host, port)} is not available ({exc.strerror or exc})") from None
            port = sock.getsockname()[1]  # the kernel's choice for 0, then the same for every address
    finally:
        for sock in plain:
            sock.close()
    held: list[socket.socket] = []
    try:
        for family, address in addresses:
            sock = _socket(family, address, reuse=True)
            held.append(sock)
            sock.bind((address[0], port, *address[2:]))
    except OSError as exc:
        for sock in held:
            sock.close()
        raise OSError(f"gRPC address {_show(host, port)} is not available ({exc.strerror or exc})") from None
    return PortGuard(held, port)


def _addresses(host: str, port: int) -> list[tuple[int, tuple[Any, ...]]]:
    """(family, sockaddr) for each address grpc would listen on. The IPv6 wildcard is bound
    dual-stack, as grpc binds it, so it covers the IPv4 wildcard too."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    found: list[tuple[int, tuple[Any, ...]]] = [(family, tuple(address)) for family, _, _, _, address in infos]
    if any(f == socket.AF_INET6 and a[0] == "::" for f, a in found):
        found = [(f, a) for f, a in found if not (f == socket.AF_INET and a[0] == "0.0.0.0")]
    unique = list(dict.fromkeys(found))
    if not unique:
        raise OSError(f"gRPC address {_show(host, port)} resolves to no address")
    return unique


def _socket(family: int, address: tuple[Any, ...], reuse: bool) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    else:  # as grpc binds: the connections of an extender that just exited (TIME_WAIT) are no conflict
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if address[0] == "::" else 1)
    return sock


def _show(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
