"""Reading decoded JSON/YAML (Kubernetes objects, scheduler requests) without trusting its shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def object_at(parent: Any, key: str) -> dict[str, Any]:
    """`parent[key]` when both are JSON objects, else an empty one: a missing or
    mistyped field reads as absent (callers that must refuse it check first)."""
    if not isinstance(parent, Mapping):
        return {}
    value = parent.get(key)
    return value if isinstance(value, dict) else {}
