"""The preempt verb's one-pass reading of a request as kube-scheduler sends it with nodeCacheCapable
(scheduler/wire._plain_candidates): it reads exactly what the per-candidate reading reads, for every
shape and at every bound (else it steps aside, and that reading refuses or reads the request); and it
takes each bound at exactly its value, not one past (a mutant `>` to `>=` fails here)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.scheduler import wire
from gpuextender.extender.scheduler.wire import (
    MAX_BIND_FIELD_CHARS,
    MAX_VICTIMS_PER_NODE,
    PreemptionArgs,
    parse_preemption_args,
)

POD = {"metadata": {"name": "big", "namespace": "ml", "uid": "preemptor"}}
LONGEST = "n" * MAX_BIND_FIELD_CHARS


def meta(victims: Any) -> bytes:
    return orjson.dumps({"Pod": POD, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims})


def victims(*uids: Any) -> list[Any]:
    return [{"UID": uid} for uid in uids]


# Requests as kube-scheduler sends them, and every way one can differ from that.
SHAPES: dict[str, Any] = {
    "as sent": {"a": {"Pods": victims("u1", "u2"), "NumPDBViolations": 1}, "b": {"Pods": victims("u3")}},
    "no candidates": {},
    "null pods": {"a": {"Pods": None, "NumPDBViolations": 0}},
    "no pods key": {"a": {"NumPDBViolations": 2}},
    "empty entry": {"a": {}},
    "null violations": {"a": {"Pods": victims("u"), "NumPDBViolations": None}},
    "violations at the bound": {"a": {"Pods": victims("u"), "NumPDBViolations": MAX_VICTIMS_PER_NODE}},
    "violations past the bound": {"a": {"Pods": victims("u"), "NumPDBViolations": MAX_VICTIMS_PER_NODE + 1}},
    "negative violations": {"a": {"Pods": victims("u"), "NumPDBViolations": -1}},
    "boolean violations": {"a": {"Pods": victims("u"), "NumPDBViolations": True}},
    "float violations": {"a": {"Pods": victims("u"), "NumPDBViolations": 1.0}},
    "lower-case keys": {"a": {"pods": victims("u"), "numPDBViolations": 0}},
    "an extra entry key": {"a": {"Pods": victims("u"), "Other": 1}},
    "an extra victim key": {"a": {"Pods": [{"UID": "u", "Name": "x"}]}},
    "a lower-case uid key": {"a": {"Pods": [{"uid": "u"}]}},
    "an empty uid": {"a": {"Pods": victims("")}},
    "a numeric uid": {"a": {"Pods": victims(7)}},
    "a null uid": {"a": {"Pods": victims(None)}},
    "a uid at the bound": {"a": {"Pods": victims("u" * MAX_BIND_FIELD_CHARS)}},
    "a uid past the bound": {"a": {"Pods": victims("u" * (MAX_BIND_FIELD_CHARS + 1))}},
    "a victim that is a string": {"a": {"Pods": ["u"]}},
    "a victim that is a list": {"a": {"Pods": [["u"]]}},
    "pods that is an object": {"a": {"Pods": {"U": 1}}},
    "pods that is a string": {"a": {"Pods": "u"}},
    "an entry that is a list": {"a": [victims("u")]},
    "an entry that is null": {"a": None},
    "a node name at the bound": {LONGEST: {"Pods": victims("u")}},
    "a node name past the bound": {LONGEST + "n": {"Pods": victims("u")}},
    "an empty node name": {"": {"Pods": victims("u")}},
    "one odd candidate among plain ones": {"a": {"Pods": victims("u1")}, "b": {"Pods": [{"uid": "u2"}]}},
}


def read(data: bytes) -> PreemptionArgs | tuple[str, str]:
    try:
        return parse_preemption_args(data)
    except InvalidInput as exc:
        return (exc.code, exc.message)


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_the_one_pass_reads_what_the_per_candidate_reading_reads(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = meta(SHAPES[shape])
    fast = read(data)
    monkeypatch.setattr(wire, "_plain_candidates", lambda _victims: None)
    assert fast == read(data)


def one_pass(victims_map: Any) -> Any:
    return wire._plain_candidates(victims_map)


def test_the_one_pass_reads_every_candidate_as_sent() -> None:
    taken = one_pass(SHAPES["as sent"])
    assert taken is not None
    proposals, plain = taken
    assert [(p.node, p.victims, p.pdb_violations) for p in proposals] == [("a", ("u1", "u2"), 1), ("b", ("u3",), 0)]
    assert plain == {"a": (("u1", "u2"), victims("u1", "u2")), "b": (("u3",), victims("u3"))}


@pytest.mark.parametrize(
    ("shape", "taken"),
    [
        ("violations at the bound", True),
        ("violations past the bound", False),
        ("negative violations", False),
        ("boolean violations", False),
        ("null violations", True),
        ("a uid at the bound", True),
        ("a uid past the bound", False),
        ("an empty uid", False),
        ("a numeric uid", False),
        ("a node name at the bound", True),
        ("a node name past the bound", False),
        ("an empty node name", False),
        ("an extra entry key", False),
        ("an extra victim key", False),
        ("no pods key", True),
        ("null pods", True),
        ("pods that is an object", False),
        ("pods that is a string", False),
        ("an entry that is null", False),
        ("one odd candidate among plain ones", False),
    ],
)
def test_the_one_pass_takes_each_bound_at_exactly_its_value(shape: str, taken: bool) -> None:
    assert (one_pass(SHAPES[shape]) is not None) is taken


def test_the_one_pass_takes_exactly_max_victims_per_node_and_not_one_more() -> None:
    at = one_pass({"a": {"Pods": victims(*(f"u{i}" for i in range(MAX_VICTIMS_PER_NODE)))}})
    assert at is not None and len(at[0][0].victims) == MAX_VICTIMS_PER_NODE
    assert one_pass({"a": {"Pods": victims(*(f"u{i}" for i in range(MAX_VICTIMS_PER_NODE + 1)))}}) is None


def test_each_candidate_gets_its_own_victims_in_order() -> None:
    taken = one_pass({"a": {"Pods": victims("u1")}, "b": {}, "c": {"Pods": victims("u2", "u3", "u4")}})
    assert taken is not None
    assert [p.victims for p in taken[0]] == [("u1",), (), ("u2", "u3", "u4")]
