"""gpu-extender's ingest worker: the gRPC server agents stream to, off the scheduler's loop.

Why a process: on the loop that answers kube-scheduler, each agent report is several
callbacks (gRPC's completion, the stream's coroutine, its ack) queued ahead of any HTTP
request that arrives meanwhile. With 5,000 agents at their heartbeat (1,667 reports/s) a
5,000-name filter's p99 grew by 4-5 ms and a shortlisted prioritize's fourfold
(bench/bench_ingest.py); on a thread of its own it was worse (the two loops trade the
interpreter lock). Here the reports are received, paced, authenticated and validated
exactly as in one process (ingest.IngestService, acks included), and each accepted report
is summarized here, with the functions and idle rule the extender would use, and the summary
relayed to the extender, which stores it (ingest_workers.py): its loop sees one frame per ~50 ms
instead of callbacks per report, and stores a summary in ~20 us where parsing and summarizing
the report took ~95 us (bench/bench_apply.py).

Several workers (`--ingest-workers`) share the agents' port with SO_REUSEPORT, the kernel
spreading the connections across them; the extender holds the port (port_guard.py) and
restarts a worker that dies or goes silent (ingest_workers.py). Each has a share of the unknown-node
limit, so together they hold at most --max-unknown-nodes (plus one per worker, rounding up).

Started by gpu-extender as `--link-fd FD --worker I/N --port P -- ARGV`: one end of a
socketpair, which worker of how many, the port the extender holds, then its own argv (the
same flags: TLS, agent auth, limits); frames.py says what crosses the link. The extender's
end closing (it exited) stops this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import NamedTuple

from prometheus_client import disable_created_metrics, generate_latest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.common.logs import configure_logging
from gpuextender.common.serving_tls import ServingCertificate, TlsLoadError, serving_certificate
from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.ingest import frames as frames
from gpuextender.extender.ingest.agent_identity import Authenticator
from gpuextender.extender.ingest.server import start_ingest_server
from gpuextender.extender.ingest.worker_args import Worker, parse_worker_argv
from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.settings import ExtenderConfig
from gpuextender.extender.state.facts_reader import POOL_SIZE, FactsReader
from gpuextender.extender.state.gpu_summary import summarize
from gpuextender.extender.state.summary_codec import Base, encode_facts, encode_readings, encode_summary
from gpuextender.extender.state.summary_refresh import (
    Heartbeat,
    RefreshBase,
    as_heartbeat,
    refresh_base,
    refreshed_readings,
    shape_key,
)
from gpuextender.v1 import gpu_state_pb2 as pb

log = logging.getLogger("gpu_extender.ingest")

# Below the extender's CPU priority: where the two compete for a core, the kernel runs the
# scheduler's call first (CFS weight 335 vs 1024, ~25 % of a contended core for ingest, which
# 5,000 agents at their heartbeat need about; uncontended, ingest runs at full speed).
NICE = 5
# A report waits at most this long before it is relayed: at 5,000 gated agents over 8 workers
# (~210 reports/s each) a frame then holds ~10 reports where it held 2 at 10 ms, and the main
# process's cost per report halved (bench/RESULTS.md); 50 ms is nothing to a 1 s sample.
FLUSH_S = 0.05
FLUSH_BYTES = 1024 * 1024  # or goes at once with the batch that reaches this size
BEAT_S = 1.0  # a BEAT frame when nothing else was sent for this long


class _Held(NamedTuple):
    """A node's last full report summarized here, as what comes next is checked against it."""

    base: Base  # (sequence, received_at): what the extender's readings entries name
    readings_base: RefreshBase  # a heartbeat's readings are checked against it
    # summary_refresh.shape_key: a full report of the same shape is relayed as readings (None: the
    # next full report of the node is summarized, the first of a stream).
    key: int | None
    # The newest full report taken on it (this one, or a later one of the same shape): what a light
    # heartbeat of the node repeats (NodeReport.heartbeat_of).
    last_full: int


class RelayStore:
    """The ReportStore of this process: each accepted report is summarized here, with the idle
    rule and functions the extender would use (its process then only stores the summary), and
    waits for the next frame to the extender, the newest per node only (a full snapshot
    supersedes the one before, so a slow extender costs at most one report per node here, never
    a backlog; a light heartbeat's readings supersede the readings before them, and wait behind
    the full report they apply to where that is not sent yet). A full report that changes only
    readings since the node's last one summarized here on the same stream (its
    summary_refresh.shape_key is that one's: an agent before 0.6 at its heartbeat) is relayed as
    the readings it changes, as its light heartbeat would be (73-121 us a report from its bytes,
    where one checked whole and summarized takes 218-334: bench/bench_apply.py), unless they turn a
    GPU busy or idle. It keeps which nodes have data (the unknown-node
    limit counts them), as the extender does."""

    def __init__(self, rule: IdleRule) -> None:
        self.rule = rule
        self._facts = FactsReader()
        self._encoded_facts: dict[tuple[GpuFacts, ...], bytes] = {}
        self._held: set[str] = set()
        # Per node, its last full report summarized, as a heartbeat reads it (_Held).
        self._bases: dict[str, _Held] = {}
        # Per node, what waits for the next frame: its full report's entry (b"": sent already) and
        # the newest heartbeat's readings after it (b"": none).
        self._batch: dict[str, tuple[bytes, bytes]] = {}
        self._size = 0
        self.full = asyncio.Event()  # set: send now (a full batch, or the extender asked for metrics)
        self.pending = asyncio.Event()  # set: something to send (a report, or the metrics asked for)
        self.metrics_asked = False
        self._keyed: tuple[pb.NodeReport, int] | None = None  # the report known_shape keyed last

    def has_data(self, node: str) -> bool:
        return node in self._held

    def known_shape(self, report: pb.NodeReport) -> bool:
        keyed = self._keyed = (report, shape_key(report))  # kept for its `ingest`, next
        held = self._bases.get(report.node_name)
        return held is not None and held.key == keyed[1]

    def ingest(self, report: pb.NodeReport, received_at: float) -> bool:
        node = report.node_name
        held = self._bases.get(node)
        keyed, self._keyed = self._keyed, None
        key = keyed[1] if keyed is not None and keyed[0] is report else shape_key(report)
        if (
            held is not None
            and held.key == key
            and self._relay_readings(node, held, as_heartbeat(report), received_at) is None
        ):
            # Only readings changed (an agent before 0.6 at its heartbeat): taken as a light one.
            self._bases[node] = held._replace(last_full=report.sequence)
            return True
        facts = self._facts.read(report)
        encoded = self._encoded_facts.get(facts)
        if encoded is None:
            if len(self._encoded_facts) >= POOL_SIZE:
                self._encoded_facts.clear()
            encoded = self._encoded_facts[facts] = encode_facts(facts)
        summary = summarize(report, self.rule, received_at)
        base = (summary.sequence, summary.received_at)
        readings_base = refresh_base(summary.gpus, summary.sm_active, summary.node_error, facts, self.rule)
        self._bases[node] = _Held(base, readings_base, key, report.sequence)
        self._queue(node, frames.summary_entry(encode_summary(summary), encoded), b"")
        return True

    def refresh(self, heartbeat: pb.NodeReport, received_at: float) -> str | None:
        """A light heartbeat: the readings it changes in the summary of the full report it repeats
        (state/summary_refresh.py), relayed as frames.READINGS; else why not."""
        node = heartbeat.node_name
        held = self._bases.get(node)
        if held is None or held.last_full != heartbeat.heartbeat_of:
            return f"report {heartbeat.heartbeat_of} of node {node} is not held here: send a full report"
        return self._relay_readings(node, held, heartbeat, received_at)

    def stream_opened(self, node: str) -> None:
        held = self._bases.get(node)
        if held is not None:  # (a stream that moved here and back finds what it left long ago)
            self._bases[node] = held._replace(key=None)

    def stream_closed(self, node: str) -> None:
        pass  # what the node's stream left is kept: its next stream starts with a full report

    def _relay_readings(self, node: str, held: _Held, heartbeat: Heartbeat, received_at: float) -> str | None:
        """The readings `heartbeat` changes in the summary held, queued as frames.READINGS; else why
        not (a GPU turns busy or idle)."""
        changes = refreshed_readings(held.readings_base, heartbeat, self.rule, received_at)
        if isinstance(changes, str):
            return changes
        waiting = self._batch.get(node)
        entry = frames.readings_entry(encode_readings(node, held.base, changes))
        self._queue(node, waiting[0] if waiting else b"", entry)
        return None

    def _queue(self, node: str, full: bytes, readings: bytes) -> None:
        replaced = self._batch.pop(node, None)  # re-inserted last: frames keep arrival order
        self._size += len(full) + len(readings) - (len(replaced[0]) + len(replaced[1]) if replaced else 0)
        self._batch[node] = (full, readings)
        self._held.add(node)
        self.pending.set()
        if self._size >= FLUSH_BYTES:
            self.full.set()

    def forget(self, nodes: Sequence[str]) -> None:
        for node in nodes:
            self._held.discard(node)
            self._bases.pop(node, None)
            self._facts.forget(node)

    def take(self) -> bytes:
        batch, self._batch, self._size = self._batch, {}, 0
        self.full.clear()
        self.pending.clear()
        return b"".join(itertools.chain.from_iterable(batch.values()))  # each node's full report, then readings


async def _relay(store: RelayStore, writer: asyncio.StreamWriter, metrics: IngestMetrics) -> None:
    """Send the queued reports FLUSH_S after the first of them arrived (at once when a batch is
    full), the metrics when the extender asks (after the reports queued before: its scrape counts
    what it has stored), and a BEAT when nothing else went for BEAT_S. Idle, it wakes once per
    BEAT_S, not every FLUSH_S (5,000 open, quiet streams cost 5 % of a core in wake-ups before)."""
    # asyncio.timeout, not wait_for: no task per wait (two waits per frame, ~20 frames a second).
    while True:
        try:
            async with asyncio.timeout(BEAT_S):
                await store.pending.wait()
        except TimeoutError:
            writer.write(frames.frame(frames.BEAT))
            await writer.drain()
            continue
        if not store.full.is_set():  # let FLUSH_S of reports gather into one frame
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_S):
                    await store.full.wait()
        batch = store.take()
        if batch:
            writer.write(frames.frame(frames.SUMMARIES, batch))
        if store.metrics_asked:
            store.metrics_asked = False
            writer.write(frames.frame(frames.METRICS, generate_latest(metrics.registry)))
        await writer.drain()


async def _listen(reader: asyncio.StreamReader, store: RelayStore, known: set[str]) -> None:
    """The extender's frames, until it goes away."""
    while True:
        got = await frames.read_frame(reader)
        if got is None:
            return
        kind, payload = got
        if kind == frames.KNOWN:
            known.clear()
            known.update(frames.names(payload))
        elif kind == frames.FORGOT:
            store.forget(frames.names(payload))
        elif kind == frames.ASK_METRICS:
            store.metrics_asked = True
            store.full.set()  # answered at once, not at the next flush
            store.pending.set()


async def agent_authenticator(config: ExtenderConfig) -> tuple[Authenticator | None, object | None]:
    if not (config.kubernetes and config.agent_auth.mode == "tokenreview"):
        return None, None
    from gpuextender.extender.ingest.token_review import TokenReviewer
    from gpuextender.extender.inventory.kube_watch import load_kube_config

    connection = await load_kube_config(config.kubeconfig)
    assert config.agent_auth.service_account is not None  # config guarantees it
    reviewer = TokenReviewer(connection, config.agent_auth.service_account, config.agent_auth.audience)
    return reviewer, reviewer


async def serve(
    config: ExtenderConfig, link: socket.socket, certificate: ServingCertificate | None, worker: Worker
) -> int:
    config = worker.config(config)
    reader, writer = await asyncio.open_unix_connection(sock=link)
    authenticator, reviewer = await agent_authenticator(config)
    store = RelayStore(config.idle_rule)
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
    relay = asyncio.create_task(_relay(store, writer, metrics), name="relay")
    listen = asyncio.create_task(_listen(reader, store, known), name="listen")
    code = 0
    try:
        # Until the extender's end closes. Should the relay itself fail (a bug), exit: the
        # extender sees the link close and stops, rather than wait for reports that never come.
        await asyncio.wait({relay, listen}, return_when=asyncio.FIRST_COMPLETED)
        if relay.done() and not relay.cancelled() and relay.exception() is not None:
            if not isinstance(relay.exception(), ConnectionError):
                log.error("relaying reports to gpu-extender failed", exc_info=relay.exception())
            code = 1
        if listen.done():
            listen.result()  # a broken frame from the extender raises FrameError here
    finally:
        for task in (relay, listen):
            task.cancel()
        for task in (relay, listen):
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, frames.FrameError):
                await task
        await server.stop(grace=1.0)
        close = getattr(reviewer, "close", None)
        if close is not None:
            await close()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parsed = parse_worker_argv(list(sys.argv[1:] if argv is None else argv))
    if parsed is None:
        print("gpu-extender ingest worker: started by gpu-extender, not by hand", file=sys.stderr)
        return 2
    link_fd, worker, argv = parsed
    link = socket.socket(fileno=link_fd)
    os.nice(NICE)
    disable_created_metrics()
    try:
        config = build_config(argv)
        certificate = serving_certificate(config.tls)
    except (ConfigError, TlsLoadError) as exc:
        print(f"gpu-extender: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level, config.log_format)
    try:
        return asyncio.run(serve(config, link, certificate, worker))
    except OSError as exc:
        print(f"gpu-extender: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except frames.FrameError as exc:
        log.error("link to gpu-extender broken: %s", exc)
        return 1
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the extender stops us
        return 0


if __name__ == "__main__":
    sys.exit(main())
