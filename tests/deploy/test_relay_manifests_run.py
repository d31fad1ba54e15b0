"""deploy/components/relay, run: the rendered extender, relay and agent containers started as the
real programs on loopback (test_manifests_run.py's mapping: listen addresses, mount paths, the
in-cluster config, the Services' DNS names), with the files deploy/tls/make-certs.sh makes and
tokens the in-test API server reviews. The agent reaches the extender only through the relay:
the relay checks the agent's client certificate and token (TokenReview of the agents' account),
the extender the relay's client certificate and token (the relays' account), and the node's data
arrives."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuextender.extender.ingest.agent_identity import NODE_NAME_EXTRA
from tests.deploy import manifests as m
from tests.deploy.test_certs import OPENSSL, run_script
from tests.deploy.test_manifests_run import (
    SCENARIO,
    Laptop,
    ServiceNameHTTPS,
    alive_and,
    container_of,
    localize,
    localize_env,
    mount_volumes,
    node_object,
    projected_token,
    rebase,
    spawn,
    wait_for,
)
from tests.e2e.test_kubernetes_inventory import ThreadedApiServer
from tests.harness import cluster, free_port, http, metric, parse_metrics, scrape
from tests.kube_apiserver import TokenReviewRequest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(m.KUBECTL is None, reason=m.NO_KUBECTL)]

NODE = "gpu-node-1"


def user_of(workload: m.KubeObject) -> str:
    """The username the API server puts in the pod's tokens: its ServiceAccount's."""
    account = workload["spec"]["template"]["spec"]["serviceAccountName"]
    return f"system:serviceaccount:{workload['metadata']['namespace']}:{account}"


def test_the_agent_reaches_the_extender_through_the_rendered_relay(tmp_path: Path) -> None:
    if OPENSSL is None:
        pytest.skip("openssl is not installed: deploy/tls/make-certs.sh needs it")
    (tmp_path / "render").mkdir()
    objects = m.kustomize_with(tmp_path / "render", [m.BASE], [m.COMPONENTS / "relay"])
    certs = tmp_path / "out"
    run_script("-o", str(certs))
    dep, extender = container_of(objects, "Deployment", "gpu-extender")
    relay_dep, relay = container_of(objects, "Deployment", "gpu-relay")
    ds, agent = container_of(objects, "DaemonSet", "gpu-agent")
    audience = projected_token(ds)["audience"]
    assert projected_token(relay_dep)["audience"] == audience

    api = ThreadedApiServer()
    try:
        s = api.server
        api.call(lambda: s.add("Node", node_object(NODE)))
        api.call(lambda: s.add_token("agent-token", user_of(ds), extra={NODE_NAME_EXTRA: [NODE]}, audiences=[audience]))
        api.call(
            lambda: s.add_token("relay-token", user_of(relay_dep), audiences=[audience])
        )  # a Deployment's: no node
        kubeconfig = s.write_kubeconfig(tmp_path / "kubeconfig")
        with cluster(tmp_path) as c:
            http_port, grpc_port = free_port(), free_port()
            ext_laptop = Laptop(
                ports={"--http-addr": http_port, "--grpc-addr": grpc_port},
                grpc_port=grpc_port,
                mounts=mount_volumes(objects, dep, extender, certs, tmp_path),
                kubeconfig=kubeconfig,
            )
            ext = spawn(
                c,
                "extender",
                "gpu-extender",
                localize(extender["args"], ext_laptop),
                localize_env(extender, ext_laptop),
                {"http": http_port, "grpc": grpc_port},
            )
            server_name = m.flag_value(agent["args"], "--tls-server-name")
            assert server_name is not None
            ca = rebase(m.flag_value(extender["args"], "--tls-cert") or "", ext_laptop.mounts).with_name("ca.crt")

            def https(path: str) -> tuple[int, bytes]:
                conn = ServiceNameHTTPS(server_name, http_port, ca)
                try:
                    conn.request("GET", path)
                    response = conn.getresponse()
                    return response.status, response.read()
                finally:
                    conn.close()

            wait_for("extender /healthz", lambda: alive_and(ext, lambda: https("/healthz")[0] == 200), ext)

            # The relay: its first argument is the subcommand, the rest flags as the extender's.
            assert relay["args"][0] == "relay"
            relay_grpc, relay_metrics = free_port(), free_port()
            relay_laptop = Laptop(
                ports={"--grpc-addr": relay_grpc, "--metrics-addr": relay_metrics},
                grpc_port=grpc_port,  # its --extender-service: the extenders' headless Service
                mounts=mount_volumes(objects, relay_dep, relay, certs, tmp_path / "relay", "relay-token"),
                kubeconfig=kubeconfig,
            )
            relay_args = ["relay", *localize(relay["args"][1:], relay_laptop)]
            r = spawn(c, "relay", "gpu-extender", relay_args, localize_env(relay, relay_laptop), {})
            relay_url = f"http://127.0.0.1:{relay_metrics}/metrics"
            ready_path = relay["readinessProbe"]["httpGet"]["path"]
            live_path = relay["livenessProbe"]["httpGet"]["path"]
            assert ready_path == "/readyz" and live_path == "/healthz"
            wait_for(
                "the relay ready: the extender answered it",
                lambda: alive_and(r, lambda: http("GET", f"http://127.0.0.1:{relay_metrics}{ready_path}")[0] == 200),
                r,
                ext,
                laptop=relay_laptop,
            )
            assert (metric(scrape(relay_url), "gpu_relay_extenders_connected") or 0) >= 1
            assert http("GET", f"http://127.0.0.1:{relay_metrics}{live_path}")[0] == 200

            # The agent: its --extender-service is the relays' Service now.
            agent_laptop = Laptop(
                ports={"--metrics-addr": free_port()},
                grpc_port=relay_grpc,
                mounts=mount_volumes(objects, ds, agent, certs, tmp_path / "agent", "agent-token"),
                node=NODE,
            )
            agent_args = [*localize(agent["args"], agent_laptop), f"--fake={SCENARIO}"]
            a = spawn(c, "agent", "gpu-agent", agent_args, localize_env(agent, agent_laptop), {})

            def idle_at_extender() -> float | None:
                status, raw = https("/metrics")
                assert status == 200
                return metric(parse_metrics(raw.decode()), "gpu_extender_node_idle_gpus", node=NODE)

            wait_for(f"{NODE}'s data at the extender, through the relay", lambda: idle_at_extender() == 8, a, r, ext)
            wait_for("the extender ready", lambda: https("/readyz")[0] == 200, ext)
            assert metric(scrape(relay_url), "gpu_extender_connected_agents") == 1
            assert f"agent for node {NODE} connected" in r.log() and "relay connected" in ext.log()
            # Each token reviewed where it is presented, for the manifests' audience.
            reviews = api.call(lambda: list(s.token_reviews))
            assert TokenReviewRequest("agent-token", (audience,)) in reviews
            assert TokenReviewRequest("relay-token", (audience,)) in reviews
            failures = [line for line in ext.log().splitlines() if "refused" in line]
            assert failures == []
            assert http("GET", relay_url)[0] == 200  # the probes' endpoint
    finally:
        api.close()
