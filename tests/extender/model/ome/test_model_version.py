"""OME's modelver parsing and the runtime-version rule (ome-api.md §7.6), table-driven."""

from __future__ import annotations

import pytest

from gpuextender.extender.model.ome.model_version import (
    ModelVersion,
    VersionParseError,
    compare_model_versions,
    parse_model_version,
    runtime_version_accepts,
)

EQ, GT, GTE = "Equal", "GreaterThan", "GreaterThanOrEqual"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", ModelVersion(1, precision=1)),
        ("v1", ModelVersion(1, major_prefix="v", precision=1)),
        ("1.12", ModelVersion(1, 12, precision=2)),
        ("v0.8.0", ModelVersion(0, 8, 0, major_prefix="v")),
        ("0.6.0", ModelVersion(0, 6, 0)),
        ("4.51.3-SAM-HQ-preview", ModelVersion(4, 51, 3, pre=("SAM-HQ-preview",))),
        ("4.43.0.dev0", ModelVersion(4, 43, 0, dev=("dev0",))),
        ("4.43.0+build", ModelVersion(4, 43, 0, build=("build",))),
        ("1.2.3-rc.1+b.2", ModelVersion(1, 2, 3, pre=("rc", "1"), build=("b", "2"))),
        ("1.2.3+b-x", ModelVersion(1, 2, 3, build=("b-x",))),  # "+" is taken off before "-"
        ("1.2.3.4", ModelVersion(1, 2, 3, dev=("4",))),  # a fourth part is a dev part
        ("1.2.0.dev1-rc1", ModelVersion(1, 2, 0, pre=("rc1",), dev=("dev1",))),
        ("18446744073709551615", ModelVersion(2**64 - 1, precision=1)),
    ],
)
def test_parse(text: str, expected: ModelVersion) -> None:
    assert parse_model_version(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "v",  # prefix without a number
        "V1",  # only a lowercase v is a prefix
        "vv1",
        "1.",
        ".1",
        "01",  # leading zero
        "1.02",
        "1.2.03",
        "1-rc1",  # suffixes only on the patch part
        "1.2-rc1",
        "1.2.3-",  # empty pre-release element
        "1.2.3+",
        "1.2.3-rc..1",
        "1.2.3.",
        "x",
        "1.2.x",
        " 1.2.3",
        "18446744073709551616",  # beyond uint64
        "\u0661.0.0",  # an Arabic-Indic digit: Go accepts ASCII digits only
    ],
)
def test_parse_errors(text: str) -> None:
    with pytest.raises(VersionParseError):
        parse_model_version(text)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("1.0.0", "1.0.0", 0),
        ("1", "1.0.0", 0),  # precision ignored
        ("v1.2", "1.2.0", 0),  # prefix ignored
        ("1.10.0", "1.9.0", 1),  # numeric, not textual
        ("2.0.0", "10.0.0", -1),
        ("1.0.1", "1.0.0", 1),
        ("1.0.0-rc1", "1.0.0", 1),  # a longer pre list is greater (element-wise, then length)
        ("1.0.0-rc1", "1.0.0-rc2", -1),
        ("1.0.0-rc.10", "1.0.0-rc.9", -1),  # elements compare as strings
        ("1.0.0+b1", "1.0.0+b1", 0),
        ("1.0.0.dev0", "1.0.0.dev1", -1),
    ],
)
def test_compare(a: str, b: str, expected: int) -> None:
    assert compare_model_versions(parse_model_version(a), parse_model_version(b)) == expected
    assert compare_model_versions(parse_model_version(b), parse_model_version(a)) == -expected


@pytest.mark.parametrize(
    ("runtime", "model", "operator", "accepted"),
    [
        # Equal (also the nil operator): precision and prefix ignored
        ("1.0.0", "1.0.0", None, True),
        ("1.0.0", "1.0.0", EQ, True),
        ("1", "1.0.0", EQ, True),
        ("v1", "1", EQ, True),
        ("1.0.1", "1.0.0", EQ, False),
        ("1.0.0", "1.0.1", None, False),
        # GreaterThan: the runtime version is an upper bound
        ("1.8.0", "1.7.0", GT, True),
        ("1.8.0", "1.8.0", GT, False),
        ("1.8.0", "1.9.0", GT, False),
        # GreaterThanOrEqual
        ("1.8.0", "1.8.0", GTE, True),
        ("1.8.0", "1.7.9", GTE, True),
        ("1.8.0", "1.8.1", GTE, False),
        # same-part-count rule for ordered operators
        ("2", "1.0.0", GT, False),
        ("2.0", "1.0", GT, True),
        ("1.8", "1.7.0", GTE, False),
        ("2", "1", GTE, True),
        # same prefix required for ordered operators
        ("v2.0.0", "1.0.0", GT, False),
        ("2.0.0", "v1.0.0", GTE, False),
        ("v2.0.0", "v1.0.0", GT, True),
        # an unofficial version on either side forces equality
        ("2.0.0", "1.0.0-rc1", GT, False),
        ("1.0.0-rc1", "1.0.0-rc1", GT, True),
        ("4.43.0.dev0", "4.43.0.dev0", GT, True),
        ("2.0.0+b", "1.0.0", GTE, False),
        ("1.0.0+b", "1.0.0+b", GTE, True),
        ("1.0.0+b1", "1.0.0+b2", EQ, False),
        ("1.0.0-rc1", "1.0.0", EQ, False),
        ("1.2.3.4", "1.2.3", GTE, False),  # four parts: dev, hence unofficial
        # any other operator string means Equal (operators are case-sensitive)
        ("1.8.0", "1.7.0", "LessThan", False),
        ("1.8.0", "1.8.0", "LessThan", True),
        ("1.9.0", "1.8.0", "greaterthan", False),
        ("1.8.0", "1.8.0", "", True),
        # a parse error on either side is a mismatch
        ("1.x", "1.0.0", EQ, False),
        ("1.0.0", "", EQ, False),
        ("2.0.0", "V1.0.0", GT, False),
        ("1-rc1", "1-rc1", EQ, False),
    ],
)
def test_runtime_version_accepts(runtime: str, model: str, operator: str | None, accepted: bool) -> None:
    assert runtime_version_accepts(runtime, model, operator) is accepted


def test_unofficial_flag() -> None:
    assert not parse_model_version("1.2.3").unofficial
    assert parse_model_version("1.2.3-rc1").unofficial
    assert parse_model_version("1.2.3+b").unofficial
    assert parse_model_version("1.2.3.dev0").unofficial
