"""The release workflow (.github/workflows/release-images.yml, which cannot run here) pushes what
the manifests pull: the same image names, the package's version as the tag, both Dockerfiles, for
amd64 and arm64."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuextender import __version__
from tests.deploy import manifests as m

WORKFLOW = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "release-images.yml"


def test_the_workflow_pushes_the_images_and_tag_the_manifests_pull() -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    job = doc["jobs"]["images"]
    images = job["strategy"]["matrix"]["image"]
    assert images == ["gpu-agent", "gpu-extender"]
    (build,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("docker/build-push-action@")]
    params = build["with"]
    assert params["platforms"] == "linux/amd64,linux/arm64" and params["push"] is True
    assert params["tags"] == "ghcr.io/kube-gpu-extender/${{ matrix.image }}:${{ steps.version.outputs.version }}"
    assert "Dockerfile.${{ matrix.image == 'gpu-agent' && 'agent' || 'extender' }}" == params["file"]
    for name in ("Dockerfile.agent", "Dockerfile.extender"):
        assert (WORKFLOW.parents[2] / name).is_file()
    # What deploy/ pulls: these names, at this package's version (the workflow's tag without its "v").
    kustomization = m.load_yaml_docs(m.COMPONENTS / "images" / "kustomization.yaml")[0]
    tags = {i["name"]: i["newTag"] for i in kustomization["images"]}
    for image in images:
        assert tags[f"ghcr.io/kube-gpu-extender/{image}"] == __version__
    assert doc[True]["push"]["tags"] == ["v*.*.*"]  # YAML 1.1 reads the key `on` as True
