"""gpu-extender's TLS and agent-auth flags: defaults, and one-line errors naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from gpuextender.common.tls_files import ServingTlsFiles
from gpuextender.extender.app import security_summary
from gpuextender.extender.flags import ConfigError, build_config, build_parser
from gpuextender.extender.settings import AgentAuth, ServiceAccountRef
from tests.harness import write_ca, write_leaf


@pytest.fixture
def pems(tmp_path: Path) -> dict[str, str]:
    ca = trustme.CA()
    cert, key = write_leaf(tmp_path, ca, "tls", "gpu-extender.gpu-extender.svc")
    return {
        "ca": str(write_ca(tmp_path, ca, "ca")),
        "cert": str(cert),
        "key": str(key),
        "missing": str(tmp_path / "missing.pem"),
    }


def test_defaults_are_plaintext_and_no_agent_auth() -> None:
    config = build_config([])
    assert config.tls is None
    assert config.agent_auth == AgentAuth("none", None, "gpu-extender")
    assert security_summary(config) == (
        "TLS off (plain HTTP and gRPC); agent auth: none (any client that reaches "
        "the gRPC port can report for any node)"
    )


def test_tls_mtls_and_tokenreview(pems: dict[str, str]) -> None:
    config = build_config(
        [
            "--tls-cert",
            pems["cert"],
            "--tls-key",
            pems["key"],
            "--tls-ca",
            pems["ca"],
            "--kubernetes",
            "--agent-auth",
            "tokenreview",
            "--agent-service-account",
            "gpu-extender/gpu-agent",
            "--agent-token-audience",
            "aud",
        ]
    )
    assert config.tls == ServingTlsFiles(Path(pems["cert"]), Path(pems["key"]), Path(pems["ca"]))
    assert config.agent_auth == AgentAuth("tokenreview", ServiceAccountRef("gpu-extender", "gpu-agent"), "aud")
    summary = security_summary(config)
    assert "TLS on for HTTPS and gRPC" in summary and f"signed by {pems['ca']}" in summary
    assert "agent auth: TokenReview (service account gpu-extender/gpu-agent, audience 'aud'" in summary


TOKENREVIEW = ["--agent-auth", "tokenreview", "--kubernetes", "--agent-service-account", "a/b"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tls-cert", "{cert}"], "--tls-cert and --tls-key go together: pass both or neither"),
        (["--tls-key", "{key}"], "--tls-cert and --tls-key go together: pass both or neither"),
        (["--tls-ca", "{ca}"], "--tls-ca (client certificates for agents) needs --tls-cert and --tls-key"),
        (["--tls-cert", "{missing}", "--tls-key", "{key}"], "--tls-cert {missing}: cannot read: No such file"),
        (["--tls-cert", "{cert}", "--tls-key", "{missing}"], "--tls-key {missing}: cannot read: No such file"),
        (["--tls-cert", "{cert}", "--tls-key", "{key}", "--tls-ca", "{missing}"], "--tls-ca {missing}: cannot read"),
        (["--agent-auth", "tokenreview", "--agent-service-account", "a/b"], "it needs --kubernetes"),
        (["--agent-auth", "tokenreview", "--kubernetes"], "needs --agent-service-account NAMESPACE/NAME"),
        (
            ["--agent-auth", "tokenreview", "--kubernetes", "--agent-service-account", "gpu-agent"],
            "--agent-service-account 'gpu-agent': expected NAMESPACE/NAME",
        ),
        (["--agent-service-account", "a/b"], "--agent-service-account only applies with --agent-auth tokenreview"),
        (["--relay-service-account", "a/r"], "--relay-service-account only applies with --agent-auth tokenreview"),
        (
            [*TOKENREVIEW, "--relay-service-account", "relay"],
            "--relay-service-account 'relay': expected NAMESPACE/NAME",
        ),
        (
            [*TOKENREVIEW, "--relay-service-account", "a/b"],
            "--relay-service-account must differ from --agent-service-account",
        ),
        (["--agent-token-audience", " "], "--agent-token-audience must not be empty"),
    ],
)
def test_flag_errors(argv: list[str], message: str, pems: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as error:
        build_config([a.format(**pems) for a in argv])
    assert message.format(**pems) in str(error.value)
    assert "\n" not in str(error.value)


def test_relays_account_is_kept_apart_from_the_agents() -> None:
    argv = ["--kubernetes", "--agent-auth", "tokenreview", "--agent-service-account", "g/gpu-agent"]
    assert build_config(argv).agent_auth.relay_service_account is None
    config = build_config([*argv, "--relay-service-account", "g/gpu-relay"])
    assert config.agent_auth.relay_service_account == ServiceAccountRef("g", "gpu-relay")
    assert config.agent_auth.service_account == ServiceAccountRef("g", "gpu-agent")


def test_an_unknown_auth_mode_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--agent-auth", "mtls"])
    assert "invalid choice: 'mtls'" in capsys.readouterr().err
