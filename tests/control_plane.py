"""A real Kubernetes control plane on 127.0.0.1 for tests and benchmarks, envtest-style.

`KUBEBUILDER_ASSETS` (controller-runtime envtest's variable) names a folder holding the `etcd`,
`kube-apiserver` and `kube-scheduler` binaries. `ControlPlane.start()` makes throwaway
certificates (trustme) and service-account keys, starts etcd and kube-apiserver (static-token
admin in system:masters, Node,RBAC authorization), and waits for `/readyz`. `scheduler()` starts a
real kube-scheduler with a `KubeSchedulerConfiguration` dict. There is no controller-manager (but
`controller_manager()` starts one with DRA's resourceclaim controller for the tests that need it) and
no kubelet, so `Kube` does their part where tests need it: the `default` ServiceAccount of a new
namespace, Nodes made Ready with the admission-added not-ready taint removed, pods deleted with
grace 0. Every process is stopped by PID, with its process group.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.harness import free_port

ASSETS_ENV = "KUBEBUILDER_ASSETS"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")
ADMIN_TOKEN = "gpu-extender-test-admin"  # the static token of `admin` (system:masters)
# A user with no role at all until a test binds one (RBAC as shipped, checked for real).
LIMITED_USER, LIMITED_TOKEN = "gpu-extender-limited", "gpu-extender-test-limited"
GPU = "nvidia.com/gpu"


def assets() -> Path | None:
    """The folder of binaries named by KUBEBUILDER_ASSETS, or None when the variable is unset."""
    value = os.environ.get(ASSETS_ENV, "").strip()
    return Path(value) if value else None


def skip_reason() -> str | None:
    """Why the control-plane tests cannot run here (one line), or None when they can."""
    folder = assets()
    if folder is None:
        return f"set {ASSETS_ENV} to a folder with etcd, kube-apiserver and kube-scheduler (docs/testing.md)"
    missing = [name for name in BINARIES if not os.access(folder / name, os.X_OK)]
    if missing:
        return f"{ASSETS_ENV}={folder} has no executable {', '.join(missing)}"
    return None


@dataclass
class Process:
    """A binary started in its own process group, its output in `log_path`."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.alive():
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=5)


def start_process(name: str, argv: list[str], log_path: Path) -> Process:
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return Process(name, popen, log_path)


def wait_for(what: str, check: Callable[[], Any], timeout: float, proc: Process | None = None) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` (and the process log) on timeout."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(
                f"{proc.name} exited with {proc.popen.returncode} while waiting for {what}:\n{proc.log()[-4000:]}"
            )
        try:
            result = check()
            if result:
                return result
        except (OSError, KubeError, ValueError) as exc:
            last = exc
        time.sleep(0.1)
    tail = f"\n{proc.name} log:\n{proc.log()[-4000:]}" if proc is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last}){tail}")


class KubeError(Exception):
    def __init__(self, status: int, body: str, what: str) -> None:
        super().__init__(f"{what} -> {status}: {body[:500]}")
        self.status = status


class Kube:
    """A small synchronous client of the apiserver's REST API (JSON), authenticated by a bearer token."""

    def __init__(self, server: str, token: str, ca_file: Path) -> None:
        self.server = server
        self.token = token
        self._ssl = ssl.create_default_context(cafile=str(ca_file))

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json", timeout: float = 10.0
    ) -> Any:
        raw = self.raw(method, path, body, content_type, timeout)
        return json.loads(raw) if raw else None

    def raw(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json", timeout: float = 10.0
    ) -> bytes:
        # Compact, keys sorted: as kube-apiserver re-encodes an object it patches, so that an opaque
        # RawExtension (a ResourceClaim's driver config, kept byte for byte) compares equal on the
        # next update (else: "spec: Invalid value ... field is immutable").
        data = None if body is None else json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._ssl) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            raise KubeError(exc.code, exc.read().decode(errors="replace"), f"{method} {path}") from None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, path: str, obj: dict[str, Any]) -> Any:
        return self.request("POST", path, obj)

    def merge_patch(self, path: str, patch: dict[str, Any]) -> Any:
        return self.request("PATCH", path, patch, "application/merge-patch+json")

    def delete(self, path: str, grace_seconds: int | None = 0) -> None:
        body = None if grace_seconds is None else {"gracePeriodSeconds": grace_seconds}
        try:
            self.request("DELETE", path, body)
        except KubeError as exc:
            if exc.status != 404:
                raise

    def apply_yaml(self, docs: list[dict[str, Any]], namespace: str | None = None) -> None:
        """Create each object (cluster-scoped or namespaced) at its REST path; one that exists is replaced."""
        for doc in docs:
            path = collection_path(doc, namespace)
            try:
                self.create(path, doc)
            except KubeError as exc:
                if exc.status != 409:
                    raise
                current = self.get(f"{path}/{doc['metadata']['name']}")
                replaced = {
                    **doc,
                    "metadata": {**doc["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
                }
                self.request("PUT", f"{path}/{doc['metadata']['name']}", replaced)

    # -- what a controller-manager or kubelet would do ---------------------------------------------

    def create_namespace(self, name: str) -> None:
        """The namespace and its `default` ServiceAccount (no controller-manager makes it)."""
        self.create("/api/v1/namespaces", {"metadata": {"name": name}})
        self.create(f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}})

    def create_node(
        self,
        name: str,
        gpus: int | None,
        labels: dict[str, str] | None = None,
        cpu: str = "64",
        memory: str = "512Gi",
    ) -> None:
        """A Ready Node with `gpus` nvidia.com/gpu allocatable (None: none listed at all, as on a node
        whose GPUs come through DRA) and no taints (the one admission adds on create is removed, as
        the node lifecycle controller would once the kubelet reports Ready)."""
        self.create(
            "/api/v1/nodes", {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}}
        )
        resources = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus is not None:
            resources[GPU] = str(gpus)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.merge_patch(
            f"/api/v1/nodes/{name}/status",
            {
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "test node",
                            "lastHeartbeatTime": now,
                            "lastTransitionTime": now,
                        }
                    ],
                }
            },
        )
        self.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})

    def delete_pods(self, namespace: str) -> None:
        """All pods of `namespace`, at once (no kubelet confirms a graceful deletion)."""
        for pod in self.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
            self.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.get(f"/api/v1/namespaces/{namespace}/pods/{name}"))

    def node_of(self, namespace: str, name: str) -> str | None:
        return self.pod(namespace, name)["spec"].get("nodeName")

    def wait_bound(self, namespace: str, name: str, timeout: float = 30.0) -> str:
        """The node the scheduler bound the pod to."""
        return str(wait_for(f"pod {namespace}/{name} bound", lambda: self.node_of(namespace, name), timeout))

    def scheduled_condition(self, namespace: str, name: str) -> dict[str, Any] | None:
        for condition in self.pod(namespace, name).get("status", {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled":
                return dict(condition)
        return None

    def wait_unschedulable(self, namespace: str, name: str, timeout: float = 30.0) -> str:
        """The message of the pod's PodScheduled=False condition, once the scheduler has written one."""

        def check() -> str | None:
            condition = self.scheduled_condition(namespace, name)
            if condition and condition.get("status") == "False" and condition.get("message"):
                return str(condition["message"])
            return None

        return str(wait_for(f"pod {namespace}/{name} PodScheduled=False", check, timeout))


def collection_path(obj: dict[str, Any], namespace: str | None = None) -> str:
    """The REST collection of `obj` (built-in kinds by the plural rules the tests need; CRs by group)."""
    api_version = obj["apiVersion"]
    plural = _PLURALS.get(obj["kind"]) or obj["kind"].lower() + "s"
    ns = obj.get("metadata", {}).get("namespace") or namespace
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if obj["kind"] in _CLUSTER_SCOPED or ns is None:
        return f"{base}/{plural}"
    return f"{base}/namespaces/{ns}/{plural}"


_PLURALS = {
    "CustomResourceDefinition": "customresourcedefinitions",
    "AcceleratorClass": "acceleratorclasses",
    "InferenceService": "inferenceservices",
    "ClusterServingRuntime": "clusterservingruntimes",
    "DeviceClass": "deviceclasses",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
}
_CLUSTER_SCOPED = {
    "CustomResourceDefinition",
    "Node",
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "AcceleratorClass",
    "ClusterServingRuntime",
    "ClusterBaseModel",
    "DeviceClass",
    "ResourceSlice",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
}


@dataclass
class ControlPlane:
    """etcd + kube-apiserver on loopback, started by `start()`, stopped (by PID) by `stop()`."""

    workdir: Path
    binaries: Path
    processes: list[Process] = field(default_factory=list)
    port: int = 0
    # DeviceTaintRules (DRA device taints set by a controller): beta in 1.36 behind its gate, and
    # served as v1beta2 (kube-apiserver) and v1alpha3 (what kube-scheduler v1.35.4 reads).
    apiserver_args: tuple[str, ...] = (
        "--feature-gates=DRADeviceTaintRules=true",
        "--runtime-config=resource.k8s.io/v1beta2=true,resource.k8s.io/v1alpha3=true",
    )

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    def kubeconfig_for(self, token: str, name: str) -> Path:
        """A kubeconfig that authenticates with `token` (e.g. LIMITED_TOKEN)."""
        path = self.workdir / f"{name}.kubeconfig"
        path.write_text(kubeconfig_yaml(self.server, self.ca_file, token))
        return path

    def client(self, token: str = ADMIN_TOKEN) -> Kube:
        return Kube(self.server, token, self.ca_file)

    def start(self, timeout: float = 90.0) -> Kube:
        import trustme
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.workdir.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA(organization_name="gpu-extender test control plane")
        serving = ca.issue_cert("127.0.0.1", "localhost", "kubernetes.default.svc", common_name="kube-apiserver")
        self.ca_file.write_bytes(ca.cert_pem.bytes())
        # The front-proxy CA: with it the apiserver publishes extension-apiserver-authentication
        # in full, and kube-scheduler stops logging that requestheader-client-ca-file is missing.
        (self.workdir / "front-proxy-ca.crt").write_bytes(trustme.CA().cert_pem.bytes())
        serving.cert_chain_pems[0].write_to_path(str(self.workdir / "apiserver.crt"))
        serving.private_key_pem.write_to_path(str(self.workdir / "apiserver.key"))
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self.workdir / "sa.key").write_bytes(
            sa_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            )
        )
        (self.workdir / "sa.pub").write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        (self.workdir / "tokens.csv").write_text(
            f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n{LIMITED_TOKEN},{LIMITED_USER},limited-uid\n'
        )

        client_port, peer_port, self.port = free_port(), free_port(), free_port()
        etcd = start_process(
            "etcd",
            [
                str(self.binaries / "etcd"),
                "--name",
                "test",
                "--data-dir",
                str(self.workdir / "etcd-data"),
                "--listen-client-urls",
                f"http://127.0.0.1:{client_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{client_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"test=http://127.0.0.1:{peer_port}",
                # A test's data needs no durability: skip fsync (much faster on a shared disk).
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
            self.workdir / "etcd.log",
        )
        self.processes.append(etcd)
        wait_for("etcd /health", lambda: _get_ok(f"http://127.0.0.1:{client_port}/health"), timeout, etcd)

        apiserver = start_process(
            "kube-apiserver",
            [
                str(self.binaries / "kube-apiserver"),
                "--etcd-servers",
                f"http://127.0.0.1:{client_port}",
                "--bind-address",
                "127.0.0.1",
                "--advertise-address",
                "127.0.0.1",
                "--secure-port",
                str(self.port),
                "--tls-cert-file",
                str(self.workdir / "apiserver.crt"),
                "--tls-private-key-file",
                str(self.workdir / "apiserver.key"),
                "--client-ca-file",
                str(self.ca_file),
                "--token-auth-file",
                str(self.workdir / "tokens.csv"),
                "--authorization-mode",
                "Node,RBAC",
                "--service-account-issuer",
                "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file",
                str(self.workdir / "sa.pub"),
                "--service-account-signing-key-file",
                str(self.workdir / "sa.key"),
                "--service-cluster-ip-range",
                "10.0.0.0/24",
                "--endpoint-reconciler-type",
                "none",
                "--cert-dir",
                str(self.workdir / "apiserver-certs"),
                "--requestheader-client-ca-file",
                str(self.workdir / "front-proxy-ca.crt"),
                "--requestheader-allowed-names",
                "front-proxy-client",
                "--requestheader-username-headers",
                "X-Remote-User",
                "--requestheader-group-headers",
                "X-Remote-Group",
                "--requestheader-extra-headers-prefix",
                "X-Remote-Extra-",
                *self.apiserver_args,
            ],
            self.workdir / "kube-apiserver.log",
        )
        self.processes.append(apiserver)
        kube = self.client()
        wait_for("kube-apiserver /readyz", lambda: kube.raw("GET", "/readyz") == b"ok", timeout, apiserver)
        self.kubeconfig.write_text(kubeconfig_yaml(self.server, self.ca_file, ADMIN_TOKEN))
        return kube

    def scheduler(
        self,
        config: dict[str, Any],
        name: str = "kube-scheduler",
        timeout: float = 60.0,
        *,
        binary: str = "kube-scheduler",
        extra_args: tuple[str, ...] = (),
    ) -> Process:
        """A real kube-scheduler (`binary`: kube-scheduler v1.35.4, or kube-scheduler-1.36) with `config`
        (its clientConnection.kubeconfig is set to the admin's); returns once its /healthz answers. A
        config it rejects fails here, with its log."""
        config = json.loads(json.dumps(config))
        config.setdefault("clientConnection", {})["kubeconfig"] = str(self.kubeconfig)
        path = self.workdir / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return self._component(name, [binary, *extra_args, "--config", str(path)], timeout)

    def controller_manager(
        self,
        name: str = "kube-controller-manager",
        timeout: float = 60.0,
        controllers: str = "resourceclaim-controller,serviceaccount-controller,garbage-collector-controller",
    ) -> Process:
        """A real kube-controller-manager v1.36.2 running only the controllers a test needs; by
        default those of the DRA tests: the resourceclaim controller (ResourceClaimTemplates become
        claims), service accounts and the garbage collector (a pod's generated claims go with it).
        Returns once its /healthz answers."""
        return self._component(
            name,
            [
                "kube-controller-manager",
                "--kubeconfig",
                str(self.kubeconfig),
                f"--controllers={controllers}",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
            ],
            timeout,
        )

    def _component(self, name: str, argv: list[str], timeout: float) -> Process:
        """Start `argv` (a binary of the folder, then its own flags) with the serving flags every
        control-plane component takes (loopback, a free secure port, unauthenticated health and
        metrics, the admin kubeconfig to check callers); return once its /healthz answers."""
        port = free_port()
        kubeconfig = str(self.kubeconfig)
        proc = start_process(
            name,
            [
                str(self.binaries / argv[0]),
                *argv[1:],
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(port),
                "--authorization-always-allow-paths",
                "/healthz,/readyz,/livez,/metrics",
                "--cert-dir",
                str(self.workdir / f"{name}-certs"),
                "--authentication-kubeconfig",
                kubeconfig,
                "--authorization-kubeconfig",
                kubeconfig,
            ],
            self.workdir / f"{name}.log",
        )
        self.processes.append(proc)
        _wait_healthy(name, port, timeout, proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()
        shutil.rmtree(self.workdir / "etcd-data", ignore_errors=True)


def _wait_healthy(name: str, port: int, timeout: float, proc: Process) -> None:
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # its self-signed serving cert; only readiness is read
    wait_for(f"{name} /healthz", lambda: _get_ok(f"https://127.0.0.1:{port}/healthz", insecure), timeout, proc)


def _get_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def kubeconfig_yaml(server: str, ca_file: Path, token: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }
    )
