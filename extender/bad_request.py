"""The one error type for input the extender refuses (answered with HTTP 4xx)."""

from __future__ import annotations


class BadRequest(ValueError):
    """`code` is a short, stable label for metrics; the message is for humans."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
