"""`gpu-extender relay`'s command line: its own flags, then gpu-extender's for the agents' side;
one line saying what is wrong, exit 2."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest
import trustme
from prometheus_client import generate_latest

from gpuextender.common.dial import DialSettings
from gpuextender.common.idle_rule import IdleRule
from gpuextender.common.netaddr import HostPort
from gpuextender.extender.cli import main
from gpuextender.extender.flags import ConfigError
from gpuextender.extender.ingest.service import IngestService
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.relay.forward_store import ForwardStore
from gpuextender.extender.relay.relay_app import Relay
from gpuextender.extender.relay.relay_flags import parse
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.harness import metric, parse_metrics, write_ca, write_leaf


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
        (["--extender", "a:1", "--resolve-interval", "0"], "--resolve-interval 0.0 must be within 0.1..3600 seconds"),
        (["--extender", "a:1", "--resolve-interval", "0.099"], "--resolve-interval 0.099 must be within"),
        (["--extender", "a:1", "--resolve-interval", "3600.5"], "--resolve-interval 3600.5 must be within"),
        (["--extender", "a:1", "--resolve-interval", "nan"], "--resolve-interval nan must be within"),
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


def test_what_the_replicas_answer_reaches_the_store_the_log_and_the_agents_acks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A refusal marks the node (its agent's next heartbeat is refused), is counted, and logged
    once a minute per node; the agents' acks follow the replicas, light heartbeats only while
    every one connected takes them."""
    now = [0.0]
    store = ForwardStore(IdleRule())
    service = IngestService(store, IngestMetrics())
    metrics = IngestMetrics()
    relay = Relay(store, service, DialSettings(), metrics, clock=lambda: now[0])
    store.stream_opened("n1")
    assert store.ingest(report("n1", [gpu(0)], seq=1), 0.0)
    refusal = pb.RelayRefusal(stream=1, node_name="n1", sequence=1, reason="not in the inventory")
    light, full_only = pb.ReportAck(light_heartbeats=True), pb.ReportAck(idle_max_utilization_percent=20.0)
    with caplog.at_level(logging.WARNING, logger="gpu_extender.relay"):
        relay.on_ack("a:1", pb.RelayAck(refused=[refusal], agent_ack=light))
        now[0] = 59.9
        relay.on_ack("a:1", pb.RelayAck(refused=[refusal]))
        now[0] = 60.0
        relay.on_ack("a:1", pb.RelayAck(refused=[refusal]))
    assert [r.getMessage() for r in caplog.records].count(
        "extender a:1 refused report 1 of node 'n1': not in the inventory"
    ) == 2  # at 0 and at 60 s, not at 59.9
    samples = parse_metrics(generate_latest(metrics.registry).decode())
    assert metric(samples, "gpu_relay_refused_reports_total") == 3
    heartbeat = pb.NodeReport(node_name="n1", sequence=2, heartbeat_of=1)
    problem = store.refresh(heartbeat, 0.0)
    assert problem is not None and "not in the inventory" in problem

    assert pb.ReportAck.FromString(service.accepted_ack(7)).light_heartbeats
    relay.on_ack("b:1", pb.RelayAck(agent_ack=full_only))
    ack = pb.ReportAck.FromString(service.accepted_ack(8))
    assert not ack.light_heartbeats and ack.sequence == 8 and ack.status == pb.ReportAck.ACCEPTED
    relay.on_ack("b:1", None)  # that replica's stream ended
    assert pb.ReportAck.FromString(service.accepted_ack(9)).light_heartbeats


def test_replicas_found_and_reached_are_both_counted() -> None:
    """gpu_relay_extenders counts the replicas found, gpu_relay_extenders_connected those with a
    stream open: the alert GPURelayExtendersUnreached compares the two."""

    async def run() -> list[tuple[float | None, float | None]]:
        store = ForwardStore(IdleRule())
        metrics = IngestMetrics()
        relay = Relay(store, IngestService(store, IngestMetrics()), DialSettings(), metrics)
        counts = []

        def count() -> None:
            registry = metrics.registry
            counts.append(
                (
                    registry.get_sample_value("gpu_relay_extenders"),
                    registry.get_sample_value("gpu_relay_extenders_connected"),
                )
            )

        count()
        relay.set_targets(frozenset({"127.0.0.1:1", "127.0.0.1:2"}))  # nothing listens there
        count()
        relay.set_targets(frozenset({"127.0.0.1:2"}))
        count()
        await relay.close()
        return counts

    assert asyncio.run(run()) == [(0.0, 0.0), (2.0, 0.0), (1.0, 0.0)]


def test_serving_files_that_do_not_load_stop_it_at_start_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files that exist but hold no certificate: said before anything listens, exit 2."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("not a certificate\n")
    key.write_text("not a key\n")
    argv = ["--extender", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key)]
    assert main(["relay", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-extender relay: ") and err.count("\n") == 1 and str(cert) in err


@pytest.mark.parametrize("taken", ["--grpc-addr", "--metrics-addr"])
def test_a_second_relay_on_a_taken_port_says_so_and_exits(taken: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Its gRPC port is bound without SO_REUSEPORT (a second relay would otherwise share the
    agents silently; the holder here allows it, as such a relay would), and its probes' port
    likewise: exit 2 in one line."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        addrs = {"--grpc-addr": "127.0.0.1:0", "--metrics-addr": "127.0.0.1:0", taken: f"127.0.0.1:{port}"}
        argv = ["--extender", "127.0.0.1:1", *(x for flag, value in addrs.items() for x in (flag, value))]
        assert main(["relay", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-extender relay: cannot listen: ") and err.count("\n") == 1


@pytest.mark.parametrize("seconds", ["0.1", "3600"])
def test_the_resolve_interval_bounds_are_taken(seconds: str) -> None:
    settings, _, _ = parse(["--extender", "a:1", "--resolve-interval", seconds])
    assert settings.resolve_interval == float(seconds)
