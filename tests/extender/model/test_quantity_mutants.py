"""Rules of model/quantity.py that mutation testing (mutmut) found no test holding, each test failing
on a one-line change: every refusal has the code `bad_quantity` and says the value refused (or the
type of a value that is no quantity); an exponent of zero digits' worth ("e0", "e000") is read; and
an exponent of exactly 40 either way is in range, 41 out of it."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuextender.extender.model.quantity import parse_quantity
from gpuextender.extender.model.untrusted import InvalidInput


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "True is not a quantity"),
        (float("inf"), "inf is not a quantity"),
        ("x", "'x' is not a Kubernetes quantity"),
        ("1e100", "'1e100' is out of range"),
        ("1e41", "'1e41' is out of range"),
        ("1e-41", "'1e-41' is out of range"),
        ("9223372036854775808", "'9223372036854775808' is out of range"),
        ([1], "expected a quantity (string or number), got list (1 item)"),
    ],
)
def test_a_refusal_says_the_value_and_has_the_bad_quantity_code(value: object, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_quantity(value)
    assert (info.value.code, str(info.value)) == ("bad_quantity", message)


def test_an_exponent_of_zero_is_read() -> None:
    assert parse_quantity("5e0") == 5
    assert parse_quantity("5E-000") == 5


def test_an_exponent_of_40_either_way_is_in_range() -> None:
    assert parse_quantity("1e-40") == Decimal("1e-40")
    assert parse_quantity("0e40") == 0
