"""Kubernetes resource quantities (`resource.Quantity`), parsed exactly.

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

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_QUANTITY = re.compile(rf"^({_NUMBER})(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")

_SUFFIX: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}

_LIMIT = Decimal(2**63)
# An exponent beyond this cannot give a value below _LIMIT (nor a non-zero one above
# 1e-30 that we care about); checking it first keeps "1e999999999" from building a
# huge integer.
_MAX_EXPONENT = 40


class QuantityError(ValueError):
    """The value is not a Kubernetes quantity (the message says why)."""


def parse_quantity(value: object) -> Decimal:
    """The exact value of a Kubernetes quantity given as a string or a JSON number."""
    if isinstance(value, bool):  # bool is an int in Python; never a quantity
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        amount = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity")
        amount = Decimal(repr(value))  # the JSON text: 2.21 -> Decimal("2.21"), not the binary float
    elif isinstance(value, str):
        m = _QUANTITY.match(value)
        if m is None:
            raise QuantityError(f"{value!r} is not a Kubernetes quantity")
        number, suffix = m.group(1), m.group(2) or ""
        try:
            amount = Decimal(number)
        except InvalidOperation:  # pragma: no cover - the regex only admits valid decimals
            raise QuantityError(f"{value!r} is not a Kubernetes quantity") from None
        if suffix in _SUFFIX:
            amount *= _SUFFIX[suffix]
        elif suffix:  # a decimal exponent: "e3", "E-2"
            exponent = int(suffix[1:])
            if abs(exponent) > _MAX_EXPONENT:
                raise QuantityError(f"{value!r} is out of range")
            amount = amount.scaleb(exponent)
    else:
        raise QuantityError(f"expected a quantity (string or number), got {type(value).__name__}")
    if abs(amount) >= _LIMIT:
        raise QuantityError(f"{value!r} is out of range")
    return amount


def quantity_value(amount: Decimal) -> int:
    """Go's `Quantity.Value()`: the integer value, rounded up away from zero."""
    return int(amount.to_integral_value(rounding=ROUND_UP))
