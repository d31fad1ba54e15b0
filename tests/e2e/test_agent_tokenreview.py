"""`--agent-auth tokenreview` end to end: the real extender (HTTPS + TLS gRPC, `--kubernetes`
against the in-test API server and its TokenReview) and real agents sending projected-token
files. A token bound to its node streams; a token bound to another node, or no token, stores
nothing and the agent says why."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from gpuextender.extender.ingest.agent_identity import NODE_NAME_EXTRA
from tests.e2e.test_kubernetes_inventory import ThreadedApiServer
from tests.extender.ingest.test_agent_identity import jwt
from tests.harness import (
    FIXTURES,
    Cluster,
    Proc,
    Samples,
    client_ssl_context,
    cluster,
    http,
    https_url,
    metric,
    parse_metrics,
    request_for,
    wait_until,
    write_ca,
    write_leaf,
    write_pem,
)
from tests.kube_apiserver import TokenReviewRequest

SCENARIOS = FIXTURES / "scenarios"
AGENT_SA = "system:serviceaccount:gpu-extender:gpu-agent"
SERVER_NAME = "gpu-extender.test"


@pytest.fixture(scope="module")
def api() -> Iterator[ThreadedApiServer]:
    server = ThreadedApiServer()
    try:
        yield server
    finally:
        server.close()


@dataclass
class Live:
    cluster: Cluster
    api: ThreadedApiServer
    context: ssl.SSLContext  # trusts the extender's CA

    def proc(self, name: str) -> Proc:
        return next(p for p in self.cluster.procs if p.name == name)

    def scrape(self) -> Samples:
        status, raw = http("GET", https_url(self.proc("extender"), "/metrics"), ssl_context=self.context)
        assert status == 200
        return parse_metrics(raw.decode())


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, api: ThreadedApiServer) -> Iterator[Live]:
    work = tmp_path_factory.mktemp("tokenreview")
    s = api.server
    api.call(lambda: s.add_token("token-node-1", AGENT_SA, extra={NODE_NAME_EXTRA: ["gpu-node-1"]}))
    api.call(lambda: s.add_token("token-of-node-1", AGENT_SA, extra={NODE_NAME_EXTRA: ["gpu-node-1"]}))
    kubeconfig = s.write_kubeconfig(work / "kubeconfig")
    ca = trustme.CA()
    cert, key = write_leaf(work, ca, "server", "127.0.0.1", SERVER_NAME)
    ca_file = write_ca(work, ca, "ca")
    tls = ("--tls-ca", str(ca_file), "--tls-server-name", SERVER_NAME)
    with cluster(work) as c:
        live = Live(c, api, client_ssl_context(ca))
        ext = c.extender(
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
            "--kubernetes",
            "--kubeconfig",
            str(kubeconfig),
            "--agent-auth",
            "tokenreview",
            "--agent-service-account",
            "gpu-extender/gpu-agent",
            ssl_context=live.context,
        )
        c.agent(
            "gpu-node-1",
            SCENARIOS / "idle8.yaml",
            ext,
            extra=(*tls, "--token-file", str(write_pem(work / "token-1", b"token-node-1\n"))),
        )
        # gpu-node-2's agent holds a token bound to gpu-node-1 (e.g. a stolen one).
        c.agent(
            "gpu-node-2",
            SCENARIOS / "idle8.yaml",
            ext,
            extra=(*tls, "--token-file", str(write_pem(work / "token-2", b"token-of-node-1\n"))),
        )
        c.agent("gpu-node-3", SCENARIOS / "idle8.yaml", ext, extra=tls)  # no --token-file
        wait_until(
            "gpu-node-1's data", lambda: metric(live.scrape(), "gpu_extender_node_idle_gpus", node="gpu-node-1") == 8
        )
        yield live


def test_the_agent_with_its_nodes_token_streams(live: Live) -> None:
    ext = live.proc("extender")
    _, raw = http("POST", https_url(ext, "/filter"), request_for(["gpu-node-1"], gpus=8), ssl_context=live.context)
    assert json.loads(raw)["NodeNames"] == ["gpu-node-1"]
    reviews = live.api.call(lambda: list(live.api.server.token_reviews))
    assert TokenReviewRequest("token-node-1", ("gpu-extender",)) in reviews
    assert "agent for node gpu-node-1 connected" in ext.log() and AGENT_SA in ext.log()
    assert "agent auth: TokenReview (service account gpu-extender/gpu-agent, audience 'gpu-extender'" in ext.log()


def test_a_token_bound_to_another_node_is_rejected_and_nothing_is_stored(live: Live) -> None:
    agent = live.proc("agent-gpu-node-2")
    wait_until("the agent's rejection line", lambda: "bound to node 'gpu-node-1'" in agent.log())
    assert "rejected report" in agent.log() and "an agent may only report for its own node" in agent.log()
    samples = live.scrape()
    assert metric(samples, "gpu_extender_agent_auth_failures_total", reason="node_mismatch") >= 1
    assert metric(samples, "gpu_extender_node_idle_gpus", node="gpu-node-2") is None
    assert "report for node 'gpu-node-2' refused" in live.proc("extender").log()


def test_an_agent_without_a_token_is_refused(live: Live) -> None:
    agent = live.proc("agent-gpu-node-3")
    wait_until(
        "the agent's refusal line",
        lambda: "UNAUTHENTICATED: no `authorization: Bearer <token>` metadata" in agent.log(),
    )
    samples = live.scrape()
    assert metric(samples, "gpu_extender_agent_auth_failures_total", reason="missing_token") >= 1
    assert metric(samples, "gpu_extender_node_idle_gpus", node="gpu-node-3") is None
    assert metric(samples, "gpu_extender_nodes_with_data") == 1


def test_a_revoked_token_stops_working_at_the_next_reauthentication(api: ThreadedApiServer, tmp_path: Path) -> None:
    """--agent-reauth-interval ends every agent connection after a while: the agent reconnects,
    its token is reviewed again, and once the API server no longer accepts it the node's
    stream is refused. (The token's own `exp` keeps the cached answer short.)"""
    s = api.server
    token = jwt({"exp": int(time.time()) + 8, "sub": AGENT_SA})
    api.call(lambda: s.add_token(token, AGENT_SA, extra={NODE_NAME_EXTRA: ["gpu-node-4"]}))
    kubeconfig = s.write_kubeconfig(tmp_path / "kubeconfig")
    ca = trustme.CA()
    cert, key = write_leaf(tmp_path, ca, "server", "127.0.0.1", SERVER_NAME)
    tls = ("--tls-ca", str(write_ca(tmp_path, ca, "ca")), "--tls-server-name", SERVER_NAME)
    context = client_ssl_context(ca)
    with cluster(tmp_path) as c:
        ext = c.extender(
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
            "--kubernetes",
            "--kubeconfig",
            str(kubeconfig),
            "--agent-auth",
            "tokenreview",
            "--agent-service-account",
            "gpu-extender/gpu-agent",
            "--agent-reauth-interval",
            "2",
            ssl_context=context,
        )
        agent = c.agent(
            "gpu-node-4",
            SCENARIOS / "idle8.yaml",
            ext,
            extra=(*tls, "--token-file", str(write_pem(tmp_path / "token", token.encode()))),
        )
        wait_until("the agent's first stream", lambda: "agent for node gpu-node-4 connected" in ext.log())
        api.call(lambda: s.add_token(token, AGENT_SA, authenticated=False))  # revoked (e.g. pod deleted)
        wait_until("the stream ended and was refused on reconnect", lambda: "token not authenticated" in agent.log())
        assert ext.log().count("agent for node gpu-node-4 connected") >= 1
        assert "agent for node gpu-node-4 disconnected" in ext.log()
        status, raw = http("GET", https_url(ext, "/metrics"), ssl_context=context)
        assert status == 200
        assert (
            metric(parse_metrics(raw.decode()), "gpu_extender_agent_auth_failures_total", reason="invalid_token") >= 1
        )
