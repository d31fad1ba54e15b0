"""deploy/ as a Helm chart (issue 50, item 10): `helm template` of each choice renders the objects
`kubectl kustomize` renders for the same choice, from the same files (deploy/templates/_kustomize.tpl
reads the kustomizations), `helm lint` is clean, and what the chart cannot do it refuses with a
reason. Real helm v4 and kubectl (tests/kube_tools.py); tests/kube/test_helm.py installs it.

The one difference allowed: a generated ConfigMap's name suffix. Both name it by its content (a
change rolls the pods that mount it), kustomize with a hash of its own encoding, the chart with a
sha256 of the data; the names are compared without it."""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuextender import __version__
from tests.deploy import docs_install as d
from tests.deploy import manifests as m
from tests.harness import ROOT
from tests.kube_tools import HELM, KUBECTL, NO_HELM, NO_KUBECTL

pytestmark = [
    pytest.mark.skipif(HELM is None, reason=NO_HELM),
    pytest.mark.skipif(KUBECTL is None, reason=NO_KUBECTL),
]
COMPONENTS = sorted(p.name for p in m.COMPONENTS.iterdir() if (p / "kustomization.yaml").is_file())


def keyed(objects: list[m.KubeObject]) -> dict[tuple[str, str, str], m.KubeObject]:
    """Objects by kind, namespace and name, generated ConfigMaps' suffix dropped everywhere."""
    out = {}
    for obj in objects:
        obj = json.loads(m.unsuffixed(json.dumps(obj)))
        out[(obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])] = obj
    return out


def helm(*args: str, chart: Path = ROOT / "deploy") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HELM), "template", "gpu-extender", str(chart), *args], capture_output=True, text=True, timeout=120
    )


def rendered(*args: str, chart: Path = ROOT / "deploy") -> dict[tuple[str, str, str], m.KubeObject]:
    result = helm(*args, chart=chart)
    assert result.returncode == 0, result.stderr
    return keyed([o for o in yaml.safe_load_all(result.stdout) if o])


def kustomized(directory: Path) -> dict[tuple[str, str, str], m.KubeObject]:
    return keyed(m.kustomize(directory))


def same(chart: dict[Any, m.KubeObject], kustomize: dict[Any, m.KubeObject]) -> None:
    assert chart.keys() == kustomize.keys(), (
        sorted(chart.keys() - kustomize.keys()),
        sorted(kustomize.keys() - chart.keys()),
    )
    differ = [key for key in chart if chart[key] != kustomize[key]]
    assert not differ, "\n".join(
        f"{key}:\nchart:     {json.dumps(chart[key], sort_keys=True)}\n"
        f"kustomize: {json.dumps(kustomize[key], sort_keys=True)}"
        for key in differ
    )


def components_of(overlay: Path) -> dict[str, bool]:
    """The chart's `components` values for an overlay of deploy/: what it adds to or drops from
    deploy/kustomization.yaml's list."""
    default = {Path(c).name for c in m.load_yaml_docs(m.DEPLOY / "kustomization.yaml")[0]["components"]}
    listed = {Path(c).name for c in m.load_yaml_docs(overlay / "kustomization.yaml")[0].get("components", [])}
    return {**{c: False for c in default - listed}, **{c: True for c in listed - default}}


def sets(values: dict[str, bool]) -> list[str]:
    return [a for name, on in sorted(values.items()) for a in ("--set", f"components.{name}={str(on).lower()}")]


def test_lint_is_clean_and_the_versions_are_the_packages() -> None:
    for args in (
        (),
        ("--set", "components.relay=true", "--set", "images.registry=r.example/x", "--set", "images.tag=t"),
    ):
        result = subprocess.run([str(HELM), "lint", str(ROOT / "deploy"), *args], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        assert not [line for line in result.stdout.splitlines() if line.startswith(("[WARNING]", "[ERROR]"))]
    chart = yaml.safe_load((ROOT / "deploy/Chart.yaml").read_text())
    assert chart["name"] == "gpu-extender" and chart["version"] == chart["appVersion"] == __version__


def test_the_defaults_are_deploy() -> None:
    same(rendered(), kustomized(m.DEPLOY))


@pytest.mark.parametrize("overlay", sorted((m.DEPLOY / "overlays").iterdir()), ids=lambda p: p.name)
def test_each_overlay_is_its_components(overlay: Path) -> None:
    values = components_of(overlay)
    assert values, f"{overlay.name} is deploy/ itself"
    same(rendered(*sets(values)), kustomized(overlay))


@pytest.mark.parametrize("component", [c for c in COMPONENTS if c != "images"])
def test_each_component_on_deploy(component: str, tmp_path: Path) -> None:
    """Every component, alone, on top of deploy/ as an overlay of yours lists it (images last)."""
    default = {Path(c).name for c in m.load_yaml_docs(m.DEPLOY / "kustomization.yaml")[0]["components"]}
    if component in default:
        values = {component: False}
        kustomize = m.kustomize_with(
            tmp_path,
            [m.BASE],
            [m.COMPONENTS / c for c in sorted(default - {component, "images"})] + [m.COMPONENTS / "images"],
        )
    else:
        values = {component: True}
        kustomize = m.kustomize_with(tmp_path, [m.DEPLOY], [m.COMPONENTS / component, m.COMPONENTS / "images"])
    same(rendered(*sets(values)), keyed(kustomize))


def test_your_images_and_pull_secret_as_the_script_writes_them(tmp_path: Path) -> None:
    """`--set images.registry/tag/pullSecrets` = deploy/ after `build-images.sh --pull-secret`; and
    the chart reads the component the script wrote: without --set, the same images."""
    repo = d.copy_repository(tmp_path / "kube-gpu-extender")
    env = d.fake_builders(tmp_path / "bin", tmp_path / "log")
    script = [str(repo / "deploy/build-images.sh"), "registry.example.com/gpu", "--pull-secret", "regcred"]
    assert subprocess.run(script, cwd=repo, env=env, capture_output=True).returncode == 0
    tag = subprocess.run(
        [str(repo / "deploy/build-images.sh"), "--print-tag"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    assert tag.startswith(f"{__version__}-g")
    kustomize = kustomized(repo / "deploy")
    values = ("--set", "images.registry=registry.example.com/gpu", "--set", f"images.tag={tag}")
    same(rendered(*values, "--set", "images.pullSecrets={regcred}"), kustomize)
    # The chart of that checkout, no --set: its images component says the same images.
    chart = rendered(chart=repo / "deploy")
    images = {c["image"] for o in chart.values() for _, pod in m.pod_templates([o]) for c in pod["containers"]}
    assert images == {
        f"registry.example.com/gpu/gpu-agent:{tag}",
        f"registry.example.com/gpu/gpu-extender:{tag}",
        "registry.k8s.io/kube-scheduler:v1.35.4",
    }


def test_the_scheduler_version_gates_and_policy_as_the_docs_overlays(tmp_path: Path) -> None:
    """deploy/README.md's own overlays (my-gates, my-policy) and its 1.36 pin, written where it
    says, equal the chart's scheduler.tag, scheduler.featureGates, extender-config and policy."""
    repo = d.copy_repository(tmp_path / "kube-gpu-extender")
    named = {d.named_file(b): b.text for b in d.fenced_blocks("deploy/README.md") if d.named_file(b)}
    for name in (
        "my-gates/kustomization.yaml",
        "deploy/components/images/kube-scheduler.yaml",
        "with-config/kustomization.yaml",
        "my-policy/kustomization.yaml",
        "my-policy/gpu-policy.yaml",
    ):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(named[name] + "\n")
    (gates,) = re.findall(r"--feature-gates=(\S+)", named["my-gates/kustomization.yaml"])
    (tag,) = re.findall(r"newTag: (\S+)", named["deploy/components/images/kube-scheduler.yaml"])
    same(
        rendered("--set", f"scheduler.tag={tag}", "--set", f"scheduler.featureGates={gates}"),
        kustomized(repo / "my-gates"),
    )
    policy = ("--set", "components.extender-config=true", "--set-file", f"policy={repo / 'my-policy/gpu-policy.yaml'}")
    same(rendered(*policy, chart=repo / "deploy"), kustomized(repo / "my-policy"))  # the checkout's 1.36 pin


def test_resources_replace_one_containers_and_nothing_else() -> None:
    shipped = rendered()
    small = rendered("--set", "resources.gpu-agent.requests.cpu=5m", "--set", "resources.gpu-agent.limits.memory=64Mi")
    key = ("DaemonSet", m.NAMESPACE, "gpu-agent")
    (agent,) = small[key]["spec"]["template"]["spec"]["containers"]
    assert agent["resources"] == {"requests": {"cpu": "5m"}, "limits": {"memory": "64Mi"}}
    agent["resources"] = shipped[key]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert small == shipped


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--set", "components.frobnicate=true"), "components.frobnicate: no such component in deploy/components/"),
        (("--set", "images.registry=r.example/x"), "images.registry needs images.tag"),
        (("--set", "components.images=false"), "components.images: always on, last"),
        (("--set", "policy=stale-after: 20"), "policy needs components.extender-config=true"),
        # values.schema.json: each value's form, before anything renders
        (("--set", "components.relay=maybe"), "at '/components/relay': got string, want boolean"),
        (("--set", "images.tag=bad tag"), "at '/images/tag': 'bad tag' does not match pattern"),
        (("--set", "images.registry=Registry.Example/GPU"), "at '/images/registry'"),
        (("--set", "images.pullSecrets={Bad_Name}"), "at '/images/pullSecrets/0'"),
        (("--set", "scheduler.tag=1.36.2"), "at '/scheduler/tag'"),
        (("--set", "scheduler.featureGates=DRAExtendedResource"), "at '/scheduler/featureGates'"),
        (("--set", "resources.gpu-agnet.requests.cpu=1"), "invalid propertyName 'gpu-agnet'"),
        (("--set", "imagse.tag=x"), "additional properties 'imagse' not allowed"),
    ],
)
def test_what_it_cannot_do_it_refuses_saying_why(args: tuple[str, ...], message: str) -> None:
    """A value the chart cannot honour fails the render with its reason: a typo never installs the
    defaults in silence."""
    result = helm(*args)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_the_chart_never_packs_the_private_keys(tmp_path: Path) -> None:
    """`helm package` after make-certs.sh: tls/out/ (the CA's key) stays out, as .helmignore says."""
    repo = d.copy_repository(tmp_path / "kube-gpu-extender")
    (repo / "deploy/tls/out").mkdir()
    (repo / "deploy/tls/out/ca.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    result = subprocess.run(
        [str(HELM), "package", str(repo / "deploy"), "-d", str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    with tarfile.open(tmp_path / f"gpu-extender-{__version__}.tgz") as archive:
        names = archive.getnames()
    assert "gpu-extender/Chart.yaml" in names and "gpu-extender/base/kustomization.yaml" in names
    assert not [n for n in names if "/tls/" in n or n.endswith((".key", ".sh", "README.md"))], names
