"""One test's world on the real control plane: its namespace, its Nodes, the real gpu-extender
(`--kubernetes`, HTTPS with a test CA) and gpu-agents on fake NVML, and a real kube-scheduler
started from a shipped KubeSchedulerConfiguration. Everything is removed when the test ends."""

from __future__ import annotations

import base64
import copy
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
import yaml

from tests.control_plane import GPU, ControlPlane, Kube, KubeError, Process
from tests.harness import (
    ROOT,
    Cluster,
    Proc,
    Samples,
    client_ssl_context,
    http,
    metric,
    parse_metrics,
    wait_until,
    write_ca,
    write_leaf,
)

SECOND_SCHEDULER = ROOT / "deploy/base/scheduler/kube-scheduler-config.yaml"
DEFAULT_SCHEDULER = ROOT / "deploy/default-scheduler/kube-scheduler-config.yaml"
EXTENDER_NAME = "gpu-extender.gpu-extender.svc"  # the serverName both shipped configs verify
NODE_LABEL = "gpu-extender.test/namespace"  # each test's pods select its own nodes only

H100 = {
    "product": "NVIDIA H100 80GB HBM3",
    "memory_gib": 80,
    "compute_capability": "9.0",
    "label": "NVIDIA-H100-80GB-HBM3",
}
A100_40 = {
    "product": "NVIDIA A100-SXM4-40GB",
    "memory_gib": 40,
    "compute_capability": "8.0",
    "label": "NVIDIA-A100-SXM4-40GB",
}


def scenario(
    gpu: dict[str, Any],
    idle: int,
    busy: int = 0,
    topology: dict[str, Any] | None = None,
    events: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A fake-NVML scenario: `busy` GPUs at 90 % utilization, then `idle` ones at 2 %; with
    `topology` and `events` (fakes/scenario.py's sections, e.g. an XID) when given."""
    fields = {k: v for k, v in gpu.items() if k != "label"}
    groups = [{**fields, "count": busy, "utilization_percent": 90, "memory_used_percent": 80}] if busy else []
    if idle:
        groups.append({**fields, "count": idle, "utilization_percent": 2, "memory_used_percent": 1})
    extra = {"topology": topology} if topology is not None else {}
    return {"gpus": groups, **extra, **({"events": events} if events else {})}


def holder(name: str, *devices: dict[str, int], namespace: str = "elsewhere", resource: str = GPU) -> dict[str, Any]:
    """A pod in a fake kubelet's List holding fake GPUs by index: {"gpu": 3}, or one replica of a
    shared GPU, {"gpu": 3, "replica": 1} (fakes/kubelet.py's scenario format)."""
    container = {"name": "main", "devices": {resource: list(devices)}}
    return {"namespace": namespace, "name": name, "containers": [container]}


def shipped_config(path: Path, url: str, ca_pem: bytes, **extender: Any) -> dict[str, Any]:
    """A shipped KubeSchedulerConfiguration pointed at the test's extender: its URL, and the test CA
    as caData in place of the caFile mounted in a cluster. Every other line is as shipped, unless a
    test overrides an extender field (e.g. ignorable) and says why."""
    config = yaml.safe_load(path.read_text())
    ext = config["extenders"][0]
    ext["urlPrefix"] = url
    tls = ext["tlsConfig"]
    tls.pop("caFile")
    tls["caData"] = base64.b64encode(ca_pem).decode()
    ext.update(extender)
    return dict(config)


@dataclass
class Scene:
    plane: ControlPlane
    kube: Kube
    ns: str
    workdir: Path
    procs: Cluster
    ca: trustme.CA
    nodes: list[str] = field(default_factory=list)
    schedulers: list[Process] = field(default_factory=list)
    dra_objects: list[str] = field(default_factory=list)  # API paths of DRA objects to delete at the end
    scenario_files: dict[str, Path] = field(default_factory=dict)
    topologies: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> fake NVML topology
    kubelet_files: dict[str, Path] = field(default_factory=dict)  # node -> its fake kubelet's scenario
    kubelet_sockets: dict[str, Path] = field(default_factory=dict)
    socket_dir: Path | None = None  # unix socket paths must stay short: not under pytest's tmp_path

    def __post_init__(self) -> None:
        self.cert, self.key = write_leaf(self.workdir, self.ca, "extender", "127.0.0.1", EXTENDER_NAME)
        self.ca_file = write_ca(self.workdir, self.ca, "extender-ca")
        self.client_tls = client_ssl_context(self.ca)

    # -- Nodes and agents ---------------------------------------------------------------------------

    def node(
        self,
        name: str,
        gpu: dict[str, Any],
        idle: int,
        busy: int = 0,
        *,
        labels: dict[str, str] | None = None,
        allocatable: int | None = None,
        topology: dict[str, Any] | None = None,
        dra: bool = False,
        events: list[dict[str, Any]] | None = None,
    ) -> str:
        """A Ready GPU Node with GFD's product label and `idle + busy` GPUs; named `<ns>-<name>`.
        `allocatable`: the Node's nvidia.com/gpu when it is not the GPU count (time-slicing
        advertises GPUs x replicas); `topology`: the fake NVML's topology, kept by set_gpus."""
        full = f"{self.ns}-{name}"
        count = idle + busy if allocatable is None else allocatable
        self.kube.create_node(
            full,
            None if dra else count,  # DRA: no nvidia.com/gpu allocatable; the GPUs are in a ResourceSlice
            {
                NODE_LABEL: self.ns,
                "nvidia.com/gpu.product": gpu["label"],
                "nvidia.com/gpu.count": str(idle + busy),
                **(labels or {}),
            },
        )
        self.nodes.append(full)
        if topology is not None:
            self.topologies[full] = topology
        self.set_gpus(full, gpu, idle, busy, events)
        return full

    def set_gpus(
        self, node: str, gpu: dict[str, Any], idle: int, busy: int = 0, events: list[dict[str, Any]] | None = None
    ) -> None:
        """(Re)write the node's scenario file: a running agent follows it, as if workloads started."""
        path = self.workdir / f"{node}.yaml"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(scenario(gpu, idle, busy, self.topologies.get(node), events)))
        tmp.replace(path)
        self.scenario_files[node] = path

    def kubelet(self, node: str, pods: list[dict[str, Any]], allocatable: dict[str, Any] | None = None) -> Proc:
        """A fake kubelet serving PodResources for `node` (start it before the node's agent, which
        then reads it): `pods` as `holder` writes them, `allocatable` the device IDs it hands out
        (default: each of the node's fake GPUs once). Its GPU UUIDs are the fake NVML's for the node."""
        if self.socket_dir is None:
            self.socket_dir = Path(tempfile.mkdtemp(prefix="kube-kl-"))
        if allocatable is None:
            gpus = sum(group["count"] for group in yaml.safe_load(self.scenario_files[node].read_text())["gpus"])
            allocatable = {GPU: [{"gpus": gpus}]}
        socket = self.socket_dir / f"{len(self.kubelet_sockets)}.sock"
        self.kubelet_files[node] = self.workdir / f"kubelet-{node}.yaml"
        self.kubelet_sockets[node] = socket
        self._write_kubelet(node, {"allocatable": allocatable, "pods": pods})
        args = ["--socket", str(socket), "--scenario", str(self.kubelet_files[node]), "--node", node]
        proc = self.procs.spawn(f"kubelet-{node}", "gpuextender.agent.fakes.kubelet", args)
        wait_until(f"{node}'s fake kubelet ({proc.log_path})", lambda: _alive_and_exists(proc, socket))
        return proc

    def set_pods(self, node: str, pods: list[dict[str, Any]]) -> None:
        """Rewrite the pods the node's fake kubelet lists (it reads its file again when it changes):
        a pod's workload starts, or held GPUs are released."""
        spec = yaml.safe_load(self.kubelet_files[node].read_text())
        self._write_kubelet(node, {**spec, "pods": pods})

    def _write_kubelet(self, node: str, spec: dict[str, Any]) -> None:
        path = self.kubelet_files[node]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(spec))
        tmp.replace(path)

    def agent(self, node: str, ext: Proc | tuple[Proc, ...], *extra: str) -> Proc:
        """The node's gpu-agent on fake NVML, streaming to `ext` (or to each of several replicas)
        over TLS (the extender's gRPC port serves the same certificate as its HTTPS port)."""
        tls = ("--tls-ca", str(self.ca_file), "--tls-server-name", EXTENDER_NAME)
        # A node with a fake kubelet: its agent reads the allocation from it.
        kubelet = ("--pod-resources-socket", str(self.kubelet_sockets[node])) if node in self.kubelet_sockets else ()
        exts = ext if isinstance(ext, tuple) else (ext,)
        return self.procs.agent(
            node, self.scenario_files[node], *exts, extra=("--interval", "0.2", *tls, *kubelet, *extra)
        )

    # -- the extender -------------------------------------------------------------------------------

    def extender(
        self, *extra: str, http_port: int | None = None, grpc_port: int | None = None, wait_ready: bool = True
    ) -> Proc:
        """The real gpu-extender over HTTPS, with Nodes and OME objects from the real apiserver's watch.
        `wait_ready=False`: returns once /readyz answers at all (503 included: Cluster.extender)."""
        return self.procs.extender(
            "--kubernetes",
            "--kubeconfig",
            str(self.plane.kubeconfig),
            "--tls-cert",
            str(self.cert),
            "--tls-key",
            str(self.key),
            *extra,
            http_port=http_port,
            grpc_port=grpc_port,
            ssl_context=self.client_tls,
            wait_ready=wait_ready,
        )

    def url(self, ext: Proc) -> str:
        return f"https://127.0.0.1:{ext.ports['http']}"

    def scrape(self, ext: Proc) -> Samples:
        status, raw = http("GET", self.url(ext) + "/metrics", ssl_context=self.client_tls)
        assert status == 200, status
        return parse_metrics(raw.decode())

    def wait_idle(self, ext: Proc, node: str, idle: int, timeout: float = 20.0) -> None:
        """Until the extender holds `idle` idle GPUs for `node` from its agent."""
        wait_until(
            f"{node}: {idle} idle GPUs in the extender",
            lambda: metric(self.scrape(ext), "gpu_extender_node_idle_gpus", node=node) == idle,
            timeout,
        )

    def wait_inventory(self, ext: Proc, kind: str, count: int) -> None:
        wait_until(
            f"{count} {kind} in the extender's inventory",
            lambda: metric(self.scrape(ext), "gpu_extender_inventory_objects", kind=kind) == count,
        )

    # -- kube-scheduler -----------------------------------------------------------------------------

    def scheduler(
        self,
        ext: Proc | None,
        which: Path = SECOND_SCHEDULER,
        *,
        port: int | None = None,
        ca_pem: bytes | None = None,
        binary: str = "kube-scheduler",
        extra_args: tuple[str, ...] = (),
        **extender: Any,
    ) -> Process:
        """A real kube-scheduler (`binary`) from the shipped config `which`, calling `ext` (or `port`)
        over HTTPS."""
        target = port if port is not None else (ext.ports["http"] if ext is not None else 0)
        pem = ca_pem if ca_pem is not None else self.ca.cert_pem.bytes()
        config = shipped_config(which, f"https://127.0.0.1:{target}", pem, **extender)
        proc = self.plane.scheduler(
            config, name=f"kube-scheduler-{len(self.schedulers)}", binary=binary, extra_args=extra_args
        )
        self.schedulers.append(proc)
        return proc

    def scheduler_alone(self, binary: str = "kube-scheduler", extra_args: tuple[str, ...] = ()) -> Process:
        """The shipped gpu-scheduler configuration with its extender removed: what an autoscaler
        simulates, and what a scheduler that never asks the extender decides."""
        config = shipped_config(SECOND_SCHEDULER, "https://127.0.0.1:1", self.ca.cert_pem.bytes())
        del config["extenders"]
        name = f"kube-scheduler-alone-{self.ns}-{len(self.schedulers)}"
        proc = self.plane.scheduler(config, name=name, binary=binary, extra_args=extra_args)
        self.schedulers.append(proc)
        return proc

    # -- pods ---------------------------------------------------------------------------------------

    def pod(
        self,
        name: str,
        gpus: int,
        *,
        scheduler: str = "gpu-scheduler",
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> str:
        limits = {GPU: str(gpus)} if gpus else {}
        self.kube.create(
            f"/api/v1/namespaces/{self.ns}/pods",
            {
                "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
                "spec": {
                    "schedulerName": scheduler,
                    "nodeSelector": {NODE_LABEL: self.ns},
                    "containers": [
                        {"name": "main", "image": "registry.example/llm:1", "resources": {"limits": limits}}
                    ],
                },
            },
        )
        return name

    def bound(self, pod: str, timeout: float = 30.0) -> str:
        return self.kube.wait_bound(self.ns, pod, timeout)

    def unschedulable(self, pod: str, timeout: float = 30.0) -> str:
        return self.kube.wait_unschedulable(self.ns, pod, timeout)

    def node_of(self, pod: str) -> str | None:
        return self.kube.node_of(self.ns, pod)

    def cleanup(self) -> None:
        self.procs.stop_all()
        if self.socket_dir is not None:  # the fake kubelets were stopped with the other processes
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        for proc in self.schedulers:
            proc.stop()
        # The next test's scheduler must not wait for this one's lease to expire.
        for lease in (
            "/apis/coordination.k8s.io/v1/namespaces/gpu-extender/leases/gpu-scheduler",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler",
            "/apis/coordination.k8s.io/v1/namespaces/gpu-extender/leases/gpu-extender-device-taints",
        ):
            self.kube.delete(lease, grace_seconds=None)
        self.kube.delete_pods(self.ns)
        if self.dra_objects:  # a DRA test: its claims (the scheduler's too), then what it created
            claims = f"/apis/resource.k8s.io/v1/namespaces/{self.ns}/resourceclaims"
            for claim in self.kube.get(claims)["items"]:
                path = f"{claims}/{claim['metadata']['name']}"
                # No controller-manager: the delete-protection finalizer would keep it forever.
                self.kube.merge_patch(path, {"metadata": {"finalizers": None}})
                self.kube.delete(path, grace_seconds=None)
            for path in self.dra_objects:
                self.kube.delete(path, grace_seconds=None)
            # The DeviceTaintRules the extenders wrote (they are stopped: none is written again).
            rules = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
            for rule in self.kube.get(rules + "?labelSelector=app.kubernetes.io/managed-by%3Dgpu-extender")["items"]:
                self.kube.delete(f"{rules}/{rule['metadata']['name']}", grace_seconds=None)
        for node in self.nodes:
            self.kube.delete(f"/api/v1/nodes/{node}", grace_seconds=None)


@contextmanager
def scene(plane: ControlPlane, kube: Kube, ns: str, workdir: Path, ca: trustme.CA) -> Iterator[Scene]:
    procs = Cluster(workdir)
    s = Scene(plane, kube, ns, workdir, procs, ca)
    try:
        yield s
    finally:
        s.cleanup()


def _alive_and_exists(proc: Proc, path: Path) -> bool:
    if not proc.alive():
        raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()}")
    return path.exists()


def copy_ome_objects(kube: Kube, docs: list[dict[str, Any]], namespace: str) -> None:
    """Create OME example objects in the apiserver; namespaced ones in the test's namespace."""
    for doc in docs:
        doc = copy.deepcopy(doc)
        if "namespace" in doc["metadata"]:
            doc["metadata"]["namespace"] = namespace
        try:
            kube.apply_yaml([doc], namespace)
        except KubeError as exc:
            raise AssertionError(f"{doc['kind']}/{doc['metadata']['name']}: {exc}") from None
