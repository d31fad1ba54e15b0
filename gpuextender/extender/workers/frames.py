"""The frames between the extender and each ingest worker (workers/worker_main.py), over a socketpair.

A frame is a 4-byte big-endian length (of what follows), a 1-byte kind, and a payload:
  worker -> extender
    READY    the gRPC port listens (its port number, decimal ASCII)
    SUMMARIES  accepted reports in arrival order, as the worker summarized them: per report a
             1-byte tag, two 4-byte big-endian lengths and two parts (state/summary_codec.py):
               FULL      a full report: its summary and the node's GPU facts;
               READINGS  a light heartbeat: the readings it changes in the summary of the full
                         report it repeats (named by that report's sequence and receipt time;
                         the second part is empty). The worker keeps the full report's entry
                         ahead of it until both are sent.
             (each carries when the report was received, time.monotonic(), one clock for every
             process of the host on Linux)
    METRICS  the worker's ingest metrics as Prometheus text, after the reports before them
    BEAT     nothing else was sent for a second: the worker's loop runs (workers/supervisor.py kills a
             worker silent for longer than WORKER_SILENT_S)
  extender -> worker
    ASK_METRICS  send METRICS now (a scrape of the extender's /metrics)
    KNOWN    the nodes the inventory lists, newline-separated (the whole set each time)
    FORGOT   nodes whose data the extender forgot (--forget-after), newline-separated
Both ends are ours and the socket is never exposed; the bounds are for a bug, not an attacker.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator

READY, SUMMARIES, METRICS, BEAT, KNOWN, FORGOT, ASK_METRICS = b"Y", b"S", b"M", b"B", b"K", b"F", b"Q"
_HEAD = struct.Struct(">IB")
_ENTRY = struct.Struct(">BII")
FULL, READINGS = 0, 1  # a SUMMARIES entry's tag
# A batch is flushed before it passes this (reports are at most 256 KiB each: report_checks).
MAX_FRAME_BYTES = 64 * 1024 * 1024


class FrameError(Exception):
    """The other end sent something no version of us sends (or went away mid-frame)."""


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return _HEAD.pack(len(payload) + 1, kind[0]) + payload


def summary_entry(summary: bytes, facts: bytes) -> bytes:
    return _ENTRY.pack(FULL, len(summary), len(facts)) + summary + facts


def readings_entry(readings: bytes) -> bytes:
    return _ENTRY.pack(READINGS, len(readings), 0) + readings


def summary_entries(payload: bytes) -> Iterator[tuple[int, bytes, bytes]]:
    """(tag, first part, second part) for each entry of a SUMMARIES payload."""
    offset, end, unpack, size = 0, len(payload), _ENTRY.unpack_from, _ENTRY.size
    while offset < end:
        if offset + size > end:
            raise FrameError("a summary entry is cut short")
        tag, first_size, second_size = unpack(payload, offset)
        if tag > READINGS:
            raise FrameError(f"a summary entry tagged {tag}")
        start = offset + size
        middle = start + first_size
        offset = middle + second_size
        if offset > end:
            raise FrameError("a summary entry is cut short")
        yield tag, payload[start:middle], payload[middle:offset]


def names(payload: bytes) -> list[str]:
    return payload.decode().split("\n") if payload else []


async def read_frame(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """(kind, payload), or None at a clean end of stream."""
    try:
        head = await reader.readexactly(_HEAD.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise FrameError("the stream ended inside a frame header") from None
    size, kind = _HEAD.unpack(head)
    if not 1 <= size <= MAX_FRAME_BYTES + 1:
        raise FrameError(f"frame of {size} bytes")
    try:
        payload = await reader.readexactly(size - 1)
    except asyncio.IncompleteReadError:
        raise FrameError("the stream ended inside a frame") from None
    return bytes([kind]), payload
