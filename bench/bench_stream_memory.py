"""Benchmark: what one open agent stream costs a grpc.aio server in memory, per server variant (issue 36).

What it measures: a bare ack server (the StreamNodeReports shape: a bidirectional stream of raw
bytes, a 2-byte ack per report, no protobuf, no state) in its own process, started with a
variant's options / handler / process settings; N client connections (each a channel of its own
with grpc.use_local_subchannel_pool, as real agents: one HTTP/2 connection per agent, one stream
on it), opened from --client-processes separate processes, each stream having sent one ~2 KB
report and read its ack. The server's VmRSS (/proc/PID/status) before any client and after all
N streams are open and a settle; per stream = (after - before) / N. Every variant is run
--repeat times, the variants interleaved (A B C .. A B C ..), so the machine's drift falls on
all of them; the figures side by side, baseline first.

Variants (--variants, comma separated; the default is all):
  baseline       the extender's options (ingest/server.py grpc_options, not authenticating), the
                 method registered as the generated code registers it (add_registered_method_handlers),
                 an async-generator handler (`async for` + `yield`, as IngestService.StreamNodeReports)
  generic        baseline, the method as a generic handler only (add_generic_rpc_handlers)
  rw-handler     baseline, a coroutine handler that reads and writes via the context
                 (`await context.read()` / `await context.write()`) instead of an async generator
  gc-freeze      baseline, gc.freeze() once the server started (before the clients)
  read-chunk-2k  + grpc.experimental.tcp_read_chunk_size 2048 (default 8192)
  read-chunk-max4k  + grpc.experimental.tcp_max_read_chunk_size 4096 (reads never over 4 KiB)
  no-channelz    + grpc.enable_channelz 0 (the per-socket channelz node and its trace)
  write-buf-8k   + grpc.http2.write_buffer_size 8192
  lookahead-16k  + grpc.http2.lookahead_bytes 16384 (the stream's initial window; default 64 KiB)
  hpack-0        + grpc.http2.hpack_table_size.decoder 0 and .encoder 0
  max-streams-1  + grpc.max_concurrent_streams 1
  minimal-stack  + grpc.minimal_stack 1 (drops optional filters: NOT for the extender, it drops
                 the message size check: here to see what the filters cost)
  arena-2        baseline with MALLOC_ARENA_MAX=2 in the server's environment (glibc)
  tsi-frame-4k   + grpc.tsi.max_frame_size 4096 (the TLS frame protector's buffer; default 16 KiB; --tls only)
  exp-memopt     baseline with GRPC_EXPERIMENTS=memory_optimization_01,memory_optimization_02,free_large_allocator
                 (core experiments this grpcio carries; an environment switch, not an option)
  combo          no-channelz + hpack-0 + rw-handler together
Diagnostics (not in the default list): connect-only (the clients connect, open no stream: the
connection's share) and tracemalloc (the Python allocations' share, printed per stream).

--tls serves every variant with a self-signed certificate (the clients trust it), as agents
talk to an extender with --grpc-tls. --metadata-bytes sends an `authorization` header of that
size with each stream (a service-account token is ~1 KB), as authenticating agents do.

Run: `.venv/bin/python bench/bench_stream_memory.py [--streams N] [--repeat R] [--variants a,b] [--tls]`
The default N (2,000) keeps a shared 2-core machine usable; the per-stream figure is flat in N
(bench_fleet_scale's 1,000-10,000 rows: 57.4 / 57.2 / 56.8 KB per node for the extender).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ACK = b"\x08\x01"
BODY = bytes(2000)
SERVICE = "gpuextender.v1.GpuStateService"
METHOD = "StreamNodeReports"


@dataclass(frozen=True)
class Variant:
    extra_options: tuple[tuple[str, int], ...] = ()
    handler: str = "agen"  # "agen": async for + yield; "rw": context.read / context.write
    registered: bool = True  # as the generated code: add_registered_method_handlers
    gc_freeze: bool = False
    env: tuple[tuple[str, str], ...] = ()
    client: str = "stream"  # "stream": one stream, a report sent, its ack read; "connect": the connection only
    trace: bool = False  # tracemalloc on (diagnostic: the Python heap's share)


VARIANTS: dict[str, Variant] = {
    "baseline": Variant(),
    "generic": Variant(registered=False),
    "rw-handler": Variant(handler="rw"),
    "gc-freeze": Variant(gc_freeze=True),
    "read-chunk-2k": Variant(extra_options=(("grpc.experimental.tcp_read_chunk_size", 2048),)),
    "read-chunk-max4k": Variant(extra_options=(("grpc.experimental.tcp_max_read_chunk_size", 4096),)),
    "no-channelz": Variant(extra_options=(("grpc.enable_channelz", 0),)),
    "write-buf-8k": Variant(extra_options=(("grpc.http2.write_buffer_size", 8192),)),
    "lookahead-16k": Variant(extra_options=(("grpc.http2.lookahead_bytes", 16384),)),
    "hpack-0": Variant(
        extra_options=(("grpc.http2.hpack_table_size.decoder", 0), ("grpc.http2.hpack_table_size.encoder", 0))
    ),
    "max-streams-1": Variant(extra_options=(("grpc.max_concurrent_streams", 1),)),
    "minimal-stack": Variant(extra_options=(("grpc.minimal_stack", 1),)),
    "arena-2": Variant(env=(("MALLOC_ARENA_MAX", "2"),)),
    "tsi-frame-4k": Variant(extra_options=(("grpc.tsi.max_frame_size", 4096),)),
    "exp-memopt": Variant(
        env=(("GRPC_EXPERIMENTS", "memory_optimization_01,memory_optimization_02,free_large_allocator"),)
    ),
    "combo": Variant(
        extra_options=(
            ("grpc.enable_channelz", 0),
            ("grpc.http2.hpack_table_size.decoder", 0),
            ("grpc.http2.hpack_table_size.encoder", 0),
        ),
        handler="rw",
    ),
    # diagnostics, not candidates: --variants connect-only,tracemalloc
    "connect-only": Variant(client="connect"),
    "tracemalloc": Variant(trace=True),
}
DIAGNOSTICS = ("connect-only", "tracemalloc")


def base_options() -> list[tuple[str, int]]:
    """The extender's options today (not authenticating: no max_connection_age timer)."""
    from gpuextender.extender.flags import build_config
    from gpuextender.extender.ingest.server import grpc_options

    return grpc_options(build_config([], env={}), False)


def variant_options(variant: Variant) -> list[tuple[str, int]]:
    options = dict(base_options())
    options.update(dict(variant.extra_options))
    return list(options.items())


def rss_kib(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_in_use_kib() -> int:
    """Bytes glibc's malloc has handed out and not had back (mallinfo2: uordblks + hblkhd), KiB; -1 without glibc."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _Mallinfo2
    except (OSError, AttributeError):
        return -1
    info = libc.mallinfo2()
    return int((info.uordblks + info.hblkhd) // 1024)


def figures(opened: int | None = None) -> dict[str, int]:
    out = {"rss_kib": rss_kib(), "malloc_kib": malloc_in_use_kib()}
    out["python_kib"] = tracemalloc.get_traced_memory()[0] // 1024 if tracemalloc.is_tracing() else -1
    if opened is not None:
        out["opened"] = opened
    return out


# --- the server -------------------------------------------------------------------------------


async def serve(args: argparse.Namespace) -> None:
    variant = VARIANTS[args.variant]
    opened = 0
    if variant.trace:
        tracemalloc.start()

    async def agen_handler(requests: Any, context: Any) -> Any:
        nonlocal opened
        opened += 1
        async for _ in requests:
            yield ACK

    async def rw_handler(requests: Any, context: Any) -> None:
        nonlocal opened
        opened += 1
        while True:
            message = await context.read()
            if message is grpc.aio.EOF:
                return
            await context.write(ACK)

    handler = agen_handler if variant.handler == "agen" else rw_handler
    server = grpc.aio.server(options=variant_options(variant))
    handlers = {METHOD: grpc.stream_stream_rpc_method_handler(handler)}
    if variant.registered:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        server.add_registered_method_handlers(SERVICE, handlers)
    else:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    if args.tls:
        cert = Path(args.tls)
        credentials = grpc.ssl_server_credentials([((cert / "key.pem").read_bytes(), (cert / "cert.pem").read_bytes())])
        server.add_secure_port(f"127.0.0.1:{args.port}", credentials)
    else:
        server.add_insecure_port(f"127.0.0.1:{args.port}")
    await server.start()
    gc.collect()
    if variant.gc_freeze:
        gc.freeze()
    await asyncio.sleep(0.5)
    loop = asyncio.get_running_loop()
    print(json.dumps(figures()), flush=True)
    # Each line on stdin asks for the figures (what the server sees, its RSS); EOF ends it.
    while await loop.run_in_executor(None, sys.stdin.readline):
        print(json.dumps(figures(opened)), flush=True)
    await server.stop(None)


# --- the clients ------------------------------------------------------------------------------


async def clients(args: argparse.Namespace) -> None:
    options: list[tuple[str, Any]] = [("grpc.use_local_subchannel_pool", 1)]  # a connection per channel
    metadata = (("authorization", "Bearer " + "x" * args.metadata_bytes),) if args.metadata_bytes else None
    if args.tls:
        credentials = grpc.ssl_channel_credentials((Path(args.tls) / "cert.pem").read_bytes())
        options.append(("grpc.ssl_target_name_override", "localhost"))
        channels = [
            grpc.aio.secure_channel(f"127.0.0.1:{args.port}", credentials, options=options) for _ in range(args.streams)
        ]
    else:
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{args.port}", options=options) for _ in range(args.streams)]
    opening = asyncio.Semaphore(64)
    calls: list[Any] = []

    async def agent(channel: grpc.aio.Channel) -> None:
        async with opening:
            if args.connect_only:
                await channel.channel_ready()
                return
            call = channel.stream_stream(f"/{SERVICE}/{METHOD}")(metadata=metadata)
            for _ in range(args.reports):
                await call.write(BODY)
                if await call.read() != ACK:
                    raise RuntimeError("no ack")
            calls.append(call)

    await asyncio.gather(*(agent(c) for c in channels))
    print("open", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)  # held open until told (or killed)


# --- the driver -------------------------------------------------------------------------------


@dataclass
class Sample:
    variant: str
    repeat: int
    streams: int
    rss_before_kib: int
    rss_after_kib: int
    seconds_to_open: float
    malloc_delta_kib: int  # glibc malloc's bytes in use, after - before
    python_delta_kib: int  # tracemalloc's (the Python allocations), after - before; -1: not traced

    @property
    def kb_per_stream(self) -> float:  # KB = 1,000 bytes, as bench/RESULTS.md's figures
        return (self.rss_after_kib - self.rss_before_kib) * 1024 / self.streams / 1000


@dataclass
class Row:
    variant: str
    kb_per_stream: list[float] = field(default_factory=list)
    rss_after_mib: list[float] = field(default_factory=list)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _self_signed(directory: Path) -> None:
    """A throwaway certificate for localhost (the `cryptography` package, a grpcio dependency's)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def measure(name: str, repeat: int, args: argparse.Namespace, tls_dir: str | None) -> Sample:
    variant = VARIANTS[name]
    port = _free_port()
    common = [sys.executable, __file__, "--port", str(port), "--variant", name]
    if tls_dir:
        common += ["--tls", tls_dir]
    env = {**os.environ, **dict(variant.env)}
    server = subprocess.Popen(
        [*common, "--role", "server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert server.stdin is not None and server.stdout is not None
    procs: list[subprocess.Popen[str]] = []
    try:
        before = json.loads(server.stdout.readline())
        share = [
            args.streams // args.client_processes + (i < args.streams % args.client_processes)
            for i in range(args.client_processes)
        ]
        started = time.monotonic()
        for n in share:
            procs.append(
                subprocess.Popen(
                    [
                        *common,
                        "--role",
                        "client",
                        "--streams",
                        str(n),
                        "--metadata-bytes",
                        str(args.metadata_bytes),
                        "--reports",
                        str(args.reports),
                    ]
                    + (["--connect-only"] if variant.client == "connect" else []),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "open":
                raise RuntimeError(f"{name}: a client process could not open its streams")
        opened_s = time.monotonic() - started
        time.sleep(args.settle)
        server.stdin.write("\n")
        server.stdin.flush()
        after = json.loads(server.stdout.readline())
        if after["opened"] != (0 if variant.client == "connect" else args.streams):
            raise RuntimeError(f"{name}: the server saw {after['opened']} streams, not {args.streams}")
        return Sample(
            name,
            repeat,
            args.streams,
            before["rss_kib"],
            after["rss_kib"],
            opened_s,
            after["malloc_kib"] - before["malloc_kib"],
            after["python_kib"] - before["python_kib"] if before["python_kib"] >= 0 else -1,
        )
    finally:
        for proc in [*procs, server]:
            proc.kill()
            proc.wait()


def format_rows(rows: list[Row], args: argparse.Namespace) -> str:
    base = rows[0].kb_per_stream
    base_mean = sum(base) / len(base)
    repeats = " ".join(f"{'#' + str(i + 1):>7}" for i in range(args.repeat))
    lines = [
        f"bare grpc.aio ack server, {args.streams} streams (one connection each, {args.reports} ~2 KB report(s) + acks "
        f"sent), {'TLS' if args.tls is not None else 'plaintext'}, {args.metadata_bytes} B of metadata; "
        "KB (1,000 B) of server RSS per stream",
        f"{'variant':<17} {repeats} {'mean':>7} {'vs ' + rows[0].variant:>12} {'RSS MiB':>8} {'at 20,000':>10}",
    ]
    for r in rows:
        mean = sum(r.kb_per_stream) / len(r.kb_per_stream)
        each = " ".join(f"{v:>7.1f}" for v in r.kb_per_stream)
        lines.append(
            f"{r.variant:<17} {each} {mean:>7.1f} {100 * (mean / base_mean - 1):>+11.1f}% "
            f"{max(r.rss_after_mib):>8.1f} {mean * 20_000 / 1000:>7.0f} MB"
        )
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--streams", type=int, default=2000, help="open streams (= connections) per variant")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--variants", default=",".join(n for n in VARIANTS if n not in DIAGNOSTICS))
    p.add_argument("--client-processes", type=int, default=2)
    p.add_argument("--settle", type=float, default=2.0, help="seconds between the last stream open and the reading")
    p.add_argument("--tls", nargs="?", const="", default=None, help="serve TLS (a self-signed certificate)")
    p.add_argument("--metadata-bytes", type=int, default=0, help="an authorization header this long per stream")
    p.add_argument(
        "--reports",
        type=int,
        default=1,
        help="reports (each acked) per stream before the reading; more cycle ring buffers (TLS) to their steady state",
    )
    p.add_argument("--json", help="write the samples here")
    p.add_argument("--connect-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--role", choices=("server", "client"), help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # One connection per stream needs a descriptor each, in every process.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.streams * 2 + 256)), hard))
    if args.role == "server":
        asyncio.run(serve(args))
        return 0
    if args.role == "client":
        asyncio.run(clients(args))
        return 0
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants: {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    print(f"baseline options: {base_options()}", file=sys.stderr)
    rows = {n: Row(n) for n in names}
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory() as tmp:
        tls_dir = None
        if args.tls is not None:
            tls_dir = args.tls or tmp
            if not args.tls:
                _self_signed(Path(tmp))
        for repeat in range(args.repeat):
            for name in names:
                s = measure(name, repeat, args, tls_dir)
                samples.append(s)
                rows[name].kb_per_stream.append(s.kb_per_stream)
                rows[name].rss_after_mib.append(s.rss_after_kib / 1024)
                print(
                    f"  {name:<17} #{repeat + 1}: {s.kb_per_stream:6.1f} KB/stream "
                    f"({s.rss_before_kib / 1024:.1f} -> {s.rss_after_kib / 1024:.1f} MiB, "
                    f"opened in {s.seconds_to_open:.1f} s; "
                    f"malloc in use {s.malloc_delta_kib * 1.024 / s.streams:.1f} KB/stream"
                    + (f", Python {s.python_delta_kib * 1.024 / s.streams:.1f}" if s.python_delta_kib >= 0 else "")
                    + ")",
                    file=sys.stderr,
                    flush=True,
                )
    print(format_rows(list(rows.values()), args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{**asdict(s), "kb_per_stream": s.kb_per_stream} for s in samples], f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
