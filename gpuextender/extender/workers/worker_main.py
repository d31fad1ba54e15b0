"""gpu-extender's ingest worker: the gRPC server agents stream to, off the scheduler's loop.

Why a process: on the loop that answers kube-scheduler, each agent report is several
callbacks (gRPC's completion, the stream's coroutine, its ack) queued ahead of any HTTP
request that arrives meanwhile. With 5,000 agents at their heartbeat (1,667 reports/s) a
5,000-name filter's p99 grew by 4-5 ms and a shortlisted prioritize's fourfold
(bench/bench_ingest.py); on a thread of its own it was worse (the two loops trade the
interpreter lock). Here the reports are received, paced, authenticated and validated
exactly as in one process (ingest.IngestService, acks included), and each accepted report
is summarized here (summary_store.py), with the functions and idle rule the extender would use, and
the summary sent to the extender (frame_loops.py), which stores it (supervisor.py): its loop sees one frame per ~50 ms
instead of callbacks per report, and stores a summary in ~20 us where parsing and summarizing
the report took ~95 us (bench/bench_apply.py).

Several workers (`--ingest-workers`) share the agents' port with SO_REUSEPORT, the kernel
spreading the connections across them; the extender holds the port (port_guard.py) and
restarts a worker that dies or goes silent (supervisor.py). Each has a share of the unknown-node
limit, so together they hold at most --max-unknown-nodes (plus one per worker, rounding up).

Started by gpu-extender as `--link-fd FD --worker I/N --port P -- ARGV`: one end of a
socketpair, which worker of how many, the port the extender holds, then its own argv (the
same flags: TLS, agent auth, limits); frames.py says what crosses the link. The extender's
end closing (it exited) stops this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Sequence

from gpuextender.common.program import run_program
from gpuextender.common.serving_tls import ServingCertificate, TlsLoadError, serving_certificate
from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.ingest.agent_identity import Authenticator
from gpuextender.extender.ingest.server import start_ingest_server
from gpuextender.extender.ingest.token_review import reviewer_for
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.settings import ExtenderConfig
from gpuextender.extender.workers import frames as frames
from gpuextender.extender.workers.frame_loops import read_frames, send_frames
from gpuextender.extender.workers.summary_store import SummaryStore
from gpuextender.extender.workers.worker_args import Worker, parse_worker_argv

log = logging.getLogger("gpu_extender.ingest")

# Below the extender's CPU priority: where the two compete for a core, the kernel runs the
# scheduler's call first (CFS weight 335 vs 1024, ~25 % of a contended core for ingest, which
# 5,000 agents at their heartbeat need about; uncontended, ingest runs at full speed).
NICE = 5


async def serve(
    config: ExtenderConfig, link: socket.socket, certificate: ServingCertificate | None, worker: Worker
) -> int:
    config = worker.config(config)
    reader, writer = await asyncio.open_unix_connection(sock=link)
    reviewer = await reviewer_for(config)
    authenticator: Authenticator | None = reviewer
    store = SummaryStore(config.idle_rule)
    metrics = IngestMetrics()
    known: set[str] = set()
    has_inventory = config.inventory is not None or config.kubernetes
    if has_inventory:  # the extender sends the inventory's node names first: no report waits on them
        first = await frames.read_frame(reader)
        if first is None or first[0] != frames.KNOWN:
            raise frames.FrameError("expected the inventory's node names first")
        known.update(frames.names(first[1]))
    server, port = await start_ingest_server(
        config, store, metrics, certificate, authenticator, known.__contains__ if has_inventory else None, True
    )
    writer.write(frames.frame(frames.READY, str(port).encode()))
    await writer.drain()
    send = asyncio.create_task(send_frames(store, writer, metrics), name="send")
    listen = asyncio.create_task(read_frames(reader, store, known), name="listen")
    code = 0
    try:
        # Until the extender's end closes. Should sending itself fail (a bug), exit: the
        # extender sees the link close and stops, rather than wait for reports that never come.
        await asyncio.wait({send, listen}, return_when=asyncio.FIRST_COMPLETED)
        if send.done() and not send.cancelled() and send.exception() is not None:
            if not isinstance(send.exception(), ConnectionError):
                log.error("sending reports to gpu-extender failed", exc_info=send.exception())
            code = 1
        if listen.done():
            listen.result()  # a broken frame from the extender raises FrameError here
    finally:
        for task in (send, listen):
            task.cancel()
        for task in (send, listen):
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, frames.FrameError):
                await task
        await server.stop(grace=1.0)
        if reviewer is not None:
            await reviewer.close()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parsed = parse_worker_argv(list(sys.argv[1:] if argv is None else argv))
    if parsed is None:
        print("gpu-extender ingest worker: started by gpu-extender, not by hand", file=sys.stderr)
        return 2
    link_fd, worker, argv = parsed
    link = socket.socket(fileno=link_fd)
    os.nice(NICE)

    def load() -> tuple[ExtenderConfig, ServingCertificate | None]:
        config = build_config(argv)
        return config, serving_certificate(config.tls)

    async def run(loaded: tuple[ExtenderConfig, ServingCertificate | None]) -> int:
        try:
            return await serve(loaded[0], link, loaded[1], worker)
        except frames.FrameError as exc:
            log.error("link to gpu-extender broken: %s", exc)
            return 1

    return run_program(
        "gpu-extender",
        load,
        run,
        refused=(ConfigError, TlsLoadError),
        log_settings=lambda loaded: (loaded[0].log_level, loaded[0].log_format),
        interrupted=0,  # Ctrl-C reaches the whole process group: the extender stops us
    )


if __name__ == "__main__":
    sys.exit(main())
