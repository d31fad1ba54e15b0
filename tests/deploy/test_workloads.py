"""The pods: hardening, resources, probes, the programs' flags (checked against the real
argument parsers), and the wiring between agent, extender, Services and Secrets."""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import PurePosixPath

import pytest

from gpuextender.agent import settings as agent_settings
from gpuextender.agent.settings import build_parser as agent_parser
from gpuextender.extender.flags import build_parser as extender_parser
from tests.deploy import manifests as m

EXTENDER_IMAGE = "ghcr.io/kube-gpu-extender/gpu-extender"
AGENT_IMAGE = "ghcr.io/kube-gpu-extender/gpu-agent"
SCHEDULER_IMAGE = "registry.k8s.io/kube-scheduler"
PARSERS = {EXTENDER_IMAGE: extender_parser, AGENT_IMAGE: agent_parser}


def all_containers(objects: list[m.KubeObject]):
    for workload, pod in m.pod_templates(objects):
        for c in m.containers(pod):
            yield workload, pod, c


def the_container(objects: list[m.KubeObject], kind: str, name: str) -> tuple[dict, dict]:
    workload = m.one(objects, kind, name, m.NAMESPACE)
    pod = workload["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def test_there_are_exactly_the_three_workloads(base_objects: list[m.KubeObject]) -> None:
    found = {
        (w["kind"], w["metadata"]["name"], m.image_repository(c["image"])) for w, _, c in all_containers(base_objects)
    }
    assert found == {
        ("Deployment", "gpu-extender", EXTENDER_IMAGE),
        ("DaemonSet", "gpu-agent", AGENT_IMAGE),
        ("Deployment", "gpu-scheduler", SCHEDULER_IMAGE),
    }


def test_every_container_is_hardened(base_objects: list[m.KubeObject]) -> None:
    for workload, pod, c in all_containers(base_objects):
        where = f"{workload['metadata']['name']}/{c['name']}"
        psc, sc = pod.get("securityContext", {}), c.get("securityContext", {})
        for ctx in (psc, sc):
            assert ctx.get("runAsNonRoot") is True, where
            assert ctx.get("runAsUser") == 65532, where
            assert ctx.get("seccompProfile") == {"type": "RuntimeDefault"}, where
        assert sc.get("allowPrivilegeEscalation") is False, where
        assert sc.get("readOnlyRootFilesystem") is True, where
        assert sc.get("privileged", False) is False, where
        assert sc.get("capabilities") == {"drop": ["ALL"]}, where
        for host in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod.get(host), where
        assert not any("hostPath" in v for v in pod.get("volumes", [])), where
        assert not any("hostPort" in p for p in c.get("ports", [])), where


def test_every_container_has_requests_and_limits(base_objects: list[m.KubeObject]) -> None:
    for workload, _, c in all_containers(base_objects):
        where = f"{workload['metadata']['name']}/{c['name']}"
        res = c.get("resources", {})
        for resource in ("cpu", "memory"):
            request, limit = res["requests"][resource], res["limits"][resource]
            assert 0 < m.quantity(request) <= m.quantity(limit), f"{where} {resource}: {request} > {limit}"
        # Nothing here may take a GPU: the agent observes all of them without requesting any.
        for section in ("requests", "limits"):
            assert not any(k.startswith("nvidia.com/") for k in res[section]), where


def test_agent_resources_cover_the_measured_figures(base_objects: list[m.KubeObject]) -> None:
    """bench/RESULTS.md: the agent's RSS is ~60 MiB; its memory request must hold that."""
    _, c = the_container(base_objects, "DaemonSet", "gpu-agent")
    assert m.quantity(c["resources"]["requests"]["memory"]) >= 60 * 2**20
    _, c = the_container(base_objects, "Deployment", "gpu-extender")
    assert m.quantity(c["resources"]["limits"]["memory"]) >= 120 * 2**20  # measured peak


def _probe_port(container: dict, probe: dict) -> int:
    port = probe["httpGet"]["port"]
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    assert isinstance(port, int) or port in named, f"probe port {port} is not a container port"
    return named.get(port, port)


def test_every_container_has_http_probes(base_objects: list[m.KubeObject]) -> None:
    for workload, _, c in all_containers(base_objects):
        for kind in ("livenessProbe", "readinessProbe"):
            assert "httpGet" in c.get(kind, {}), f"{workload['metadata']['name']}: no {kind}"
            _probe_port(c, c[kind])


def test_extender_probes_are_https_healthz_and_readyz(base_objects: list[m.KubeObject]) -> None:
    _, c = the_container(base_objects, "Deployment", "gpu-extender")
    live, ready = c["livenessProbe"]["httpGet"], c["readinessProbe"]["httpGet"]
    assert (live["path"], live["scheme"]) == ("/healthz", "HTTPS")
    assert (ready["path"], ready["scheme"]) == ("/readyz", "HTTPS")
    http_port = int(m.flag_value(c["args"], "--http-addr").rsplit(":", 1)[1])
    assert _probe_port(c, c["livenessProbe"]) == _probe_port(c, c["readinessProbe"]) == http_port


def test_agent_probes_and_scrape_annotations_use_the_metrics_port(base_objects: list[m.KubeObject]) -> None:
    ds = m.one(base_objects, "DaemonSet", "gpu-agent", m.NAMESPACE)
    _pod, c = the_container(base_objects, "DaemonSet", "gpu-agent")
    metrics_port = int(m.flag_value(c["args"], "--metrics-addr").rsplit(":", 1)[1])
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for kind in ("livenessProbe", "readinessProbe"):
        assert _probe_port(c, c[kind]) == metrics_port
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == metrics_port
    assert annotations["prometheus.io/path"] == "/metrics"


def _flags(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def _parse(parser: argparse.ArgumentParser, args: list[str]) -> argparse.Namespace:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            return parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"{parser.prog} rejects the manifest's arguments {args}:\n{stderr.getvalue()}")


@pytest.mark.parametrize("image", [EXTENDER_IMAGE, AGENT_IMAGE], ids=["gpu-extender", "gpu-agent"])
def test_program_arguments_are_known_flags(base_objects: list[m.KubeObject], image: str) -> None:
    """Every --flag exists in the program's own argument parser (the image's ENTRYPOINT is the
    console script, so `args` is exactly its argv), and the whole list parses."""
    parser = PARSERS[image]()
    known = {s for action in parser._actions for s in action.option_strings}
    seen = 0
    for workload, _, c in all_containers(base_objects):
        if m.image_repository(c["image"]) != image:
            continue
        seen += 1
        assert "command" not in c, "the image's ENTRYPOINT is the program; use args"
        unknown = [f for f in _flags(c["args"]) if f not in known]
        assert not unknown, f"{workload['metadata']['name']}: {parser.prog} has no {unknown}"
        _parse(parser, c["args"])
    assert seen == 1


def test_program_configs_build_from_the_manifest_arguments(base_objects: list[m.KubeObject], tmp_path) -> None:
    """Beyond parsing: the programs' own build_config accepts the argument combination (e.g.
    --agent-auth tokenreview needs --kubernetes). The mounted files (Secret keys, projected
    token) are recreated under tmp_path with the content the kubelet would put there: a CA
    certificate in ca.crt, a certificate and its key in tls.crt/tls.key (made with trustme)."""
    import trustme

    from gpuextender.agent.settings import build_config as agent_config
    from gpuextender.extender.flags import build_config as extender_config

    ca = trustme.CA()
    leaf = ca.issue_cert("gpu-extender-agents.gpu-extender.svc")
    contents = {
        "ca.crt": ca.cert_pem.bytes(),
        "tls.crt": leaf.cert_chain_pems[0].bytes(),
        "tls.key": leaf.private_key_pem.bytes(),
        "token": b"eyJhbGciOiJSUzI1NiJ9.e30.sig",
    }

    def rebased(args: list[str]) -> list[str]:
        out = []
        for arg in args:
            flag, sep, value = arg.partition("=")
            if sep and value.startswith("/"):
                path = tmp_path / value.lstrip("/")
                if path.name in contents:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(contents[path.name])
                else:  # a directory flag (--control-dir under an emptyDir): the agent makes it
                    path.parent.mkdir(parents=True, exist_ok=True)
                arg = f"{flag}={path}"
            out.append(arg)
        return out

    _, extender = the_container(base_objects, "Deployment", "gpu-extender")
    assert extender_config(rebased(extender["args"])).kubernetes
    _, agent = the_container(base_objects, "DaemonSet", "gpu-agent")
    assert agent_config(rebased(agent["args"]), {"NODE_NAME": "gpu-node-1"}).node_name == "gpu-node-1"


def test_flag_check_catches_a_misspelt_flag() -> None:
    parser = extender_parser()
    known = {s for action in parser._actions for s in action.option_strings}
    assert [f for f in _flags(["--kubernetes", "--tls-certificate=/x"]) if f not in known] == ["--tls-certificate"]


def test_agent_sees_all_gpus_without_requesting_any(base_objects: list[m.KubeObject]) -> None:
    ds = m.one(base_objects, "DaemonSet", "gpu-agent", m.NAMESPACE)
    pod, c = the_container(base_objects, "DaemonSet", "gpu-agent")
    assert pod["runtimeClassName"] == "nvidia"
    env = {e["name"]: e for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    # --node-name defaults to $NODE_NAME: the downward API's spec.nodeName.
    assert m.flag_value(c["args"], "--node-name") is None
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]} in terms[0]["matchExpressions"]
    tolerations = pod["tolerations"]
    assert any(t["key"] == "nvidia.com/gpu" and t["operator"] == "Exists" and "effect" not in t for t in tolerations)
    assert pod["priorityClassName"] == "system-node-critical"
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"


def _mounted_volume(pod: dict, container: dict, path: str) -> dict:
    """The pod volume whose mount contains `path`."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if PurePosixPath(path).parent == PurePosixPath(mount["mountPath"]):
            assert mount.get("readOnly") is True and "subPath" not in mount, mount
            return volumes[mount["name"]]
    raise AssertionError(f"{path} is not under any volume mount of {container['name']}")


def test_agent_token_and_certificates_come_from_the_right_volumes(base_objects: list[m.KubeObject]) -> None:
    pod, agent = the_container(base_objects, "DaemonSet", "gpu-agent")
    _, extender = the_container(base_objects, "Deployment", "gpu-extender")
    token_volume = _mounted_volume(pod, agent, m.flag_value(agent["args"], "--token-file"))
    (source,) = token_volume["projected"]["sources"]
    token = source["serviceAccountToken"]
    assert token["audience"] == m.flag_value(extender["args"], "--agent-token-audience")
    assert token["path"] == PurePosixPath(m.flag_value(agent["args"], "--token-file")).name
    # The extender accepts tokens of the agents' own ServiceAccount only.
    assert m.flag_value(extender["args"], "--agent-service-account") == f"{m.NAMESPACE}/{pod['serviceAccountName']}"
    assert m.flag_value(extender["args"], "--agent-auth") == "tokenreview"
    for flag in ("--tls-ca", "--tls-cert", "--tls-key"):
        path = m.flag_value(agent["args"], flag)
        volume = _mounted_volume(pod, agent, path)
        assert volume["secret"]["secretName"] == "gpu-agent-tls"
        assert volume["secret"]["optional"] is False
        assert PurePosixPath(path).name in ("ca.crt", "tls.crt", "tls.key")


def test_extender_serves_tls_from_its_secret(base_objects: list[m.KubeObject]) -> None:
    pod, c = the_container(base_objects, "Deployment", "gpu-extender")
    assert "--kubernetes" in c["args"]
    for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key"), ("--tls-ca", "ca.crt")):
        path = m.flag_value(c["args"], flag)
        volume = _mounted_volume(pod, c, path)
        assert volume["secret"]["secretName"] == "gpu-extender-tls"
        assert volume["secret"]["optional"] is False, "a missing Secret must stop the pod, not start it without TLS"
        assert PurePosixPath(path).name == key


def test_agents_reach_every_replica_through_the_headless_service(base_objects: list[m.KubeObject]) -> None:
    _, agent = the_container(base_objects, "DaemonSet", "gpu-agent")
    _, extender = the_container(base_objects, "Deployment", "gpu-extender")
    svc = m.one(base_objects, "Service", "gpu-extender-agents", m.NAMESPACE)
    spec = svc["spec"]
    assert spec["clusterIP"] == "None"
    assert spec["publishNotReadyAddresses"] is True
    host, port = m.flag_value(agent["args"], "--extender-service").rsplit(":", 1)
    assert host == f"gpu-extender-agents.{m.NAMESPACE}.svc"
    (svc_port,) = spec["ports"]
    assert svc_port["port"] == int(port)
    named = {p["name"]: p["containerPort"] for p in extender["ports"]}
    assert named[svc_port["targetPort"]] == int(m.flag_value(extender["args"], "--grpc-addr").rsplit(":", 1)[1])
    assert m.flag_value(agent["args"], "--tls-server-name") in m.service_dns_names(svc)


def test_services_select_the_extender_pods(base_objects: list[m.KubeObject]) -> None:
    dep = m.one(base_objects, "Deployment", "gpu-extender", m.NAMESPACE)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    for name in ("gpu-extender", "gpu-extender-agents"):
        selector = m.one(base_objects, "Service", name, m.NAMESPACE)["spec"]["selector"]
        assert selector.items() <= labels.items(), name
    svc = m.one(base_objects, "Service", "gpu-extender", m.NAMESPACE)["spec"]
    assert svc.get("type", "ClusterIP") == "ClusterIP" and svc.get("clusterIP") != "None"
    assert [(p["port"], p["targetPort"]) for p in svc["ports"]] == [(443, "https")]


def test_extender_is_highly_available(base_objects: list[m.KubeObject]) -> None:
    dep = m.one(base_objects, "Deployment", "gpu-extender", m.NAMESPACE)
    spec = dep["spec"]
    assert spec["replicas"] == 2
    (term,) = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    labels = spec["template"]["metadata"]["labels"]
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    pdb = m.one(base_objects, "PodDisruptionBudget", "gpu-extender", m.NAMESPACE)
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_scheduler_deployment_runs_the_pinned_upstream_image(
    base_objects: list[m.KubeObject], scheduler_config: dict
) -> None:
    pod, c = the_container(base_objects, "Deployment", "gpu-scheduler")
    assert m.image_repository(c["image"]) == SCHEDULER_IMAGE
    assert pod["serviceAccountName"] == "gpu-scheduler"
    # The binary in command, every flag in args: an overlay appends feature gates with one patch.
    assert c["command"] == ["/usr/local/bin/kube-scheduler"]
    assert [a for a in c["args"] if not a.startswith("--")] == []
    for kind in ("livenessProbe", "readinessProbe"):
        assert c[kind]["httpGet"]["scheme"] == "HTTPS" and _probe_port(c, c[kind]) == 10259
    assert scheduler_config["leaderElection"]["leaderElect"] is True


def test_the_documented_clear_xid_finds_the_running_agent(base_objects: list[m.KubeObject]) -> None:
    """deploy/README and --help say `kubectl exec POD -- gpu-agent --clear-xid 5`: the exec'd command
    (the container's environment, no other flag) must look where the DaemonSet's agent answers. It
    looked in /tmp/gpu-agent while the agent answered in /tmp/gpu-agent/control: "no running agent
    answered within 10s" (issue 26)."""
    _, c = the_container(base_objects, "DaemonSet", "gpu-agent")
    # `kubectl exec` runs with the container's environment: a GPU_AGENT_CONTROL_DIR there would
    # reach both sides alike; the DaemonSet sets none, so the flag and the default must agree.
    assert not [e for e in c.get("env", []) if e["name"] == f"{agent_settings.ENV_PREFIX}CONTROL_DIR"]
    parser = agent_settings.build_parser()
    running = parser.parse_args(c["args"]).control_dir
    exec_in_pod = parser.parse_args(["--clear-xid", "5"]).control_dir
    assert exec_in_pod == running == agent_settings.DEFAULT_CONTROL_DIR
