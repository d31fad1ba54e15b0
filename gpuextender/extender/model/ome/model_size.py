"""OME's parameter-count strings ("7B", "1.5B", "350M", "1T"): `parseModelSize` in
`pkg/runtimeselector/matcher.go`, ome-api.md §7.7.

The last character is checked case-sensitively and removed once: "T" x 1e12, "B" x 1e9,
"M" x 1e6, anything else x 1 (the whole string is the number). The rest goes through
Go's `strconv.ParseFloat`; when that fails the size is **0**, not an error. So "7b",
"500K" (which OME's own model agent can write, §5), " 7B", "7 B", "" and "B" are all 0,
while "1e3M", "+7B", "Inf" and "NaN" are numbers, exactly as in Go.

`parse_go_float` reproduces ParseFloat's syntax, because Python's `float()` is more
lenient (it strips whitespace, takes "+nan", hex without an exponent) and returns inf on
overflow where Go returns an error (-> size 0): decimal with optional "." and e-exponent;
hexadecimal "0x1.8p3" only with a p-exponent; "_" only between digits (or right after
"0x"); "inf"/"infinity" with an optional sign and "nan" without, case-insensitive.
"""

from __future__ import annotations

import math
import re

_SUFFIX_MULTIPLIERS = {"T": 1e12, "B": 1e9, "M": 1e6}

_D = r"[0-9](?:_?[0-9])*"  # ASCII digits; "_" only between two digits
_H = r"[0-9a-fA-F]"
_DECIMAL = re.compile(rf"[+-]?(?:{_D}(?:\.(?:{_D})?)?|\.{_D})(?:[eE][+-]?{_D})?")
# Go lets "_" follow the "0x" prefix as if it were a digit: "0x_1p0" is valid.
_HEX = re.compile(rf"[+-]?0[xX](?=\.?{_H}|_)(?:_?{_H})*(?:\.(?:{_H}(?:_?{_H})*)?)?[pP][+-]?{_D}")
_INFINITY = re.compile(r"[+-]?(?:inf|infinity)", re.IGNORECASE)
_NAN = re.compile(r"nan", re.IGNORECASE)


def parse_go_float(text: str) -> float:
    """Go's `strconv.ParseFloat(text, 64)`; raises ValueError where Go returns an error."""
    if _INFINITY.fullmatch(text):
        return -math.inf if text[0] == "-" else math.inf
    if _NAN.fullmatch(text):
        return math.nan
    if _HEX.fullmatch(text):
        try:
            value = float.fromhex(text.replace("_", ""))
        except OverflowError as exc:
            raise ValueError(f"{text!r}: value out of range") from exc
    elif _DECIMAL.fullmatch(text):
        value = float(text)  # same "_" rule as Go once the pattern has passed
    else:
        raise ValueError(f"{text!r}: invalid syntax")
    if math.isinf(value):  # only a literal "Inf" may be infinite; overflow is ErrRange
        raise ValueError(f"{text!r}: value out of range")
    return value


def parse_model_size(text: str) -> float:
    """Parameters in a size string; 0.0 for anything ParseFloat refuses."""
    multiplier = _SUFFIX_MULTIPLIERS.get(text[-1:], 1.0)
    number = text[:-1] if multiplier != 1.0 else text
    try:
        return parse_go_float(number) * multiplier
    except ValueError:
        return 0.0
