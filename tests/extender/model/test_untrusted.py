"""model/untrusted.py: the one reader of untrusted decoded JSON/YAML and its one error type. Each
bound at exactly its value on both sides; messages stay short whatever was sent."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.model.untrusted import (
    MAX_OBJECT_NAME_CHARS,
    Fields,
    InvalidInput,
    described,
    nominated_node,
    object_at,
    pod_uid,
    shown,
)


def test_shown_keeps_40_characters_and_cuts_the_41st() -> None:
    assert shown("x" * 40) == repr("x" * 40)
    assert shown("x" * 41) == f"{'x' * 40!r}... (41 characters)"
    assert shown(2**63) == repr(2**63)  # 64 bits: shown
    assert shown(2**64) == "an integer of 65 bits"  # never str() of a huge integer
    assert shown({"a": 1}) == "a JSON object" and shown([1]) == "a JSON array"


def test_described_names_the_type_and_counts_containers() -> None:
    assert described([1]) == "list (1 item)" and described([1, 2]) == "list (2 items)"
    assert described({}) == "dict (0 keys)" and described({"a": 1}) == "dict (1 key)"
    assert described(5) == "int 5" and described(None) == "NoneType None"
    assert len(described("y" * 1_000_000)) < 80


def test_object_at_reads_a_missing_or_mistyped_object_as_empty() -> None:
    assert object_at({"m": {"a": 1}}, "m") == {"a": 1}
    for parent in ({"m": [1]}, {"m": None}, {}, None, [{"m": {}}], "m"):
        assert object_at(parent, "m") == {}


def refused(call: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        call()
    return info.value


def test_an_error_names_the_subject_and_the_path_and_carries_its_code() -> None:
    err = refused(lambda: Fields("Thing 'a'", code="bad_thing").mapping([1, 2], "spec.x"))
    assert str(err) == "Thing 'a': spec.x: expected an object, got list (2 items)"
    assert (err.code, err.subject, err.path, err.problem) == (
        "bad_thing",
        "Thing 'a'",
        "spec.x",
        "expected an object, got list (2 items)",
    )
    assert isinstance(err, ValueError)
    # Without a subject the message starts at the path; the subject may be refined as it is learnt.
    fields = Fields()
    assert str(refused(lambda: fields.string(5, "p"))) == "p: expected a string, got int 5"
    fields.subject = "Thing 'b'"
    assert str(refused(lambda: fields.boolean("yes", "q"))).startswith("Thing 'b': q: expected true or false")


def test_absent_reads_as_none_or_empty_and_required_refuses_it() -> None:
    f = Fields()
    assert f.mapping(None, "m") is None and f.string(None, "s") is None and f.boolean(None, "b") is None
    assert f.integer(None, "i") is None and f.strings(None, "l") is None
    assert f.text(None, "t") == "" and f.items(None, "l") == [] and f.keyed(None, "k") == []
    assert f.string_map(None, "m") == {}
    assert refused(lambda: f.mapping(None, "m", required=True)).problem == "required field is missing"


@pytest.mark.parametrize(("value", "ok"), [(-1, False), (0, True), (10, True), (11, False)])
def test_integer_bounds_are_inclusive(value: int, ok: bool) -> None:
    f = Fields()
    if ok:
        assert f.integer(value, "i", (0, 10)) == value
    else:
        assert "out of range [0, 10]" in refused(lambda: f.integer(value, "i", (0, 10))).problem


def test_integer_refuses_bools_and_floats_unless_whole_floats_are_asked_for() -> None:
    f = Fields()
    for value in (True, 1.0, "1"):
        assert refused(lambda v=value: f.integer(v, "i")).path == "i"
    assert f.integer(989.0, "i", whole_floats=True) == 989
    assert refused(lambda: f.integer(989.5, "i", whole_floats=True)).problem == "expected an integer, got float 989.5"


def test_lists_maps_and_keys_name_the_bad_element() -> None:
    f = Fields()
    assert f.strings(["a", "b"], "l") == ("a", "b")
    assert refused(lambda: f.strings(["a", 3], "l")).path == "l[1]"
    assert refused(lambda: f.items("abc", "l")).problem == "expected a list, got str 'abc'"
    assert f.keyed({"b": 1, "a": 2}, "k") == [("a", 2), ("b", 1)]
    assert refused(lambda: f.keyed({1: "x"}, "k")).problem == "expected string keys, got int 1"
    assert f.string_map({"a": "1"}, "m") == {"a": "1"}
    assert refused(lambda: f.string_map({"a": 1}, "m")).path == "m['a']"


def test_a_huge_value_never_makes_a_huge_message() -> None:
    f = Fields()
    for value in ("z" * 1_000_000, 10**5000, list(range(100_000))):
        assert len(str(refused(lambda v=value: f.mapping(v, "m")))) < 120


@pytest.mark.parametrize(
    ("pod", "uid"),
    [
        ({"metadata": {"uid": "u-1"}}, "u-1"),
        ({"metadata": {"uid": "u" * MAX_OBJECT_NAME_CHARS}}, "u" * MAX_OBJECT_NAME_CHARS),  # at the bound
        ({"metadata": {"uid": "u" * (MAX_OBJECT_NAME_CHARS + 1)}}, ""),  # past it
        ({"metadata": {"uid": 7}}, ""),
        ({"metadata": []}, ""),
        ({}, ""),
        ([], ""),
    ],
)
def test_a_pods_uid_is_a_bounded_string_or_none(pod: Any, uid: str) -> None:
    assert pod_uid(pod) == uid


def test_a_pods_nominated_node_is_a_bounded_string_or_none() -> None:
    assert nominated_node({"status": {"nominatedNodeName": "n1"}}) == "n1"
    assert nominated_node({"status": {"nominatedNodeName": "n" * MAX_OBJECT_NAME_CHARS}}) == "n" * MAX_OBJECT_NAME_CHARS
    assert nominated_node({"status": {"nominatedNodeName": "n" * (MAX_OBJECT_NAME_CHARS + 1)}}) == ""
    assert nominated_node({"status": {"nominatedNodeName": None}}) == ""
    assert nominated_node({"status": "x"}) == nominated_node({}) == ""
