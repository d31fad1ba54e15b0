"""TLS end to end with real processes on loopback: the extender serves HTTPS and mTLS gRPC
(certificates made here with trustme); agents with the right CA and client certificate stream,
agents with the wrong CA or without a client certificate are refused and say why."""

from __future__ import annotations

import json
import ssl
import urllib.error
from collections.abc import Iterator
from http.client import HTTPException
from pathlib import Path

import pytest
import trustme

from tests.harness import (
    FIXTURES,
    Cluster,
    Proc,
    Samples,
    client_ssl_context,
    cluster,
    fixture_bytes,
    http,
    https_url,
    metric,
    parse_metrics,
    request_for,
    wait_until,
    write_ca,
    write_leaf,
)

SCENARIOS = FIXTURES / "scenarios"
SERVER_NAME = "gpu-extender.test"


class Tls:
    def __init__(self, directory: Path) -> None:
        self.server_ca, self.client_ca, self.stranger_ca = trustme.CA(), trustme.CA(), trustme.CA()
        self.server_ca_file = write_ca(directory, self.server_ca, "server-ca")
        self.client_ca_file = write_ca(directory, self.client_ca, "client-ca")
        self.stranger_ca_file = write_ca(directory, self.stranger_ca, "stranger-ca")
        self.server_cert, self.server_key = write_leaf(directory, self.server_ca, "server", "127.0.0.1", SERVER_NAME)
        self.client_cert, self.client_key = write_leaf(directory, self.client_ca, "agent", "gpu-agent")
        self.context = client_ssl_context(self.server_ca)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return Tls(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, tls: Tls) -> Iterator[Cluster]:
    """An mTLS extender; gpu-node-1 dials it directly, gpu-node-4 finds it as localhost:PORT;
    gpu-node-2 trusts the wrong CA, gpu-node-3 has no client certificate."""
    with cluster(tmp_path_factory.mktemp("tls")) as c:
        ext = c.extender(
            "--tls-cert",
            str(tls.server_cert),
            "--tls-key",
            str(tls.server_key),
            "--tls-ca",
            str(tls.client_ca_file),
            ssl_context=tls.context,
        )
        grpc_port = ext.ports["grpc"]
        client = ("--tls-cert", str(tls.client_cert), "--tls-key", str(tls.client_key))
        c.agent(
            "gpu-node-1",
            SCENARIOS / "busy8.yaml",
            ext,
            extra=("--tls-ca", str(tls.server_ca_file), "--tls-server-name", SERVER_NAME, *client),
        )
        c.agent(
            "gpu-node-4",
            SCENARIOS / "idle8.yaml",
            extra=(
                "--extender-service",
                f"localhost:{grpc_port}",
                "--resolve-interval",
                "1",
                "--tls-ca",
                str(tls.server_ca_file),
                "--tls-server-name",
                SERVER_NAME,
                *client,
            ),
        )
        c.agent(
            "gpu-node-2",
            SCENARIOS / "idle8.yaml",
            ext,
            extra=("--tls-ca", str(tls.stranger_ca_file), "--tls-server-name", SERVER_NAME, *client),
        )
        c.agent(
            "gpu-node-3",
            SCENARIOS / "idle8.yaml",
            ext,
            extra=("--tls-ca", str(tls.server_ca_file), "--tls-server-name", SERVER_NAME),
        )
        wait_until("2 nodes with data", lambda: metric(scrape(ext, tls), "gpu_extender_nodes_with_data") == 2)
        yield c


def proc(c: Cluster, name: str) -> Proc:
    return next(p for p in c.procs if p.name == name)


def scrape(ext: Proc, tls: Tls) -> Samples:
    status, raw = http("GET", https_url(ext, "/metrics"), ssl_context=tls.context)
    assert status == 200
    return parse_metrics(raw.decode())


def test_https_answers_filter_and_probes_to_a_client_that_trusts_the_ca(live: Cluster, tls: Tls) -> None:
    ext = proc(live, "extender")
    assert http("GET", https_url(ext, "/healthz"), ssl_context=tls.context)[0] == 200
    status, raw = http(
        "POST", https_url(ext, "/filter"), fixture_bytes("filter-request-nodecache-true.json"), ssl_context=tls.context
    )
    assert status == 200
    answer = json.loads(raw)
    # gpu-node-1's agent streams over mTLS: its busy GPUs are known. gpu-node-2 and -3 have no data
    # (refused), so all their allocatable GPUs count as idle.
    assert answer["FailedNodes"] == {"gpu-node-1": "gpu-extender: too few idle GPUs (InsufficientIdleGPUs)"}
    assert sorted(answer["NodeNames"]) == ["gpu-node-2", "gpu-node-3"]
    assert "security: TLS on for HTTPS and gRPC" in ext.log() and "mTLS on" in ext.log()
    assert "scheduler API on https://" in ext.log()


def test_https_refuses_a_client_with_another_ca_and_plain_http(live: Cluster, tls: Tls) -> None:
    ext = proc(live, "extender")
    with pytest.raises(urllib.error.URLError) as refused:
        http("GET", https_url(ext, "/healthz"), ssl_context=client_ssl_context(tls.stranger_ca))
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)
    with pytest.raises((OSError, HTTPException)):
        http("GET", f"http://127.0.0.1:{ext.ports['http']}/healthz")


def test_agents_with_the_right_ca_and_client_certificate_stream(live: Cluster, tls: Tls) -> None:
    ext = proc(live, "extender")
    samples = scrape(ext, tls)
    assert metric(samples, "gpu_extender_node_idle_gpus", node="gpu-node-1") == 1  # busy8: 7 busy, 1 idle
    assert metric(samples, "gpu_extender_node_idle_gpus", node="gpu-node-4") == 8
    _, raw = http(
        "POST", https_url(ext, "/filter"), request_for(["gpu-node-1", "gpu-node-4"], gpus=4), ssl_context=tls.context
    )
    assert json.loads(raw)["NodeNames"] == ["gpu-node-4"]
    agent = proc(live, "agent-gpu-node-1")
    assert "stream security: TLS, extender certificate checked against" in agent.log()
    assert f"streaming to extender 127.0.0.1:{ext.ports['grpc']}" in agent.log()


def test_the_service_name_is_resolved_to_the_extender(live: Cluster, tls: Tls) -> None:
    ext = proc(live, "extender")
    agent = proc(live, "agent-gpu-node-4")
    target = f"127.0.0.1:{ext.ports['grpc']}"
    assert f"extender service localhost:{ext.ports['grpc']}: " in agent.log()
    samples = parse_metrics(http("GET", f"http://127.0.0.1:{agent.ports['metrics']}/metrics")[1].decode())
    assert metric(samples, "gpu_agent_stream_connected", extender=target) == 1


def test_an_agent_trusting_another_ca_is_refused_and_says_why(live: Cluster, tls: Tls) -> None:
    ext = proc(live, "extender")
    agent = proc(live, "agent-gpu-node-2")
    line = f"TLS handshake with 127.0.0.1:{ext.ports['grpc']} failed: certificate verify failed"
    wait_until("the agent's TLS line", lambda: line in agent.log())
    assert "check --tls-ca / --tls-server-name" in agent.log()
    assert metric(scrape(ext, tls), "gpu_extender_node_idle_gpus", node="gpu-node-2") is None
    assert agent.alive()


def test_an_agent_without_a_client_certificate_is_refused_and_says_why(live: Cluster, tls: Tls) -> None:
    ext = proc(live, "extender")
    agent = proc(live, "agent-gpu-node-3")
    line = (
        f"TLS handshake with 127.0.0.1:{ext.ports['grpc']} failed: the extender closed the connection "
        "during the handshake; it probably requires a client certificate (mTLS): "
        "pass --tls-cert and --tls-key"
    )
    wait_until("the agent's TLS line", lambda: line in agent.log())
    assert metric(scrape(ext, tls), "gpu_extender_node_idle_gpus", node="gpu-node-3") is None
    assert metric(scrape(ext, tls), "gpu_extender_nodes_with_data") == 2
