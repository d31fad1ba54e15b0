"""The extender's flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.flags import ConfigError, build_config, build_parser


def test_defaults() -> None:
    config = build_config([])
    assert str(config.http_addr) == "0.0.0.0:8888" and str(config.grpc_addr) == "0.0.0.0:9090"
    assert (config.idle_rule.max_utilization_percent, config.idle_rule.max_memory_used_percent) == (30.0, 50.0)
    policy = config.api.policy
    assert (policy.stale_after_s, policy.stale_policy, policy.no_fit_policy) == (10.0, "fail-open", "pass-all")
    assert config.api.gpu_resources == ("nvidia.com/gpu",) and config.api.compact_priorities
    # 5,000 node names (~110 KiB) plus a Pod as large as etcd stores (1.5 MiB); the event loop
    # is never held over 100 ms within it (bench/bench_hostile_http.py).
    assert config.api.max_body_bytes == 2 * 1024**2
    assert (config.api.max_candidates, config.api.body_read_timeout_s) == (25_000, 10.0)
    assert config.api.default_class_policy == "FirstAvailable"
    assert (config.inventory, config.kubernetes, config.kubeconfig) == (None, False, None)
    # Safe by default: a new replica waits for the agents instead of deciding on assumed data.
    assert config.api.readiness_grace_s == 30.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--http-addr", "8888"], "expected HOST:PORT"),
        (["--grpc-addr", "h:70000"], "outside 0..65535"),
        (["--idle-max-utilization", "0"], "must be within (0, 100]"),
        (["--idle-max-sm-active", "0"], "must be within (0, 100]"),
        (["--idle-max-sm-active", "100.01"], "must be within (0, 100]"),
        (["--idle-max-sm-active", "nan"], "must be within (0, 100]"),
        (["--idle-max-sm-active", "none"], "is not a percent or off"),
        (["--stale-after", "0"], "must be positive"),
        (["--max-body-bytes", "100"], "below 64 KiB"),
        (["--max-body-bytes", str(64 * 1024 - 1)], "below 64 KiB"),
        (["--max-candidates", "0"], "must be at least 1"),
        (["--body-read-timeout", "0"], "must be a positive number of seconds"),
        (["--body-read-timeout", "-1"], "must be a positive number of seconds"),
        (["--body-read-timeout", "nan"], "must be a positive number of seconds"),
        (["--body-read-timeout", "inf"], "must be a positive number of seconds"),
        (["--inventory", "/nonexistent"], "no such file"),
        (["--inventory", ".", "--kubernetes"], "pick one"),
        (["--kubeconfig", "/k"], "only applies with --kubernetes"),
    ],
)
def test_flag_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_config(argv)


def test_help_explains_the_policies() -> None:
    text = build_parser().format_help()
    for phrase in ("nodeCacheCapable: true", "fail-closed", "pass-all", "--inventory", "--gpu-resource"):
        assert phrase in text


def test_request_bounds_are_accepted_at_their_edges() -> None:
    smallest = build_config(
        ["--max-body-bytes", str(64 * 1024), "--max-candidates", "1", "--body-read-timeout", "0.001"]
    ).api
    assert (smallest.max_body_bytes, smallest.max_candidates, smallest.body_read_timeout_s) == (65536, 1, 0.001)


def test_help_explains_the_request_bounds() -> None:
    text = " ".join(build_parser().format_help().split())
    for phrase in (
        "--max-body-bytes",
        "22 B per node name",
        "etcd",
        "100 ms",
        "--max-candidates",
        "too_many_nodes",
        "--body-read-timeout",
        "408",
    ):
        assert phrase in text, phrase


def test_the_stale_policy_help_says_what_the_decision_does() -> None:
    """One truth about stale nodes (issue 26): --help said stale counts as "all allocatable GPUs
    idle" while the decision (decide/README.md) counts them as just enough, never all idle."""
    text = " ".join(build_parser().format_help().split())
    assert "all allocatable GPUs idle" not in text
    assert "never as all idle" in text


def test_the_sm_activity_rule_off_from_a_config_file_needs_the_word_quoted(tmp_path: Path) -> None:
    quoted = tmp_path / "quoted.yaml"
    quoted.write_text('idle-max-sm-active: "off"\n')
    assert build_config(["--config", str(quoted)], {}).idle_rule.max_sm_active_percent is None
    bare = tmp_path / "bare.yaml"
    bare.write_text("idle-max-sm-active: off\n")  # YAML 1.1: the boolean false
    with pytest.raises(ConfigError, match='got False: quote a word, as "off"'):
        build_config(["--config", str(bare)], {})


def test_the_sm_activity_rule_is_on_by_default_off_on_request_and_taken_at_its_edges() -> None:
    assert build_config([]).idle_rule.max_sm_active_percent == 10.0
    assert build_config([]).idle_rule == IdleRule()  # one home for the default: common/idle_rule.py
    for off in ("off", "OFF", " off "):
        assert build_config(["--idle-max-sm-active", off]).idle_rule.max_sm_active_percent is None
    assert build_config([], {"GPU_EXTENDER_IDLE_MAX_SM_ACTIVE": "off"}).idle_rule.max_sm_active_percent is None
    assert build_config(["--idle-max-sm-active", "100"]).idle_rule.max_sm_active_percent == 100.0
    assert build_config(["--idle-max-sm-active", "0.01"]).idle_rule.max_sm_active_percent == 0.01


def test_cleanup_on_exit_is_off_by_default_on_by_flag_env_or_file_and_needs_a_writer(tmp_path: Path) -> None:
    assert build_config(["--kubernetes"], env={}).publish.cleanup_on_exit is False
    assert build_config(["--kubernetes", "--cleanup-on-exit"], env={}).publish.cleanup_on_exit is True
    on = {"GPU_EXTENDER_CLEANUP_ON_EXIT": "true"}
    assert build_config(["--kubernetes"], env=on).publish.cleanup_on_exit is True
    assert build_config(["--kubernetes", "--no-cleanup-on-exit"], env=on).publish.cleanup_on_exit is False
    config = tmp_path / "config.yaml"
    config.write_text("cleanup-on-exit: true\n")
    assert build_config(["--kubernetes", "--config", str(config)], env={}).publish.cleanup_on_exit is True
    for argv in (["--cleanup-on-exit"], ["--kubernetes", "--device-taints", "off", "--cleanup-on-exit"]):
        with pytest.raises(ConfigError, match="--cleanup-on-exit needs --kubernetes and --device-taints on"):
            build_config(argv, env={})
    text = " ".join(build_parser().format_help().split())
    assert "Off by default: a rolling update would clear and rewrite every rule and condition" in text
    assert "before it gives the Lease up, within 20 s" in text and "gpu-extender cleanup" in text
