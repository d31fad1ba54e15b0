"""A node's summary and GPU facts, or a light heartbeat's readings, as bytes, from an ingest worker
to the extender (workers/supervisor.py).

The workers summarize each report (gpu_summary.summarize, the same pure function the extender
runs with --ingest-in-process) so that the extender's own process, which answers kube-scheduler,
only stores what arrives: decoding a summary is ~14 us (half of it marshal) where parsing and
summarizing the report takes a worker ~150-250 us (bench/RESULTS.md, issue 36).

marshal, not pickle: it builds only plain values (tuples, numbers, strings, bytes, frozensets),
never objects of a class the bytes name. The field order is NodeSummary's and GpuPositions's own
(dataclasses.fields), so a field added there travels without a change here; both ends are the
same build of gpu-extender (the workers are started from the extender's own interpreter).
"""

from __future__ import annotations

import dataclasses
import marshal
import operator
from collections import deque
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, TypeVar

from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.state.gpu_summary import GpuPositions, NodeSummary
from gpuextender.extender.state.summary_refresh import READING_FIELDS

_FIELDS = tuple(f.name for f in dataclasses.fields(NodeSummary))
FIELD_INDEX = {name: i for i, name in enumerate(_FIELDS)}  # a field's place in the encoded tuple
_ALL_FIELDS = operator.attrgetter(*_FIELDS)  # one C call for every field's value, in order
# The only fields a heartbeat's readings may change (summary_refresh.py): any other is a bug.
_READING_INDEX = {name: FIELD_INDEX[name] for name in READING_FIELDS}
_POSITIONS = _FIELDS.index("positions")
_POSITION_FIELDS = tuple(f.name for f in dataclasses.fields(GpuPositions))
MARSHAL_VERSION = 4
T = TypeVar("T")


def slot_builder(cls: type[T]) -> Callable[[Sequence[Any]], T]:
    """`cls(*values)` for a frozen slots dataclass whose __init__ only sets its fields, by the slots'
    own setters: ~3.7 us for NodeSummary's 27 fields where the frozen __init__ (object.__setattr__
    by name, a lookup each) takes ~5.9, a quarter of what the main process spends storing a relayed
    summary (bench/RESULTS.md). TypeError for any other class, and for values not one per field."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in vars(cls) or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: not a frozen slots dataclass without __post_init__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if any(not f.init for f in fields):
        raise TypeError(f"{cls.__name__}: a field its __init__ does not take")
    setters = tuple(getattr(cls, f.name).__set__ for f in fields)
    count, new, call = len(setters), object.__new__, operator.call

    def build(values: Sequence[Any]) -> T:
        if len(values) != count:
            raise TypeError(f"{cls.__name__} takes {count} values, not {len(values)}")
        obj = new(cls)
        deque(map(call, setters, repeat(obj), values), 0)  # each setter called in C, no frame each
        return obj

    return build


_new_summary = slot_builder(NodeSummary)


def encode_summary(summary: NodeSummary) -> bytes:
    values = list(_ALL_FIELDS(summary))
    positions = summary.positions
    if positions is not None:
        values[_POSITIONS] = tuple([getattr(positions, name) for name in _POSITION_FIELDS])
    return marshal.dumps(tuple(values), MARSHAL_VERSION)


def decode_summary(data: bytes) -> NodeSummary:
    """ValueError, EOFError or TypeError for bytes encode_summary did not make."""
    values = marshal.loads(data)
    if type(values) is not tuple or len(values) != len(_FIELDS):
        raise ValueError(f"not a node summary: {type(values).__name__}")
    positions = values[_POSITIONS]
    if positions is None:
        return _new_summary(values)
    values = list(values)
    values[_POSITIONS] = GpuPositions(*positions)
    return _new_summary(values)


Readings = tuple[tuple[str, Any], ...]  # (field name, value): what a light heartbeat changes
Base = tuple[int, float]  # a full report's (sequence, received_at): what a heartbeat's readings apply to


def encode_readings(node: str, base: Base, changes: dict[str, Any]) -> bytes:
    """A light heartbeat's `changes` (summary_refresh.refreshed_fields) to the summary of `node`'s
    full report `base`: ~0.35 KB where the summary and facts are ~1.4 KB, and no summary to decode first."""
    return marshal.dumps((node, base[0], base[1], tuple(changes.items())), MARSHAL_VERSION)


def decode_readings(data: bytes) -> tuple[str, Base, Readings]:
    """ValueError, EOFError or TypeError for bytes encode_readings did not make."""
    value = marshal.loads(data)
    if type(value) is not tuple or len(value) != 4:
        raise ValueError(f"not a heartbeat's readings: {type(value).__name__}")
    node, sequence, received_at, changes = value
    return node, (sequence, received_at), changes


def with_readings(summary: NodeSummary, changes: Readings) -> NodeSummary:
    """`summary` with the fields a light heartbeat changes (KeyError for any other field)."""
    values = list(_ALL_FIELDS(summary))
    for name, value in changes:
        values[_READING_INDEX[name]] = value
    return _new_summary(values)


def encode_facts(facts: tuple[GpuFacts, ...]) -> bytes:
    return marshal.dumps(tuple([tuple(f) for f in facts]), MARSHAL_VERSION)


def decode_facts(data: bytes) -> tuple[GpuFacts, ...]:
    return tuple([GpuFacts(*f) for f in marshal.loads(data)])
