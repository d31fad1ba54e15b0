"""The install's whole life with kustomize, as deploy/README.md spells it, on a real
kube-apiserver (issues 38 and 50): in an admin's checkout (a clone of a copy of this repository, so
that `git pull` pulls), each documented command run as written, in the docs' order, with the
scripts' defaults: preflight, the images (builders that record and build nothing:
tests/test_image_run.py builds the Dockerfiles), `kubectl apply -k deploy/`, the certificates, the
opt-in overlay, the relays' overlay, an upgrade to a new commit, and the uninstall with its
cleanup. Each step prints nothing the docs do not announce; afterwards no object of ours is left.

An API server of its own, with a kube-controller-manager running only the controllers the
lifecycle shows, so the session's shared one keeps its namespace as the other tests made it. No
kubelet: no pod runs. tests/kube/test_helm.py does the same with Helm."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control_plane import ControlPlane, wait_for
from tests.deploy import docs_install as d
from tests.harness import ROOT
from tests.kube.install_steps import (
    ANNOUNCED,
    IN_SKEW,
    KUBECTL_MINOR,
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
from tests.kube_tools import KUBECTL, NO_KUBECTL, tool_env

OPENSSL = shutil.which("openssl")
pytestmark = [
    pytest.mark.skipif(KUBECTL is None, reason=NO_KUBECTL),
    pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed: deploy/tls/make-certs.sh needs it"),
]


@pytest.fixture(scope="module")
def plane(k8s_assets: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with lifecycle_plane(k8s_assets, tmp_path_factory.mktemp("install-plane")) as control:
        yield control


def preflight(plane: ControlPlane, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    env = {**tool_env(), "KUBECONFIG": str(plane.kubeconfig)} if env is None else env
    result = subprocess.run(
        [str(ROOT / "deploy/preflight.sh")], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    return result.returncode, result.stdout.splitlines()


def failing(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("FAIL")]


def test_preflight_names_what_the_cluster_lacks_and_passes_once_it_is_there(plane: ControlPlane) -> None:
    """deploy/preflight.sh (issue 38 item 7) against a real API server: a bare one fails on the
    RuntimeClass, the GPU nodes and the extender's two nodes; each added in turn clears its line.
    The two-node bound: one untainted node fails, two pass (a tainted GPU node does not count).
    kubectl (the pinned 1.35) is within one minor of the 1.36 server; gpu-scheduler's pinned 1.35
    is one minor older: a warning, not a failure."""
    code, lines = preflight(plane)
    assert code == 1, lines
    assert [line.split("  ", 1)[1].split(" (")[0] for line in failing(lines)] == [
        *(
            []
            if KUBECTL_MINOR in (35, 36, 37)
            else [f"kubectl 1.{KUBECTL_MINOR} is more than one minor from the cluster's 1.36"]
        ),
        "no RuntimeClass nvidia",
        "no node labelled nvidia.com/gpu.present=true",
        "0 schedulable node(s) without NoSchedule/NoExecute taints",
    ], lines
    assert any(line.startswith("PASS  Kubernetes 1.") for line in lines), lines
    if KUBECTL_MINOR in (35, 36, 37):
        assert f"PASS  kubectl 1.{KUBECTL_MINOR} is within one minor of the cluster's 1.36" in lines, lines
    assert "WARN  gpu-scheduler's kube-scheduler 1.35 is one minor older than the cluster's 1.36" in lines, lines
    kube = plane.client()
    kube.create("/apis/node.k8s.io/v1/runtimeclasses", {"metadata": {"name": "nvidia"}, "handler": "nvidia"})
    kube.create_node("gpu-0", 8, labels={"nvidia.com/gpu.present": "true"})
    kube.merge_patch("/api/v1/nodes/gpu-0", {"spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}})
    kube.create_node("cpu-0", None)
    code, lines = preflight(plane)
    assert failing(lines)[-1:] == ["FAIL  1 schedulable node(s) without NoSchedule/NoExecute taints"], lines
    kube.create_node("cpu-1", None)
    code, lines = preflight(plane)
    if KUBECTL_MINOR not in (35, 36, 37):
        return  # the skew line stays (the rest is checked): .ci/run fetches kubectl 1.35 (KUBE_TOOLS)
    assert code == 0 and not failing(lines) and lines[-1] == "preflight: ready to install", lines
    assert "PASS  1 GPU node(s) labelled nvidia.com/gpu.present=true (an agent each)" in lines


def test_preflight_refuses_a_kubectl_and_a_scheduler_out_of_skew(plane: ControlPlane, tmp_path: Path) -> None:
    """The skew bounds from both sides: kubectl two minors from the server fails, one passes (above);
    a scheduler newer than the server fails, the same minor passes, two older fails."""
    fake = tmp_path / "bin"
    fake.mkdir()
    real = str(KUBECTL)
    for client in ("34", "37", "38"):
        (fake / "kubectl").write_text(
            "#!/bin/sh\n"
            f'if [ "$1 $2 $3" = "version --client -o" ]; then echo \'{{"clientVersion": {{"minor": "{client}"}}}}\'; '
            f'else exec {real} "$@"; fi\n'
        )
        (fake / "kubectl").chmod(0o755)
        env = {**tool_env(), "KUBECONFIG": str(plane.kubeconfig)}
        env["PATH"] = f"{fake}:{env['PATH']}"
        _, lines = preflight(plane, env)
        skewed = [line for line in failing(lines) if line.startswith("FAIL  kubectl")]
        if client == "37":
            assert not skewed and f"PASS  kubectl 1.{client} is within one minor of the cluster's 1.36" in lines
        else:
            assert skewed == [f"FAIL  kubectl 1.{client} is more than one minor from the cluster's 1.36"], lines

    repo = d.copy_repository(tmp_path / "kube-gpu-extender")
    pin = repo / "deploy/components/images/kube-scheduler.yaml"
    shipped = pin.read_text()
    for tag, verdict in (("v1.37.0", "FAIL"), ("v1.36.2", "PASS"), ("v1.34.3", "FAIL")):
        pin.write_text(shipped.replace("newTag: v1.35.4", f"newTag: {tag}"))
        result = subprocess.run(
            [str(repo / "deploy/preflight.sh")],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=repo,
            env={**tool_env(), "KUBECONFIG": str(plane.kubeconfig)},
        )
        minor = tag.split(".")[1]
        lines = [line for line in result.stdout.splitlines() if f"kube-scheduler 1.{minor}" in line]
        assert len(lines) == 1 and lines[0].startswith(verdict), result.stdout


@IN_SKEW
def test_the_documented_install_upgrade_and_uninstall(plane: ControlPlane, tmp_path: Path) -> None:
    kube = plane.client()
    kube.create("/api/v1/namespaces", {"metadata": {"name": "llm"}})  # the workloads' namespace, step 4
    ready_cluster(kube)
    admin = Admin(plane, tmp_path)

    # deploy/README.md's install, as written, but for what needs a kubelet (rollout status).
    install = d.sh_blocks("deploy/README.md", "# deploy/\n")[0]
    skipped = [c for c in install if c.startswith("kubectl -n gpu-extender rollout")]
    assert len(skipped) == 1 and install[:3] == [
        "deploy/preflight.sh",
        "deploy/build-images.sh registry.example.com/gpu",
        "kubectl apply -k deploy/",
    ], install
    for command in [c for c in install if c not in skipped]:
        result = admin.run(command)
        if command.startswith("deploy/"):
            continue  # the scripts' own progress on stderr (openssl's) is not kubectl's warnings
        assert not unannounced(result), (command, result.stderr)
        if command == "kubectl apply -k deploy/":
            # The agent's root user and hostPath volumes (the kubelet's socket, GFD's labels), nothing else.
            (agent,) = result.stderr.splitlines()
            assert ANNOUNCED.search(agent) and 'restricted volume type "hostPath"' in agent and "runAsUser=0" in agent
    commit = admin.commit()
    assert template_images(kube, "deployments", "gpu-extender") == [
        f"registry.example.com/gpu/gpu-extender:0.1.0-g{commit}"
    ]
    assert template_images(kube, "daemonsets", "gpu-agent") == [f"registry.example.com/gpu/gpu-agent:0.1.0-g{commit}"]
    mutators = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"
    assert [o["metadata"]["name"] for o in kube.get(mutators)["items"]] != []  # step 4's opt-in policy
    assert kube.get("/api/v1/namespaces/llm")["metadata"]["labels"]["gpu-extender.io/scheduler"] == "gpu-scheduler"

    # deploy/README.md, Relays: the overlay written where it says, applied as it says.
    (block,) = [b for b in d.fenced_blocks("deploy/README.md") if d.named_file(b) == "my-relays/kustomization.yaml"]
    (admin.checkout / "my-relays").mkdir()
    (admin.checkout / "my-relays/kustomization.yaml").write_text(block.text + "\n")
    assert not unannounced(admin.run("kubectl apply -k my-relays/"))
    assert template_images(kube, "deployments", "gpu-relay") == template_images(kube, "deployments", "gpu-extender")

    # Upstream moves on; deploy/README.md, Upgrade, as written.
    admin.upstream_moves_on()
    upgrade = d.sh_blocks("deploy/README.md", "## Upgrade")[0]
    assert upgrade[1] == "git pull" and upgrade[3] == "kubectl diff -k deploy/", upgrade
    for command in upgrade:
        if command.startswith("git "):
            admin.run(command)  # git's own progress on stderr
            continue
        assert not unannounced(admin.run(command, (0, 1) if command.startswith("kubectl diff") else (0,))), command
    new_commit = admin.commit()
    assert new_commit != commit
    images = template_images(kube, "deployments", "gpu-extender")
    assert images == [f"registry.example.com/gpu/gpu-extender:0.1.0-g{new_commit}"]
    wait_for("the extender's ReplicaSet of the new image", lambda: rolled_to(kube, images[0]), 60)
    # --prune: the relays' overlay was not applied this time, so its objects went; what was not
    # applied client-side from deploy/ (the TLS Secrets), and the namespace, stayed.
    relays = "/apis/apps/v1/namespaces/gpu-extender/deployments?labelSelector=app.kubernetes.io/name=gpu-relay"
    assert kube.get(relays)["items"] == []
    secrets = {o["metadata"]["name"] for o in kube.get("/api/v1/namespaces/gpu-extender/secrets")["items"]}
    assert {"gpu-extender-tls", "gpu-agent-tls"} <= secrets

    # deploy/README.md, Uninstall, as written, after the extender wrote what it writes.
    extender_writes(kube)
    uninstall = d.sh_blocks("deploy/README.md", "## Uninstall")[0]
    assert uninstall[:2] == ["kubectl delete -k deploy/", ".venv/bin/gpu-extender cleanup"], uninstall
    for command in uninstall:
        result = admin.run(command)
        assert not result.stderr.strip(), (command, result.stderr)
        if command.endswith("cleanup"):
            managed = "app.kubernetes.io/managed-by=gpu-extender, resource.k8s.io/v1beta2"
            rules = f"cleanup: deleted 1 DeviceTaintRule ({managed})"
            assert result.stdout.splitlines() == [
                rules,
                "cleanup: removed the GPUsUsable condition from 1 Node",
                "cleanup: removed taint gpu-extender.io/no-usable-gpu from 1 Node",
            ], result.stdout
    wait_for("the namespace gone", lambda: not kube.get(f"/api/v1/namespaces?labelSelector={PART_OF}")["items"], 90)
    assert ours_left(kube) == ["devicetaintrules/theirs", "taint nvidia.com/gpu"]
