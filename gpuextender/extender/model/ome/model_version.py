"""OME's model/framework version rules (`pkg/modelver/util.go` and the matcher's
`compareModel{Format,Framework}Versions`), ome-api.md §7.6.

Parsing (`parse_model_version`), like `modelver.Parse`:
- split on "." into at most 3 parts; `precision` = the number of parts (1-3);
- an optional lowercase "v" on the major part is kept as `major_prefix` ("V1" is an error);
- every numeric part is ASCII digits, no leading zero, fits uint64; an empty part is an
  error ("1.", "v");
- only the *third* part may carry suffixes, taken off in this order: "+build" (split on
  "."), then "-pre" (split on "."), then ".dev" (what remains after the first ".", split on
  "."), e.g. "4.43.0.dev0" -> dev ("dev0",). So "1.2.3.4" has dev ("4",), while "1-rc1"
  and "1.2-rc1" are parse errors; an empty suffix element ("1.2.3-") is an error;
- missing minor/patch count as 0.

A version is *unofficial* when it has any pre, build or dev element.

`runtime_version_accepts(runtime_version, model_version, operator)`:
- either string fails to parse -> False;
- either version unofficial, or operator Equal (also when None: the Go nil pointer) ->
  `compare_model_versions == 0`, which ignores precision and prefix (1 == 1.0.0 == v1);
- otherwise different precision or different prefix -> False (the same-part-count rule);
- "GreaterThan": runtime > model; "GreaterThanOrEqual": runtime >= model. The *runtime's*
  version is an upper bound: runtime 1.8.0 GreaterThan accepts model 1.7.0, rejects 1.8.0;
- any other operator string -> equality (Go's `default:` branch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

OPERATOR_EQUAL = "Equal"
OPERATOR_GREATER_THAN = "GreaterThan"
OPERATOR_GREATER_THAN_OR_EQUAL = "GreaterThanOrEqual"

_DIGITS = frozenset("0123456789")
_UINT64_MAX = 2**64 - 1
_MAJOR_PREFIXES = ("v",)  # modelver's acceptedMajorVersionPrefixes: lowercase only


class VersionParseError(ValueError):
    """A version string `modelver.Parse` would refuse."""


@dataclass(frozen=True, slots=True)
class ModelVersion:
    major: int
    minor: int = 0
    patch: int = 0
    major_prefix: str = ""
    pre: tuple[str, ...] = ()
    build: tuple[str, ...] = ()
    dev: tuple[str, ...] = ()
    precision: int = 3  # how many of major.minor.patch were written

    @property
    def unofficial(self) -> bool:
        return bool(self.pre or self.build or self.dev)


def _numeric(text: str, part: str) -> int:
    # Go: containsOnly(digits) passes "" vacuously, then ParseUint("") fails; same result.
    if not text or not set(text) <= _DIGITS:
        raise VersionParseError(f"invalid character(s) in {part} number {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise VersionParseError(f"{part} must not have leading zeroes: {text!r}")
    value = int(text)
    if value > _UINT64_MAX:
        raise VersionParseError(f"{part} number {text!r} is out of range")
    return value


def _suffix(text: str, what: str) -> tuple[str, ...]:
    elements = tuple(text.split("."))
    if any(not e for e in elements):
        raise VersionParseError(f"{what} meta data is empty")
    return elements


def parse_model_version(text: str) -> ModelVersion:
    """`modelver.Parse`; raises VersionParseError."""
    if not text:
        raise VersionParseError("version string empty")
    parts = text.split(".", 2)
    precision = len(parts)
    major_text, prefix = parts[0], ""
    for candidate in _MAJOR_PREFIXES:
        if major_text.startswith(candidate):
            prefix, major_text = candidate, major_text[len(candidate) :]
            break
    major = _numeric(major_text, "major")
    minor = _numeric(parts[1] if precision > 1 else "0", "minor")
    patch_text = parts[2] if precision > 2 else "0"
    build: tuple[str, ...] = ()
    pre: tuple[str, ...] = ()
    dev: tuple[str, ...] = ()
    # Same order as Go: "+build" first, then "-pre", then ".dev" from what is left.
    if (i := patch_text.find("+")) != -1:
        build_text, patch_text = patch_text[i + 1 :], patch_text[:i]
        build = _suffix(build_text, "Build")
    if (i := patch_text.find("-")) != -1:
        pre_text, patch_text = patch_text[i + 1 :], patch_text[:i]
        pre = _suffix(pre_text, "Prerelease")
    if (i := patch_text.find(".")) != -1:
        dev_text, patch_text = patch_text[i + 1 :], patch_text[:i]
        dev = _suffix(dev_text, "Dev")
    patch = _numeric(patch_text, "patch")
    # Go validates the suffix elements after the patch number; the error kind differs
    # only in wording, and any error makes a comparison false.
    return ModelVersion(major, minor, patch, prefix, pre, build, dev, precision)


_Comparable = TypeVar("_Comparable", int, str)


def _cmp(a: _Comparable, b: _Comparable) -> int:
    return -1 if a < b else int(a != b)


def _cmp_elements(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    # Go compareStringSlices: first differing element (byte order == code point order
    # for UTF-8), then the shorter list is smaller. So "1.0.0-rc1" > "1.0.0".
    for x, y in zip(a, b, strict=False):
        if x != y:
            return _cmp(x, y)
    return _cmp(len(a), len(b))


def compare_model_versions(v: ModelVersion, o: ModelVersion) -> int:
    """`modelver.CompareVersion`: -1, 0 or 1. Precision and prefix play no part."""
    for x, y in ((v.major, o.major), (v.minor, o.minor), (v.patch, o.patch)):
        if x != y:
            return _cmp(x, y)
    for xs, ys in ((v.pre, o.pre), (v.build, o.build), (v.dev, o.dev)):
        if c := _cmp_elements(xs, ys):
            return c
    return 0


def runtime_version_accepts(runtime_version: str, model_version: str, operator: str | None) -> bool:
    """Whether a runtime entry's version (with its operator) accepts the model's version."""
    try:
        model = parse_model_version(model_version)
        runtime = parse_model_version(runtime_version)
    except VersionParseError:
        return False
    op = OPERATOR_EQUAL if operator is None else operator
    if model.unofficial or runtime.unofficial or op == OPERATOR_EQUAL:
        # Unofficial versions force equality whatever the operator says.
        return compare_model_versions(runtime, model) == 0
    if model.precision != runtime.precision or model.major_prefix != runtime.major_prefix:
        return False
    if op == OPERATOR_GREATER_THAN:
        return compare_model_versions(runtime, model) > 0
    if op == OPERATOR_GREATER_THAN_OR_EQUAL:
        return compare_model_versions(runtime, model) >= 0
    return compare_model_versions(runtime, model) == 0
