"""Rules of model/untrusted.py that mutation testing (mutmut) found no test holding, each test
failing on a one-line change: an error made without a subject or a path carries "" for them; a
value that is neither a scalar, an object nor a list is shown as "a JSON value"; `Fields`' default
code is `wrong_type`; and `keyed` and `string_map` name the field's path and the refused value."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.extender.model.untrusted import Fields, InvalidInput, shown


def refused(call: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        call()
    return info.value


def test_an_error_without_subject_or_path_carries_empty_ones() -> None:
    err = InvalidInput("c", "m")
    assert (err.subject, err.path, err.problem) == ("", "", "m")


def test_a_value_neither_scalar_object_nor_list_is_shown_as_a_json_value() -> None:
    assert shown((1, 2)) == "a JSON value"
    assert shown([1]) == "a JSON array"


def test_fields_refuse_with_the_wrong_type_code_by_default() -> None:
    assert refused(lambda: Fields().string(5, "p")).code == "wrong_type"


def test_keyed_names_its_path_for_a_non_object_and_for_a_non_string_key() -> None:
    f = Fields()
    not_object = refused(lambda: f.keyed([1], "spec.k"))
    assert (not_object.path, str(not_object)) == ("spec.k", "spec.k: expected an object, got list (1 item)")
    bad_key = refused(lambda: f.keyed({1: "x"}, "spec.k"))
    assert (bad_key.path, str(bad_key)) == ("spec.k", "spec.k: expected string keys, got int 1")


def test_string_map_describes_the_refused_value() -> None:
    err = refused(lambda: Fields().string_map({"a": 7}, "m"))
    assert err.problem == "expected a string value, got int 7"
