"""An ingest worker's store (workers/worker_main.py): each report the gRPC service accepts is
summarized here, with the idle rule and functions the extender would use, and waits, the newest per
node, for the next SUMMARIES frame to the extender (frame_loops.py), whose process then only stores
the summary (workers/supervisor.py)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import NamedTuple

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.gpu_facts import GpuFacts
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
from gpuextender.extender.workers import frames as frames
from gpuextender.v1 import gpu_state_pb2 as pb

FLUSH_BYTES = 1024 * 1024  # a batch of this size goes at once, not FLUSH_S after its first report


class _Held(NamedTuple):
    """A node's last full report summarized here, as what comes next is checked against it."""

    base: Base  # (sequence, received_at): what the extender's readings entries name
    readings_base: RefreshBase  # a heartbeat's readings are checked against it
    # summary_refresh.shape_key: a full report of the same shape is sent as readings (None: the
    # next full report of the node is summarized, the first of a stream).
    key: int | None
    # The newest full report taken on it (this one, or a later one of the same shape): what a light
    # heartbeat of the node repeats (NodeReport.heartbeat_of).
    last_full: int


class SummaryStore:
    """The ReportStore of this process: each accepted report is summarized here, with the idle
    rule and functions the extender would use (its process then only stores the summary), and
    waits for the next frame to the extender, the newest per node only (a full snapshot
    supersedes the one before, so a slow extender costs at most one report per node here, never
    a backlog; a light heartbeat's readings supersede the readings before them, and wait behind
    the full report they apply to where that is not sent yet). A full report that changes only
    readings since the node's last one summarized here on the same stream (its
    summary_refresh.shape_key is that one's: an agent before 0.6 at its heartbeat) is sent as
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
        self._metrics_asked = False
        self._keyed: tuple[pb.NodeReport, int] | None = None  # the report known_shape keyed last

    def ask_metrics(self) -> None:
        """The extender asked for the worker's series: sent at once, not at the next flush."""
        self._metrics_asked = True
        self.full.set()
        self.pending.set()

    def metrics_due(self) -> bool:
        """Whether the series were asked for since the last time this said so."""
        asked, self._metrics_asked = self._metrics_asked, False
        return asked

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
            and self._queue_readings(node, held, as_heartbeat(report), received_at) is None
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
        (state/summary_refresh.py), sent as frames.READINGS; else why not."""
        node = heartbeat.node_name
        held = self._bases.get(node)
        if held is None or held.last_full != heartbeat.heartbeat_of:
            return f"report {heartbeat.heartbeat_of} of node {node} is not held here: send a full report"
        return self._queue_readings(node, held, heartbeat, received_at)

    def stream_opened(self, node: str) -> None:
        held = self._bases.get(node)
        if held is not None:  # (a stream that moved here and back finds what it left long ago)
            self._bases[node] = held._replace(key=None)

    def stream_closed(self, node: str) -> None:
        pass  # what the node's stream left is kept: its next stream starts with a full report

    def _queue_readings(self, node: str, held: _Held, heartbeat: Heartbeat, received_at: float) -> str | None:
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
