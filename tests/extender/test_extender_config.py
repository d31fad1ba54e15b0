"""The extender's flags."""

from __future__ import annotations

import pytest

from extender.config import ConfigError, build_config, build_parser


def test_defaults() -> None:
    config = build_config([])
    assert str(config.http_addr) == "0.0.0.0:8888" and str(config.grpc_addr) == "0.0.0.0:9090"
    assert (config.idle_rule.max_utilization_percent, config.idle_rule.max_memory_used_percent) == (30.0, 50.0)
    policy = config.api.policy
    assert (policy.stale_after_s, policy.stale_policy, policy.no_fit_policy) == (10.0, "fail-open", "pass-all")
    assert config.api.gpu_resources == ("nvidia.com/gpu",) and config.api.compact_priorities
    assert config.api.max_body_bytes == 64 * 1024**2
    assert config.api.default_class_policy == "FirstAvailable"
    assert (config.inventory, config.kubernetes, config.kubeconfig) == (None, False, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--http-addr", "8888"], "expected HOST:PORT"),
        (["--grpc-addr", "h:70000"], "outside 0..65535"),
        (["--idle-max-utilization", "0"], "must be within (0, 100]"),
        (["--stale-after", "0"], "must be positive"),
        (["--max-body-bytes", "100"], "below 64 KiB"),
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
