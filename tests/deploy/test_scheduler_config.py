"""The KubeSchedulerConfiguration files (the gpu-scheduler's ConfigMap and the default-scheduler
snippet), key by key.

kube-scheduler decodes its configuration strictly: an unknown or mis-cased key stops it from
starting (extender-api.md §5.1, pitfall P12: `enableHttps` is not the v1 key). There is no
kube-scheduler here to try the files on, so `config_problems` checks them against the field
names of kubescheduler.config.k8s.io/v1 written out below (extenders[] exactly as §5.1 lists
them), and then the values the extender needs (§4.3, §4.6, §4.7, §4.8, §4.10)."""

from __future__ import annotations

import copy
import re
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy import manifests as m

# kubescheduler.config.k8s.io/v1 field names (case-sensitive), per object.
TOP_LEVEL = {
    "apiVersion",
    "kind",
    "parallelism",
    "leaderElection",
    "clientConnection",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "profiles",
    "extenders",
    "delayCacheUntilActive",
    "enableProfiling",
    "enableContentionProfiling",
}
LEADER_ELECTION = {
    "leaderElect",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "resourceLock",
    "resourceName",
    "resourceNamespace",
}
CLIENT_CONNECTION = {"kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"}
PROFILE = {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"}
# extender-api.md §5.1, with the Go types' YAML kinds.
EXTENDER = {
    "urlPrefix": str,
    "filterVerb": str,
    "prioritizeVerb": str,
    "preemptVerb": str,
    "bindVerb": str,
    "weight": int,
    "enableHTTPS": bool,
    "tlsConfig": dict,
    "httpTimeout": str,
    "nodeCacheCapable": bool,
    "managedResources": list,
    "ignorable": bool,
}
TLS_CONFIG = {
    "insecure": bool,
    "serverName": str,
    "certFile": str,
    "keyFile": str,
    "caFile": str,
    "certData": str,
    "keyData": str,
    "caData": str,
}
MANAGED_RESOURCE = {"name": str, "ignoredByScheduler": bool}
GO_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")


def _unknown(obj: dict, allowed, where: str) -> list[str]:
    return [f"{where}: unknown key {k!r}" for k in obj if k not in allowed]


def _typed(obj: dict, types: dict, where: str) -> list[str]:
    problems = _unknown(obj, types, where)
    for key, value in obj.items():
        expected = types.get(key)
        # bool is an int in Python: weight: true must not pass as an integer.
        if expected is not None and (not isinstance(value, expected) or (expected is int and isinstance(value, bool))):
            problems.append(f"{where}.{key}: {value!r} is not a {expected.__name__}")
    return problems


GPU_ONLY = [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]


def config_problems(cfg: dict[str, Any], managed: list[dict[str, Any]] | None = None) -> list[str]:
    """What kube-scheduler would refuse, or the shipped settings forbid. `managed`: the extender's
    managedResources (None: absent, as the gpu-scheduler ships; GPU_ONLY in the default scheduler,
    where every pod of the cluster would otherwise call the extender)."""
    """Everything kube-scheduler's strict decoder or validation would reject, plus what this
    project requires of its extender entry."""
    problems = _unknown(cfg, TOP_LEVEL, "config")
    if cfg.get("apiVersion") != "kubescheduler.config.k8s.io/v1" or cfg.get("kind") != "KubeSchedulerConfiguration":
        problems.append("config: not a kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration")
    problems += _unknown(cfg.get("leaderElection") or {}, LEADER_ELECTION, "leaderElection")
    problems += _unknown(cfg.get("clientConnection") or {}, CLIENT_CONNECTION, "clientConnection")
    for i, profile in enumerate(cfg.get("profiles") or []):
        problems += _unknown(profile, PROFILE, f"profiles[{i}]")
    extenders = cfg.get("extenders") or []
    if len(extenders) != 1:
        problems.append(f"extenders: expected the gpu-extender entry alone, found {len(extenders)}")
    for i, ext in enumerate(extenders):
        where = f"extenders[{i}]"
        problems += _typed(ext, EXTENDER, where)
        tls = ext.get("tlsConfig") or {}
        problems += _typed(tls, TLS_CONFIG, f"{where}.tlsConfig")
        # Semantics (§4.3, §4.6-§4.8).
        if urlsplit(str(ext.get("urlPrefix", ""))).scheme != "https":
            problems.append(f"{where}.urlPrefix: the scheme must be https (enableHTTPS does not change it)")
        if ext.get("enableHTTPS") is not True:
            problems.append(f"{where}.enableHTTPS must be true")
        if not tls.get("caFile") and not tls.get("caData"):
            problems.append(f"{where}.tlsConfig: no CA - enableHTTPS without one does not verify the server")
        if tls.get("insecure"):
            problems.append(f"{where}.tlsConfig.insecure must not be set")
        if not tls.get("serverName"):
            problems.append(f"{where}.tlsConfig.serverName must name the certificate's DNS name")
        if ext.get("filterVerb") != "filter" or ext.get("prioritizeVerb") != "prioritize":
            problems.append(f"{where}: filterVerb/prioritizeVerb must be filter/prioritize (the extender's routes)")
        if ext.get("prioritizeVerb") and not (isinstance(ext.get("weight"), int) and ext["weight"] > 0):
            problems.append(f"{where}.weight must be > 0 with a prioritizeVerb")
        if ext.get("nodeCacheCapable") is not True:
            problems.append(f"{where}.nodeCacheCapable must be true (names only; false corrupts scoring)")
        if not GO_DURATION.match(str(ext.get("httpTimeout", ""))):
            problems.append(f"{where}.httpTimeout must be a Go duration such as 2s")
        if "ignorable" not in ext:
            problems.append(f"{where}.ignorable must be chosen explicitly")
        listed = ext.get("managedResources")
        for j, res in enumerate(listed or []):
            problems += _typed(res, MANAGED_RESOURCE, f"{where}.managedResources[{j}]")
        if managed is None and listed is not None:
            problems.append(
                f"{where}.managedResources must be absent: a pod whose GPUs come through a DRA ResourceClaim "
                "requests no extended resource and would never reach the extender"
            )
        if managed is not None and listed != managed:
            problems.append(f"{where}.managedResources must be {managed}")
        if "bindVerb" in ext and ext["bindVerb"] != "bind":
            problems.append(f"{where}.bindVerb must be bind (the extender's route) when set")
        if ext.get("preemptVerb") != "preempt":
            problems.append(
                f"{where}.preemptVerb must be preempt (the extender's route: it checks preemption's victims)"
            )
    return problems


def default_scheduler_config() -> dict[str, Any]:
    text = (m.DEPLOY / "default-scheduler" / "kube-scheduler-config.yaml").read_text()
    assert "__GPU_EXTENDER_CLUSTER_IP__" in text
    return yaml.safe_load(text.replace("__GPU_EXTENDER_CLUSTER_IP__", "10.96.12.34"))


def test_gpu_scheduler_config_has_only_valid_keys_and_values(scheduler_config: dict) -> None:
    assert config_problems(scheduler_config) == []
    # kube-scheduler binds; the extender sees bindings in its pod watch (the bind verb is an option:
    # deploy/components/extender-binds; bench/RESULTS.md, "Bursts").
    assert "bindVerb" not in scheduler_config["extenders"][0]


def test_default_scheduler_snippet_has_only_valid_keys_and_values() -> None:
    cfg = default_scheduler_config()
    assert config_problems(cfg, managed=GPU_ONLY) == []
    assert config_problems(cfg) != []  # there, only GPU pods call the extender (deploy/README.md)
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["default-scheduler"]
    assert cfg["clientConnection"]["kubeconfig"] == "/etc/kubernetes/scheduler.conf"


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda c: c["extenders"][0].update(enableHttps=c["extenders"][0].pop("enableHTTPS")),
            "unknown key 'enableHttps'",
        ),
        (lambda c: c.update(extenderConfigs=[]), "unknown key 'extenderConfigs'"),
        (lambda c: c["extenders"][0]["tlsConfig"].update(cafile="/x"), "unknown key 'cafile'"),
        (
            lambda c: c["extenders"][0].update(urlPrefix="http://gpu-extender.gpu-extender.svc:443"),
            "scheme must be https",
        ),
        (lambda c: c["extenders"][0].update(weight=0), "weight must be > 0"),
        (lambda c: c["extenders"][0].update(weight="5"), "is not a int"),
        (lambda c: c["extenders"][0].update(nodeCacheCapable=False), "nodeCacheCapable must be true"),
        (lambda c: c["extenders"][0].update(managedResources=GPU_ONLY), "managedResources must be absent"),
        (lambda c: c["extenders"][0]["tlsConfig"].pop("caFile"), "no CA"),
        (lambda c: c["extenders"][0].update(httpTimeout=2), "Go duration"),
        (lambda c: c["extenders"][0].pop("ignorable"), "ignorable must be chosen"),
        (lambda c: c["profiles"][0].update(SchedulerName="x"), "unknown key 'SchedulerName'"),
        (lambda c: c["extenders"][0].update(bindVerb="Bind"), "bindVerb must be bind"),
        (lambda c: c["extenders"][0].update(preemptVerb="Preempt"), "preemptVerb must be preempt"),
        (lambda c: c["extenders"][0].pop("preemptVerb"), "preemptVerb must be preempt"),
    ],
    ids=[
        "enableHttps",
        "extenderConfigs",
        "tls-cafile",
        "http",
        "weight-0",
        "weight-string",
        "nodecache-false",
        "managed-shape",
        "no-ca",
        "timeout-int",
        "ignorable-unset",
        "profile-case",
        "no-bind",
        "preempt-case",
        "preempt-unset",
    ],
)
def test_the_checker_rejects_what_kube_scheduler_would(scheduler_config: dict, mutate, expected: str) -> None:
    cfg = copy.deepcopy(scheduler_config)
    mutate(cfg)
    problems = config_problems(cfg)
    assert any(expected in p for p in problems), problems


def test_gpu_scheduler_profile_and_sampling(scheduler_config: dict) -> None:
    assert [p["schedulerName"] for p in scheduler_config["profiles"]] == ["gpu-scheduler"]
    # §4.10: the extender must judge every feasible GPU node, not an adaptive sample.
    assert scheduler_config["percentageOfNodesToScore"] == 100
    ext = scheduler_config["extenders"][0]
    # Pods that opted into gpu-scheduler wait rather than land without the extender's checks.
    assert ext["ignorable"] is False
    assert 1 <= ext["weight"] <= 10, "weight outside the range deploy/README.md argues for"


def test_gpu_scheduler_reaches_the_extender_service(base_objects: list[m.KubeObject], scheduler_config: dict) -> None:
    """urlPrefix names the gpu-extender Service and one of its ports, that port leads to the
    container port --http-addr listens on, and serverName is a name the certificate will carry."""
    ext = scheduler_config["extenders"][0]
    url = urlsplit(ext["urlPrefix"])
    svc = m.one(base_objects, "Service", "gpu-extender", m.NAMESPACE)
    assert url.hostname == f"gpu-extender.{m.NAMESPACE}.svc"
    assert url.path in ("", "/"), "the extender serves /filter at the root (no --path-prefix)"
    port = next(p for p in svc["spec"]["ports"] if p["port"] == url.port)
    extender = m.one(base_objects, "Deployment", "gpu-extender", m.NAMESPACE)
    container = extender["spec"]["template"]["spec"]["containers"][0]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    http_port = int(m.flag_value(container["args"], "--http-addr").rsplit(":", 1)[1])
    assert named[port["targetPort"]] == http_port
    assert ext["tlsConfig"]["serverName"] in m.service_dns_names(svc)


def test_gpu_scheduler_mounts_its_config_and_the_ca(base_objects: list[m.KubeObject], scheduler_config: dict) -> None:
    dep = m.one(base_objects, "Deployment", "gpu-scheduler", m.NAMESPACE)
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {mt["mountPath"]: volumes[mt["name"]] for mt in container["volumeMounts"]}

    config_path = m.flag_value(container["args"], "--config")
    config_dir, config_file = config_path.rsplit("/", 1)
    assert mounts[config_dir]["configMap"]["name"].startswith("gpu-scheduler-config")
    assert config_file == "config.yaml"

    ca_dir, ca_file = scheduler_config["extenders"][0]["tlsConfig"]["caFile"].rsplit("/", 1)
    secret = mounts[ca_dir]["secret"]
    assert secret["secretName"] == "gpu-extender-tls"
    # Only the CA is projected into the scheduler, never the extender's private key.
    assert secret["items"] == [{"key": "ca.crt", "path": ca_file}]


def test_leader_election_lock_matches_its_rbac(base_objects: list[m.KubeObject], scheduler_config: dict) -> None:
    le = scheduler_config["leaderElection"]
    assert le["leaderElect"] is True and le["resourceLock"] == "leases"
    role = m.one(base_objects, "Role", "gpu-scheduler-leader-election", le["resourceNamespace"])
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named and all(r["resourceNames"] == [le["resourceName"]] for r in named)
    assert {v for r in named for v in r["verbs"]} == {"get", "update"}


def test_default_scheduler_snippets_mount_what_the_config_names() -> None:
    """The static-pod and kubeadm snippets pass --config with the path the README copies the
    file to, and mount the directory the config's caFile is in."""
    cfg = default_scheduler_config()
    ca_dir = cfg["extenders"][0]["tlsConfig"]["caFile"].rsplit("/", 1)[0]
    (pod,) = m.load_yaml_docs(m.DEPLOY / "default-scheduler" / "kube-scheduler-static-pod.snippet.yaml")
    (container,) = pod["spec"]["containers"]
    config_path = m.flag_value(container["command"], "--config")
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["spec"]["volumes"]}
    mounts = {mt["mountPath"]: volumes[mt["name"]] for mt in container["volumeMounts"]}
    assert mounts[config_path] == config_path and mounts[ca_dir] == ca_dir
    (kubeadm,) = m.load_yaml_docs(m.DEPLOY / "default-scheduler" / "kubeadm-clusterconfiguration.snippet.yaml")
    scheduler = kubeadm["scheduler"]
    assert {"name": "config", "value": config_path} in scheduler["extraArgs"]
    assert {(v["hostPath"], v["mountPath"]) for v in scheduler["extraVolumes"]} == {
        (config_path, config_path),
        (ca_dir, ca_dir),
    }
    readme = (m.DEPLOY / "README.md").read_text()
    assert f"tee {config_path}" in readme and f"{ca_dir}/ca.crt" in readme
