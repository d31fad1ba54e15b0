"""Kubernetes resource quantities (`resource.Quantity`), parsed exactly: the one home of the grammar.

OME stores every AcceleratorClass number that is not a plain integer as a
Quantity (ome-api.md §2.1): `memoryGB` ("80Gi", read as BYTES), `memoryBandwidthGBps`
("3350"), the cost fields ("2.21") and `resources[].quantity`.

Grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go):

    quantity        ::= signedNumber suffix
    signedNumber    ::= [+-] number
    number          ::= digits | digits "." digits | digits "." | "." digits
    suffix          ::= binarySI | decimalSI | decimalExponent
    binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei             (powers of 1024)
    decimalSI       ::= n | u | m | "" | k | M | G | T | P | E   (powers of 1000)
    decimalExponent ::= ("e" | "E") signedInteger               ("1e3", "1E3"; a bare "E" is exa)

No whitespace is allowed. A JSON number (Quantity is int-or-string in the CRD) is read
from its decimal text, so `2.21` and `"2.21"` are the same. Values are exact `Decimal`s:
no float rounding before a comparison.

`quantity_value` is Go's `Quantity.Value()`: the integer rounded UP, away from zero
("2.21" -> 3, "0.5" -> 1). OME takes `memoryGB.Value()` and `memoryBandwidthGBps.Value()`,
so callers that must reproduce OME use it.

Magnitudes of 2**63 or more are rejected: `Value()` is an int64 in Go, and nothing
meaningful on an AcceleratorClass is that large. (Kubernetes itself would accept and
saturate them; refusing keeps a typo like "80e30Gi" from ranking a class first.)
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_UP, Decimal, InvalidOperation

from gpuextender.extender.model.untrusted import InvalidInput, described, shown

# The grammar, for every reader of quantities (pod GPU counts in model/pod_gpus.py too): a signed
# number, then at most ONE of a binary SI suffix, a decimal SI suffix or a decimal exponent. Group 1:
# the number; group 2: the suffix ("Gi", "k", "e3", "E-2"), or None.
QUANTITY = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")
# Decimal SI suffixes as powers of ten, binary ones as multipliers.
DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
BINARY_SI = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}

_SUFFIX: dict[str, Decimal] = {
    **{suffix: Decimal(1).scaleb(power) for suffix, power in DECIMAL_SI.items()},
    **{suffix: Decimal(multiplier) for suffix, multiplier in BINARY_SI.items()},
}

_LIMIT = Decimal(2**63)
# An exponent beyond this cannot give a value below _LIMIT (nor a non-zero one above
# 1e-30 that we care about); checking it first keeps "1e999999999" from building a
# huge integer.
_MAX_EXPONENT = 40


def _refused(problem: str) -> InvalidInput:
    return InvalidInput("bad_quantity", problem)


def parse_quantity(value: object) -> Decimal:
    """The exact value of a Kubernetes quantity given as a string or a JSON number."""
    if isinstance(value, bool):  # bool is an int in Python; never a quantity
        raise _refused(f"{shown(value)} is not a quantity")
    if isinstance(value, int):
        amount = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _refused(f"{shown(value)} is not a quantity")
        amount = Decimal(repr(value))  # the JSON text: 2.21 -> Decimal("2.21"), not the binary float
    elif isinstance(value, str):
        m = QUANTITY.fullmatch(value)
        if m is None:
            raise _refused(f"{shown(value)} is not a Kubernetes quantity")
        number, suffix = m.group(1), m.group(2) or ""
        try:
            amount = Decimal(number)
        except InvalidOperation:  # pragma: no cover - the regex only admits valid decimals
            raise _refused(f"{shown(value)} is not a Kubernetes quantity") from None
        if suffix in _SUFFIX:
            amount *= _SUFFIX[suffix]
        elif suffix:  # a decimal exponent: "e3", "E-2"
            # Read without its sign and leading zeros, and counted before int(): int() refuses
            # (ValueError) past 4,300 characters, and no exponent of more than two digits is in range.
            digits = suffix[1:].lstrip("+-").lstrip("0") or "0"
            if len(digits) > 2:
                raise _refused(f"{shown(value)} is out of range")
            exponent = -int(digits) if suffix[1] == "-" else int(digits)
            if abs(exponent) > _MAX_EXPONENT:
                raise _refused(f"{shown(value)} is out of range")
            amount = amount.scaleb(exponent)
    else:
        raise _refused(f"expected a quantity (string or number), got {described(value)}")
    if abs(amount) >= _LIMIT:
        raise _refused(f"{shown(value)} is out of range")
    return amount


def quantity_value(amount: Decimal) -> int:
    """Go's `Quantity.Value()`: the integer value, rounded up away from zero."""
    return int(amount.to_integral_value(rounding=ROUND_UP))
