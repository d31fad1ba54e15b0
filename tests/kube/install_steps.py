"""What the install lifecycle tests share (tests/kube/test_install.py with kustomize,
tests/kube/test_helm.py with Helm): an admin in a clone of this repository running documented
commands word for word, the cluster preflight asks for, what a running extender leaves behind, and
what of ours is left after an uninstall."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.control_plane import ControlPlane, Kube
from tests.deploy import docs_install as d
from tests.harness import ROOT
from tests.kube_tools import HELM, KUBECTL, tool_env

# What the docs announce (deploy/README.md, Install): the namespace's `warn: restricted` on the agent
# (kubectl prints it as it is, helm in a log line around it).
ANNOUNCED = re.compile(r'Warning: would violate PodSecurity \\?"restricted:latest\\?": ')
PART_OF = "app.kubernetes.io/part-of=kube-gpu-extender"
RULES = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
# kube-controller-manager's controllers the lifecycle shows: deployments roll into ReplicaSets, a
# deleted namespace empties and goes.
CONTROLLERS = "namespace-controller,garbage-collector-controller,deployment-controller,serviceaccount-controller"


# The kubectl the docs' commands find (the pinned 1.35 where .ci/run fetched it): preflight holds it
# within one minor of the suite's 1.36 API server, and the documented install starts with preflight.
def kubectl_minor() -> int:
    """The minor version of that kubectl (0 without one)."""
    if KUBECTL is None:
        return 0
    out = subprocess.run([KUBECTL, "version", "--client", "-o", "json"], capture_output=True, text=True).stdout
    found = re.search(r'"minor": *"(\d+)', out)
    return int(found.group(1)) if found else 0


KUBECTL_MINOR = kubectl_minor()
IN_SKEW = pytest.mark.skipif(
    KUBECTL_MINOR not in (35, 36, 37),
    reason=f"kubectl 1.{KUBECTL_MINOR} is out of skew with the suite's 1.36 API server: preflight fails as it should "
    "(.ci/run fetches kubectl 1.35: KUBE_TOOLS)",
)


@contextmanager
def lifecycle_plane(k8s_assets: Path, workdir: Path) -> Iterator[ControlPlane]:
    """An API server of the test's own, with the controllers of CONTROLLERS: the session's shared
    one keeps its namespace as the other tests made it."""
    control = ControlPlane(workdir, k8s_assets)
    try:
        control.start()
        control.controller_manager(controllers=CONTROLLERS)
        yield control
    finally:
        control.stop()


def unvalidated_tools(folder: Path) -> Path:
    """`kubectl` that adds --validate=false to `apply`, `helm` that adds
    --disable-openapi-validation to `install` and `upgrade`: neither (kubectl 1.32 and the pinned
    1.35, helm v4) can read the OpenAPI of the suite's kube-apiserver, built from
    openshift/kubernetes (its v3 document lacks the core kinds' paths, its v2 protobuf answers
    503), and each stops before sending anything; against an upstream server they validate. The
    objects' schemas are checked offline by tests/deploy/test_render.py."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, real, verbs, flag in (
        ("kubectl", KUBECTL, "apply", "--validate=false"),
        ("helm", HELM, "install|upgrade", "--disable-openapi-validation"),
    ):
        wrapper = folder / name
        wrapper.write_text(f'#!/bin/sh\ncase "$1" in {verbs}) exec {real} "$@" {flag} ;; esac\nexec {real} "$@"\n')
        wrapper.chmod(0o755)
    return folder


class Admin:
    """An admin at the root of a clone of this repository (`upstream`, a copy of it: `git pull`
    pulls): runs documented commands word for word (a shell, plain `kubectl` and `helm`: the pinned
    ones first on PATH, the fake image builders before the real ones)."""

    def __init__(self, plane: ControlPlane, tmp_path: Path) -> None:
        self.upstream = d.copy_repository(tmp_path / "upstream")
        self.checkout = tmp_path / "kube-gpu-extender"
        subprocess.run(["git", "clone", "-q", str(self.upstream), str(self.checkout)], check=True)
        (self.checkout / ".venv").symlink_to(ROOT / ".venv")  # Preflight's venv with the gpu-extender CLI
        env = d.fake_builders(tmp_path / "bin", tmp_path / "builders.log")
        self.env = {**tool_env(env), "KUBECONFIG": str(plane.kubeconfig)}
        self.env["PATH"] = f"{unvalidated_tools(tmp_path / 'tools')}:{self.env['PATH']}"

    def run(self, command: str, codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            command, shell=True, cwd=self.checkout, env=self.env, capture_output=True, text=True, timeout=180
        )
        assert result.returncode in codes, f"{command}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        return result

    def commit(self) -> str:
        return self.run("git rev-parse --short=12 HEAD").stdout.strip()

    def upstream_moves_on(self) -> None:
        """A newer commit upstream, changing what the images hold."""
        (self.upstream / "gpuextender/extender/upgrade_marker.py").write_text('"""A newer commit."""\n')
        git = ["git", "-c", "user.name=u", "-c", "user.email=u@example.com"]
        subprocess.run([*git, "add", "-A"], cwd=self.upstream, check=True)
        subprocess.run([*git, "commit", "-qm", "next"], cwd=self.upstream, check=True)


def unannounced(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip() and not ANNOUNCED.search(line)]


def ready_cluster(kube: Kube) -> None:
    """What preflight asks of the cluster (test_install.py's first test adds it in turn): the RuntimeClass, a GPU
    node and two nodes for the extender's replicas."""
    if not kube.get("/apis/node.k8s.io/v1/runtimeclasses")["items"]:
        kube.create("/apis/node.k8s.io/v1/runtimeclasses", {"metadata": {"name": "nvidia"}, "handler": "nvidia"})
    names = {o["metadata"]["name"] for o in kube.get("/api/v1/nodes")["items"]}
    if "gpu-0" not in names:
        kube.create_node("gpu-0", 8, labels={"nvidia.com/gpu.present": "true"})
        kube.merge_patch(
            "/api/v1/nodes/gpu-0", {"spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}}
        )
    for name in {"cpu-0", "cpu-1"} - names:
        kube.create_node(name, None)


def extender_writes(kube: Kube) -> None:
    """What a running extender leaves cluster-wide (deploy/README.md, "What other schedulers and
    autoscalers see"): a DeviceTaintRule, a node's GPUsUsable condition and its taint; and, beside
    them, another controller's rule and taint, which the uninstall must keep."""
    for name, labels in (
        ("gpu-extender.gpu-0.gpu-0", {"app.kubernetes.io/managed-by": "gpu-extender"}),
        ("theirs", {}),
    ):
        kube.create(
            RULES,
            {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-0", "device": "gpu-0"},
                    "taint": {"key": "gpu-extender.io/unhealthy", "value": "xid-79", "effect": "NoSchedule"},
                },
            },
        )
    stamp = "2026-01-01T00:00:00Z"
    condition = {"type": "GPUsUsable", "status": "False", "reason": "NoUsableGPU", "lastTransitionTime": stamp}
    kube.request(
        "PATCH",
        "/api/v1/nodes/gpu-0/status",
        {"status": {"conditions": [condition]}},
        "application/strategic-merge-patch+json",
    )
    taints = [{"key": k, "effect": "NoSchedule"} for k in ("nvidia.com/gpu", "gpu-extender.io/no-usable-gpu")]
    kube.merge_patch("/api/v1/nodes/gpu-0", {"spec": {"taints": taints}})


def ours_left(kube: Kube) -> list[str]:
    """Every object of ours the cluster still holds, by kind and name."""
    left = []
    for path in (
        "/api/v1/namespaces",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles",
        "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
        "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
    ):
        items: list[dict[str, Any]] = kube.get(f"{path}?labelSelector={PART_OF}")["items"]
        left += [f"{path.rsplit('/', 1)[1]}/{o['metadata']['name']}" for o in items]
    left += [f"devicetaintrules/{o['metadata']['name']}" for o in kube.get(RULES)["items"]]
    node = kube.get("/api/v1/nodes/gpu-0")
    left += [f"condition {c['type']}" for c in node["status"]["conditions"] if c["type"] != "Ready"]
    left += [f"taint {t['key']}" for t in node["spec"].get("taints", [])]
    return left


def template_images(kube: Kube, kind: str, name: str) -> list[str]:
    obj = kube.get(f"/apis/apps/v1/namespaces/gpu-extender/{kind}/{name}")
    return [c["image"] for c in obj["spec"]["template"]["spec"]["containers"]]


def rolled_to(kube: Kube, image: str) -> bool:
    """The extender's Deployment has a ReplicaSet of `image` (the deployment controller rolled)."""
    sets = "/apis/apps/v1/namespaces/gpu-extender/replicasets?labelSelector=app.kubernetes.io/name=gpu-extender"
    return any(r["spec"]["template"]["spec"]["containers"][0]["image"] == image for r in kube.get(sets)["items"])
