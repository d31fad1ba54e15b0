"""An ingest worker's two loops over its link to the extender (frames.py says what crosses it):
the summaries its store holds sent in frames, and the extender's frames read."""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import generate_latest

from gpuextender.extender.ingest.limits import FLUSH_S
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.workers import frames as frames
from gpuextender.extender.workers.summary_store import SummaryStore

BEAT_S = 1.0  # a BEAT frame when nothing else was sent for this long


async def send_frames(store: SummaryStore, writer: asyncio.StreamWriter, metrics: IngestMetrics) -> None:
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
        if store.metrics_due():
            writer.write(frames.frame(frames.METRICS, generate_latest(metrics.registry)))
        await writer.drain()


async def read_frames(reader: asyncio.StreamReader, store: SummaryStore, known: set[str]) -> None:
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
            store.ask_metrics()
