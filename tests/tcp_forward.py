"""A loopback TCP forwarder: what a Kubernetes Service is to kube-scheduler in tests that restart
the extender. It listens only once it is started (before that the port refuses connections, as a
Service with no ready endpoint does) and pipes bytes both ways, TLS included, untouched.

`move_to` points it at another endpoint, as a Service does when its endpoints change: new
connections go there; with `close_established` (the default) the connections it already forwards
are cut too, so a kept-alive client (kube-scheduler's HTTP client) reconnects, to the new one."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import Counter
from collections.abc import Iterator


class Forwarder:
    def __init__(self, listen_port: int, target_port: int, host: str = "127.0.0.1") -> None:
        self._host = host
        self._target = (host, target_port)
        self._server = socket.create_server((host, listen_port))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.connections: Counter[int] = Counter()  # connections forwarded, per target port
        self.refused: Counter[int] = Counter()  # connections the target port refused
        accept = threading.Thread(target=self._accept, name="forwarder-accept", daemon=True)
        self._threads.append(accept)
        accept.start()

    @property
    def target_port(self) -> int:
        return self._target[1]

    @property
    def listen_port(self) -> int:
        return int(self._server.getsockname()[1])

    def move_to(self, target_port: int, *, close_established: bool = True) -> None:
        """New connections go to `target_port`; with `close_established`, every connection forwarded
        so far is cut (both ends shut down): an in-flight request fails, a kept-alive one reconnects."""
        with self._lock:
            self._target = (self._host, target_port)
            cut, self._sockets = (self._sockets, []) if close_established else ([], self._sockets)
        for s in cut:
            _shut(s)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                target = self._target
            try:
                upstream = socket.create_connection(target, timeout=5)
            except OSError:
                self.refused[target[1]] += 1
                client.close()
                continue
            with self._lock:
                moved = target != self._target  # moved while it connected: cut, as move_to would have
                if not moved:
                    self.connections[target[1]] += 1
                    self._sockets += [client, upstream]
            if moved:
                _shut(client)
                _shut(upstream)
                continue
            # A long run (bench/soak.py) opens connections for hours: what ended is let go.
            self._threads = [t for t in self._threads if t.is_alive()]
            ends = [2]  # pipes still running for this connection: the last one closes both sockets
            for a, b in ((client, upstream), (upstream, client)):
                t = threading.Thread(target=self._pipe, args=(a, b, ends, (client, upstream)), daemon=True)
                self._threads.append(t)
                t.start()

    def _pipe(
        self, src: socket.socket, dst: socket.socket, ends: list[int], pair: tuple[socket.socket, socket.socket]
    ) -> None:
        # (OSError from the first call too: a move or close can shut the sockets before this thread runs.)
        with contextlib.suppress(OSError):
            src.settimeout(None)
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with self._lock:
            ends[0] -= 1
            last = ends[0] == 0
            if last:
                self._sockets = [s for s in self._sockets if s not in pair]
        if last:  # both ways ended: the connection is over, its sockets closed (no file left open)
            for s in pair:
                _shut(s)

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        with self._lock:
            for s in self._sockets:
                _shut(s)
        for t in self._threads:
            t.join(timeout=2)


def _shut(s: socket.socket) -> None:
    """Shut down, then close: a thread blocked in recv() on it returns (close alone would not wake it)."""
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()


@contextlib.contextmanager
def forwarding(listen_port: int, target_port: int) -> Iterator[Forwarder]:
    forwarder = Forwarder(listen_port, target_port)
    try:
        yield forwarder
    finally:
        forwarder.close()
