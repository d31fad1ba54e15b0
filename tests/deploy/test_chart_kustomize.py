"""deploy/templates/_kustomize.tpl on its own (issue 50, item 10): the part of kustomize the chart
applies, on small kustomizations written here, against the real `kubectl kustomize` of the same
files; and what it does not apply fails the render with a reason, never renders something else.

A throwaway chart: its Chart.yaml, the template file as shipped, and one template that renders the
directory `k/` of the chart as deploy/templates/install.yaml renders deploy/."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.harness import ROOT
from tests.kube_tools import HELM, KUBECTL, NO_HELM, NO_KUBECTL

pytestmark = [
    pytest.mark.skipif(HELM is None, reason=NO_HELM),
    pytest.mark.skipif(KUBECTL is None, reason=NO_KUBECTL),
]
RENDER = """{{- $acc := dict "objects" (list) "generated" (list) -}}
{{- include "kz.build" (dict "files" .Files "dir" "k" "acc" $acc) -}}
{{- range $acc.objects }}
---
{{ toYaml . }}
{{- end }}
"""
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "ns", "labels": {"tier": "front"}},
    "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [{"name": "c", "image": "example.com/app:1", "args": ["--a", "--b", "--c"]}],
                "volumes": [{"name": "v1", "emptyDir": {}}, {"name": "v2", "emptyDir": {}}],
            },
        },
    },
}
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "ns"}, "spec": {}}


def chart(tmp_path: Path, files: dict[str, object]) -> Path:
    root = tmp_path / "chart"
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: t\nversion: 0.1.0\n")
    shutil.copy(ROOT / "deploy/templates/_kustomize.tpl", root / "templates")
    (root / "templates/render.yaml").write_text(RENDER)
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        text = content if isinstance(content, str) else yaml.safe_dump(content)
        (root / name).write_text(text)
    return root


def helm(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HELM), "template", "t", str(root)], capture_output=True, text=True, timeout=60)


def objects(text: str) -> list[dict]:
    return sorted((o for o in yaml.safe_load_all(text) if o), key=lambda o: json.dumps(o, sort_keys=True))


def test_what_it_applies_it_applies_as_kustomize_does(tmp_path: Path) -> None:
    """Resources from a file of several documents and from a directory, a Component with its own
    resource, every JSON patch operation at every kind of position (a key, a list index, the end,
    a `~1` in a key), targets by kind, name, namespace and label selector, labels on metadata and
    pod templates, images and an ImageTagTransformer."""
    patch = [
        {"op": "test", "path": "/spec/template/spec/containers/0/name", "value": "c"},
        {"op": "add", "path": "/spec/template/spec/containers/0/args/0", "value": "--first"},
        {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--last"},
        {"op": "replace", "path": "/spec/template/spec/containers/0/args/2", "value": "--A"},
        {"op": "remove", "path": "/spec/template/spec/containers/0/args/3"},
        {"op": "add", "path": "/spec/template/spec/volumes/1", "value": {"name": "v15", "emptyDir": {}}},
        {"op": "remove", "path": "/spec/template/spec/volumes/0"},
        {"op": "add", "path": "/metadata/labels/example.com~1role", "value": "x"},
        {"op": "replace", "path": "/metadata/labels/tier", "value": "back"},
        {"op": "remove", "path": "/spec/selector/matchLabels/app"},
    ]
    root = chart(
        tmp_path,
        {
            "k/kustomization.yaml": {
                "resources": ["objects.yaml", "sub"],
                "components": ["../c"],
                "patches": [
                    {"path": "patch.yaml", "target": {"kind": "Deployment", "name": "web", "namespace": "ns"}},
                    {
                        "target": {"kind": "Service", "labelSelector": "tier=front"},
                        "patch": "- op: add\n  path: /spec/type\n  value: NodePort\n",
                    },
                    {
                        "target": {"kind": "Service", "labelSelector": "tier=back"},
                        "patch": "- op: remove\n  path: /spec\n",
                    },
                ],
                "labels": [{"pairs": {"part-of": "t"}, "includeTemplates": True}],
                "images": [{"name": "example.com/app", "newName": "mine.example/app", "newTag": "2"}],
                "transformers": ["sched.yaml"],
            },
            "k/objects.yaml": yaml.safe_dump(DEPLOYMENT) + "---\n" + yaml.safe_dump(SERVICE),
            "k/patch.yaml": patch,
            "k/sched.yaml": {
                "apiVersion": "builtin",
                "kind": "ImageTagTransformer",
                "metadata": {"name": "x"},
                "imageTag": {"name": "registry.k8s.io/kube-scheduler", "newTag": "v1.36.2"},
            },
            "k/sub/kustomization.yaml": {"resources": ["svc.yaml"], "labels": [{"pairs": {"tier": "front"}}]},
            "k/sub/svc.yaml": {**SERVICE, "metadata": {"name": "other", "namespace": "ns"}},
            "c/kustomization.yaml": {
                "apiVersion": "kustomize.config.k8s.io/v1alpha1",
                "kind": "Component",
                "resources": ["pod.yaml"],
            },
            "c/pod.yaml": {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "d", "namespace": "ns"},
                "spec": {
                    "template": {"spec": {"containers": [{"name": "s", "image": "registry.k8s.io/kube-scheduler:v1"}]}}
                },
            },
        },
    )
    rendered = helm(root)
    assert rendered.returncode == 0, rendered.stderr
    kustomized = subprocess.run([str(KUBECTL), "kustomize", str(root / "k")], capture_output=True, text=True)
    assert kustomized.returncode == 0, kustomized.stderr
    assert objects(rendered.stdout) == objects(kustomized.stdout)
    web = next(o for o in objects(rendered.stdout) if o["kind"] == "Deployment")
    assert web["spec"]["template"]["spec"]["containers"][0]["args"] == ["--first", "--a", "--A", "--last"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"k/kustomization.yaml": {"resources": ["x.yaml"], "namePrefix": "p-"}},
            "namePrefix is not a field this chart applies",
        ),
        ({"k/kustomization.yaml": {"resources": ["missing.yaml"]}}, "resource missing.yaml not found"),
        ({"k/kustomization.yaml": {"resources": ["x.yaml"], "patches": [{"patch": "[]"}]}}, "a patch without a target"),
        (
            {
                "k/kustomization.yaml": {"resources": ["x.yaml"], "transformers": ["t.yaml"]},
                "k/t.yaml": {"kind": "LabelTransformer"},
            },
            "only ImageTagTransformer is applied",
        ),
        (
            {
                "k/kustomization.yaml": {
                    "resources": ["x.yaml"],
                    "patches": [{"target": {"kind": "Deployment"}, "patch": "- op: move\n  from: /a\n  path: /b\n"}],
                }
            },
            "op move is not applied",
        ),
        (
            {
                "k/kustomization.yaml": {
                    "resources": ["x.yaml"],
                    "patches": [
                        {
                            "target": {"kind": "Deployment"},
                            "patch": "- op: test\n  path: /spec/template/spec/containers/0/name\n  value: other\n",
                        }
                    ],
                }
            },
            'test /spec/template/spec/containers/0/name: "c" is not "other"',
        ),
        (
            {
                "k/kustomization.yaml": {
                    "resources": ["x.yaml"],
                    "patches": [
                        {
                            "target": {"kind": "Deployment"},
                            "patch": "- op: replace\n  path: /spec/nothing\n  value: 1\n",
                        }
                    ],
                }
            },
            "replace /spec/nothing: no such member",
        ),
        (
            {
                "k/kustomization.yaml": {
                    "resources": ["x.yaml"],
                    "patches": [
                        {
                            "target": {"kind": "Deployment"},
                            "patch": "- op: replace\n  path: /spec/template/spec/volumes/5\n  value: {}\n",
                        }
                    ],
                }
            },
            "index out of range",
        ),
        (
            {
                "k/kustomization.yaml": {
                    "resources": ["x.yaml"],
                    "patches": [
                        {"target": {"kind": "Deployment"}, "patch": "- op: add\n  path: /nowhere/x\n  value: 1\n"}
                    ],
                }
            },
            "add /nowhere/x: no nowhere",
        ),
    ],
)
def test_what_it_does_not_apply_fails_saying_what(tmp_path: Path, files: dict[str, object], message: str) -> None:
    result = helm(chart(tmp_path, {"k/x.yaml": DEPLOYMENT, **files}))
    assert result.returncode != 0 and message in result.stderr, result.stderr
