"""The one error type for input the extender refuses (answered with HTTP 4xx)."""

from __future__ import annotations

from typing import Any

# How much of a refused value a message shows: enough to recognise it, never the whole
# of a megabyte string (nor an integer of more than 4,300 digits, which str() refuses).
_SHOWN_CHARS = 40


class BadRequest(ValueError):
    """`code` is a short, stable label for metrics; the message is for humans."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def shown(value: Any) -> str:
    """`value` for an error message, at most ~80 characters whatever was sent."""
    if isinstance(value, str):
        if len(value) <= _SHOWN_CHARS:
            return repr(value)
        return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"
    return f"a JSON {'object' if isinstance(value, dict) else 'array' if isinstance(value, list) else 'value'}"
