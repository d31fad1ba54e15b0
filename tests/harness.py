"""Test harness: the real gpu-extender and gpu-agent as processes on loopback,
plus HTTP and Prometheus helpers (exposition parsed back with prometheus_client)."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REQUESTS = FIXTURES / "extender-requests"


# Listening ports for the processes under test come from below Linux's ephemeral range (32768-
# 60999): a port the kernel handed out (bind to 0) can be taken again as the source port of some
# outgoing connection before the process under test binds it, and a run with thousands of gRPC
# connections (the benchmarks) does hit that.
_PORT_RANGE = (20000, 32767)
_ports = random.Random()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, outside the kernel's ephemeral range."""
    for _ in range(1000):
        port = _ports.randint(*_PORT_RANGE)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORT_RANGE} on 127.0.0.1")


def http(
    method: str, url: str, body: bytes | None = None, timeout: float = 5.0, ssl_context: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=ssl_context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post_json(url: str, body: bytes) -> tuple[int, Any]:
    status, raw = http("POST", url, body)
    return status, json.loads(raw)


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(url: str) -> Samples:
    status, raw = http("GET", url)
    assert status == 200, f"GET {url} -> {status}"
    return parse_metrics(raw.decode())


def metric(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


# How long a started process may take to listen: a bound on liveness, not speed (the suite runs in
# parallel on a busy machine; a process that exits is noticed at once, never after this).
STARTUP_S = 60.0
# How long a wait for something the code will do (a report in, a state out) may take: a bound on
# liveness too. CI ran one at 15 s into the ground beside a starting kube-apiserver.
WAIT_S = 45.0


def wait_until(what: str, check: Callable[[], Any], timeout: float = WAIT_S, interval: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` on timeout."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (OSError, AssertionError, KeyError) as exc:
            last_error = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error})")


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    ports: dict[str, int] = field(default_factory=dict)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.alive():
            self.popen.send_signal(sig)
        try:
            return self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait(timeout=5)


class Cluster:
    """Starts processes and guarantees they are all stopped afterwards."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[Proc] = []

    def spawn(self, name: str, module: str, args: list[str], ports: dict[str, int] | None = None) -> Proc:
        log_path = self.workdir / f"{name}-{len(self.procs)}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("NODE_NAME", None)
        with open(log_path, "wb") as log_file:
            popen = subprocess.Popen(
                [sys.executable, "-m", module, *args], stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=ROOT
            )
        proc = Proc(name, popen, log_path, ports or {})
        self.procs.append(proc)
        return proc

    def extender(
        self,
        *extra: str,
        http_port: int | None = None,
        grpc_port: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        wait_ready: bool = True,
    ) -> Proc:
        """With `ssl_context` (a client context trusting the extender's CA), readiness is checked over HTTPS.
        `wait_ready=False` returns once the process has started (for tests of /readyz itself).
        Tests that are not about readiness start with `--readiness-grace 0` unless they pass their own."""
        http_port = http_port or free_port()
        grpc_port = grpc_port or free_port()
        grace = [] if any(a.startswith("--readiness-grace") for a in extra) else ["--readiness-grace", "0"]
        proc = self.spawn(
            "extender",
            "gpuextender.extender",
            ["--http-addr", f"127.0.0.1:{http_port}", "--grpc-addr", f"127.0.0.1:{grpc_port}", *grace, *extra],
            {"http": http_port, "grpc": grpc_port},
        )
        scheme = "https" if ssl_context is not None else "http"
        wanted = (200,) if wait_ready else (200, 503)
        wait_until(
            f"extender /readyz ({proc.log_path})",
            lambda: _alive_and(
                proc,
                lambda: http("GET", f"{scheme}://127.0.0.1:{http_port}/readyz", ssl_context=ssl_context)[0] in wanted,
            ),
            STARTUP_S,
        )
        return proc

    def agent(self, node: str, scenario: Path, *extenders: Proc, extra: tuple[str, ...] = ()) -> Proc:
        metrics_port = free_port()
        args = ["--fake", str(scenario), "--node-name", node, "--metrics-addr", f"127.0.0.1:{metrics_port}"]
        for ext in extenders:
            args += ["--extender", f"127.0.0.1:{ext.ports['grpc']}"]
        proc = self.spawn(f"agent-{node}", "gpuextender.agent", [*args, *extra], {"metrics": metrics_port})
        wait_until(
            f"agent {node} /healthz ({proc.log_path})",
            lambda: _alive_and(proc, lambda: http("GET", f"http://127.0.0.1:{metrics_port}/healthz")[0] == 200),
        )
        return proc

    def print_log_tails(self, lines: int = 40) -> None:
        for proc in self.procs:
            tail = proc.log().splitlines()[-lines:]
            print(f"--- last {len(tail)} lines of {proc.log_path.name} ---", *tail, sep="\n")

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.stop()


def _alive_and(proc: Proc, check: Callable[[], bool]) -> bool:
    if not proc.alive():
        raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()}")
    return check()


@contextmanager
def cluster(workdir: Path) -> Iterator[Cluster]:
    c = Cluster(workdir)
    try:
        yield c
    except BaseException:
        c.print_log_tails()  # pytest shows a failed test's stdout: each process's say on what went wrong
        raise
    finally:
        c.stop_all()


def url(proc: Proc, path: str) -> str:
    port = proc.ports["http"] if "http" in proc.ports else proc.ports["metrics"]
    return f"http://127.0.0.1:{port}{path}"


def https_url(proc: Proc, path: str) -> str:
    return f"https://127.0.0.1:{proc.ports['http']}{path}"


def fixture_bytes(name: str) -> bytes:
    return (REQUESTS / name).read_bytes()


def request_for(node_names: list[str], gpus: int = 2) -> bytes:
    """A names-mode ExtenderArgs: the captured Pod, with its GPU request set to `gpus`."""
    args = json.loads(fixture_bytes("filter-request-nodecache-true.json"))
    for container in args["Pod"]["spec"]["containers"]:
        for key in ("requests", "limits"):
            container["resources"][key]["nvidia.com/gpu"] = str(gpus)
    args["NodeNames"] = node_names
    return json.dumps(args).encode()


# -- TLS material for tests (trustme CAs; files replaced atomically, as the kubelet does) ------------


def write_pem(path: Path, data: bytes) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # a new inode: what a Secret volume update looks like
    return path


def write_leaf(directory: Path, ca: Any, name: str, *identities: str) -> tuple[Path, Path]:
    """A certificate for `identities` signed by the trustme `ca`: (name.crt, name.key)."""
    leaf = ca.issue_cert(*(identities or (name,)))
    cert = write_pem(directory / f"{name}.crt", b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    key = write_pem(directory / f"{name}.key", leaf.private_key_pem.bytes())
    return cert, key


def write_ca(directory: Path, ca: Any, name: str) -> Path:
    return write_pem(directory / f"{name}.pem", ca.cert_pem.bytes())


def client_ssl_context(ca: Any) -> ssl.SSLContext:
    """A client context that trusts only the trustme `ca` (no system CAs), verifying names."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname and CERT_REQUIRED by default
    ca.configure_trust(context)
    return context
