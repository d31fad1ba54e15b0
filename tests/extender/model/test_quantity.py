"""Kubernetes quantities: the grammar, exact values, Go's Value() rounding."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuextender.extender.model.quantity import parse_quantity, quantity_value
from gpuextender.extender.model.untrusted import InvalidInput


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Decimal(0)),
        ("80", Decimal(80)),
        ("80Gi", Decimal(80 * 2**30)),
        ("1Ki", Decimal(1024)),
        ("1.5Mi", Decimal(3 * 2**19)),
        ("2Ei", Decimal(2 * 2**60)),
        ("2.21", Decimal("2.21")),
        ("3350", Decimal(3350)),
        ("3.35k", Decimal(3350)),
        ("80G", Decimal(80 * 10**9)),
        ("1M", Decimal(10**6)),
        ("1E", Decimal(10**18)),  # a bare E is exa, not an exponent
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("25e-1", Decimal("2.5")),
        ("1.5e+2", Decimal(150)),
        ("500m", Decimal("0.5")),
        ("100u", Decimal("0.0001")),
        ("7n", Decimal("7e-9")),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+3", Decimal(3)),
        ("-3", Decimal(-3)),
        (80, Decimal(80)),  # int-or-string: a JSON number
        (2.21, Decimal("2.21")),  # the float's decimal text, not its binary value
    ],
)
def test_parse_quantity(text: object, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "eighty",
        "",
        " 80",
        "80 ",
        "80Gib",
        "80gi",
        "1K",
        "1e",
        "1e3.5",
        "Gi",
        "1.2.3",
        "--1",
        "0x10",
        "80GB",
        True,
        None,
        [80],
        {"v": 1},
        float("nan"),
        float("inf"),
        "1e41",  # exponent out of range
        "9223372036854775808",  # 2**63: beyond Go's int64 Value()
        "8Ei",  # 2**63 again, through a suffix
    ],
)
def test_bad_quantities_raise(bad: object) -> None:
    with pytest.raises(InvalidInput):
        parse_quantity(bad)


def test_error_message_quotes_the_value() -> None:
    with pytest.raises(InvalidInput, match="'eighty' is not a Kubernetes quantity"):
        parse_quantity("eighty")


@pytest.mark.parametrize(
    ("text", "value"),
    [("2.21", 3), ("0.5", 1), ("500m", 1), ("3", 3), ("80Gi", 80 * 2**30), ("-2.5", -3), ("0", 0), ("1n", 1)],
)
def test_quantity_value_rounds_up_away_from_zero(text: str, value: int) -> None:
    assert quantity_value(parse_quantity(text)) == value


@pytest.mark.parametrize(
    "value",
    [
        "1e" + "9" * 5_000,  # int() refuses an exponent string past 4,300 digits (a ValueError)
        "1e100",  # three digits: out of range before int()
        10**5_000,  # repr() of this int raises a ValueError; the message must not use it
        "9" * 100_000,
    ],
    ids=["exponent-5000-digits", "exponent-3-digits", "int-5000-digits", "100k-digits"],
)
def test_the_worst_small_quantities_are_refused_with_a_short_message(value: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_quantity(value)
    assert len(str(caught.value)) < 120


def test_an_exponent_of_two_digits_is_read_at_the_bound() -> None:
    assert parse_quantity("1e18") == 10**18
    assert parse_quantity("1e-09") == Decimal("1e-9")
    assert parse_quantity("1e-" + "0" * 5_000 + "3") == Decimal("0.001")  # zeros padding it: read without them
    with pytest.raises(InvalidInput):
        parse_quantity("1e19")  # >= 2**63
