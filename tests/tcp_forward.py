"""A loopback TCP forwarder: what a Kubernetes Service is to kube-scheduler in tests that restart
the extender. It listens only once it is started (before that the port refuses connections, as a
Service with no ready endpoint does) and pipes bytes both ways, TLS included, untouched."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


class Forwarder:
    def __init__(self, listen_port: int, target_port: int, host: str = "127.0.0.1") -> None:
        self._target = (host, target_port)
        self._server = socket.create_server((host, listen_port))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        accept = threading.Thread(target=self._accept, name="forwarder-accept", daemon=True)
        self._threads.append(accept)
        accept.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                t = threading.Thread(target=self._pipe, args=(a, b), daemon=True)
                self._threads.append(t)
                t.start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(None)
        with contextlib.suppress(OSError):
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.close()
        for t in self._threads:
            t.join(timeout=2)


@contextlib.contextmanager
def forwarding(listen_port: int, target_port: int) -> Iterator[Forwarder]:
    forwarder = Forwarder(listen_port, target_port)
    try:
        yield forwarder
    finally:
        forwarder.close()
