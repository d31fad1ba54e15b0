"""The ingest bounds' flags: --max-clock-skew and --max-unknown-nodes, each bound tested on both sides."""

from __future__ import annotations

import pytest

from gpuextender.extender.flags import ConfigError, build_config, build_parser


def test_defaults() -> None:
    config = build_config([])
    assert (config.max_clock_skew_s, config.max_unknown_nodes) == (30.0, 64)


@pytest.mark.parametrize("value", ["1", "86400", "2.5"])
def test_clock_skew_within_its_range(value: str) -> None:
    assert build_config(["--max-clock-skew", value]).max_clock_skew_s == float(value)


@pytest.mark.parametrize("value", ["0.999", "86400.001", "0", "-5", "nan", "inf"])
def test_clock_skew_outside_its_range(value: str) -> None:
    with pytest.raises(ConfigError, match=r"--max-clock-skew .* must be within \[1, 86400\] seconds"):
        build_config(["--max-clock-skew", value])


def test_unknown_nodes_bound() -> None:
    assert build_config(["--max-unknown-nodes", "0"]).max_unknown_nodes == 0
    with pytest.raises(ConfigError, match="--max-unknown-nodes -1 must be >= 0"):
        build_config(["--max-unknown-nodes", "-1"])


def test_help_names_the_bounds() -> None:
    text = build_parser().format_help()
    assert "--max-clock-skew" in text and "--max-unknown-nodes" in text
