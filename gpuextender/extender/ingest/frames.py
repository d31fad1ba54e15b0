"""The frames between the extender and each ingest worker (ingest_process.py), over a socketpair.

A frame is a 4-byte big-endian length (of what follows), a 1-byte kind, and a payload:
  worker -> extender
    READY    the gRPC port listens (its port number, decimal ASCII)
    REPORTS  accepted reports in arrival order: per report an 8-byte big-endian float
             (when it was received, time.monotonic(), the same clock in both processes on
             Linux), a 4-byte length and the serialized NodeReport
    METRICS  the worker's ingest metrics as Prometheus text, after the reports before them
    BEAT     nothing else was sent for a second: the worker's loop runs (relay.py kills a
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

READY, REPORTS, METRICS, BEAT, KNOWN, FORGOT, ASK_METRICS = b"Y", b"R", b"M", b"B", b"K", b"F", b"Q"
_HEAD = struct.Struct(">IB")
_ENTRY = struct.Struct(">dI")
# A batch is flushed before it passes this (reports are at most 256 KiB each: report_checks).
MAX_FRAME_BYTES = 64 * 1024 * 1024


class FrameError(Exception):
    """The other end sent something no version of us sends (or went away mid-frame)."""


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return _HEAD.pack(len(payload) + 1, kind[0]) + payload


def report_entry(received_at: float, report: bytes) -> bytes:
    return _ENTRY.pack(received_at, len(report)) + report


def report_entries(payload: bytes) -> Iterator[tuple[float, bytes]]:
    """(received_at, serialized NodeReport) for each entry of a REPORTS payload."""
    view, offset, end = memoryview(payload), 0, len(payload)
    while offset < end:
        if offset + _ENTRY.size > end:
            raise FrameError("a report entry is cut short")
        received_at, size = _ENTRY.unpack_from(view, offset)
        offset += _ENTRY.size
        if offset + size > end:
            raise FrameError("a report entry is cut short")
        yield received_at, bytes(view[offset : offset + size])
        offset += size


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
