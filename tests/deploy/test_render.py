"""deploy/ renders with kustomize (the base, every component on top of it, the overlay) and every
rendered object validates strictly against the Kubernetes 1.35 OpenAPI schemas shipped offline
by kubernetes-validate. Objects of CRD kinds (cert-manager, Prometheus Operator, OME) have no
schema there and are skipped by API group, explicitly; their own tests check them."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy import manifests as m

K8S_VERSION = "1.35"  # the gpu-scheduler image is kube-scheduler v1.35.x

needs_kubectl = pytest.mark.skipif(m.KUBECTL is None, reason=m.NO_KUBECTL)

COMPONENTS = sorted(p for p in m.COMPONENTS.iterdir() if (p / "kustomization.yaml").is_file())


# Kinds newer than K8S_VERSION, validated against the first schemas that have them (and applied to
# a real API server by tests/kube/test_gpu_scheduler_by_default.py).
NEWER_KINDS = {
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): "1.36",
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): "1.36",
}


@functools.cache
def _validate(obj_json: str, version: str = K8S_VERSION) -> str | None:
    """One object's error, or None; cached because the base is re-validated under every
    component (kubernetes-validate re-reads its schema files on each call)."""
    obj = json.loads(obj_json)
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"
    except kubernetes_validate.SchemaNotFoundError as exc:
        return exc.message
    return None


def validation_errors(objects: list[m.KubeObject]) -> tuple[list[str], list[str]]:
    """(errors, skipped) for a list of objects; a kind without a schema is an error unless its
    API group is one of the CRD groups listed in manifests.CRD_TYPED_GROUPS."""
    errors, skipped = [], []
    for obj in objects:
        label = f"{obj['kind']}/{obj['metadata']['name']}"
        group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
        if group in m.CRD_TYPED_GROUPS:
            skipped.append(f"{label}: {m.CRD_TYPED_GROUPS[group]}, no schema in kubernetes-validate")
            continue
        error = _validate(
            json.dumps(obj, sort_keys=True), NEWER_KINDS.get((obj["apiVersion"], obj["kind"]), K8S_VERSION)
        )
        if error is not None:
            errors.append(f"{label}: {error}")
    return errors, skipped


def test_strict_validation_rejects_an_unknown_field() -> None:
    """The validator used below really is strict (an unknown field is an error, not ignored)."""
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": 1, "targetPort": 1}], "clusterIp": "None"},
    }
    errors, _ = validation_errors([svc])
    assert errors and "clusterIp" in errors[0]


def test_base_validates_strictly(base_objects: list[m.KubeObject]) -> None:
    """`kubectl kustomize deploy/` (or, without kubectl, the files it lists) validates."""
    objects = base_objects
    errors, skipped = validation_errors(objects)
    assert not errors, "\n".join(errors)
    assert not skipped, "the base must not need any CRD"
    kinds = {o["kind"] for o in objects}
    assert {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "DaemonSet",
        "PodDisruptionBudget",
        "ConfigMap",
    } <= kinds


@needs_kubectl
def test_rendered_base_is_what_the_files_list() -> None:
    """The source loader used when kubectl is absent sees exactly the objects kustomize renders,
    and kustomize only adds labels, image tags and the ConfigMap hash to them."""
    rendered = m.kustomize(m.BASE)
    source = m.load_source(m.BASE)
    generated = ["gpu-scheduler-config"]
    assert sorted(m.identity(o, generated) for o in rendered) == sorted(m.identity(o, generated) for o in source)
    for obj in rendered:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kube-gpu-extender", m.identity(obj)


def test_namespaced_objects_name_their_namespace(base_objects: list[m.KubeObject]) -> None:
    """No namespace transformer is used (it would move the kube-system RoleBinding), so every
    namespaced object must say gpu-extender itself - the one exception is that RoleBinding."""
    for obj in base_objects:
        ns = obj["metadata"].get("namespace")
        if obj["kind"] in m.CLUSTER_SCOPED:
            assert ns is None, m.identity(obj)
        elif obj["kind"] == "RoleBinding" and obj["roleRef"]["name"] == "extension-apiserver-authentication-reader":
            assert ns == "kube-system"
        else:
            assert ns == m.NAMESPACE, m.identity(obj)


def test_namespace_enforces_the_restricted_pod_security_standard(base_objects: list[m.KubeObject]) -> None:
    ns = m.one(base_objects, "Namespace", m.NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@needs_kubectl
def test_the_default_install_reads_allocation_from_the_kubelet_and_the_opt_out_is_the_base(tmp_path: Path) -> None:
    """`kubectl apply -k deploy/` is the base plus components/kubelet-allocation (issue 26: without it
    the extender cannot tell a GPU a pod holds from a free one) and components/device-taints (issue
    35: what the agents know, published for other schedulers); overlays/no-kubelet-access is the
    base and device-taints, restricted Pod Security and a non-root agent."""
    default = m.kustomize(m.DEPLOY)
    publish = m.COMPONENTS / "device-taints"
    with_component = m.kustomize_with(tmp_path, [m.BASE], [m.COMPONENTS / "kubelet-allocation", publish])
    key = lambda objects: sorted((m.identity(o), json.dumps(o, sort_keys=True)) for o in objects)  # noqa: E731
    assert key(default) == key(with_component)
    ds = m.one(default, "DaemonSet", "gpu-agent", m.NAMESPACE)
    assert "/var/lib/kubelet/pod-resources" in {
        v.get("hostPath", {}).get("path") for v in ds["spec"]["template"]["spec"]["volumes"]
    }
    opt_out = m.kustomize(m.DEPLOY / "overlays" / "no-kubelet-access")
    other = tmp_path / "base-and-publish"
    other.mkdir()
    assert key(opt_out) == key(m.kustomize_with(other, [m.BASE], [publish]))
    ds = m.one(opt_out, "DaemonSet", "gpu-agent", m.NAMESPACE)
    assert not any("hostPath" in v for v in ds["spec"]["template"]["spec"]["volumes"])
    cert_manager = m.kustomize(m.DEPLOY / "overlays" / "cert-manager")
    ds = m.one(cert_manager, "DaemonSet", "gpu-agent", m.NAMESPACE)
    assert any("hostPath" in v for v in ds["spec"]["template"]["spec"]["volumes"])  # the same default


def test_images_are_pinned_and_overridable() -> None:
    """One home for the images: components/images (which every install path lists), the
    scheduler's version in the pin beside it; the base names the same released images."""
    images = m.COMPONENTS / "images"
    kustomization = m.load_yaml_docs(images / "kustomization.yaml")[0]
    tags = {i["name"]: i["newTag"] for i in kustomization["images"]}
    assert tags == {"ghcr.io/kube-gpu-extender/gpu-extender": "0.1.0", "ghcr.io/kube-gpu-extender/gpu-agent": "0.1.0"}
    assert "images" not in m.load_yaml_docs(m.BASE / "kustomization.yaml")[0]
    (pin,) = m.load_yaml_docs(images / "kube-scheduler.yaml")
    assert kustomization["transformers"] == ["kube-scheduler.yaml"] and pin["kind"] == "ImageTagTransformer"
    scheduler_tag = pin["imageTag"]["newTag"]
    assert pin["imageTag"]["name"] == "registry.k8s.io/kube-scheduler"
    assert scheduler_tag.startswith(f"v{K8S_VERSION}.") and scheduler_tag.split(".")[-1].isdigit()
    tags[pin["imageTag"]["name"]] = scheduler_tag
    for _, pod in m.pod_templates(m.load_source(m.BASE)):
        for c in m.containers(pod):
            assert c["image"] == f"{m.image_repository(c['image'])}:{tags[m.image_repository(c['image'])]}"


@needs_kubectl
@pytest.mark.parametrize("component", COMPONENTS, ids=lambda p: p.name)
def test_each_component_renders_with_the_base(tmp_path: Path, component: Path) -> None:
    objects = m.kustomize_with(tmp_path, [m.BASE], [component])
    errors, _skipped = validation_errors(objects)
    assert not errors, "\n".join(errors)
    base = {m.identity(b): b for b in m.load_source(m.BASE)}
    added = [o for o in objects if m.identity(o) not in base]
    changed = [o for o in objects if m.identity(o) in base and o != _rendered_base()[m.identity(o)]]
    assert added or changed, f"{component.name} adds or changes nothing"
    for obj in added:
        if obj["kind"] not in m.CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace") == m.NAMESPACE, m.identity(obj)


@needs_kubectl
def test_all_components_together_and_the_overlay_render(tmp_path: Path) -> None:
    everything = m.kustomize_with(tmp_path, [m.BASE], COMPONENTS)
    errors, _ = validation_errors(everything)
    assert not errors, "\n".join(errors)
    overlay = m.kustomize(m.DEPLOY / "overlays" / "cert-manager")
    assert {o["kind"] for o in overlay} >= {"Certificate", "Issuer", "Deployment", "DaemonSet"}
    errors, _ = validation_errors(overlay)
    assert not errors, "\n".join(errors)


def test_components_are_kustomize_components() -> None:
    assert {p.name for p in COMPONENTS} == {
        "acceleratorclass-crd",
        "alerts",
        "cert-manager",
        "device-taints",
        "extender-binds",
        "extender-config",
        "gpu-scheduler-by-default",
        "images",
        "kubelet-allocation",
        "monitoring",
        "node-taints",
        "reclaim",
        "relay",
    }
    for component in COMPONENTS:
        doc = m.load_yaml_docs(component / "kustomization.yaml")[0]
        assert doc["kind"] == "Component" and doc["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
        what = m.load_source(component) or doc.get("patches") or doc.get("images")
        assert what, f"{component.name} lists no resources, patches or images"


@functools.lru_cache(maxsize=1)
def _rendered_base() -> dict[Any, m.KubeObject]:
    return {m.identity(o): o for o in m.kustomize(m.BASE)}


@needs_kubectl
def test_kubelet_allocation_grants_the_agent_its_sockets_and_nothing_more(tmp_path: Path) -> None:
    """The agent reaches the kubelet's root-owned socket as uid 0 with no capability, no privilege
    escalation and a read-only root; both host paths are mounted read-only; the namespace enforces
    privileged (hostPath) while warn and audit stay restricted. The base is unchanged."""
    objects = m.kustomize_with(tmp_path, [m.BASE], [m.COMPONENTS / "kubelet-allocation"])
    ds = m.one(objects, "DaemonSet", "gpu-agent", m.NAMESPACE)
    pod = ds["spec"]["template"]["spec"]
    (c,) = [c for c in pod["containers"] if c["name"] == "gpu-agent"]
    ctx = c["securityContext"]
    assert (ctx["runAsUser"], ctx["runAsNonRoot"], pod["securityContext"]["runAsUser"]) == (0, False, 0)
    assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx["privileged"] is False
    host = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    assert host == {
        "pod-resources": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"},
        "gfd-labels": {"path": "/etc/kubernetes/node-feature-discovery/features.d", "type": "DirectoryOrCreate"},
    }
    mounts = {v["name"]: v for v in c["volumeMounts"]}
    for name in host:
        assert mounts[name]["readOnly"] is True
    assert mounts["pod-resources"]["mountPath"] == "/var/lib/kubelet/pod-resources"  # the agent's default socket dir
    ns = m.one(objects, "Namespace", m.NAMESPACE, None)
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"
    # Only the agent changed: every other pod template is as in the base.
    base = _rendered_base()
    for obj in objects:
        if obj["kind"] in ("Deployment",) and m.identity(obj) in base:
            assert obj == base[m.identity(obj)], m.identity(obj)


@needs_kubectl
def test_the_quickstarts_opt_in_overlay_is_the_default_install_plus_the_namespace_policy(tmp_path: Path) -> None:
    """README's Quickstart step 4, `kubectl apply -k deploy/overlays/opt-in-by-namespace`: exactly
    deploy/'s objects and components/gpu-scheduler-by-default's policy, valid against the schemas
    that serve MutatingAdmissionPolicy v1 (1.36); the namespace label the step sets is the one the
    policy matches."""
    overlay = m.kustomize(m.DEPLOY / "overlays" / "opt-in-by-namespace")
    default = m.kustomize(m.DEPLOY)
    extra = {m.identity(o) for o in overlay} - {m.identity(o) for o in default}
    assert {kind for (kind, _ns, _name) in extra} == {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}
    assert [o for o in default if o not in overlay] == []  # nothing of the default install changed
    errors, _ = validation_errors(overlay)
    assert not errors, "\n".join(errors)
    readme = (m.DEPLOY.parent / "README.md").read_text()
    assert "kubectl apply -k deploy/overlays/opt-in-by-namespace" in readme
    label = re.search(r"kubectl label namespace llm (\S+)=(\S+)", readme)
    assert label is not None
    binding = m.one(overlay, "MutatingAdmissionPolicyBinding", "gpu-scheduler-for-gpu-pods")
    selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
    assert selector == {label.group(1): label.group(2)}
