"""The extender holds the agents' port for its workers: a port taken is refused with the cause;
a held port takes listeners with SO_REUSEPORT (the workers) and refuses a second extender."""

from __future__ import annotations

import socket

import pytest

from gpuextender.extender.workers.port_guard import hold_port


def listener(port: int, reuseport: bool) -> socket.socket:
    sock = socket.socket()
    if reuseport:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_a_held_port_takes_workers_and_refuses_a_second_extender() -> None:
    guard = hold_port("127.0.0.1", 0)
    try:
        assert guard.port > 0
        workers = [listener(guard.port, reuseport=True) for _ in range(2)]
        with pytest.raises(OSError, match=rf"gRPC address 127.0.0.1:{guard.port} is not available"):
            hold_port("127.0.0.1", guard.port)
        for _ in range(20):  # the guard never listens: every connection reaches a worker
            socket.create_connection(("127.0.0.1", guard.port), timeout=5).close()
        for worker in workers:
            worker.close()
        with pytest.raises(OSError, match="is not available"):  # between two workers' lives: still ours
            hold_port("127.0.0.1", guard.port)
    finally:
        guard.close()
    hold_port("127.0.0.1", guard.port).close()  # given back


def test_a_port_another_program_listens_on_is_refused() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=rf"127.0.0.1:{port} is not available \(Address already in use\)"):
            hold_port("127.0.0.1", port)


def test_a_port_held_with_reuseport_by_another_program_is_refused() -> None:
    """SO_REUSEPORT would let us join its group: the plain bind first refuses it."""
    with listener(0, reuseport=True) as taken:
        with pytest.raises(OSError, match="is not available"):
            hold_port("127.0.0.1", taken.getsockname()[1])


def test_the_wildcard_is_held_dual_stack() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    guard = hold_port("::", 0)
    try:
        with pytest.raises(OSError, match="is not available"):
            hold_port("0.0.0.0", guard.port)
    finally:
        guard.close()
