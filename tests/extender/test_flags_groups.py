"""--group-topology-levels and --group-hold: defaults, parsing, bounds at their values."""

from __future__ import annotations

import pytest

from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.settings import DEFAULT_GROUP_HOLD_S, MAX_GROUP_HOLD_S


def test_defaults_are_the_nvlink_clique_and_five_minutes() -> None:
    api = build_config([]).api
    assert api.group_levels == ("nvidia.com/gpu.clique",) and api.group_hold_s == DEFAULT_GROUP_HOLD_S == 300.0


def test_levels_are_trimmed_deduplicated_and_kept_in_order() -> None:
    config = build_config(
        ["--group-topology-levels", " nvidia.com/gpu.clique, cloud.google.com/gce-topology-block,nvidia.com/gpu.clique"]
    )
    assert config.api.group_levels == ("nvidia.com/gpu.clique", "cloud.google.com/gce-topology-block")


@pytest.mark.parametrize("text", ["", " , ", "rack one", "k" * 318])
def test_levels_that_name_no_label_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="--group-topology-levels"):
        build_config(["--group-topology-levels", text])


def test_a_label_key_of_the_longest_length_is_taken() -> None:
    assert build_config(["--group-topology-levels", "k" * 317]).api.group_levels == ("k" * 317,)


@pytest.mark.parametrize(
    ("value", "ok"),
    [("0", False), ("0.001", True), (str(MAX_GROUP_HOLD_S), True), ("3600.001", False), ("nan", False), ("-5", False)],
)
def test_group_hold_bounds(value: str, ok: bool) -> None:
    if ok:
        assert build_config(["--group-hold", value]).api.group_hold_s == float(value)
    else:
        with pytest.raises(ConfigError, match="--group-hold"):
            build_config(["--group-hold", value])
