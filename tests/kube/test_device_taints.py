"""Issue 25 on the real control plane: what the agents know of GPU health becomes DRA device taints
that kube-scheduler's allocator honours.

kube-apiserver v1.36.2 serves DeviceTaintRules (DRADeviceTaintRules, resource.k8s.io/v1beta2 and
v1alpha3: tests/control_plane.py); kube-scheduler v1.35.4 runs with DRADeviceTaints and
DRADeviceTaintRules (kube-scheduler-1.36 panics on a DeviceTaintRule with that gate: ../shared/k8s).
Six DRA nodes of 8 GPUs; on each, GPU 0 raised XID 79 (the agent quarantines it). Two gpu-extender
replicas, every agent streaming to both: one leads (Lease) and writes one NoSchedule rule per
quarantined device, the other writes nothing. 40 one-GPU claim pods: the allocator's first fit
would give gpu-0 first; none gets it. `gpu-agent --clear-xid 0` on one node: its rule goes (after
--device-taint-clear-after, 1 s here)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from gpuextender.agent.fakes.kubelet import fake_gpu_uuid
from tests.control_plane import LIMITED_TOKEN, LIMITED_USER, wait_for
from tests.deploy import manifests as m
from tests.extender.dra_objects import device_class, gpu_slice
from tests.harness import Proc, http, metric
from tests.kube.scene import H100, Scene
from tests.kube.test_dra import DRA, claim_pod

RULES = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
NODES, PODS = 6, 40
OPS = ("create", "update", "delete")
GATES = ("--feature-gates=DRADeviceTaints=true,DRADeviceTaintRules=true",)


def ours(world: Scene) -> dict[str, dict[str, Any]]:
    items = world.kube.get(RULES + "?labelSelector=app.kubernetes.io/managed-by%3Dgpu-extender")["items"]
    return {r["metadata"]["name"]: r for r in items}


def mode(world: Scene, ext: Proc) -> str:
    samples = world.scrape(ext)
    found = [
        m
        for m in ("writing", "standby", "unsupported", "forbidden", "no-lease-namespace", "off")
        if metric(samples, "gpu_extender_device_taints_mode", mode=m) == 1
    ]
    return found[0] if found else "?"


@pytest.mark.slow
def test_quarantined_gpus_are_never_allocated_and_come_back_once_cleared(
    world: Scene, capsys: pytest.CaptureFixture[str]
) -> None:
    kube, ns = world.kube, world.ns
    class_name = f"{ns}-gpu"
    kube.create(f"{DRA}/deviceclasses", device_class(class_name))
    world.dra_objects.append(f"{DRA}/deviceclasses/{class_name}")
    xid = [{"at_s": 0.2, "gpus": [0], "xid": 79}]
    nodes = [world.node(f"d{i}", H100, 8, dra=True, events=xid) for i in range(NODES)]
    for n in nodes:
        published = gpu_slice(n, 8, uuid_of=lambda minor, node=n: fake_gpu_uuid(node, minor))
        kube.create(f"{DRA}/resourceslices", published)
        world.dra_objects.append(f"{DRA}/resourceslices/{published['metadata']['name']}")

    flags = ("--device-taint-after", "1", "--device-taint-clear-after", "1", "--stale-after", "120")
    replicas = (world.extender(*flags), world.extender(*flags))
    control = Path(tempfile.mkdtemp(prefix="gx-ctl-"))  # unix socket paths must stay short
    try:
        for i, n in enumerate(nodes):
            world.agent(n, replicas, "--control-dir", str(control / str(i)))
        wait_for(
            f"{NODES} NoSchedule rules, one per quarantined GPU",
            lambda: len(ours(world)) == NODES or None,
            60,
        )
        rules = ours(world)
        for n in nodes:
            rule = rules[f"gpu-extender.{n}.gpu-0"]["spec"]
            assert rule["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": n, "device": "gpu-0"}
            assert (rule["taint"]["key"], rule["taint"]["value"], rule["taint"]["effect"]) == (
                "gpu-extender.io/unhealthy",
                "xid-79",
                "NoSchedule",
            )
        # Exactly one writer: one replica leads, the other has written nothing.
        modes = sorted(mode(world, ext) for ext in replicas)
        assert modes == ["standby", "writing"], modes
        standby = next(ext for ext in replicas if mode(world, ext) == "standby")
        for op in OPS:
            assert (metric(world.scrape(standby), "gpu_extender_device_taint_writes_total", op=op) or 0) == 0
        versions = {name: r["metadata"]["resourceVersion"] for name, r in rules.items()}

        world.scheduler(replicas[0], binary="kube-scheduler", extra_args=GATES)
        for i in range(PODS):
            claim_pod(world, f"p{i:02d}", f"c{i:02d}", class_name, 1)
        wait_for(
            f"{PODS} pods bound",
            lambda: (
                sum(1 for p in kube.get(f"/api/v1/namespaces/{ns}/pods")["items"] if p["spec"].get("nodeName")) == PODS
                or None
            ),
            180,
        )
        given = []
        for i in range(PODS):
            claim = kube.get(f"{DRA}/namespaces/{ns}/resourceclaims/c{i:02d}")
            given += [(r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]]
        assert len(given) == PODS and not [g for g in given if g[1] == "gpu-0"], given
        # The rules did not move while the pods were placed: no replica undid the other's.
        assert {name: r["metadata"]["resourceVersion"] for name, r in ours(world).items()} == versions

        # The operator clears the XID on one node: its rule goes, the others stay.
        started = time.monotonic()
        cleared = subprocess.run(
            [sys.executable, "-m", "gpuextender.agent", "--clear-xid", "0", "--control-dir", str(control / "0")],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert cleared.returncode == 0, cleared.stdout + cleared.stderr
        gone = f"gpu-extender.{nodes[0]}.gpu-0"
        wait_for(f"{gone} deleted", lambda: gone not in ours(world) or None, 30)
        took = time.monotonic() - started
        assert len(ours(world)) == NODES - 1

        # The leader goes away: the standby takes the Lease when it expires and adopts the rules
        # as they are (no rule deleted and made again).
        kept = {name: r["metadata"]["resourceVersion"] for name, r in ours(world).items()}
        leader = next(ext for ext in replicas if ext is not standby)
        leader.stop()
        wait_for("the standby writing", lambda: mode(world, standby) == "writing" or None, 60)
        time.sleep(2)  # a few of its passes: whatever it would change, it has changed by now
        assert {name: r["metadata"]["resourceVersion"] for name, r in ours(world).items()} == kept
        writes = world.scrape(standby)
        assert sum(metric(writes, "gpu_extender_device_taint_writes_total", op=op) or 0 for op in OPS) == 0
        with capsys.disabled():
            print(
                f"\ndevice taints: {PODS} claim pods, 0 on a quarantined GPU; rule gone {took:.2f} s after "
                "--clear-xid (1 s of it the clear hold)"
            )
    finally:
        shutil.rmtree(control, ignore_errors=True)


def test_without_the_rbac_component_the_writer_says_forbidden_and_writes_once_it_is_applied(world: Scene) -> None:
    """RBAC as shipped, checked by the real API server: the extender runs as a user bound to the
    base's ClusterRole only; its device-taint writer reports `forbidden` (one log line, the mode
    metric) and keeps serving. Once deploy/components/device-taints is applied, it writes."""
    ns = world.ns
    user = {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": LIMITED_USER}
    role = m.one(m.kustomize(m.BASE), "ClusterRole", "gpu-extender")
    grant(world, {**role, "metadata": {"name": f"{ns}-base"}})
    grant(world, binding("ClusterRoleBinding", f"{ns}-base", "ClusterRole", f"{ns}-base", user))
    n = quarantined_dra_node(world)

    limited = world.plane.kubeconfig_for(LIMITED_TOKEN, f"{ns}-limited")
    ext = world.extender("--kubeconfig", str(limited), "--device-taint-after", "1")
    world.agent(n, ext)
    wait_for("the writer forbidden", lambda: mode(world, ext) == "forbidden" or None, 30)
    assert "not allowed to list devicetaintrules" in ext.log() and "deploy/components/device-taints" in ext.log()
    assert ours(world) == {}
    # Node status too (no Lease, no leader), said in that one line; the extender keeps filtering.
    assert metric(world.scrape(ext), "gpu_extender_node_status_mode", mode="forbidden") == 1
    time.sleep(12)  # past a retry (10 s): still the one line
    assert ext.log().count("not allowed to list devicetaintrules") == 1, ext.log()
    status, raw = http("POST", world.url(ext) + "/filter", filter_body(world.ns, n), ssl_context=world.client_tls)
    assert status == 200 and json.loads(raw)["NodeNames"] is not None, raw

    for obj in m.load_source(m.COMPONENTS / "device-taints"):  # renamed for this test, bound to the user
        obj = {**obj, "metadata": {**obj["metadata"], "name": f"{ns}-{obj['metadata']['name']}"}}
        if obj["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            obj["subjects"] = [user]
            obj["roleRef"] = {**obj["roleRef"], "name": f"{ns}-{obj['roleRef']['name']}"}
        grant(world, obj)
    wait_for("the writer writing", lambda: mode(world, ext) == "writing" or None, 60)
    wait_for("its rule", lambda: f"gpu-extender.{n}.gpu-0" in ours(world) or None, 30)


def filter_body(namespace: str, node: str) -> bytes:
    """A filter call for a one-GPU device-plugin pod on `node` (a DRA node: no nvidia.com/gpu)."""
    pod = {
        "metadata": {"name": "probe", "namespace": namespace, "uid": "probe"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    return json.dumps({"Pod": pod, "NodeNames": [node]}).encode()


def quarantined_dra_node(world: Scene) -> str:
    """A DRA node of 8 GPUs (its DeviceClass and ResourceSlice) whose GPU 0 raises XID 79 at once."""
    kube, ns = world.kube, world.ns
    class_name = f"{ns}-gpu"
    kube.create(f"{DRA}/deviceclasses", device_class(class_name))
    world.dra_objects.append(f"{DRA}/deviceclasses/{class_name}")
    n = world.node("d", H100, 8, dra=True, events=[{"at_s": 0.2, "gpus": [0], "xid": 79}])
    published = gpu_slice(n, 8, uuid_of=lambda minor: fake_gpu_uuid(n, minor))
    kube.create(f"{DRA}/resourceslices", published)
    world.dra_objects.append(f"{DRA}/resourceslices/{published['metadata']['name']}")
    return n


def binding(kind: str, name: str, role_kind: str, role: str, subject: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [subject],
    }


def path_of(obj: dict[str, Any], name: str) -> str:
    plural = {
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
    }[obj["kind"]]
    namespace = obj["metadata"].get("namespace")
    where = f"namespaces/{namespace}/" if namespace else ""
    return f"/apis/rbac.authorization.k8s.io/v1/{where}{plural}/{name}"


def grant(world: Scene, obj: dict[str, Any]) -> None:
    """Create an RBAC object (named for this test), deleted when the test ends."""
    obj = {k: v for k, v in obj.items() if k != "status"}
    path = path_of(obj, obj["metadata"]["name"])
    world.kube.create(path.rsplit("/", 1)[0], obj)
    world.dra_objects.append(path)


def test_without_the_leases_namespace_the_writer_says_so_once_and_writes_once_it_exists(world: Scene) -> None:
    """Issue 37, item 7: --leader-namespace names a namespace that does not exist. The writer says
    once, in one line, what is missing and how to fix it (no traceback every retry), the mode metric
    shows it, and it writes once the namespace is there."""
    kube, ns = world.kube, world.ns
    n = quarantined_dra_node(world)
    missing = f"{ns}-leases"
    ext = world.extender("--leader-namespace", missing, "--device-taint-after", "1")
    world.agent(n, ext)
    wait_for("the writer without its namespace", lambda: mode(world, ext) == "no-lease-namespace" or None, 30)
    time.sleep(3)  # more than one election retry (2 s) later: still one line, no traceback
    said = [line for line in ext.log().splitlines() if f"namespace {missing} of the replicas' Lease" in line]
    assert len(said) == 1 and "--leader-namespace" in said[0] and f"kubectl create namespace {missing}" in said[0]
    assert "Traceback" not in ext.log() and ours(world) == {}
    kube.create_namespace(missing)
    wait_for("the writer writing", lambda: mode(world, ext) == "writing" or None, 60)
    wait_for("its rule", lambda: f"gpu-extender.{n}.gpu-0" in ours(world) or None, 30)
