"""flag > environment > config file > default, for both programs, through their real parsers."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from gpuextender.agent.settings import ConfigError as AgentConfigError
from gpuextender.agent.settings import build_config as agent_config
from gpuextender.agent.settings import build_parser as agent_parser
from gpuextender.common.layered_config import MAX_CONFIG_BYTES, describe_sources
from gpuextender.common.logs import JsonFormatter
from gpuextender.extender.flags import ConfigError, build_config, build_parser

NODE = {"NODE_NAME": "gpu-node-1"}


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_each_source_overrides_the_one_below(tmp_path: Path) -> None:
    config = write(tmp_path, "stale-after: 20\nshortlist: 7\nmax-unknown-nodes: 9\n")
    assert build_config([], {}).api.policy.stale_after_s == 10.0  # default
    c = build_config(["--config", str(config)], {})
    assert (c.api.policy.stale_after_s, c.api.shortlist, c.max_unknown_nodes) == (20.0, 7, 9)
    c = build_config(["--config", str(config)], {"GPU_EXTENDER_STALE_AFTER": "30", "GPU_EXTENDER_SHORTLIST": "8"})
    assert (c.api.policy.stale_after_s, c.api.shortlist, c.max_unknown_nodes) == (30.0, 8, 9)
    c = build_config(["--config", str(config), "--stale-after", "40"], {"GPU_EXTENDER_STALE_AFTER": "30"})
    assert (c.api.policy.stale_after_s, c.api.shortlist) == (40.0, 7)
    assert dict(c.sources) == {"shortlist": f"file {config}", "max_unknown_nodes": f"file {config}"}
    c = build_config(["--config", str(config)], {"GPU_EXTENDER_STALE_AFTER": "30"})
    assert dict(c.sources)["stale_after"] == "env GPU_EXTENDER_STALE_AFTER"
    assert describe_sources(c.sources).startswith("stale-after (env GPU_EXTENDER_STALE_AFTER)")


def test_the_config_file_can_come_from_the_environment_and_the_flag_wins(tmp_path: Path) -> None:
    from_env, from_flag = write(tmp_path, "shortlist: 3\n", "a.yaml"), write(tmp_path, "shortlist: 4\n", "b.yaml")
    assert build_config([], {"GPU_EXTENDER_CONFIG": str(from_env)}).api.shortlist == 3
    assert build_config(["--config", str(from_flag)], {"GPU_EXTENDER_CONFIG": str(from_env)}).api.shortlist == 4


def test_keys_take_dashes_or_underscores_and_an_empty_file_sets_nothing(tmp_path: Path) -> None:
    assert build_config(["--config", str(write(tmp_path, "stale_after: 12\n"))], {}).api.policy.stale_after_s == 12
    assert build_config(["--config", str(write(tmp_path, "", "empty.yaml"))], {}).api.shortlist == 100


def test_a_repeatable_flag_is_replaced_whole_by_a_higher_source(tmp_path: Path) -> None:
    config = write(tmp_path, "gpu-resource: [nvidia.com/gpu, nvidia.com/mig-1g.10gb]\n")
    assert build_config(["--config", str(config)], {}).api.gpu_resources == ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
    env = {"GPU_EXTENDER_GPU_RESOURCE": "example.com/gpu, nvidia.com/gpu.shared"}
    assert build_config(["--config", str(config)], env).api.gpu_resources == (
        "example.com/gpu",
        "nvidia.com/gpu.shared",
    )
    assert build_config(["--config", str(config), "--gpu-resource", "x.io/gpu"], env).api.gpu_resources == ("x.io/gpu",)
    # A single value in the file is a list of one; an empty variable is an empty list (then the default).
    assert build_config(
        ["--config", str(write(tmp_path, "gpu-resource: a.io/gpu\n", "one.yaml"))], {}
    ).api.gpu_resources == ("a.io/gpu",)
    assert build_config(["--config", str(config)], {"GPU_EXTENDER_GPU_RESOURCE": ""}).api.gpu_resources == (
        "nvidia.com/gpu",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("1", True),
        ("Yes", True),
        ("on", True),
        ("false", False),
        ("0", False),
        ("no", False),
        ("OFF", False),
    ],
)
def test_switches_from_the_environment(text: str, expected: bool) -> None:
    # store_true, over a file that switched it on: env false must switch it off again.
    assert build_config([], {"GPU_EXTENDER_INGEST_IN_PROCESS": text}).ingest_in_process is expected
    # BooleanOptionalAction (default on).
    assert agent_config([], {**NODE, "GPU_AGENT_HEALTH_EVENTS": text}).health_events is expected


def test_a_lower_source_switch_is_switched_off_by_a_higher_one(tmp_path: Path) -> None:
    config = write(tmp_path, "ingest-in-process: true\n")
    assert build_config(["--config", str(config)], {}).ingest_in_process is True
    assert (
        build_config(["--config", str(config)], {"GPU_EXTENDER_INGEST_IN_PROCESS": "false"}).ingest_in_process is False
    )
    assert agent_config([], NODE).dcgm_names is True
    agent_file = write(tmp_path, "dcgm-names: false\n", "agent.yaml")
    assert agent_config(["--config", str(agent_file)], NODE).dcgm_names is False
    assert agent_config(["--config", str(agent_file), "--dcgm-names"], NODE).dcgm_names is True


@pytest.mark.parametrize(
    ("argv", "env", "text", "message"),
    [
        (
            [],
            {"GPU_EXTENDER_STALE_AFTER": "soon"},
            None,
            "GPU_EXTENDER_STALE_AFTER: argument --stale-after: invalid float value",
        ),
        (
            [],
            {"GPU_EXTENDER_STALE_POLICY": "maybe"},
            None,
            "GPU_EXTENDER_STALE_POLICY: argument --stale-policy: invalid choice",
        ),
        ([], {"GPU_EXTENDER_INGEST_IN_PROCESS": "sure"}, None, "GPU_EXTENDER_INGEST_IN_PROCESS: 'sure' is not on/off"),
        ([], {"GPU_EXTENDER_SHORTLIST": "-1"}, None, "--shortlist -1 must be >= 0"),  # validated like a flag
        (["--config", "{file}"], {}, "stale-aftr: 20\n", "unknown setting 'stale-aftr'"),
        (["--config", "{file}"], {}, "- stale-after\n", "expected a mapping of settings"),
        (["--config", "{file}"], {}, "stale-after: [1, 2]\n", "stale-after: expected a single value"),
        (
            ["--config", "{file}"],
            {},
            "stale-after: true\n",
            "stale-after: expected a single value (text or number), got True: quote",
        ),
        (["--config", "{file}"], {}, "stale-after: {a: 1}\n", "stale-after: expected a single value"),
        (["--config", "{file}"], {}, "stale-after: [20\n", "not valid YAML"),
        (
            ["--config", "{file}"],
            {},
            "stale-after: " + "[" * 60_000 + "]" * 60_000,
            "not valid YAML",
        ),  # deep: no traceback
        (["--config", "{file}"], {}, "stale-policy: maybe\n", "argument --stale-policy: invalid choice"),
        (["--config", "{file}"], {}, "version: true\n", "unknown setting 'version'"),
        (["--config", "{file}"], {}, "config: other.yaml\n", "unknown setting 'config'"),
        (["--config", "{missing}"], {}, None, "cannot read: No such file or directory"),
        ([], {"GPU_EXTENDER_CONFIG": "{missing}"}, None, "GPU_EXTENDER_CONFIG {missing}: cannot read"),
    ],
)
def test_wrong_settings_are_refused_naming_their_source(
    tmp_path: Path, argv: list[str], env: dict[str, str], text: str | None, message: str
) -> None:
    file, missing = tmp_path / "config.yaml", tmp_path / "missing.yaml"
    if text is not None:
        file.write_text(text)
    argv = [a.format(file=file, missing=missing) for a in argv]
    env = {k: v.format(missing=missing) for k, v in env.items()}
    with pytest.raises(ConfigError) as exc:
        build_config(argv, env)
    assert message.format(missing=missing) in str(exc.value)
    if text is not None:
        assert f"--config {file}: " in str(exc.value)


def test_the_config_file_size_bound_is_exact(tmp_path: Path) -> None:
    line = "stale-after: 20\n"
    at_bound = write(tmp_path, line + "#" * (MAX_CONFIG_BYTES - len(line) - 1) + "\n", "at.yaml")
    assert at_bound.stat().st_size == MAX_CONFIG_BYTES
    assert build_config(["--config", str(at_bound)], {}).api.policy.stale_after_s == 20
    over = write(tmp_path, line + "#" * (MAX_CONFIG_BYTES - len(line)) + "\n", "over.yaml")
    assert over.stat().st_size == MAX_CONFIG_BYTES + 1
    with pytest.raises(ConfigError, match="larger than 256 KiB"):
        build_config(["--config", str(over)], {})


def test_other_variables_with_the_prefix_are_ignored() -> None:
    # Kubernetes service links for a Service named gpu-extender, in every pod of its namespace.
    env = {
        "GPU_EXTENDER_SERVICE_HOST": "10.0.0.1",
        "GPU_EXTENDER_PORT": "tcp://10.0.0.1:8888",
        "GPU_EXTENDER_PORT_8888_TCP_PORT": "8888",
    }
    assert build_config([], env).sources == ()


def test_agent_settings_follow_the_same_rule(tmp_path: Path) -> None:
    config = write(tmp_path, "interval: 2\nextender: [a:9090, b:9090]\nheartbeat: 5\n")
    c = agent_config(["--config", str(config)], NODE)
    assert (c.interval_s, c.extenders, c.heartbeat_s) == (2.0, ("a:9090", "b:9090"), 5.0)
    c = agent_config(
        ["--config", str(config), "--heartbeat", "4"],
        {**NODE, "GPU_AGENT_INTERVAL": "0.5", "GPU_AGENT_EXTENDER": "c:9090"},
    )
    assert (c.interval_s, c.extenders, c.heartbeat_s) == (0.5, ("c:9090",), 4.0)
    # The node name: flag, then GPU_AGENT_NODE_NAME, then the downward API's NODE_NAME.
    assert agent_config([], {"NODE_NAME": "n1", "GPU_AGENT_NODE_NAME": "n2"}).node_name == "n2"
    assert agent_config(["--node-name", "n3"], {"NODE_NAME": "n1", "GPU_AGENT_NODE_NAME": "n2"}).node_name == "n3"
    # The older comma-separated $GPU_AGENT_EXTENDERS still works, below every other source.
    assert agent_config([], {**NODE, "GPU_AGENT_EXTENDERS": "x:1, y:2"}).extenders == ("x:1", "y:2")
    assert agent_config([], {**NODE, "GPU_AGENT_EXTENDERS": "x:1", "GPU_AGENT_EXTENDER": "z:3"}).extenders == ("z:3",)
    assert agent_config([], {**NODE, "GPU_AGENT_EXTENDER_SERVICE": "svc.ns.svc:9090"}).extender_service is not None
    with pytest.raises(AgentConfigError, match="GPU_AGENT_INTERVAL: argument --interval: invalid float value"):
        agent_config([], {**NODE, "GPU_AGENT_INTERVAL": "fast"})
    with pytest.raises(AgentConfigError, match=r"--interval 100.0 must be within"):
        agent_config([], {**NODE, "GPU_AGENT_INTERVAL": "100"})


def test_a_one_shot_command_is_never_a_setting(tmp_path: Path) -> None:
    assert agent_config([], {**NODE, "GPU_AGENT_CLEAR_XID": "all"}).clear_xids == ()
    with pytest.raises(AgentConfigError, match="unknown setting 'clear-xid'"):
        agent_config(["--config", str(write(tmp_path, "clear-xid: all\n"))], NODE)


@pytest.mark.parametrize(
    ("parser", "prefix", "example"),
    [(build_parser, "GPU_EXTENDER_", "STALE_AFTER"), (agent_parser, "GPU_AGENT_", "INTERVAL")],
)
def test_help_states_the_rule_and_needs_no_source_tree(parser, prefix: str, example: str) -> None:  # type: ignore[no-untyped-def]
    text = " ".join(parser().format_help().split())
    assert f"{prefix}<FLAG> ({prefix}{example}=" in text
    assert "Precedence: flag > environment > config file > default." in text
    assert "--config PATH" in text and "--log-format {text,json}" in text
    assert "gpuextender/" not in text and ".py" not in text  # no pointers into the source tree


def test_json_log_lines_carry_the_structured_fields() -> None:
    record = logging.LogRecord("gpu_extender", logging.WARNING, __file__, 1, "refused %s", ("x",), None)
    record.__dict__.update({"verb": "filter", "reason": "too_large", "node": None, "secret": "not a field"})
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "refused x" and entry["level"] == "warning" and entry["logger"] == "gpu_extender"
    assert (entry["verb"], entry["reason"]) == ("filter", "too_large")
    assert "node" not in entry and "secret" not in entry
    assert entry["time"].endswith("Z") and len(entry["time"]) == len("2026-01-01T00:00:00.000Z")


def test_the_programs_log_the_addresses_they_really_bound(tmp_path: Path) -> None:
    """`:0` ports: the start-up line names the real ones, and they answer. JSON logs parse line by line."""
    extender = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuextender.extender",
            "--http-addr",
            "127.0.0.1:0",
            "--grpc-addr",
            "127.0.0.1:0",
            "--readiness-grace",
            "0",
            "--log-format",
            "json",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "GPU_EXTENDER_SHORTLIST": "5"},
    )
    try:
        entries = []
        assert extender.stderr is not None
        for line in extender.stderr:
            entries.append(json.loads(line))
            if "security:" in entries[-1]["message"]:
                break
        start = next(e for e in entries if "scheduler API on" in e["message"])
        http = start["address"]
        assert http.startswith("127.0.0.1:") and not http.endswith(":0")
        assert f"http://{http}/" in start["message"]
        grpc_port = int(start["message"].split("grpc://127.0.0.1:")[1].split(";")[0])
        assert grpc_port != 0
        assert any("shortlist (env GPU_EXTENDER_SHORTLIST)" in e["message"] for e in entries)
        import urllib.request

        with urllib.request.urlopen(f"http://{http}/healthz", timeout=5) as answer:
            assert answer.status == 200
    finally:
        extender.terminate()
        extender.wait(timeout=10)


def test_the_fleet_page_can_be_turned_off_by_flag_env_or_file(tmp_path: Path) -> None:
    assert build_config([], {}).api.fleet_page is True
    assert build_config(["--no-fleet-page"], {}).api.fleet_page is False
    assert build_config([], {"GPU_EXTENDER_FLEET_PAGE": "false"}).api.fleet_page is False
    off = write(tmp_path, "fleet-page: false\n")
    assert build_config(["--config", str(off)], {}).api.fleet_page is False
    assert build_config(["--config", str(off), "--fleet-page"], {}).api.fleet_page is True
