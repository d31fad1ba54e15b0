"""A node's summary and GPU facts as bytes, from an ingest worker to the extender (ingest_workers.py).

The workers summarize each report (gpu_summary.summarize, the same pure function the extender
runs with --ingest-in-process) so that the extender's own process, which answers kube-scheduler,
only stores what arrives: decoding a summary is ~10 us where parsing and summarizing the report
was ~60-100 us (bench/RESULTS.md, issue 36).

marshal, not pickle: it builds only plain values (tuples, numbers, strings, bytes, frozensets),
never objects of a class the bytes name. The field order is NodeSummary's and GpuPositions's own
(dataclasses.fields), so a field added there travels without a change here; both ends are the
same build of gpu-extender (the workers are started from the extender's own interpreter).
"""

from __future__ import annotations

import dataclasses
import marshal
from typing import Any

from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.state.gpu_summary import GpuPositions, NodeSummary

_FIELDS = tuple(f.name for f in dataclasses.fields(NodeSummary))
FIELD_INDEX = {name: i for i, name in enumerate(_FIELDS)}  # a field's place in summary_values
_POSITIONS = _FIELDS.index("positions")
_POSITION_FIELDS = tuple(f.name for f in dataclasses.fields(GpuPositions))
MARSHAL_VERSION = 4


def summary_values(summary: NodeSummary) -> list[Any]:
    """The summary's fields as encode_values takes them (a caller may change some: FIELD_INDEX)."""
    values = [getattr(summary, name) for name in _FIELDS]
    positions = summary.positions
    if positions is not None:
        values[_POSITIONS] = tuple([getattr(positions, name) for name in _POSITION_FIELDS])
    return values


def encode_values(values: list[Any]) -> bytes:
    return marshal.dumps(tuple(values), MARSHAL_VERSION)


def encode_summary(summary: NodeSummary) -> bytes:
    return encode_values(summary_values(summary))


def decode_values(data: bytes) -> list[Any]:
    """encode_values's list back (bytes of ours: a worker's own, kept for a light heartbeat)."""
    return list(marshal.loads(data))


def decode_summary(data: bytes) -> NodeSummary:
    """ValueError, EOFError or TypeError for bytes encode_summary did not make."""
    values = marshal.loads(data)
    if type(values) is not tuple or len(values) != len(_FIELDS):
        raise ValueError(f"not a node summary: {type(values).__name__}")
    positions = values[_POSITIONS]
    if positions is None:
        return NodeSummary(*values)
    values = list(values)
    values[_POSITIONS] = GpuPositions(*positions)
    return NodeSummary(*values)


def encode_facts(facts: tuple[GpuFacts, ...]) -> bytes:
    return marshal.dumps(tuple([tuple(f) for f in facts]), MARSHAL_VERSION)


def decode_facts(data: bytes) -> tuple[GpuFacts, ...]:
    return tuple([GpuFacts(*f) for f in marshal.loads(data)])
