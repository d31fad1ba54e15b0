"""Reading decoded JSON/YAML without trusting its shape: the one reader of untrusted fields
(scheduler requests, Pods, Kubernetes and OME objects, inventory files) and its one error type.

- `object_at(parent, key)`: lenient; a missing or mistyped object reads as empty, for callers
  that only look (logs, optional hints).
- `Fields(subject)`: strict; typed access where a wrong type is refused, with the object and the
  field path in the message (`InvalidInput`).
- `InvalidInput`: what every refusal raises. `code` is a short, stable label (metrics, the HTTP
  answer's `reason`); the message is for humans and shows refused values bounded (`shown`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, NoReturn

# How much of a refused value a message shows: enough to recognise it, never the whole
# of a megabyte string (nor an integer of more than 4,300 digits, which str() refuses).
_SHOWN_CHARS = 40
# An RFC 3339 time with nanoseconds and an offset is 35 characters: longer is not one (and is not parsed).
_MAX_TIME_CHARS = 64
MAX_OBJECT_NAME_CHARS = 253  # a Kubernetes object name or UID, at most (a DNS subdomain)


class InvalidInput(ValueError):
    """Input refused. `subject` names the object and `path` the field, where the reader knows them;
    `problem` is the message without them."""

    def __init__(self, code: str, message: str, *, subject: str = "", path: str = "", problem: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.subject = subject
        self.path = path
        self.problem = problem or message


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


def described(value: Any) -> str:
    """`value`'s type and, for a scalar, the value itself (bounded): "list (3 items)", "int 5"."""
    if isinstance(value, Mapping):
        return f"{type(value).__name__} ({_counted(len(value), 'key')})"
    if isinstance(value, list | tuple):
        return f"{type(value).__name__} ({_counted(len(value), 'item')})"
    return f"{type(value).__name__} {shown(value)}"


def _counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def timestamp(value: Any) -> datetime | None:
    """An RFC 3339 time with its zone (the API server's `2026-12-07T05:58:29Z`), or None for
    anything else: lenient, for times that only order or age things (never refused)."""
    if not isinstance(value, str) or len(value) > _MAX_TIME_CHARS:
        return None
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else None


def pod_uid(pod: Any) -> str:
    """metadata.uid of a Pod kube-scheduler sent ("" when absent, mistyped or longer than a name):
    read once per call, the key of its bindings, group members and preemptions."""
    uid = object_at(pod, "metadata").get("uid")
    return uid if isinstance(uid, str) and len(uid) <= MAX_OBJECT_NAME_CHARS else ""


def nominated_node(pod: Any) -> str:
    """status.nominatedNodeName: where kube-scheduler's preemption made room for the pod ("" none)."""
    node = object_at(pod, "status").get("nominatedNodeName")
    return node if isinstance(node, str) and len(node) <= MAX_OBJECT_NAME_CHARS else ""


def object_at(parent: Any, key: str) -> dict[str, Any]:
    """`parent[key]` when both are JSON objects, else an empty one: a missing or
    mistyped field reads as absent (callers that must refuse it use Fields)."""
    if not isinstance(parent, Mapping):
        return {}
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


class Fields:
    """Typed access to one object's fields. An absent field (None) reads as None; a field of the
    wrong type is refused with InvalidInput naming `subject` (which a reader may refine once it
    knows the object's name) and the field's path."""

    __slots__ = ("code", "subject")

    def __init__(self, subject: str = "", code: str = "wrong_type") -> None:
        self.subject = subject
        self.code = code

    def fail(self, path: str, problem: str) -> NoReturn:
        message = ": ".join(part for part in (self.subject, path, problem) if part)
        raise InvalidInput(self.code, message, subject=self.subject, path=path, problem=problem)

    def mapping(self, value: Any, path: str, *, required: bool = False) -> Mapping[str, Any] | None:
        if value is None:
            if required:
                self.fail(path, "required field is missing")
            return None
        if not isinstance(value, Mapping):
            self.fail(path, f"expected an object, got {described(value)}")
        return value

    def string(self, value: Any, path: str) -> str | None:
        if value is None or isinstance(value, str):
            return value
        self.fail(path, f"expected a string, got {described(value)}")

    def text(self, value: Any, path: str) -> str:
        """A string field, "" when absent."""
        return self.string(value, path) or ""

    def boolean(self, value: Any, path: str) -> bool | None:
        if value is None or isinstance(value, bool):
            return value
        self.fail(path, f"expected true or false, got {described(value)}")

    def integer(
        self, value: Any, path: str, bounds: tuple[int, int] | None = None, *, whole_floats: bool = False
    ) -> int | None:
        """`whole_floats`: 989.0 reads as 989 (YAML and JSON readers may give a float for an integer)."""
        if value is None:
            return None
        if whole_floats and isinstance(value, float) and value.is_integer():
            value = int(value)
        # bool is an int in Python, not in JSON.
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {described(value)}")
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            self.fail(path, f"{shown(value)} is out of range [{bounds[0]}, {bounds[1]}]")
        return value

    def items(self, value: Any, path: str) -> list[Any]:
        """A list field, [] when absent."""
        if value is None:
            return []
        if not isinstance(value, list | tuple):
            self.fail(path, f"expected a list, got {described(value)}")
        return list(value)

    def strings(self, value: Any, path: str) -> tuple[str, ...] | None:
        if value is None:
            return None
        return tuple(self.text(v, f"{path}[{i}]") for i, v in enumerate(self.items(value, path)))

    def keyed(self, value: Any, path: str) -> list[tuple[str, Any]]:
        """A map's entries sorted by key (deterministic, unlike a Go map)."""
        m = self.mapping(value, path)
        if m is None:
            return []
        for key in m:
            if not isinstance(key, str):
                self.fail(path, f"expected string keys, got {described(key)}")
        return sorted(m.items())

    def string_map(self, value: Any, path: str) -> dict[str, str]:
        """A map of strings to strings, {} when absent."""
        m = self.mapping(value, path)
        if m is None:
            return {}
        for k, v in m.items():
            if not isinstance(k, str) or not isinstance(v, str):
                self.fail(f"{path}[{shown(k)}]", f"expected a string value, got {described(v)}")
        return dict(m)
