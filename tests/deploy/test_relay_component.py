"""components/relay (docs/relay.md): with it the agents stream to the relays' Service, the relays
forward to every extender replica through the headless Service with their own token (the
extender's --relay-service-account is their ServiceAccount, the token's audience its
--agent-token-audience), and they review the agents' tokens as the extender does. The relay's
arguments build with its own parser and the extender's (the mounted files recreated)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trustme
import yaml

from gpuextender.extender.relay.relay_flags import parse
from tests.deploy import manifests as m
from tests.deploy.docs_install import copy_repository

COMPONENT = m.COMPONENTS / "relay"
needs_kubectl = pytest.mark.skipif(m.KUBECTL is None, reason=m.NO_KUBECTL)


def the_container(objects: list[m.KubeObject], kind: str, name: str) -> tuple[m.KubeObject, m.KubeObject]:
    workload = m.one(objects, kind, name)
    (container,) = m.containers(workload["spec"]["template"]["spec"])
    return workload, container


def relay_container(objects: list[m.KubeObject]) -> tuple[m.KubeObject, m.KubeObject]:
    return the_container(objects, "Deployment", "gpu-relay")


def test_the_relays_arguments_build_with_its_parser(tmp_path: Path) -> None:
    _, container = relay_container(m.load_yaml_docs(COMPONENT / "relay.yaml"))
    assert container["args"][0] == "relay"
    ca = trustme.CA()
    leaf = ca.issue_cert("gpu-extender-agents.gpu-extender.svc")
    contents = {
        "ca.crt": ca.cert_pem.bytes(),
        "tls.crt": leaf.cert_chain_pems[0].bytes(),
        "tls.key": leaf.private_key_pem.bytes(),
        "token": b"eyJhbGciOiJSUzI1NiJ9.e30.sig",
    }
    args = []
    for arg in container["args"][1:]:
        flag, sep, value = arg.partition("=")
        if sep and value.startswith("/"):
            path = tmp_path / value.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(contents[path.name])
            arg = f"{flag}={path}"
        args.append(arg)
    settings, config, dial = parse(args)
    assert settings.extender_service == "gpu-extender-agents.gpu-extender.svc:9090"
    assert dial.tls and dial.client_cert and dial.token_file is not None
    assert dial.tls_server_name == "gpu-extender-agents.gpu-extender.svc"
    assert config.kubernetes and config.agent_auth.mode == "tokenreview" and config.tls is not None
    assert config.grpc_addr.port == 9090 and settings.metrics_addr == "0.0.0.0:9091"


@needs_kubectl
def test_with_the_component_agents_stream_to_the_relays_which_reach_every_replica(tmp_path: Path) -> None:
    objects = m.kustomize_with(tmp_path, [m.BASE], [COMPONENT])
    deployment, relay = relay_container(objects)
    pod = deployment["spec"]["template"]["spec"]
    # The agents: to the relays' Service, which selects the relay pods on their gRPC port.
    _, agent = the_container(objects, "DaemonSet", "gpu-agent")
    service = m.one(objects, "Service", "gpu-relay")
    assert m.flag_value(agent["args"], "--extender-service") == f"{service['metadata']['name']}.gpu-extender.svc:9090"
    assert "clusterIP" not in service["spec"]  # one relay per agent, not one stream per relay
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert {p["name"] for p in relay["ports"]} >= {service["spec"]["ports"][0]["targetPort"], "metrics"}
    # The relays: to every replica (the headless Service), named as the agents name them.
    headless = m.one(objects, "Service", "gpu-extender-agents")
    assert headless["spec"]["clusterIP"] == "None"
    assert m.flag_value(relay["args"], "--extender-service") == "gpu-extender-agents.gpu-extender.svc:9090"
    assert m.flag_value(relay["args"], "--extender-tls-server-name") == m.flag_value(agent["args"], "--tls-server-name")
    # ... with their own identity, which the extender takes as the relays'.
    _, extender = the_container(objects, "Deployment", "gpu-extender")
    account = pod["serviceAccountName"]
    assert m.flag_value(extender["args"], "--relay-service-account") == f"gpu-extender/{account}"
    assert m.flag_value(extender["args"], "--relay-service-account") != m.flag_value(
        extender["args"], "--agent-service-account"
    )
    (token,) = [v for v in pod["volumes"] if v["name"] == "extender-token"]
    audience = token["projected"]["sources"][0]["serviceAccountToken"]["audience"]
    assert audience == m.flag_value(extender["args"], "--agent-token-audience")
    # They review the agents' tokens: their account may create TokenReviews, nothing else.
    binding = m.one(objects, "ClusterRoleBinding", "gpu-relay")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "gpu-extender"}]
    role = m.one(objects, "ClusterRole", binding["roleRef"]["name"])
    assert role["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
    ]
    assert m.flag_value(relay["args"], "--agent-service-account") == m.flag_value(
        extender["args"], "--agent-service-account"
    )


@needs_kubectl
def test_the_readmes_overlay_renders_with_the_relays(tmp_path: Path) -> None:
    """deploy/README.md, "Relays": its overlay, written where it says in a copy of the repository,
    renders the relays on the extender's image as every other pod (components/images last) and
    points the agents at them; everything else is deploy/'s."""
    readme = (m.DEPLOY / "README.md").read_text()
    section = readme.split("### Relays\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```yaml\n(# my-relays/kustomization.yaml:.*?)```", section, re.S)
    repo = copy_repository(tmp_path / "kube-gpu-extender")
    (repo / "my-relays").mkdir()
    (repo / "my-relays/kustomization.yaml").write_text(block)
    assert yaml.safe_load(block)["components"] == ["../deploy/components/relay", "../deploy/components/images"]
    objects = m.kustomize(repo / "my-relays")
    assert m.one(objects, "Deployment", "gpu-relay")
    _, agent = the_container(objects, "DaemonSet", "gpu-agent")
    assert m.flag_value(agent["args"], "--extender-service") == "gpu-relay.gpu-extender.svc:9090"
    _, relay = the_container(objects, "Deployment", "gpu-relay")
    _, extender = the_container(objects, "Deployment", "gpu-extender")
    assert relay["image"] == extender["image"]
    relays = {m.identity(o) for o in objects if "relay" in o["metadata"]["name"]}
    assert {m.identity(o) for o in objects} - relays == {m.identity(o) for o in m.kustomize(m.DEPLOY)}
