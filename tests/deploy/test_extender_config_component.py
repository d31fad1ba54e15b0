"""deploy/components/extender-config: policy settings in a ConfigMap, read with --config.

Rendered with the real kustomize (`kubectl kustomize`) over the base; the Deployment's rendered
arguments, with the ConfigMap's file where the volume puts it, go through gpu-extender's own
configuration code."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import pytest
import yaml

from gpuextender.extender.flags import build_config
from gpuextender.extender.settings import ExtenderConfig
from tests.deploy import manifests as m
from tests.deploy.docs_install import copy_repository
from tests.harness import ROOT

COMPONENT = m.COMPONENTS / "extender-config"

pytestmark = pytest.mark.skipif(m.KUBECTL is None, reason=m.NO_KUBECTL)


def rendered(tmp_path: Path) -> tuple[list[str], dict[str, str], str]:
    """(the extender's args, the mounted ConfigMap's data, the mount path)."""
    objects = m.kustomize_with(tmp_path, [m.BASE], [COMPONENT])
    deployment = m.one(objects, "Deployment", "gpu-extender", m.NAMESPACE)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    mount = next(v for v in container["volumeMounts"] if v["name"] == "config")
    # The volume names the generated (hash-suffixed) ConfigMap, which the render holds.
    config_map = m.one(objects, "ConfigMap", volume["configMap"]["name"], m.NAMESPACE)
    assert config_map["metadata"]["name"].startswith("gpu-extender-config-")
    assert mount["readOnly"] is True
    return container["args"], config_map["data"], mount["mountPath"]


def run_config(tmp_path: Path, args: list[str], data: dict[str, str], mount: str) -> ExtenderConfig:
    """build_config over the rendered args, the file where the mount puts it. TLS and agent
    authentication name files of the cluster's Secret: left out here (tested in test_manifests_run)."""
    (tmp_path / "mounted").mkdir(exist_ok=True)
    for key, text in data.items():
        (tmp_path / "mounted" / key).write_text(text)
    local = []
    for arg in args:
        if arg.startswith(("--tls-", "--agent-")):
            continue
        if arg.startswith("--config="):
            path = PurePosixPath(arg.split("=", 1)[1])
            assert path.parent == PurePosixPath(mount)
            arg = f"--config={tmp_path / 'mounted' / path.name}"
        local.append(arg)
    return build_config(local, {})


def test_the_component_mounts_the_file_and_points_config_at_it(tmp_path: Path) -> None:
    args, data, mount = rendered(tmp_path)
    assert args[-1] == f"--config={mount}/config.yaml" and "config.yaml" in data
    # The base passes no policy flag: every setting in the file takes effect.
    keys = set(yaml.safe_load(data["config.yaml"]))
    assert not [a for a in args if a.lstrip("-").split("=")[0] in keys]


def test_the_shipped_file_spells_out_the_defaults(tmp_path: Path) -> None:
    args, data, mount = rendered(tmp_path)
    with_file = run_config(tmp_path, args, data, mount)
    without = run_config(tmp_path, [a for a in args if not a.startswith("--config=")], {}, mount)
    assert with_file.api == without.api and with_file.idle_rule == without.idle_rule
    assert {dest for dest, _ in with_file.sources} == {k.replace("-", "_") for k in yaml.safe_load(data["config.yaml"])}


def test_an_edited_file_changes_the_policy_and_a_flag_still_wins(tmp_path: Path) -> None:
    args, data, mount = rendered(tmp_path)
    edited = yaml.safe_load(data["config.yaml"])
    edited.update(
        {
            "node-strategy": "binpack",
            "stale-after": 20,
            "no-fit-policy": "reject",
            "gpu-resource": ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"],
        }
    )
    config = run_config(tmp_path, args, {"config.yaml": yaml.safe_dump(edited)}, mount)
    assert config.api.node_strategy == "binpack" and config.api.policy.stale_after_s == 20
    assert config.api.policy.no_fit_policy == "reject"
    assert config.api.gpu_resources == ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
    config = run_config(tmp_path, [*args, "--stale-after=5"], {"config.yaml": yaml.safe_dump(edited)}, mount)
    assert config.api.policy.stale_after_s == 5


def test_the_documented_overlays_render_as_spelled(tmp_path: Path) -> None:
    """Issue 38, item 1: deploy/README.md "Changing the policy" written out file by file as the docs
    spell them, where they put them (in the checkout: a copy of the repository), rendered with the
    real kustomize: the replaced ConfigMap is the one the Deployment mounts, with the admin's file,
    which gpu-extender takes."""
    section = (ROOT / "deploy" / "README.md").read_text().split("## Changing the policy\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n# ([\w./-]+):[^\n]*\n(.*?)```", section, re.S)
    assert [name for name, _ in blocks] == [
        "with-config/kustomization.yaml",
        "my-policy/kustomization.yaml",
        "my-policy/gpu-policy.yaml",
    ]
    repo = copy_repository(tmp_path / "kube-gpu-extender")
    for name, text in blocks:
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text(text)
    tmp_path = repo
    for overlay, expected in (("with-config", None), ("my-policy", blocks[2][1])):
        objects = m.kustomize(tmp_path / overlay)
        deployment = m.one(objects, "Deployment", "gpu-extender", m.NAMESPACE)
        pod = deployment["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "config")
        data = m.one(objects, "ConfigMap", volume["configMap"]["name"], m.NAMESPACE)["data"]
        if expected is not None:
            assert data == {"config.yaml": expected}
            (container,) = pod["containers"]
            mount = next(v for v in container["volumeMounts"] if v["name"] == "config")["mountPath"]
            config = run_config(tmp_path, container["args"], data, mount)
            assert (config.api.policy.stale_after_s, config.api.node_strategy) == (20.0, "binpack")
