"""deploy/build-images.sh (issue 38 item 3, issue 50): the install's first step until images are
released. Run for real, with builders that record what they are asked (the Dockerfiles themselves
are built and run by tests/test_image_run.py): what it builds and pushes, the tag it picks, and the
component it writes, in a copy of the repository (it writes deploy/components/images/ there)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gpuextender import __version__
from tests.deploy import docs_install as d
from tests.deploy import manifests as m
from tests.harness import ROOT

SCRIPT = ROOT / "deploy/build-images.sh"
COMPONENT = Path("deploy/components/images/kustomization.yaml")


def run(*args: str, root: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(root / "deploy/build-images.sh"), *args], capture_output=True, text=True, timeout=60, cwd=root, env=env
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return d.copy_repository(tmp_path / "kube-gpu-extender")


def commit_of(repo: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_one_platform_builds_and_pushes_both_images_with_the_builder_asked_for() -> None:
    before = (ROOT / COMPONENT).read_text()
    result = run("registry.example.com/gpu/", "--builder", "podman", "--tag", "t1", "--dry-run")
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if line.startswith("+ ")]
    assert commands == [
        f"+ podman build -f {ROOT}/Dockerfile.agent -t registry.example.com/gpu/gpu-agent:t1 {ROOT}",
        "+ podman push registry.example.com/gpu/gpu-agent:t1",
        f"+ podman build -f {ROOT}/Dockerfile.extender -t registry.example.com/gpu/gpu-extender:t1 {ROOT}",
        "+ podman push registry.example.com/gpu/gpu-extender:t1",
    ]
    # A dry run writes nothing: the component as shipped.
    assert "would write deploy/components/images/kustomization.yaml:" in result.stdout
    assert (ROOT / COMPONENT).read_text() == before and "newName: registry.example.com/gpu/gpu-agent" in result.stdout


def test_no_push_and_a_platform_and_buildah() -> None:
    result = run(
        "reg:5000/gpu", "--builder", "buildah", "--platform", "linux/arm64", "--no-push", "--tag", "dev-1", "--dry-run"
    )
    assert result.returncode == 0, result.stderr
    assert (
        "+ buildah bud --platform linux/arm64 -f" in result.stdout and "reg:5000/gpu/gpu-agent:dev-1" in result.stdout
    )
    assert " push " not in result.stdout


def test_several_platforms_are_one_buildx_push_per_image() -> None:
    result = run("r.example/x", "--platform", "linux/amd64,linux/arm64", "--builder", "docker", "--dry-run")
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
        (("r.example/x", "--pull-secret", "Bad_Name"), "is not a Secret name"),
        (("r.example/x", "--overlay", "x"), "--overlay is gone"),
        (("r.example/x", "--base", "x"), "--base is gone"),
    ],
)
def test_refusals_say_why_and_exit_2(args: tuple[str, ...], message: str) -> None:
    result = run(*args, "--dry-run")
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "+ " not in result.stdout  # nothing built


def test_the_default_tag_is_the_version_and_the_commit_and_changes_with_the_images(repo: Path, tmp_path: Path) -> None:
    """A new tag for every commit and for every uncommitted change to what the images hold; the
    same for a change elsewhere (deploy/, the docs' overlays): the images did not change."""
    env = d.fake_builders(tmp_path / "bin", tmp_path / "log")
    clean = f"{__version__}-g{commit_of(repo)}"
    assert f"(tag {clean})" in run("r.example/x", root=repo, env=env).stdout
    (repo / "deploy/README.md").write_text("changed\n")
    assert f"(tag {clean})" in run("r.example/x", root=repo, env=env).stdout
    (repo / "gpuextender/extender/new_module.py").write_text("X = 1\n")
    dirty = run("r.example/x", root=repo, env=env).stdout
    assert f"(tag {clean}-dirty." in dirty, dirty
    (repo / "gpuextender/extender/new_module.py").write_text("X = 2\n")
    assert run("r.example/x", root=repo, env=env).stdout != dirty  # another change, another tag
    # Outside git: the version and the time.
    subprocess.run(["rm", "-rf", str(repo / ".git")], check=True)
    outside = run("r.example/x", root=repo, env=env).stdout
    assert f"(tag {__version__}-2" in outside, outside


def test_the_component_takes_every_install_path_to_these_images(repo: Path, tmp_path: Path) -> None:
    """deploy/ and each overlay list the component: after the script, all of them install the
    images it built, with the pull secret asked for; kube-scheduler keeps its own pin."""
    env = d.fake_builders(tmp_path / "bin", tmp_path / "log")
    result = run("registry.example.com/gpu", "--pull-secret", "regcred", root=repo, env=env)
    assert result.returncode == 0, result.stderr
    tag = f"{__version__}-g{commit_of(repo)}"
    assert (tmp_path / "log").read_text().splitlines() == [
        f"docker build -f {repo}/Dockerfile.agent -t registry.example.com/gpu/gpu-agent:{tag} {repo}",
        f"docker push registry.example.com/gpu/gpu-agent:{tag}",
        f"docker build -f {repo}/Dockerfile.extender -t registry.example.com/gpu/gpu-extender:{tag} {repo}",
        f"docker push registry.example.com/gpu/gpu-extender:{tag}",
    ]
    doc = yaml.safe_load((repo / COMPONENT).read_text())
    assert doc["kind"] == "Component" and doc["transformers"] == ["kube-scheduler.yaml"]
    if m.KUBECTL is None:
        return
    for path in ("deploy", "deploy/overlays/opt-in-by-namespace", "deploy/overlays/cert-manager"):
        mine, shipped = m.kustomize(repo / path), m.kustomize(ROOT / path)
        pods = list(m.pod_templates(mine))
        assert {c["image"] for _, pod in pods for c in pod["containers"]} == {
            f"registry.example.com/gpu/gpu-agent:{tag}",
            f"registry.example.com/gpu/gpu-extender:{tag}",
            "registry.k8s.io/kube-scheduler:v1.35.4",
        }
        assert all(pod["imagePullSecrets"] == [{"name": "regcred"}] for _, pod in pods)

        def unmoved(objects: list[m.KubeObject]) -> list[str]:
            for _, pod in m.pod_templates(objects):
                pod.pop("imagePullSecrets", None)
            text = [yaml.safe_dump(o) for o in objects]
            return [
                t.replace("registry.example.com/gpu/", "ghcr.io/kube-gpu-extender/").replace(tag, "0.1.0") for t in text
            ]

        assert unmoved(mine) == unmoved(shipped)  # everything else as shipped


def test_the_scheduler_pin_survives_the_script(repo: Path, tmp_path: Path) -> None:
    """kube-scheduler.yaml is the admin's: the script writes only its own file beside it."""
    pin = repo / "deploy/components/images/kube-scheduler.yaml"
    pin.write_text(pin.read_text().replace("newTag: v1.35.4", "newTag: v1.34.3"))
    env = d.fake_builders(tmp_path / "bin", tmp_path / "log")
    for _ in range(2):
        assert run("r.example/x", "--no-push", root=repo, env=env).returncode == 0
    assert "newTag: v1.34.3" in pin.read_text()
    if m.KUBECTL is not None:
        images = {c["image"] for _, pod in m.pod_templates(m.kustomize(repo / "deploy")) for c in pod["containers"]}
        assert "registry.k8s.io/kube-scheduler:v1.34.3" in images


def test_no_build_writes_the_component_for_mirrored_images(repo: Path, tmp_path: Path) -> None:
    log = tmp_path / "log"
    env = d.fake_builders(tmp_path / "bin", log)
    result = run("registry.example.com/gpu", "--tag", "0.1.0", "--no-build", root=repo, env=env)
    assert result.returncode == 0 and not log.exists(), result
    assert 'newName: registry.example.com/gpu/gpu-agent\n    newTag: "0.1.0"' in (repo / COMPONENT).read_text()
