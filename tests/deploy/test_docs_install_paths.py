"""Every install path the docs spell, followed as written in a copy of the repository (issue 50):
deploy/build-images.sh with its defaults (builders that build nothing: tests/test_image_run.py
builds the Dockerfiles), the overlays the docs show written where they say, and every
`kubectl apply|delete|diff -k DIR` and `kubectl kustomize DIR` of README.md and deploy/README.md,
in blocks and in prose, rendered from that copy, and every `helm install|upgrade` as `helm
template` with the same arguments. Each must render, install only the images the
install built (none is released yet) or the pinned kube-scheduler, and label every object for
`kubectl apply --prune` (deploy/README.md, Upgrade)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy import docs_install as d
from tests.deploy import manifests as m
from tests.harness import ROOT
from tests.kube_tools import HELM, tool_env

pytestmark = pytest.mark.skipif(m.KUBECTL is None, reason=m.NO_KUBECTL)

PART_OF = ("app.kubernetes.io/part-of", "kube-gpu-extender")
SCHEDULER = re.compile(r"^registry\.k8s\.io/kube-scheduler:v1\.\d+\.\d+$")
# Inline commands of the prose: `kubectl apply -k DIR`, `kubectl kustomize DIR > FILE`.
INLINE = re.compile(r"`(kubectl (?:apply|delete|diff|kustomize)\b[^`]*)`")
# The paths the docs must keep spelling (a parser that found none would pass on nothing).
EXPECTED = {
    "deploy/",
    "deploy/tls/",
    "deploy/overlays/opt-in-by-namespace",
    "deploy/overlays/cert-manager/",
    "deploy/overlays/no-kubelet-access",
    "my-base/",
    "my-cert-manager/",
    "my-monitoring/",
    "my-relays/",
    "my-gates/",
    "my-policy/",
    "with-config/",
    "my-kubelet-path/",
}


def follow_the_docs(repo: Path, env: dict[str, str]) -> dict[str, str]:
    """Write each named file and run each build-images.sh and make-certs.sh command as the docs
    order them; return every kustomize directory the docs name, with the first command naming it."""
    paths: dict[str, str] = {}
    for doc in d.DOCS:
        for block in d.fenced_blocks(doc):
            target = d.named_file(block)
            if target is not None:
                (repo / target).parent.mkdir(parents=True, exist_ok=True)
                (repo / target).write_text(block.text + "\n")
                continue
            if block.lang != "sh":
                continue
            for command in d.commands(block):
                if command.startswith(("deploy/build-images.sh", "deploy/tls/make-certs.sh")):
                    if command.startswith("deploy/tls/") and shutil.which("openssl") is None:
                        continue
                    run = subprocess.run(command, shell=True, cwd=repo, env=env, capture_output=True, text=True)
                    assert run.returncode == 0, f"{doc}: {command}\n{run.stderr}"
                path = d.kustomize_path(command)
                if path is not None:
                    paths.setdefault(path, f"{doc}: {command}")
                if command.startswith(("helm install ", "helm upgrade ")):
                    paths.setdefault(f"helm: {command}", f"{doc}: {command}")
        for inline in INLINE.findall((ROOT / doc).read_text()):
            path = d.kustomize_path(inline)
            if path is not None:
                paths.setdefault(path, f"{doc}: {inline}")
    return paths


def built_images(log: Path) -> set[str]:
    """What the fake builders were asked to build (`-t IMAGE`)."""
    return {t for line in log.read_text().splitlines() for t in re.findall(r" -t (\S+)", line)}


def test_every_documented_apply_path_installs_the_images_the_install_built(tmp_path: Path) -> None:
    repo = d.copy_repository(tmp_path / "kube-gpu-extender")
    log = tmp_path / "builders.log"
    env = d.fake_builders(tmp_path / "bin", log)
    paths = follow_the_docs(repo, env)
    assert EXPECTED <= paths.keys(), sorted(EXPECTED - paths.keys())

    built = built_images(log)
    tag = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=repo, capture_output=True, text=True)
    # The default tag: the version and the copy's commit (its tree is clean).
    assert built == {
        f"registry.example.com/gpu/gpu-agent:0.1.0-g{tag.stdout.strip()}",
        f"registry.example.com/gpu/gpu-extender:0.1.0-g{tag.stdout.strip()}",
    }, built
    problems = []
    helm_paths = [p for p in paths if p.startswith("helm: ")]
    assert HELM is None or len(helm_paths) >= 3, helm_paths  # install, opt-in, upgrade
    for path, where in sorted(paths.items()):
        if path.startswith("deploy/tls") and shutil.which("openssl") is None:
            continue
        if path.startswith("helm: "):
            if HELM is None:
                continue
            words = re.sub(r"^helm: helm (install|upgrade) ", "helm template ", path).replace(" --reuse-values", "")
            proc = subprocess.run(words, shell=True, cwd=repo, env=tool_env(env), capture_output=True, text=True)
        else:
            proc = subprocess.run([str(m.KUBECTL), "kustomize", path], cwd=repo, capture_output=True, text=True)
        if proc.returncode != 0:
            problems.append(f"{where}: does not render: {proc.stderr.strip()}")
            continue
        objects = [o for o in yaml.safe_load_all(proc.stdout) if o]
        images = {c["image"] for _, pod in m.pod_templates(objects) for c in m.containers(pod)}
        foreign = sorted(i for i in images if i not in built and not SCHEDULER.match(i))
        if foreign:
            problems.append(f"{where}: installs images the install did not build: {foreign}")
        unlabelled = [
            f"{o['kind']}/{o['metadata']['name']}"
            for o in objects
            if (o["metadata"].get("labels") or {}).get(PART_OF[0]) != PART_OF[1]
        ]
        if unlabelled:
            problems.append(f"{where}: not labelled {PART_OF[0]}={PART_OF[1]} (prune): {unlabelled}")
    assert not problems, "\n".join(problems)


def test_the_shipped_paths_name_the_released_images_until_the_script_runs() -> None:
    """As shipped (no step 0), every path names the release: the component the script rewrites is
    the one place the images are chosen."""
    for path in ("deploy", "deploy/overlays/opt-in-by-namespace", "deploy/overlays/no-kubelet-access"):
        images = {c["image"] for _, pod in m.pod_templates(m.kustomize(ROOT / path)) for c in m.containers(pod)}
        assert images == {
            "ghcr.io/kube-gpu-extender/gpu-agent:0.1.0",
            "ghcr.io/kube-gpu-extender/gpu-extender:0.1.0",
            "registry.k8s.io/kube-scheduler:v1.35.4",
        }, (path, images)
