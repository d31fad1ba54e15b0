"""OME's parseModelSize and the Go ParseFloat syntax under it (ome-api.md §7.7), table-driven."""

from __future__ import annotations

import math

import pytest

from gpuextender.extender.model.ome.model_size import parse_go_float, parse_model_size


@pytest.mark.parametrize(
    ("text", "parameters"),
    [
        ("7B", 7e9),
        ("1.5B", 1.5e9),
        ("685B", 685e9),
        ("350M", 3.5e8),
        ("1T", 1e12),
        ("0.5T", 5e11),
        ("1000", 1000.0),  # no suffix: the number itself
        ("1e3M", 1e9),
        ("+7B", 7e9),
        ("-7B", -7e9),
        ("1.B", 1e9),
        (".5B", 5e8),
        ("1_000M", 1e9),  # Go accepts "_" between digits
        ("0x1p3B", 8e9),  # hexadecimal with a p exponent
        # all of these are 0: ParseFloat refuses what is left
        ("7b", 0.0),  # suffixes are case-sensitive
        ("500K", 0.0),  # K is not a suffix (OME's own model agent writes it)
        (" 7B", 0.0),
        ("7B ", 0.0),
        ("7 B", 0.0),
        ("", 0.0),
        ("B", 0.0),
        ("TB", 0.0),  # only the last character is a suffix
        ("7BB", 0.0),
        ("1__0B", 0.0),
        ("_1B", 0.0),
        ("0x1B", 0.0),  # hexadecimal needs a p exponent
        (".", 0.0),
        ("\u0667B", 0.0),  # an Arabic-Indic 7: Python's float() takes it, Go does not
        ("1e400", 0.0),  # out of range is an error in Go, hence 0
        ("1e400B", 0.0),
        ("+nanB", 0.0),  # NaN takes no sign
        ("infinB", 0.0),
        # Go's special values
        ("InfB", math.inf),
        ("-infinityT", -math.inf),
    ],
)
def test_parse_model_size(text: str, parameters: float) -> None:
    assert parse_model_size(text) == parameters


def test_nan_size() -> None:
    assert math.isnan(parse_model_size("NaN"))
    assert math.isnan(parse_model_size("nanB"))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1_23.50_0_0e+1_2", 1.235e14),  # cases from Go's atof_test.go
        ("0x_1_2.3_4_5p+1_2", 74565.0),
        ("0x1.8p1", 3.0),
        ("0x.8p1", 1.0),
        ("5.", 5.0),
        ("-.5", -0.5),
        ("1e-400", 0.0),  # underflow is not an error
        ("+Inf", math.inf),
        ("iNf", math.inf),
        ("InFiNiTy", math.inf),
    ],
)
def test_go_float_accepts(text: str, value: float) -> None:
    assert parse_go_float(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "-_123.5e+12",
        "123_.5e+12",
        "123._5e+12",
        "123.5e+_12",
        "123.5e+12_",
        "0x__12.345p+12",
        "0x12._345p+12",
        "0x12.345p_+12",
        "0x1",
        "0x.p1",
        "0x1p2000",  # overflow
        " 1",
        "1 ",
        "+.e1",
        "e5",
        "-nan",
        "nan(1)",
        "infx",
        "1e",
        "",
    ],
)
def test_go_float_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_float(text)
