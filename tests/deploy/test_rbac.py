"""Least-privilege RBAC: the extender may read exactly the kinds its inventory watches
(gpuextender/extender/model/kube_objects.py KINDS), list+watch Pods (POD, the bound-pod ledger), the
group sources' PodGroups (app.POD_GROUP_KINDS), PodDisruptionBudgets (the preempt verb) and
create TokenReviews; the agent has no API access at all;
the second scheduler has the upstream system roles plus its own Lease and the authentication
reader Role in kube-system. No wildcards anywhere."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from gpuextender.extender.app import POD_GROUP_KINDS
from gpuextender.extender.flags import build_config
from gpuextender.extender.model.kube_objects import KINDS, POD, POD_DISRUPTION_BUDGET, RESOURCE_CLAIM
from gpuextender.extender.settings import RECLAIM_LABEL
from tests.deploy import manifests as m

EXTENDER_SA = (m.NAMESPACE, "gpu-extender")
AGENT_SA = (m.NAMESPACE, "gpu-agent")
SCHEDULER_SA = (m.NAMESPACE, "gpu-scheduler")


def bindings_by_subject(objects: list[m.KubeObject]) -> dict[tuple[str, str], list[tuple[str, str, str]]]:
    """ServiceAccount (namespace, name) -> [(binding kind, binding namespace, roleRef kind/name)]."""
    out: dict[tuple[str, str], list[tuple[str, str, str]]] = defaultdict(list)
    for b in objects:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        for s in b.get("subjects", []):
            assert s["kind"] == "ServiceAccount", f"{b['metadata']['name']} binds a {s['kind']}"
            ref = f"{b['roleRef']['kind']}/{b['roleRef']['name']}"
            out[(s["namespace"], s["name"])].append((b["kind"], b["metadata"].get("namespace", ""), ref))
    return out


def permissions(rules: list[dict]) -> set[tuple[str, str, str, tuple[str, ...]]]:
    """(apiGroup, resource, verb, resourceNames) for every combination a rule list grants."""
    return {
        (group, resource, verb, tuple(rule.get("resourceNames", ())))
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
    }


def test_no_wildcards_and_no_non_resource_urls(base_objects: list[m.KubeObject]) -> None:
    for role in base_objects:
        if role["kind"] not in ("Role", "ClusterRole"):
            continue
        assert "aggregationRule" not in role
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups", "resourceNames"):
                assert not any("*" in v for v in rule.get(field, [])), f"{role['metadata']['name']}: '*' in {field}"
            assert "nonResourceURLs" not in rule


def test_extender_reads_exactly_the_inventory_kinds_and_creates_tokenreviews(base_objects: list[m.KubeObject]) -> None:
    bound = bindings_by_subject(base_objects)[EXTENDER_SA]
    assert bound == [("ClusterRoleBinding", "", "ClusterRole/gpu-extender")]
    role = m.one(base_objects, "ClusterRole", "gpu-extender")
    # The inventory sources only LIST and WATCH (gpuextender/extender/inventory/kube_watch.py): no `get`.
    expected = {
        (k.group, k.plural, verb, ())
        for k in (*KINDS, POD, RESOURCE_CLAIM, POD_DISRUPTION_BUDGET, *POD_GROUP_KINDS.values())
        for verb in ("list", "watch")
    }
    expected.add(("authentication.k8s.io", "tokenreviews", "create", ()))
    assert permissions(role["rules"]) == expected


def test_extender_may_only_list_and_watch_pods(base_objects: list[m.KubeObject]) -> None:
    """The bound-pod watch (kube_watch with POD's field selector) needs list+watch on core pods:
    no get, no pods/status, no pods/binding (deploy/components/extender-binds adds that one)."""
    role = m.one(base_objects, "ClusterRole", "gpu-extender")
    on_pods = {p for p in permissions(role["rules"]) if p[1].split("/")[0] == "pods"}
    assert on_pods == {("", "pods", "list", ()), ("", "pods", "watch", ())}
    assert (POD.group, POD.plural) == ("", "pods")


def test_the_bind_component_adds_exactly_pods_binding_create_for_the_extender() -> None:
    objects = m.load_source(m.COMPONENTS / "extender-binds")
    role = m.one(objects, "ClusterRole", "gpu-extender-binds")
    assert permissions(role["rules"]) == {("", "pods/binding", "create", ())}
    binding = m.one(objects, "ClusterRoleBinding", "gpu-extender-binds")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "gpu-extender-binds",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-extender", "namespace": m.NAMESPACE}]


def test_agent_has_no_api_access(base_objects: list[m.KubeObject]) -> None:
    assert bindings_by_subject(base_objects).get(AGENT_SA, []) == []
    sa = m.one(base_objects, "ServiceAccount", "gpu-agent", m.NAMESPACE)
    assert sa["automountServiceAccountToken"] is False
    ds = m.one(base_objects, "DaemonSet", "gpu-agent", m.NAMESPACE)
    pod = ds["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpu-agent"
    assert pod["automountServiceAccountToken"] is False


def test_scheduler_has_the_upstream_roles_and_its_own_lease(base_objects: list[m.KubeObject]) -> None:
    bound = sorted(bindings_by_subject(base_objects)[SCHEDULER_SA])
    assert bound == sorted(
        [
            ("ClusterRoleBinding", "", "ClusterRole/system:kube-scheduler"),
            ("ClusterRoleBinding", "", "ClusterRole/system:volume-scheduler"),
            ("RoleBinding", "kube-system", "Role/extension-apiserver-authentication-reader"),
            ("RoleBinding", m.NAMESPACE, "Role/gpu-scheduler-leader-election"),
        ]
    )
    role = m.one(base_objects, "Role", "gpu-scheduler-leader-election", m.NAMESPACE)
    assert permissions(role["rules"]) == {
        ("coordination.k8s.io", "leases", "create", ()),
        ("coordination.k8s.io", "leases", "get", ("gpu-scheduler",)),
        ("coordination.k8s.io", "leases", "update", ("gpu-scheduler",)),
    }


def test_only_our_service_accounts_are_bound_and_roles_are_ours(base_objects: list[m.KubeObject]) -> None:
    assert set(bindings_by_subject(base_objects)) <= {EXTENDER_SA, SCHEDULER_SA}
    defined = {(r["kind"], r["metadata"]["name"]) for r in base_objects if r["kind"] in ("Role", "ClusterRole")}
    assert defined == {("ClusterRole", "gpu-extender"), ("Role", "gpu-scheduler-leader-election")}
    service_accounts = {
        (sa["metadata"]["namespace"], sa["metadata"]["name"]) for sa in m.find(base_objects, "ServiceAccount")
    }
    assert service_accounts == {EXTENDER_SA, AGENT_SA, SCHEDULER_SA}


def test_the_permission_check_notices_an_extra_rule(base_objects: list[m.KubeObject]) -> None:
    """A rule added to the extender's ClusterRole (a `get` on pods, say) changes what `permissions` returns."""
    role = m.one(base_objects, "ClusterRole", "gpu-extender")
    widened = role["rules"] + [{"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get"]}]
    assert permissions(widened) - permissions(role["rules"]) == {
        ("", "pods", "get", ()),
        ("", "pods/status", "get", ()),
    }


def test_the_device_taints_component_adds_exactly_its_rules_and_its_lease() -> None:
    """deploy/components/device-taints: the DeviceTaintRules the writer keeps (it lists only its own),
    the GPUsUsable condition (a patch of nodes/status), the reclaim signal's Events, and the one
    Lease that elects the replica that writes; nothing else."""
    objects = m.load_source(m.COMPONENTS / "device-taints")
    role = m.one(objects, "ClusterRole", "gpu-extender-device-taints")
    assert permissions(role["rules"]) == {
        ("resource.k8s.io", "devicetaintrules", verb, ()) for verb in ("get", "list", "create", "update", "delete")
    } | {("", "nodes/status", "patch", ()), ("", "events", "create", ())}
    lease = m.one(objects, "Role", "gpu-extender-device-taints-lease", m.NAMESPACE)
    assert permissions(lease["rules"]) == {
        ("coordination.k8s.io", "leases", "create", ()),
        ("coordination.k8s.io", "leases", "get", ("gpu-extender-device-taints",)),
        ("coordination.k8s.io", "leases", "update", ("gpu-extender-device-taints",)),
    }
    for kind, name in (
        ("ClusterRoleBinding", "gpu-extender-device-taints"),
        ("RoleBinding", "gpu-extender-device-taints-lease"),
    ):
        binding = m.one(objects, kind, name, m.NAMESPACE if kind == "RoleBinding" else None)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-extender", "namespace": m.NAMESPACE}]
    from gpuextender.extender.state.device_taints import LEASE_NAME

    assert LEASE_NAME == "gpu-extender-device-taints"


def test_the_node_taints_component_adds_a_get_and_a_patch_of_nodes_and_turns_the_taint_on(tmp_path: Path) -> None:
    """deploy/components/node-taints: read a Node and patch its taints (--node-taint on), nothing else."""
    objects = m.load_source(m.COMPONENTS / "node-taints")
    role = m.one(objects, "ClusterRole", "gpu-extender-node-taints")
    assert permissions(role["rules"]) == {("", "nodes", "get", ()), ("", "nodes", "patch", ())}
    binding = m.one(objects, "ClusterRoleBinding", "gpu-extender-node-taints")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-extender", "namespace": m.NAMESPACE}]
    rendered = m.kustomize_with(tmp_path, [m.DEPLOY], [m.COMPONENTS / "node-taints"])  # deploy/ has device-taints
    extender = m.one(rendered, "Deployment", "gpu-extender", m.NAMESPACE)
    args = extender["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--node-taint=on" in args and "--kubernetes" in args
    assert build_config(["--kubernetes", "--node-taint=on"], env={}).publish.node_taint


def test_the_reclaim_component_adds_namespaces_list_and_evictions_and_turns_dry_run_on(tmp_path: Path) -> None:
    """deploy/components/reclaim: list namespaces (the opt-in label), create pods/eviction (the
    Eviction API: no pod delete), --reclaim=dry-run; the code's calls are exactly these."""
    objects = m.load_source(m.COMPONENTS / "reclaim")
    role = m.one(objects, "ClusterRole", "gpu-extender-reclaim")
    assert permissions(role["rules"]) == {("", "namespaces", "list", ()), ("", "pods/eviction", "create", ())}
    binding = m.one(objects, "ClusterRoleBinding", "gpu-extender-reclaim")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-extender", "namespace": m.NAMESPACE}]
    source = (Path(__file__).parents[2] / "gpuextender/extender/inventory/reclaim_writer.py").read_text()
    assert "list_namespace(" in source and "create_namespaced_pod_eviction(" in source
    assert "delete_namespaced_pod" not in source
    rendered = m.kustomize_with(tmp_path, [m.DEPLOY], [m.COMPONENTS / "reclaim"])  # deploy/ has device-taints
    extender = m.one(rendered, "Deployment", "gpu-extender", m.NAMESPACE)
    args = extender["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--reclaim=dry-run" in args and "--kubernetes" in args
    assert build_config(["--kubernetes", "--reclaim=dry-run"], env={}).publish.reclaim == "dry-run"


def test_the_reclaim_opt_in_the_readme_spells_is_the_label_the_code_reads() -> None:
    """deploy/README.md's `kubectl label namespace ... KEY=VALUE` under Reclaim, as an admin types it."""
    readme = (m.DEPLOY / "README.md").read_text()
    section = readme[readme.index("### Reclaim") : readme.index("## Multi-pod jobs")]
    spelled = re.findall(r"kubectl label namespace \S+ (\S+)=([^\s`]+)", section)
    assert spelled == [RECLAIM_LABEL], spelled
    assert "=".join(RECLAIM_LABEL) in section
