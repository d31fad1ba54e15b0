"""deploy/build-images.sh (issue 38 item 3): the install's first step until images are released.
Run for real with --dry-run (what it would build and push, and the overlay it writes, rendered
by kustomize); the Dockerfiles themselves are built and run by tests/test_image_run.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gpuextender import __version__
from tests.deploy import manifests as m
from tests.harness import ROOT

SCRIPT = ROOT / "deploy/build-images.sh"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_one_platform_builds_and_pushes_both_images_with_the_builder_asked_for(tmp_path: Path) -> None:
    result = run("registry.example.com/gpu/", "--builder", "podman", "--dry-run", "--overlay", str(tmp_path))
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if line.startswith("+ ")]
    assert commands == [
        f"+ podman build -f {ROOT}/Dockerfile.agent -t registry.example.com/gpu/gpu-agent:{__version__} {ROOT}",
        f"+ podman push registry.example.com/gpu/gpu-agent:{__version__}",
        f"+ podman build -f {ROOT}/Dockerfile.extender -t registry.example.com/gpu/gpu-extender:{__version__} {ROOT}",
        f"+ podman push registry.example.com/gpu/gpu-extender:{__version__}",
    ]


def test_no_push_and_a_platform_and_buildah() -> None:
    result = run(
        "reg:5000/gpu",
        "--builder",
        "buildah",
        "--platform",
        "linux/arm64",
        "--no-push",
        "--tag",
        "dev-1",
        "--dry-run",
        "--overlay",
        "/dev/null/never",
    )
    # The overlay directory cannot be made: the commands were printed, then it fails saying so.
    assert (
        "+ buildah bud --platform linux/arm64 -f" in result.stdout and "reg:5000/gpu/gpu-agent:dev-1" in result.stdout
    )
    assert " push " not in result.stdout
    assert result.returncode != 0


def test_several_platforms_are_one_buildx_push_per_image(tmp_path: Path) -> None:
    result = run(
        "r.example/x",
        "--platform",
        "linux/amd64,linux/arm64",
        "--builder",
        "docker",
        "--dry-run",
        "--overlay",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("+ docker buildx build --platform linux/amd64\\,linux/arm64") == 2, result.stdout
    assert result.stdout.count("--push") == 2 and "docker push" not in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "REGISTRY is required"),
        (("Registry.Example.com/GPU",), "is not a registry path"),
        (("r.example/x", "--tag", "bad tag"), "is not an image tag"),
        (("r.example/x", "--builder", "kaniko"), "--builder must be docker, podman or buildah"),
        (("r.example/x", "--platform", "linux/amd64,linux/arm64", "--builder", "podman"), "needs docker buildx"),
        (("r.example/x", "--platform", "a,b", "--builder", "docker", "--no-push"), "can only be pushed"),
        (("r.example/x", "r.example/y"), "one REGISTRY only"),
        (("r.example/x", "--frobnicate"), "unknown option --frobnicate"),
    ],
)
def test_refusals_say_why_and_exit_2(args: tuple[str, ...], message: str) -> None:
    result = run(*args, "--dry-run")
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "+ " not in result.stdout  # nothing built


@pytest.mark.skipif(m.KUBECTL is None, reason=m.NO_KUBECTL)
def test_the_overlay_installs_deploy_with_these_images(tmp_path: Path) -> None:
    overlay = tmp_path / "overlays" / "mine"
    assert (
        run("registry.example.com/gpu", "--dry-run", "--builder", "docker", "--overlay", str(overlay)).returncode == 0
    )
    doc = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert (overlay / doc["resources"][0]).resolve() == ROOT / "deploy"  # relative: the checkout may move
    mine, shipped = m.kustomize(overlay), m.kustomize(ROOT / "deploy")
    images = {c["image"] for _, pod in m.pod_templates(mine) for c in pod["containers"]}
    assert images == {
        f"registry.example.com/gpu/gpu-agent:{__version__}",
        f"registry.example.com/gpu/gpu-extender:{__version__}",
        "registry.k8s.io/kube-scheduler:v1.35.4",
    }

    # Everything else is deploy/ as shipped.
    def unmoved(objects: list[m.KubeObject]) -> list[str]:
        return [yaml.safe_dump(o).replace("registry.example.com/gpu/", "ghcr.io/kube-gpu-extender/") for o in objects]

    assert unmoved(mine) == unmoved(shipped)


def test_the_docs_make_it_the_first_step() -> None:
    readme, guide = (ROOT / "README.md").read_text(), (ROOT / "deploy/README.md").read_text()
    for doc in (readme, guide):
        assert doc.index("deploy/build-images.sh registry.example.com/gpu") < doc.index(
            "kubectl apply -k deploy/overlays/my-registry/"
        )


@pytest.mark.skipif(m.KUBECTL is None, reason=m.NO_KUBECTL)
def test_the_overlay_can_sit_on_another_overlay(tmp_path: Path) -> None:
    """Quickstart step 4 with your own images: the opt-in overlay, with them."""
    base = ROOT / "deploy/overlays/opt-in-by-namespace"
    result = run("registry.example.com/gpu", "--base", str(base), "--no-push", "--dry-run", "--overlay", str(tmp_path))
    assert result.returncode == 0, result.stderr
    mine, theirs = m.kustomize(tmp_path), m.kustomize(base)
    assert len(mine) == len(theirs) and {o["kind"] for o in mine} == {o["kind"] for o in theirs}
    images = {c["image"] for _, pod in m.pod_templates(mine) for c in pod["containers"]}
    assert f"registry.example.com/gpu/gpu-extender:{__version__}" in images
    assert not [i for i in images if i.startswith("ghcr.io/")]
    assert run("r.example/x", "--base", str(tmp_path / "nowhere"), "--dry-run").returncode == 2
