"""The install, as README's Quickstart and deploy/README.md spell it, on a real kube-apiserver
(issue 38 items 3 and 5): the images (deploy/build-images.sh, here --dry-run: tests/test_image_run.py
builds the Dockerfiles), `kubectl apply -k` its overlay, then the certificates into the namespace,
then both again as the renewal says. Each object is applied one way only, so nothing warns but the
one PodSecurity warning the docs announce, and the renewal meets no conflict.

An API server of its own (no kubelets, no controllers: the objects are accepted, no pod runs),
so the session's shared one keeps its namespace as the other tests made it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control_plane import ControlPlane
from tests.harness import ROOT

KUBECTL = shutil.which("kubectl")
OPENSSL = shutil.which("openssl")
pytestmark = [
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed: the install is kubectl's"),
    pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed: deploy/tls/make-certs.sh needs it"),
]
# What the docs announce (deploy/README.md, Install): the namespace's `warn: restricted` on the agent.
ANNOUNCED = re.compile(r'^Warning: would violate PodSecurity "restricted:latest": .*$')


@pytest.fixture(scope="module")
def plane(k8s_assets: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    control = ControlPlane(tmp_path_factory.mktemp("install-plane"), k8s_assets)
    try:
        control.start()
        yield control
    finally:
        control.stop()


def kubectl(plane: ControlPlane, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """kubectl against `plane`. `apply` gets --validate=false: the kubectl here (1.32) cannot read
    the OpenAPI of these newer API servers ("$root has invalid property: Extensions") and stops
    before sending anything; an admin's kubectl matches the cluster. The objects' schemas are
    checked by tests/deploy/test_render.py."""
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    if args[:1] == ("apply",):
        args = (*args, "--validate=false")
    result = subprocess.run([str(KUBECTL), *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result


def warnings(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def tls_step(plane: ControlPlane, work: Path) -> subprocess.CompletedProcess[str]:
    """`deploy/tls/make-certs.sh && kubectl apply --server-side -k deploy/tls/`, its output in
    `work` instead of the repository (the kustomization as shipped, beside it)."""
    out = work / "out"
    subprocess.run(
        [str(ROOT / "deploy/tls/make-certs.sh"), "-o", str(out)], check=True, capture_output=True, timeout=120
    )
    shutil.copy(ROOT / "deploy/tls/kustomization.yaml", work / "kustomization.yaml")
    return kubectl(plane, "apply", "--server-side", "-k", str(work))


def preflight(plane: ControlPlane) -> tuple[int, list[str]]:
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    result = subprocess.run(
        [str(ROOT / "deploy/preflight.sh")], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    return result.returncode, result.stdout.splitlines()


def failing(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("FAIL")]


def test_preflight_names_what_the_cluster_lacks_and_passes_once_it_is_there(plane: ControlPlane) -> None:
    """deploy/preflight.sh (issue 38 item 7) against a real API server: a bare one fails on the
    RuntimeClass, the GPU nodes and the extender's two nodes; each added in turn clears its line.
    The two-node bound: one untainted node fails, two pass (a tainted GPU node does not count)."""
    code, lines = preflight(plane)
    assert code == 1, lines
    assert [line.split("  ", 1)[1].split(" (")[0] for line in failing(lines)] == [
        "no RuntimeClass nvidia",
        "no node labelled nvidia.com/gpu.present=true",
        "0 schedulable node(s) without NoSchedule/NoExecute taints",
    ], lines
    assert any(line.startswith("PASS  Kubernetes 1.") for line in lines), lines
    kube = plane.client()
    kube.create("/apis/node.k8s.io/v1/runtimeclasses", {"metadata": {"name": "nvidia"}, "handler": "nvidia"})
    kube.create_node("gpu-0", 8, labels={"nvidia.com/gpu.present": "true"})
    kube.merge_patch("/api/v1/nodes/gpu-0", {"spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}})
    kube.create_node("cpu-0", None)
    code, lines = preflight(plane)
    assert failing(lines) == ["FAIL  1 schedulable node(s) without NoSchedule/NoExecute taints"], lines
    kube.create_node("cpu-1", None)
    code, lines = preflight(plane)
    assert code == 0 and not failing(lines) and lines[-1] == "preflight: ready to install", lines
    assert "PASS  1 GPU node(s) labelled nvidia.com/gpu.present=true (an agent each)" in lines


def test_the_documented_install_and_renewal_apply_each_object_one_way(plane: ControlPlane, tmp_path: Path) -> None:
    readme, guide = (ROOT / "README.md").read_text(), (ROOT / "deploy/README.md").read_text()
    steps = (
        "deploy/build-images.sh registry.example.com/gpu",
        "kubectl apply -k deploy/overlays/my-registry/",
        "deploy/tls/make-certs.sh && kubectl apply --server-side -k deploy/tls/",
    )
    for doc in (readme, guide):  # the order this test follows is the docs' order
        assert [doc.index(step) for step in steps] == sorted(doc.index(step) for step in steps)

    overlay = tmp_path / "overlays" / "my-registry"
    images = subprocess.run(
        [str(ROOT / "deploy/build-images.sh"), "registry.example.com/gpu", "--dry-run", "--overlay", str(overlay)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert images.returncode == 0, images.stderr
    applied = kubectl(plane, "apply", "-k", str(overlay))
    unannounced = [w for w in warnings(applied) if not ANNOUNCED.match(w)]
    assert not unannounced, unannounced
    agent_warnings = [w for w in warnings(applied) if ANNOUNCED.match(w)]
    assert len(agent_warnings) == 1 and "daemonset.apps/gpu-agent" in applied.stdout, applied
    # The agent's root user and hostPath volumes (the kubelet's socket, GFD's labels), nothing else.
    assert 'restricted volume type "hostPath"' in agent_warnings[0] and "runAsUser=0" in agent_warnings[0], (
        agent_warnings
    )

    certs = tls_step(plane, tmp_path / "tls")
    assert not warnings(certs), certs.stderr
    assert "secret/gpu-extender-tls serverside-applied" in certs.stdout, certs.stdout

    # Renewal, as documented: both again (new leaf certificates). No conflict, no warning about
    # an object applied another way; the namespace keeps the level deploy/ gave it.
    again = kubectl(plane, "apply", "-k", str(overlay))
    assert not [w for w in warnings(again) if not ANNOUNCED.match(w)], again.stderr
    assert not warnings(tls_step(plane, tmp_path / "renew"))
    namespace = kubectl(plane, "get", "namespace", "gpu-extender", "-o", "json").stdout
    assert '"pod-security.kubernetes.io/enforce": "privileged"' in namespace
    assert '"pod-security.kubernetes.io/warn": "restricted"' in namespace
    managers = kubectl(plane, "get", "namespace", "gpu-extender", "--show-managed-fields", "-o", "json").stdout
    assert '"manager": "kubectl-client-side-apply"' in managers and '"manager": "kubectl"' not in managers
