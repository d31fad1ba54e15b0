"""gpu-agent's discovery, TLS and token flags: defaults, environment, and one-line errors naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from gpuextender.agent.settings import ConfigError, build_config
from gpuextender.common.dial import DialSettings
from gpuextender.common.netaddr import HostPort
from tests.harness import write_ca, write_leaf

BASE = ["--node-name", "gpu-node-1"]


@pytest.fixture
def pems(tmp_path: Path) -> dict[str, str]:
    ca = trustme.CA()
    cert, key = write_leaf(tmp_path, ca, "client", "gpu-agent")
    return {
        "ca": str(write_ca(tmp_path, ca, "ca")),
        "cert": str(cert),
        "key": str(key),
        "missing": str(tmp_path / "missing.pem"),
        "dir": str(tmp_path),
    }


def test_defaults_are_plaintext_without_discovery() -> None:
    config = build_config(BASE, {})
    assert config.extender_service is None and config.resolve_interval_s == 15.0
    assert config.dial == DialSettings() and not config.dial.tls


def test_extender_service_from_flag_or_environment() -> None:
    env = {"GPU_AGENT_EXTENDER_SERVICE": "gpu-extender-agents.gpu-extender.svc:9090"}
    assert build_config(BASE, env).extender_service == HostPort("gpu-extender-agents.gpu-extender.svc", 9090)
    flag = build_config([*BASE, "--extender-service", "other:9191", "--resolve-interval", "30"], env)
    assert flag.extender_service == HostPort("other", 9191) and flag.resolve_interval_s == 30.0
    both = build_config([*BASE, "--extender-service", "svc:9090", "--extender", "10.0.0.1:9090"], {})
    assert both.extenders == ("10.0.0.1:9090",) and both.extender_service == HostPort("svc", 9090)


def test_full_mtls_settings(pems: dict[str, str]) -> None:
    config = build_config(
        [
            *BASE,
            "--tls-ca",
            pems["ca"],
            "--tls-cert",
            pems["cert"],
            "--tls-key",
            pems["key"],
            "--tls-server-name",
            "gpu-extender.gpu-extender.svc",
            "--token-file",
            "/var/run/t",
        ],
        {},
    )
    assert config.dial == DialSettings(
        Path(pems["ca"]), Path(pems["cert"]), Path(pems["key"]), "gpu-extender.gpu-extender.svc", Path("/var/run/t")
    )
    assert config.dial.tls and config.dial.client_cert


def test_a_token_file_is_not_checked_at_start(pems: dict[str, str]) -> None:
    """The kubelet may mount it late or rotate it: a missing one is a runtime warning and a retry."""
    assert build_config([*BASE, "--token-file", pems["missing"]], {}).dial.token_file == Path(pems["missing"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--extender-service", "9090"], "--extender-service '9090': expected HOST:PORT"),
        (["--extender-service", ":9090"], "--extender-service ':9090': expected the Service's DNS name"),
        (["--extender-service", "svc:0"], "expected the Service's DNS name and gRPC port"),
        (["--extender-service", "svc:9090", "--resolve-interval", "0"], "--resolve-interval 0.0 must be within"),
        (["--tls-ca", "{ca}", "--tls-cert", "{cert}"], "--tls-cert and --tls-key go together"),
        (["--tls-ca", "{ca}", "--tls-key", "{key}"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "{cert}", "--tls-key", "{key}"], "--tls-cert/--tls-key needs --tls-ca"),
        (["--tls-server-name", "svc"], "--tls-server-name needs --tls-ca"),
        (["--tls-ca", "{missing}"], "--tls-ca {missing}: cannot read: No such file or directory"),
        (["--tls-ca", "{dir}"], "--tls-ca {dir}: cannot read: Is a directory"),
        (["--tls-ca", "{ca}", "--tls-cert", "{missing}", "--tls-key", "{key}"], "--tls-cert {missing}: cannot read"),
        (["--tls-ca", "{ca}", "--tls-cert", "{cert}", "--tls-key", "{missing}"], "--tls-key {missing}: cannot read"),
    ],
)
def test_flag_errors(argv: list[str], message: str, pems: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as error:
        build_config([*BASE, *(a.format(**pems) for a in argv)], {})
    assert message.format(**pems) in str(error.value)
    assert "\n" not in str(error.value)


def test_unusable_pem_contents_fail_at_start(pems: dict[str, str], tmp_path: Path) -> None:
    _, other_key = write_leaf(tmp_path, trustme.CA(), "other", "x")
    with pytest.raises(ConfigError, match=r"--tls-cert .*client.crt / --tls-key .*other.key: cannot load the pair"):
        build_config([*BASE, "--tls-ca", pems["ca"], "--tls-cert", pems["cert"], "--tls-key", str(other_key)], {})
    with pytest.raises(ConfigError, match=r"--tls-ca .*client.key: not a PEM CA certificate"):
        build_config([*BASE, "--tls-ca", pems["key"]], {})


def test_an_empty_credential_file_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "ca.pem"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match=f"--tls-ca {empty}: the file is empty"):
        build_config([*BASE, "--tls-ca", str(empty)], {})
