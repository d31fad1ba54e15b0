"""The install's whole life with Helm, as README's Quickstart and deploy/README.md spell it, on a
real kube-apiserver with real helm v4 (issue 50, item 10): in an admin's checkout, each documented
command as written: preflight, the images, `helm install` with them as two `--set` values, the
certificates, `helm upgrade --reuse-values` to opt namespaces in, an upgrade to a new commit, and
the uninstall with its cleanup. What the chart installs is what `kubectl kustomize` renders for the
same choice (the same objects, the same images); each step prints nothing the docs do not
announce; afterwards no object of ours is left.

An API server of its own (tests/kube/test_install.py says why); no kubelet: no pod runs."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.control_plane import ControlPlane, Kube, wait_for
from tests.deploy import docs_install as d
from tests.deploy import manifests as m
from tests.kube.install_steps import (
    ANNOUNCED,
    PART_OF,
    Admin,
    extender_writes,
    lifecycle_plane,
    ours_left,
    ready_cluster,
    rolled_to,
    template_images,
    unannounced,
)
from tests.kube_tools import HELM, KUBECTL, NO_HELM, NO_KUBECTL

pytestmark = [
    pytest.mark.skipif(KUBECTL is None, reason=NO_KUBECTL),
    pytest.mark.skipif(HELM is None, reason=NO_HELM),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed: make-certs.sh needs it"),
]
# The kinds the install makes, where an object of ours could be (cluster-wide and in its namespaces).
KINDS = (
    "/api/v1/namespaces",
    "/api/v1/namespaces/gpu-extender/configmaps",
    "/api/v1/namespaces/gpu-extender/serviceaccounts",
    "/api/v1/namespaces/gpu-extender/services",
    "/api/v1/namespaces/gpu-extender/resourcequotas",
    "/apis/apps/v1/namespaces/gpu-extender/deployments",
    "/apis/apps/v1/namespaces/gpu-extender/daemonsets",
    "/apis/policy/v1/namespaces/gpu-extender/poddisruptionbudgets",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/gpu-extender/roles",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/gpu-extender/rolebindings",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings",
    "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
    "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
)


@pytest.fixture(scope="module")
def plane(k8s_assets: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with lifecycle_plane(k8s_assets, tmp_path_factory.mktemp("helm-plane")) as control:
        yield control


def summary(kind: str, obj: dict[str, Any]) -> tuple[tuple[str, str], str]:
    """(kind, name without a generated suffix) -> its pod images, comma-joined ("" for none)."""
    spec = obj.get("spec") or {}
    template = spec.get("template", {}) if isinstance(spec, dict) else {}
    images = [c["image"] for c in template.get("spec", {}).get("containers", [])]
    return (kind, m.unsuffixed(obj["metadata"]["name"])), ",".join(images)


def live(kube: Kube) -> dict[tuple[str, str], str]:
    """Every object of ours in the cluster, as `summary` says it."""
    found = {}
    for path in KINDS:
        listing = kube.get(f"{path}?labelSelector={PART_OF}")
        found.update(summary(listing["kind"].removesuffix("List"), obj) for obj in listing["items"])
    return found


def kustomized(admin: Admin, overlay: str) -> dict[tuple[str, str], str]:
    """The same, for what `kubectl kustomize OVERLAY` renders in the admin's checkout."""
    objects = yaml.safe_load_all(admin.run(f"kubectl kustomize {overlay}").stdout)
    return dict(summary(obj["kind"], obj) for obj in objects if obj)


def test_the_quickstart_with_helm_upgrade_and_uninstall(plane: ControlPlane, tmp_path: Path) -> None:
    kube = plane.client()
    kube.create("/api/v1/namespaces", {"metadata": {"name": "llm"}})  # the workloads' namespace, step 4
    ready_cluster(kube)
    admin = Admin(plane, tmp_path)

    # README, Quickstart step 2, as written, but for what needs a kubelet (rollout status) or a
    # running extender behind a port-forward (explain: tests/kube/test_explain_pod.py).
    (quickstart,) = d.sh_blocks("README.md", "2. **Install on a cluster**")
    skipped = [c for c in quickstart if c.startswith(("kubectl -n gpu-extender rollout", "gpu-extender explain"))]
    steps = [c for c in quickstart if c not in skipped]
    assert len(skipped) == 2 and [c.split(" --")[0] for c in steps[1:3]] == [
        "deploy/build-images.sh registry.example.com/gpu",
        "helm install gpu-extender deploy/",
    ], steps
    for command in steps:
        result = admin.run(command)
        if not command.startswith("deploy/"):  # the scripts' own progress (openssl's) aside
            assert not unannounced(result), (command, result.stderr)
        if command.startswith("helm install"):
            assert len([line for line in result.stderr.splitlines() if ANNOUNCED.search(line)]) == 1, result.stderr
    commit = admin.commit()
    assert template_images(kube, "deployments", "gpu-extender") == [
        f"registry.example.com/gpu/gpu-extender:0.1.0-g{commit}"
    ]
    # What Helm installed is what kustomize renders for the same choice: the opt-in overlay.
    assert live(kube) == kustomized(admin, "deploy/overlays/opt-in-by-namespace")
    assert kube.get("/api/v1/namespaces/llm")["metadata"]["labels"]["gpu-extender.io/scheduler"] == "gpu-scheduler"
    values = json.loads(admin.run("helm get values gpu-extender --namespace default -o json").stdout)
    assert values["components"] == {"gpu-scheduler-by-default": True}

    # Upstream moves on; deploy/README.md, Upgrade with Helm: the first block's git and images
    # steps, then the Helm block.
    admin.upstream_moves_on()
    kustomize_path, helm_path = d.sh_blocks("deploy/README.md", "## Upgrade")
    assert helm_path[0].startswith("helm upgrade gpu-extender deploy/ --namespace default --reuse-values"), helm_path
    for command in [*kustomize_path[:3], *helm_path]:
        result = admin.run(command)
        if command.startswith("helm "):
            assert not unannounced(result), (command, result.stderr)
    new_commit = admin.commit()
    assert new_commit != commit
    images = template_images(kube, "deployments", "gpu-extender")
    assert images == [f"registry.example.com/gpu/gpu-extender:0.1.0-g{new_commit}"]
    wait_for("the extender's ReplicaSet of the new image", lambda: rolled_to(kube, images[0]), 60)
    assert live(kube) == kustomized(admin, "deploy/overlays/opt-in-by-namespace")  # the values kept

    # deploy/README.md, Uninstall with Helm, after the extender wrote what it writes.
    extender_writes(kube)
    _, uninstall = d.sh_blocks("deploy/README.md", "## Uninstall")
    assert uninstall == ["helm uninstall gpu-extender --namespace default --wait", ".venv/bin/gpu-extender cleanup"]
    for command in uninstall:
        result = admin.run(command)
        assert not result.stderr.strip(), (command, result.stderr)
    wait_for("the namespace gone", lambda: not kube.get(f"/api/v1/namespaces?labelSelector={PART_OF}")["items"], 90)
    assert ours_left(kube) == ["devicetaintrules/theirs", "taint nvidia.com/gpu"]
    assert (
        subprocess.run(
            [str(HELM), "list", "--all-namespaces", "-q"], env=admin.env, capture_output=True, text=True
        ).stdout.strip()
        == ""
    )
