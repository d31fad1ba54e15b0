"""Loading deploy/ for the tests: rendered by `kubectl kustomize` when kubectl is installed,
otherwise read straight from the files each kustomization lists (enough for the policy checks:
the base uses no patches, only `images`, `labels` and one configMapGenerator)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.kube_tools import KUBECTL

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "base"
COMPONENTS = DEPLOY / "components"
NAMESPACE = "gpu-extender"

KubeObject = dict[str, Any]

NO_KUBECTL = "kubectl is not installed: `kubectl kustomize` (kustomize built into kubectl) renders deploy/"

# Kinds whose schema is a CRD that kubernetes-validate does not ship: they are checked by the
# dedicated tests (cert-manager Certificates, the AcceleratorClass schema, the monitors' selectors).
CRD_TYPED_GROUPS = {
    "cert-manager.io": "cert-manager's CRDs (Certificate, Issuer)",
    "monitoring.coreos.com": "Prometheus Operator's CRDs (PodMonitor, ServiceMonitor)",
    "ome.io": "OME's CRDs (AcceleratorClass)",
}
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
}


def load_yaml_docs(path: Path) -> list[KubeObject]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def kustomize(directory: Path) -> list[KubeObject]:
    """`kubectl kustomize DIRECTORY`, parsed. Raises AssertionError with kubectl's message on failure."""
    assert KUBECTL, NO_KUBECTL
    proc = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize {directory} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def kustomize_with(tmp_path: Path, resources: Iterable[Path], components: Iterable[Path] = ()) -> list[KubeObject]:
    """Render a throwaway kustomization in tmp_path that references deploy/ directories.
    kustomize refuses absolute paths for directories, so they are written relative to tmp_path."""
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(r, tmp_path) for r in resources],
        "components": [os.path.relpath(c, tmp_path) for c in components],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return kustomize(tmp_path)


def load_source(directory: Path) -> list[KubeObject]:
    """What a kustomization (or Component) in `directory` lists, without kustomize: resources
    (files and directories, recursively) and configMapGenerator entries built from files."""
    spec = load_yaml_docs(directory / "kustomization.yaml")[0]
    objects: list[KubeObject] = []
    for entry in spec.get("resources", []):
        path = directory / entry
        objects.extend(load_source(path) if path.is_dir() else load_yaml_docs(path))
    for gen in spec.get("configMapGenerator", []):
        data = {}
        for item in gen.get("files", []):
            key, _, rel = item.rpartition("=")
            rel_path = directory / rel
            data[key or rel_path.name] = rel_path.read_text()
        meta = {"name": gen["name"]}
        if gen.get("namespace"):
            meta["namespace"] = gen["namespace"]
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    return objects


def identity(obj: KubeObject, generated: Iterable[str] = ()) -> tuple[str, str, str]:
    """(kind, namespace, name) with a kustomize hash suffix removed from generated names."""
    meta = obj["metadata"]
    name = meta["name"]
    for gen in generated:
        if name.startswith(gen + "-"):
            name = gen
    return obj["kind"], meta.get("namespace", ""), name


def find(
    objects: Iterable[KubeObject], kind: str, name: str | None = None, namespace: str | None = None
) -> list[KubeObject]:
    return [
        o
        for o in objects
        if o["kind"] == kind
        and (name is None or o["metadata"]["name"] == name)
        and (namespace is None or o["metadata"].get("namespace") == namespace)
    ]


def one(objects: Iterable[KubeObject], kind: str, name: str | None = None, namespace: str | None = None) -> KubeObject:
    found = find(objects, kind, name, namespace)
    assert len(found) == 1, f"expected exactly one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_templates(objects: Iterable[KubeObject]) -> Iterator[tuple[KubeObject, KubeObject]]:
    """(workload, pod spec) for every Deployment, DaemonSet, StatefulSet, Job and bare Pod."""
    for obj in objects:
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"):
            yield obj, obj["spec"]["template"]["spec"]
        elif obj["kind"] == "Pod":
            yield obj, obj["spec"]
        elif obj["kind"] == "CronJob":
            yield obj, obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def containers(pod_spec: KubeObject) -> list[KubeObject]:
    return list(pod_spec.get("initContainers", [])) + list(pod_spec["containers"])


def image_repository(image: str) -> str:
    """The image name without tag or digest."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


def service_dns_names(service: KubeObject, cluster_domain: str = "cluster.local") -> set[str]:
    name, ns = service["metadata"]["name"], service["metadata"]["namespace"]
    return {name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.{cluster_domain}"}


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of `--flag=value` or `--flag value` in an argument list (last one wins)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


_BINARY_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL_SUFFIX = {"m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def quantity(value: str | int | float) -> float:
    """A Kubernetes resource quantity as a number (enough for cpu and memory figures)."""
    text = str(value)
    for suffix, factor in _BINARY_SUFFIX.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    if text and text[-1] in _DECIMAL_SUFFIX:
        return float(text[:-1]) * _DECIMAL_SUFFIX[text[-1]]
    return float(text)


# The content-named ConfigMaps (configMapGenerator; the chart names them too, by another hash):
# compared across kustomize, the chart and the cluster without the suffix.
GENERATED_NAME = re.compile(r"\b(gpu-scheduler-config|gpu-extender-config)-[a-z0-9]{10}\b")


def unsuffixed(text: str) -> str:
    """`text` with every generated ConfigMap's name suffix replaced by `SUFFIX`."""
    return GENERATED_NAME.sub(r"\1-SUFFIX", text)
