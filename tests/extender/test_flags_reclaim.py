"""--reclaim and --reclaim-min-runtime: off by default, the bounds at exactly their values on both
sides, what reclaim needs, and --help."""

from __future__ import annotations

import pytest

from gpuextender.extender.flags import ConfigError, build_config, build_parser
from gpuextender.extender.settings import MAX_RECLAIM_MIN_RUNTIME_S, MIN_RECLAIM_MIN_RUNTIME_S, RECLAIM_LABEL

KUBE = ["--kubernetes"]


def test_reclaim_is_off_by_default_and_takes_dry_run_and_on() -> None:
    publish = build_config([], env={}).publish
    assert (publish.reclaim, publish.reclaim_min_runtime_s) == ("off", 1800.0)
    assert build_config([*KUBE, "--reclaim=dry-run"], env={}).publish.reclaim == "dry-run"
    assert build_config([*KUBE, "--reclaim", "on"], env={}).publish.reclaim == "on"
    assert build_config([*KUBE], env={"GPU_EXTENDER_RECLAIM": "dry-run"}).publish.reclaim == "dry-run"


@pytest.mark.parametrize("value", [MIN_RECLAIM_MIN_RUNTIME_S, MAX_RECLAIM_MIN_RUNTIME_S])
def test_the_min_runtime_is_taken_at_its_bounds(value: float) -> None:
    config = build_config([*KUBE, "--reclaim=on", f"--reclaim-min-runtime={value:g}"], env={})
    assert config.publish.reclaim_min_runtime_s == value


@pytest.mark.parametrize(
    "value", [MIN_RECLAIM_MIN_RUNTIME_S - 0.001, MAX_RECLAIM_MIN_RUNTIME_S + 0.001, float("nan"), float("inf")]
)
def test_the_min_runtime_is_refused_past_its_bounds(value: float) -> None:
    with pytest.raises(ConfigError, match=r"--reclaim-min-runtime .* must be within \[60, 604800\] seconds"):
        build_config([*KUBE, f"--reclaim-min-runtime={value!r}"], env={})


@pytest.mark.parametrize(
    "argv", [["--reclaim=on"], ["--reclaim=dry-run"], [*KUBE, "--device-taints=off", "--reclaim=on"]]
)
def test_reclaim_needs_kubernetes_and_the_leader(argv: list[str]) -> None:
    with pytest.raises(ConfigError, match="needs --kubernetes and --device-taints on"):
        build_config(argv, env={})
    build_config([*KUBE, "--reclaim=off"], env={})  # off needs nothing


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--reclaim=yes"])


def test_help_explains_reclaim_and_its_safety() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "--reclaim {off,dry-run,on}" in text
    for words in (
        f"{RECLAIM_LABEL[0]}={RECLAIM_LABEL[1]}",
        "Eviction API (PodDisruptionBudgets honoured)",
        "dry-run: the Events and gpu_extender_reclaim_evictions_total say what would be evicted, nothing is",
        "never evicts a pod that has run (status.startTime) for less than this. Within [60, 604800]",
    ):
        assert words in text, words
