"""`gpu-extender relay`'s command line: its own flags, then gpu-extender's for the agents' side;
one line saying what is wrong, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from gpuextender.common.netaddr import HostPort
from gpuextender.extender.cli import main
from gpuextender.extender.flags import ConfigError
from gpuextender.extender.relay.relay_main import parse
from tests.harness import write_ca, write_leaf


def test_its_flags_then_the_extenders() -> None:
    settings, config, dial = parse(
        ["--extender", "10.0.0.5:9090", "--grpc-addr", "127.0.0.1:9190", "--max-clock-skew", "5"]
    )
    assert settings.extender == ["10.0.0.5:9090"] and settings.extender_service is None
    assert config.grpc_addr == HostPort("127.0.0.1", 9190) and config.max_clock_skew_s == 5.0
    assert not dial.tls and dial.token_file is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "name the extenders: --extender-service HOST:PORT or --extender HOST:PORT"),
        (["--extender", "nowhere"], "--extender 'nowhere'"),
        (["--extender-service", ":9090"], "--extender-service ':9090': expected the Service's DNS name"),
        (["--extender", "a:1", "--resolve-interval", "0"], "--resolve-interval must be more than 0 seconds"),
        (["--extender", "a:1", "--extender-tls-cert", "c.pem"], "--extender-tls-cert and --extender-tls-key go"),
        (
            ["--extender", "a:1", "--extender-tls-server-name", "x"],
            "--extender-tls-server-name needs --extender-tls-ca",
        ),
        (["--extender", "a:1", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_what_is_wrong_is_said_in_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    if message.startswith("unrecognized"):
        with pytest.raises(SystemExit):
            parse(argv)
        assert message in capsys.readouterr().err
        return
    with pytest.raises(ConfigError) as error:
        parse(argv)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert main(["relay", *argv]) == 2
    assert capsys.readouterr().err.startswith("gpu-extender relay: ")


def test_a_certificate_pair_that_does_not_match_is_named_by_the_relays_flags(tmp_path: Path) -> None:
    ca, other = trustme.CA(), trustme.CA()
    ca_path = write_ca(tmp_path, ca, "ca")
    cert, _ = write_leaf(tmp_path, ca, "relay", "relay")
    _, key = write_leaf(tmp_path, other, "other", "other")
    argv = ["--extender", "a:1", "--extender-tls-ca", str(ca_path)]
    with pytest.raises(ConfigError) as error:
        parse([*argv, "--extender-tls-cert", str(cert), "--extender-tls-key", str(key)])
    assert f"--extender-tls-cert {cert} / --extender-tls-key {key}: cannot load the pair" in str(error.value)
