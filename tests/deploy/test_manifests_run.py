"""The rendered manifests, run: the gpu-extender Deployment's and the gpu-agent DaemonSet's container
arguments and env, with the files deploy/tls/make-certs.sh makes for the two Secrets, started as the
real programs on loopback against the in-test API server (list/watch + TokenReview).

Only what cannot be the same on a laptop is changed, in `localize` (listen addresses, volume mount
paths, in-cluster config, the headless Service's DNS name, the downward API's node name) plus
`--fake` for the agent (no GPU here). Every other flag is passed as the manifest writes it, so
TLS, mTLS, the token audience, the service account and `--tls-server-name` are the deployed ones:
the agent verifies the script's certificate for the manifest's server name, the extender checks
the agent's client certificate against the Secret's CA and its projected token with a TokenReview,
and HTTPS is checked as kube-scheduler does it (the ConfigMap's `tlsConfig.serverName` and
`caFile`, through the scheduler pod's own volume mounts)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.client import HTTPSConnection
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml

from gpuextender.extender.ingest.agent_identity import NODE_NAME_EXTRA
from tests.deploy import manifests as m
from tests.deploy.test_certs import OPENSSL, run_script
from tests.e2e.test_kubernetes_inventory import ThreadedApiServer
from tests.harness import (
    FIXTURES,
    STARTUP_S,
    Cluster,
    Proc,
    Samples,
    cluster,
    free_port,
    http,
    metric,
    parse_metrics,
    request_for,
    wait_until,
)
from tests.kube_apiserver import TokenReviewRequest

pytestmark = pytest.mark.slow

SCENARIO = FIXTURES / "scenarios" / "idle8.yaml"  # 8 idle H100s
KUBELET = FIXTURES / "kubelet" / "notebook-gpu0.yaml"  # a pod holds GPU 0 and leaves it idle
POD_RESOURCES_DIR = "/var/lib/kubelet/pod-resources"  # the agent's default socket's directory
NODE = "gpu-node-1"  # where the agent pod "runs"
ROGUE_NODE = "gpu-node-2"  # an agent whose token is bound to NODE, not to this node
# The images' ENTRYPOINTs are the console scripts: `args` is exactly their argv.
MODULES = {"gpu-extender": "gpuextender.extender", "gpu-agent": "gpuextender.agent"}


# -- the laptop mapping: everything that differs from a pod, and nothing else ------------------------


@dataclass
class Laptop:
    ports: dict[str, int]  # listen flag -> free loopback port (the pod listens on 0.0.0.0:PORT)
    grpc_port: int  # the extender's gRPC port, where the headless Service's name must lead
    mounts: dict[str, Path]  # container mountPath -> a local directory with the volume's files
    kubeconfig: Path | None = None  # the in-test API server, instead of the pod's in-cluster config
    node: str = ""  # spec.nodeName, for the downward API
    rewritten: list[str] = field(default_factory=list)  # what was changed, for failure messages


LISTEN_FLAGS = ("--http-addr", "--grpc-addr", "--metrics-addr")
EMPTY_DIR_MARK = ".test-emptydir"
HOST_DIR_MARK = ".test-hostpath"


def localize(args: list[str], laptop: Laptop) -> list[str]:
    out = []
    for arg in args:
        assert arg.startswith("--"), f"{arg!r}: the manifests write --flag or --flag=value (read below)"
        flag, sep, value = arg.partition("=")
        new = value
        if flag in LISTEN_FLAGS:
            # 0.0.0.0:<container port> -> 127.0.0.1:<free port>
            assert value.rsplit(":", 1)[0] == "0.0.0.0", arg
            new = f"127.0.0.1:{laptop.ports[flag]}"
        elif flag == "--extender-service":
            # The headless Service's DNS name -> a name that resolves to the extender here.
            new = f"localhost:{laptop.grpc_port}"
        elif value.startswith("/"):
            # A file in a volume mount (Secret key, projected token) -> the same file in tmp_path.
            new = str(rebase(value, laptop.mounts))
        out.append(f"{flag}{sep}{new}")
        if new != value:
            laptop.rewritten.append(f"{arg} -> {new}")
        if arg == "--kubernetes":
            # In-cluster config -> a kubeconfig for the in-test API server (still --kubernetes).
            assert laptop.kubeconfig is not None, "--kubernetes without a kubeconfig to point it at"
            out.append(f"--kubeconfig={laptop.kubeconfig}")
            laptop.rewritten.append(f"+ --kubeconfig={laptop.kubeconfig}")
    return out


def localize_env(container: m.KubeObject, laptop: Laptop) -> dict[str, str]:
    env = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])  # passed unchanged (e.g. NVIDIA_VISIBLE_DEVICES)
        elif entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            env[entry["name"]] = laptop.node  # the downward API
        else:
            pytest.fail(f"env {entry['name']}: no local stand-in for {entry}")
    return env


def rebase(path: str, mounts: dict[str, Path]) -> Path:
    pure = PurePosixPath(path)
    for mount_path, local in mounts.items():
        if pure.is_relative_to(mount_path):
            if (local / EMPTY_DIR_MARK).exists() or (local / HOST_DIR_MARK).exists():
                return local / pure.relative_to(mount_path)  # an emptyDir or a host directory: made at run time
            local_file = local / pure.relative_to(mount_path)
            assert local_file.is_file(), f"{path}: the volume mounted at {mount_path} has no such key"
            return local_file
    raise AssertionError(f"{path} is under no volume mount of the container: it would not exist in the pod")


def mount_volumes(
    objects: list[m.KubeObject],
    workload: m.KubeObject,
    container: m.KubeObject,
    certs: Path,
    root: Path,
    token: str = "",
) -> dict[str, Path]:
    """What the kubelet would mount, as local directories: Secret keys from the script's output
    (one directory per Secret), the projected ServiceAccount token, ConfigMap data."""
    pod = workload["spec"]["template"]["spec"]
    namespace = workload["metadata"]["namespace"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        local = root / workload["metadata"]["name"] / mount["name"]
        local.mkdir(parents=True)
        if "secret" in volume:
            secret = certs / volume["secret"]["secretName"]
            assert secret.is_dir(), f"make-certs.sh makes no Secret {secret.name}"
            items = volume["secret"].get("items") or [{"key": p.name, "path": p.name} for p in secret.iterdir()]
            for item in items:
                shutil.copyfile(secret / item["key"], local / item["path"])
        elif "configMap" in volume:
            config_map = m.one(objects, "ConfigMap", volume["configMap"]["name"], namespace)
            for key, text in config_map["data"].items():
                (local / key).write_text(text)
        elif "projected" in volume:
            for source in volume["projected"]["sources"]:
                (local / source["serviceAccountToken"]["path"]).write_text(token)
        elif "emptyDir" in volume:
            (local / EMPTY_DIR_MARK).touch()  # writable scratch space (the kubelet makes it 0777)
        elif "hostPath" in volume:
            (local / HOST_DIR_MARK).touch()  # the node's directory: start_agent serves a fake kubelet in it
        else:
            pytest.fail(f"volume {mount['name']}: no local stand-in for {volume}")
        mounts[mount["mountPath"]] = local
    return mounts


# -- the rendered objects ---------------------------------------------------------------------------


def container_of(objects: list[m.KubeObject], kind: str, name: str) -> tuple[m.KubeObject, m.KubeObject]:
    workload = m.one(objects, kind, name, m.NAMESPACE)
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return workload, container


def projected_token(workload: m.KubeObject) -> dict:
    (source,) = [
        s["serviceAccountToken"]
        for v in workload["spec"]["template"]["spec"]["volumes"]
        for s in v.get("projected", {}).get("sources", [])
        if "serviceAccountToken" in s
    ]
    return source


# -- processes ------------------------------------------------------------------------------------------


def spawn(c: Cluster, name: str, program: str, args: list[str], env: dict[str, str], ports: dict[str, int]) -> Proc:
    """Like Cluster.spawn, but the console script (the image's ENTRYPOINT) with the container's env."""
    script = Path(sys.executable).with_name(program)
    command = [str(script)] if script.exists() else [sys.executable, "-m", MODULES[program]]
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NODE_NAME", "GPU_AGENT_EXTENDERS", "GPU_AGENT_EXTENDER_SERVICE")
    }
    log_path = c.workdir / f"{name}.log"
    with open(log_path, "wb") as log_file:
        popen = subprocess.Popen(
            [*command, *args],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**base, "PYTHONUNBUFFERED": "1", **env},
            cwd=c.workdir,
        )
    proc = Proc(name, popen, log_path, ports)
    c.procs.append(proc)
    return proc


def alive_and(proc: Proc, check: Callable[[], bool]) -> bool:
    if not proc.alive():
        raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()}")
    return check()


def wait_for(what: str, check: Callable[[], object], *procs: Proc, laptop: Laptop | None = None) -> None:
    """wait_until (bounded as a process's start: STARTUP_S), failing with what was rewritten and the
    last log lines of `procs`."""
    try:
        wait_until(what, check, STARTUP_S)
    except AssertionError as exc:
        tails = "".join(f"\n--- {p.name} ({p.log_path}):\n" + "\n".join(p.log().splitlines()[-15:]) for p in procs)
        rewritten = "\nrewritten for loopback:\n  " + "\n  ".join(laptop.rewritten) if laptop else ""
        raise AssertionError(f"{exc}{rewritten}{tails}") from None


class ServiceNameHTTPS(HTTPSConnection):
    """HTTPS to 127.0.0.1 that verifies (and sends as Host) the Service DNS name kube-scheduler
    dials, like `curl --resolve NAME:PORT:127.0.0.1`."""

    def __init__(self, server_name: str, port: int, ca_file: Path) -> None:
        super().__init__(server_name, port, timeout=5)
        self.tls = ssl.create_default_context(cafile=str(ca_file))  # verifies chain and name

    def connect(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), self.timeout)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


# -- the run ------------------------------------------------------------------------------------------------


@dataclass
class Live:
    cluster: Cluster
    api: ThreadedApiServer
    objects: list[m.KubeObject]
    certs: Path
    root: Path
    extender: Proc
    extender_laptop: Laptop
    server_name: str  # tlsConfig.serverName of the scheduler configuration
    scheduler_ca: Path  # tlsConfig.caFile, through the scheduler pod's mounts
    filter_path: str  # urlPrefix path + filterVerb
    agent: Proc | None = None
    agent_laptop: Laptop | None = None
    first_scrape: Samples = field(default_factory=dict)  # when the agent's data arrived, before any other agent

    def https(
        self, method: str, path: str, body: bytes | None = None, server_name: str | None = None
    ) -> tuple[int, bytes]:
        conn = ServiceNameHTTPS(server_name or self.server_name, self.extender.ports["http"], self.scheduler_ca)
        try:
            conn.request(method, path, body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def scrape(self) -> Samples:
        status, raw = self.https("GET", "/metrics")
        assert status == 200
        return parse_metrics(raw.decode())

    def reads_kubelet(self) -> bool:
        """The rendered agent mounts the kubelet's PodResources directory (deploy/'s default)."""
        _, container = container_of(self.objects, "DaemonSet", "gpu-agent")
        return any(v["mountPath"] == POD_RESOURCES_DIR for v in container.get("volumeMounts", []))

    def idle_expected(self) -> int:
        return 7 if self.reads_kubelet() else 8  # KUBELET's pod holds GPU 0

    def start_agent(self, name: str, node: str, token: str) -> tuple[Proc, Laptop]:
        """An agent pod of the DaemonSet on `node`, its projected token file holding `token`."""
        ds, container = container_of(self.objects, "DaemonSet", "gpu-agent")
        metrics_port = free_port()
        laptop = Laptop(
            ports={"--metrics-addr": metrics_port},
            grpc_port=self.extender.ports["grpc"],
            mounts=mount_volumes(self.objects, ds, container, self.certs, self.root / name, token),
            node=node,
        )
        args = [*localize(container["args"], laptop), f"--fake={SCENARIO}"]  # simulated NVML: no GPU here
        if POD_RESOURCES_DIR in laptop.mounts:
            # The shipped default (deploy/: allocation from the kubelet): a fake kubelet serves the real
            # PodResources API in the hostPath's stand-in, where the agent's default socket path leads.
            socket_path = rebase(f"{POD_RESOURCES_DIR}/kubelet.sock", laptop.mounts)
            kubelet = ["--socket", str(socket_path), "--scenario", str(KUBELET), "--node", node]
            self.cluster.spawn(f"kubelet-{name}", "gpuextender.agent.fakes.kubelet", kubelet)
            wait_until(f"the fake kubelet of {name}", socket_path.exists)
            args.append(f"--pod-resources-socket={socket_path}")
            laptop.rewritten.append(f"+ --pod-resources-socket={socket_path} (the default, rebased)")
        proc = spawn(self.cluster, name, "gpu-agent", args, localize_env(container, laptop), {"metrics": metrics_port})
        wait_for(
            f"{name} /healthz",
            lambda: alive_and(proc, lambda: http("GET", f"http://127.0.0.1:{metrics_port}/healthz")[0] == 200),
            proc,
            laptop=laptop,
        )
        return proc, laptop


def node_object(name: str, gpus: int = 8) -> dict:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, default_objects: list[m.KubeObject]) -> Iterator[Live]:
    base_objects = default_objects  # the default install: allocation from the kubelet where kubectl renders it
    if OPENSSL is None:
        pytest.skip("openssl is not installed: deploy/tls/make-certs.sh needs it")
    root = tmp_path_factory.mktemp("manifests-run")
    certs = root / "out"
    run_script("-o", str(certs))  # the files of the two Secrets

    dep, extender = container_of(base_objects, "Deployment", "gpu-extender")
    ds, _ = container_of(base_objects, "DaemonSet", "gpu-agent")
    audience = projected_token(ds)["audience"]
    # The username the API server puts in the agent pod's token: its ServiceAccount.
    agent_sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
    agent_user = f"system:serviceaccount:{ds['metadata']['namespace']}:{agent_sa}"

    # kube-scheduler's view: its configuration and CA file as its pod mounts them.
    sched, sched_container = container_of(base_objects, "Deployment", "gpu-scheduler")
    sched_mounts = mount_volumes(base_objects, sched, sched_container, certs, root)
    config = yaml.safe_load(rebase(m.flag_value(sched_container["args"], "--config"), sched_mounts).read_text())
    (ext_entry,) = config["extenders"]
    assert ext_entry["enableHTTPS"] is True

    api = ThreadedApiServer()
    try:
        s = api.server
        api.call(lambda: s.add("Node", node_object(NODE)))
        # The node a rogue agent claims: no allocatable GPUs, so the extender's readiness
        # (--readiness-grace: every GPU node reported) waits for NODE's agent only.
        api.call(lambda: s.add("Node", node_object(ROGUE_NODE, gpus=0)))
        # Both tokens are the agent ServiceAccount's, for the manifest's audience, bound to NODE.
        for token in (f"token-of-{NODE}", f"another-token-of-{NODE}"):
            api.call(
                lambda token=token: s.add_token(
                    token, agent_user, extra={NODE_NAME_EXTRA: [NODE]}, audiences=[audience]
                )
            )
        kubeconfig = s.write_kubeconfig(root / "kubeconfig")
        http_port, grpc_port = free_port(), free_port()
        ext_laptop = Laptop(
            ports={"--http-addr": http_port, "--grpc-addr": grpc_port},
            grpc_port=grpc_port,
            mounts=mount_volumes(base_objects, dep, extender, certs, root),
            kubeconfig=kubeconfig,
        )
        ext_args = localize(extender["args"], ext_laptop)
        with cluster(root) as c:
            ext = spawn(
                c,
                "extender",
                "gpu-extender",
                ext_args,
                localize_env(extender, ext_laptop),
                {"http": http_port, "grpc": grpc_port},
            )
            live = Live(
                cluster=c,
                api=api,
                objects=base_objects,
                certs=certs,
                root=root,
                extender=ext,
                extender_laptop=ext_laptop,
                server_name=ext_entry["tlsConfig"]["serverName"],
                scheduler_ca=rebase(ext_entry["tlsConfig"]["caFile"], sched_mounts),
                filter_path=urlsplit(ext_entry["urlPrefix"]).path.rstrip("/") + "/" + ext_entry["filterVerb"],
            )
            # Up, but not ready: no agent has reached this replica yet (the manifest's --readiness-grace).
            waiting = b"waiting for agent data: 1 of 1 GPU node(s) not reported yet"
            wait_for(
                f"extender /readyz over HTTPS as {live.server_name} (waiting for agents)",
                lambda: alive_and(ext, lambda: waiting in live.https("GET", "/readyz")[1]),
                ext,
                laptop=ext_laptop,
            )
            live.agent, live.agent_laptop = live.start_agent("agent", NODE, f"token-of-{NODE}")
            wait_for(
                f"{NODE}'s data at the extender",
                lambda: metric(live.scrape(), "gpu_extender_node_idle_gpus", node=NODE) == live.idle_expected(),
                live.agent,
                ext,
                laptop=live.agent_laptop,
            )
            wait_for(
                "extender /readyz once the agent is in",
                lambda: alive_and(ext, lambda: live.https("GET", "/readyz")[0] == 200),
                ext,
                laptop=ext_laptop,
            )
            live.first_scrape = live.scrape()
            yield live
    finally:
        api.close()


def test_extender_serves_https_as_the_scheduler_configuration_expects(live: Live) -> None:
    """/readyz (the readiness probe) and the filter verb, verified with the CA file and server name
    kube-scheduler uses; a name outside the certificate is refused, so the check is real."""
    assert live.https("GET", "/readyz")[0] == 200
    # The filter verb where kube-scheduler posts it (urlPrefix path + filterVerb).
    status, raw = live.https("POST", live.filter_path, request_for([NODE], gpus=8))
    assert status == 200 and json.loads(raw)["NodeNames"] == [NODE], raw
    with pytest.raises(ssl.SSLCertVerificationError):
        live.https("GET", "/readyz", server_name="gpu-extender.default.svc")
    log = live.extender.log()
    assert "scheduler API on https://" in log
    assert "security: TLS on for HTTPS and gRPC (" in log
    ext_args = container_of(live.objects, "Deployment", "gpu-extender")[1]["args"]
    assert m.flag_value(ext_args, "--tls-ca"), "the Deployment passes no --tls-ca: agents are not authenticated by TLS"
    client_ca = rebase(m.flag_value(ext_args, "--tls-ca"), live.extender_laptop.mounts)
    assert f"mTLS on: agents need a client certificate signed by {client_ca}" in log
    sa, aud = m.flag_value(ext_args, "--agent-service-account"), m.flag_value(ext_args, "--agent-token-audience")
    assert (
        f"agent auth: TokenReview (service account {sa}, audience {aud!r}, token bound to the reporting node, " in log
    )
    assert "inventory: Kubernetes API (list+watch)" in log


def test_the_agent_streams_over_mtls_with_its_projected_token(live: Live) -> None:
    samples = live.scrape()
    assert metric(samples, "gpu_extender_nodes_with_data") == 1
    # deploy/ reads allocation from the kubelet by default: the GPU a pod holds is not idle capacity.
    assert metric(samples, "gpu_extender_node_idle_gpus", node=NODE) == live.idle_expected()
    if live.reads_kubelet():
        assert metric(samples, "gpu_extender_node_allocated_idle_gpus", node=NODE) == 1
        assert "GPU allocation from the kubelet's PodResources API at " in live.agent.log()
    assert metric(samples, "gpu_extender_connected_agents") >= 1
    # Nothing was refused before another agent came along.
    failures = {
        dict(labels).get("reason"): v
        for (name, labels), v in live.first_scrape.items()
        if name == "gpu_extender_agent_auth_failures_total"
    }
    assert not any(failures.values()), failures

    # The TokenReview asked for the manifest's audience, for the token in the projected file.
    audience = projected_token(m.one(live.objects, "DaemonSet", "gpu-agent", m.NAMESPACE))["audience"]
    reviews = live.api.call(lambda: list(live.api.server.token_reviews))
    assert TokenReviewRequest(f"token-of-{NODE}", (audience,)) in reviews

    agent_log = live.agent.log()
    agent_args = container_of(live.objects, "DaemonSet", "gpu-agent")[1]["args"]
    server_name = m.flag_value(agent_args, "--tls-server-name")
    assert f"for the name {server_name!r}, client certificate " in agent_log  # TLS + client cert, manifest's name
    assert "; bearer token from " in agent_log
    # --clear-xid works with the manifest's --control-dir on its emptyDir (read-only root filesystem).
    assert "answering `gpu-agent --clear-xid` requests in " in agent_log and "--clear-xid unavailable" not in agent_log
    target = f"127.0.0.1:{live.extender.ports['grpc']}"
    agent_metrics = parse_metrics(http("GET", f"http://127.0.0.1:{live.agent.ports['metrics']}/metrics")[1].decode())
    assert metric(agent_metrics, "gpu_agent_stream_connected", extender=target) == 1
    assert not metric(agent_metrics, "gpu_agent_reports_rejected_total", extender=target)
    assert f"agent for node {NODE} connected" in live.extender.log()


def test_an_agent_with_a_token_bound_to_another_node_stores_nothing(live: Live) -> None:
    """The same DaemonSet arguments on ROGUE_NODE, with a valid token of the agents' ServiceAccount
    that is bound to NODE: TLS and the token check pass, every report is rejected."""
    rogue, laptop = live.start_agent("rogue-agent", ROGUE_NODE, f"another-token-of-{NODE}")
    wait_for(
        "the rogue agent's rejection",
        lambda: f"bound to node '{NODE}'" in rogue.log(),
        rogue,
        live.extender,
        laptop=laptop,
    )
    assert "rejected report" in rogue.log() and "an agent may only report for its own node" in rogue.log()
    samples = live.scrape()
    assert metric(samples, "gpu_extender_agent_auth_failures_total", reason="node_mismatch") >= 1
    assert metric(samples, "gpu_extender_node_idle_gpus", node=ROGUE_NODE) is None
    assert metric(samples, "gpu_extender_nodes_with_data") == 1
    assert f"report for node '{ROGUE_NODE}' refused" in live.extender.log()
    target = f"127.0.0.1:{live.extender.ports['grpc']}"
    rogue_metrics = parse_metrics(http("GET", f"http://127.0.0.1:{rogue.ports['metrics']}/metrics")[1].decode())
    assert metric(rogue_metrics, "gpu_agent_reports_rejected_total", extender=target) >= 1
    assert rogue.alive()
