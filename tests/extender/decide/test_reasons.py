"""decide/reasons.py: a Reason is its message, encoded by orjson (the answer's encoder) and json
as that string; its code, sentence and map beside it; read-only; every code and message distinct."""

from __future__ import annotations

import copy
import json
import pickle
from collections import Counter

import orjson
import pytest

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.reasons import Reason

ALL = [value for value in vars(reasons).values() if isinstance(value, Reason)]


def test_a_reason_is_its_message() -> None:
    r = reasons.INSUFFICIENT_IDLE_GPUS
    assert r == r.message == "gpu-extender: too few idle GPUs (InsufficientIdleGPUs)"
    assert type(r.message) is str
    assert (r.code, r.sentence, r.unresolvable) == ("InsufficientIdleGPUs", "too few idle GPUs", False)
    assert orjson.dumps({"n": r}) == json.dumps({"n": r}, separators=(",", ":")).encode()
    assert orjson.loads(orjson.dumps({"n": r})) == {"n": r.message}
    assert repr(r) == "Reason(InsufficientIdleGPUs)"


def test_reasons_are_read_only() -> None:
    with pytest.raises(AttributeError, match="read-only"):
        reasons.STALE_GPU_DATA.unresolvable = True  # type: ignore[misc]
    assert reasons.STALE_GPU_DATA.unresolvable is False


def test_codes_and_messages_are_distinct_so_counts_per_reason_are_exact() -> None:
    assert len(ALL) >= 14
    assert len({r.code for r in ALL}) == len({r.message for r in ALL}) == len(ALL)
    counted = Counter([reasons.NVML_UNAVAILABLE, reasons.STALE_GPU_DATA, reasons.NVML_UNAVAILABLE])
    assert counted == {reasons.NVML_UNAVAILABLE: 2, reasons.STALE_GPU_DATA: 1}
    assert all(key is reasons.NVML_UNAVAILABLE or key is reasons.STALE_GPU_DATA for key in counted)


def test_copies_are_the_reason_itself_and_a_pickled_one_comes_back_whole() -> None:
    r = reasons.GPUS_TAKEN_BY_BOUND_PODS
    assert copy.copy(r) is r and copy.deepcopy({"n": r})["n"] is r
    back = pickle.loads(pickle.dumps(r))
    assert (back, back.code, back.sentence, back.unresolvable) == (r, r.code, r.sentence, r.unresolvable)
