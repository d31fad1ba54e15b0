"""--group-topology-levels, --group-topology-policy, --group-hold and --group-holds-per-namespace: defaults, parsing,
bounds at their values."""

from __future__ import annotations

import pytest

from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.settings import (
    DEFAULT_GROUP_HOLD_S,
    DEFAULT_GROUP_MEMBERS_GRACE_S,
    DEFAULT_GROUPS_PER_NAMESPACE,
    MAX_GROUP_HOLD_S,
    MAX_GROUPS,
)


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


def test_groups_per_namespace_default_is_100_and_reaches_the_book() -> None:
    from gpuextender.common.idle_rule import IdleRule
    from gpuextender.extender.observe.metrics import ExtenderMetrics
    from gpuextender.extender.scheduler.http_api import SchedulerApi
    from gpuextender.extender.state.gpu_state import GpuState

    assert build_config([]).api.groups_per_namespace == DEFAULT_GROUPS_PER_NAMESPACE == 100
    settings = build_config(["--group-holds-per-namespace", "7"]).api
    state = GpuState(IdleRule())
    assert SchedulerApi(state, ExtenderMetrics(state), settings).groups.per_namespace == 7


@pytest.mark.parametrize(
    ("value", "ok"), [("0", False), ("1", True), (str(MAX_GROUPS), True), (str(MAX_GROUPS + 1), False), ("-1", False)]
)
def test_groups_per_namespace_bounds(value: str, ok: bool) -> None:
    if ok:
        assert build_config(["--group-holds-per-namespace", value]).api.groups_per_namespace == int(value)
    else:
        with pytest.raises(ConfigError, match=r"--group-holds-per-namespace .* must be within \[1, 10000\]"):
            build_config(["--group-holds-per-namespace", value])


def test_group_topology_policy_is_required_by_default_preferred_on_request_nothing_else() -> None:
    assert build_config([]).api.group_preferred is False
    assert build_config(["--group-topology-policy", "required"]).api.group_preferred is False
    assert build_config(["--group-topology-policy", "preferred"]).api.group_preferred is True
    with pytest.raises(SystemExit):
        build_config(["--group-topology-policy", "sometimes"])


@pytest.mark.parametrize(
    ("value", "ok"), [("0", False), ("0.001", True), ("3600", True), ("3600.001", False), ("nan", False), ("-1", False)]
)
def test_group_members_grace_bounds(value: str, ok: bool) -> None:
    if ok:
        assert build_config(["--group-members-grace", value]).api.group_members_grace_s == float(value)
    else:
        with pytest.raises(ConfigError, match="--group-members-grace"):
            build_config(["--group-members-grace", value])


def test_group_members_grace_default_is_a_minute() -> None:
    assert build_config([]).api.group_members_grace_s == DEFAULT_GROUP_MEMBERS_GRACE_S == 60.0
