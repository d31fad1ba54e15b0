"""The ingest's flags: --max-clock-skew, --max-unknown-nodes and --ingest-workers, each bound tested on
both sides."""

from __future__ import annotations

import pytest

from gpuextender.extender import flags
from gpuextender.extender.flags import ConfigError, build_config, build_parser
from gpuextender.extender.settings import auto_ingest_workers


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


@pytest.mark.parametrize(("value", "workers"), [("1", 1), ("64", 64), (" 8 ", 8)])
def test_ingest_workers_within_its_range(value: str, workers: int) -> None:
    assert build_config(["--ingest-workers", value]).ingest_workers == workers


@pytest.mark.parametrize("value", ["0", "65", "-1"])
def test_ingest_workers_outside_its_range(value: str) -> None:
    with pytest.raises(ConfigError, match=rf"--ingest-workers {value} must be within \[1, 64\] \(or auto\)"):
        build_config(["--ingest-workers", value])


@pytest.mark.parametrize("value", ["many", "2.5", ""])
def test_ingest_workers_that_are_no_number(value: str) -> None:
    with pytest.raises(ConfigError, match="a number of processes, or auto"):
        build_config(["--ingest-workers", value])


@pytest.mark.parametrize(("cpus", "workers"), [(1, 1), (2, 1), (3, 2), (9, 8), (10, 8), (96, 8)])
def test_auto_ingest_workers_leave_a_cpu_for_the_main_process(cpus: int, workers: int) -> None:
    assert auto_ingest_workers(cpus) == workers


def test_auto_is_the_default_and_follows_the_usable_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flags, "usable_cpus", lambda: 5)
    assert build_config([]).ingest_workers == 4 == build_config(["--ingest-workers", "auto"]).ingest_workers


def test_workers_and_in_process_ingest_contradict() -> None:
    with pytest.raises(ConfigError, match="--ingest-workers and --ingest-in-process contradict"):
        build_config(["--ingest-in-process", "--ingest-workers", "1"])
    assert build_config(["--ingest-in-process"]).ingest_in_process  # auto (the default) is no contradiction
