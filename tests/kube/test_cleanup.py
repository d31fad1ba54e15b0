"""Issue 50, item 5 on the real control plane: what gpu-extender wrote cluster-wide (DeviceTaintRules,
the GPUsUsable condition, the node taint) is removed after an uninstall by `gpu-extender cleanup`,
and on SIGTERM by the leader of a replica set run with --cleanup-on-exit; nothing of anyone else's.

kube-apiserver v1.36.2 serves DeviceTaintRules as resource.k8s.io/v1beta2 (tests/control_plane.py).
The shared control plane is one per test worker and its tests run one at a time, each removing what
it made: the counts the command prints are the cluster's, and they are exact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.control_plane import LIMITED_TOKEN, LIMITED_USER, wait_for
from tests.kube.scene import H100, Scene
from tests.kube.test_device_taints import RULES, binding, grant, mode, ours, quarantined_dra_node

OURS = {"app.kubernetes.io/managed-by": "gpu-extender"}
NODE_TAINT = "gpu-extender.io/no-usable-gpu"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/gpu-extender/leases/gpu-extender-device-taints"
CONSOLE_SCRIPT = Path(sys.executable).parent / "gpu-extender"


def cleanup(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command: the venv's console script (python -m gpuextender.extender without one)."""
    command = [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.exists() else [sys.executable, "-m", "gpuextender.extender"]
    return subprocess.run(
        [*command, "cleanup", "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=120
    )


def printed(run: subprocess.CompletedProcess[str], status: int = 0) -> list[str]:
    assert (run.returncode, run.stderr) == (status, ""), run.stdout + run.stderr
    return run.stdout.splitlines()


def counted(rules: int, conditions: int, taints: int, *, dry: bool = False) -> list[str]:
    """The three lines of a run that removed (or, dry, would remove) that many of each."""

    def many(n: int, noun: str) -> str:
        return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

    deleted, removed = ("would delete", "would remove") if dry else ("deleted", "removed")
    return [
        f"cleanup: {deleted} {many(rules, 'DeviceTaintRule')} (app.kubernetes.io/managed-by=gpu-extender, "
        "resource.k8s.io/v1beta2)",
        f"cleanup: {removed} the GPUsUsable condition from {many(conditions, 'Node')}",
        f"cleanup: {removed} taint {NODE_TAINT} from {many(taints, 'Node')}",
    ]


def rule(name: str, pool: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": pool, "device": "gpu-0"},
            "taint": {"key": "gpu-extender.io/unhealthy", "value": "xid-79", "effect": "NoSchedule"},
        },
    }


def add_rule(world: Scene, name: str, pool: str, labels: dict[str, str]) -> None:
    world.kube.create(RULES, rule(name, pool, labels))
    world.dra_objects.append(f"{RULES}/{name}")  # deleted when the test ends (the survivors)


def plugin_node(world: Scene, name: str, conditions: list[str], taints: list[str]) -> str:
    """A Node with `conditions` beside Ready (each False) and `taints` (each NoSchedule)."""
    full = f"{world.ns}-{name}"
    world.kube.create_node(full, 8)
    world.nodes.append(full)
    stamp = "2026-01-01T00:00:00Z"
    extra = [
        {"type": c, "status": "False", "reason": "Test", "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
        for c in conditions
    ]
    if extra:
        world.kube.request(
            "PATCH",
            f"/api/v1/nodes/{full}/status",
            {"status": {"conditions": extra}},
            "application/strategic-merge-patch+json",
        )
    if taints:
        world.kube.merge_patch(f"/api/v1/nodes/{full}", {"spec": {"taints": [_taint(k) for k in taints]}})
    return full


def _taint(key: str) -> dict[str, str]:
    return {"key": key, "effect": "NoSchedule"}


def condition_types(world: Scene, node: str) -> list[str]:
    return [c["type"] for c in world.kube.get(f"/api/v1/nodes/{node}")["status"].get("conditions") or []]


def taint_keys(world: Scene, node: str) -> list[str]:
    return [t["key"] for t in world.kube.get(f"/api/v1/nodes/{node}")["spec"].get("taints") or []]


def test_cleanup_removes_exactly_ours_and_a_second_run_finds_nothing(world: Scene) -> None:
    ns, kubeconfig = world.ns, world.plane.kubeconfig
    add_rule(world, f"gpu-extender.{ns}-a.gpu-0", f"{ns}-a", OURS)
    add_rule(world, f"gpu-extender-busy.{ns}-a.gpu-1", f"{ns}-a", OURS)
    # Not ours: a rule with our name but not our label, and one another controller labelled.
    add_rule(world, f"gpu-extender.{ns}-b.gpu-0", f"{ns}-b", {})
    add_rule(world, f"{ns}-theirs", f"{ns}-b", {"app.kubernetes.io/managed-by": "nvidia-dra-driver"})
    a = plugin_node(world, "a", ["GPUsUsable", "MemoryPressure"], ["example.com/maintenance", NODE_TAINT])
    b = plugin_node(world, "b", ["GPUsUsable"], [])
    c = plugin_node(world, "c", ["MemoryPressure"], ["example.com/maintenance"])
    before = {n: (condition_types(world, n), taint_keys(world, n)) for n in (a, b, c)}

    assert printed(cleanup(kubeconfig, "--dry-run")) == counted(2, 2, 1, dry=True)
    assert len(ours(world)) == 2 and {n: (condition_types(world, n), taint_keys(world, n)) for n in before} == before

    assert (
        printed(cleanup(kubeconfig))
        == counted(2, 2, 1)
        == [
            "cleanup: deleted 2 DeviceTaintRules (app.kubernetes.io/managed-by=gpu-extender, resource.k8s.io/v1beta2)",
            "cleanup: removed the GPUsUsable condition from 2 Nodes",
            f"cleanup: removed taint {NODE_TAINT} from 1 Node",
        ]
    )
    assert ours(world) == {}
    left = {r["metadata"]["name"] for r in world.kube.get(RULES)["items"]}
    assert {f"gpu-extender.{ns}-b.gpu-0", f"{ns}-theirs"} <= left
    assert not {f"gpu-extender.{ns}-a.gpu-0", f"gpu-extender-busy.{ns}-a.gpu-1"} & left
    # Every other condition and taint as it was, in its order.
    for n, (conditions, taints) in before.items():
        kept = ([t for t in conditions if t != "GPUsUsable"], [k for k in taints if k != NODE_TAINT])
        assert (condition_types(world, n), taint_keys(world, n)) == kept
    assert before[a] != (["MemoryPressure", "Ready"], ["example.com/maintenance"])  # a had ours
    assert (sorted(before[a][0]), before[a][1]) == (
        ["GPUsUsable", "MemoryPressure", "Ready"],
        ["example.com/maintenance", NODE_TAINT],
    )

    assert printed(cleanup(kubeconfig)) == counted(0, 0, 0)  # idempotent: a second run finds nothing


def test_a_user_without_the_rights_is_told_which_verb_on_which_resource_and_exit_1(world: Scene) -> None:
    """RBAC checked by the real API server: a user with no role at all cannot list anything; one who
    may list but not delete or patch removes nothing, and each line says what RBAC must allow."""
    ns = world.ns
    add_rule(world, f"gpu-extender.{ns}-a.gpu-0", f"{ns}-a", OURS)
    node = plugin_node(world, "a", ["GPUsUsable"], [NODE_TAINT])
    limited = world.plane.kubeconfig_for(LIMITED_TOKEN, f"{ns}-limited")

    assert printed(cleanup(limited), 1) == [
        "cleanup: note: cannot read the Lease gpu-extender/gpu-extender-device-taints: forbidden (RBAC: needs get "
        "on leases.coordination.k8s.io): not checked whether a gpu-extender still runs",
        "cleanup: deleted 0 DeviceTaintRules (app.kubernetes.io/managed-by=gpu-extender, resource.k8s.io/v1beta2): "
        "could not list them: forbidden (RBAC: needs list on devicetaintrules.resource.k8s.io)",
        "cleanup: removed the GPUsUsable condition from 0 Nodes: could not list them: forbidden (RBAC: needs list "
        "on nodes)",
        f"cleanup: removed taint {NODE_TAINT} from 0 Nodes: could not list them: forbidden (RBAC: needs list on nodes)",
    ]

    reader = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"{ns}-reader"},
        "rules": [
            {"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]},
        ],
    }
    user = {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": LIMITED_USER}
    grant(world, reader)
    grant(world, binding("ClusterRoleBinding", f"{ns}-reader", "ClusterRole", f"{ns}-reader", user))
    listed = wait_for(
        "the grant in effect", lambda: (r := cleanup(limited)).stdout.count("could not list") == 0 and r, 30
    )
    assert printed(listed, 1) == [
        "cleanup: deleted 0 DeviceTaintRules (app.kubernetes.io/managed-by=gpu-extender, resource.k8s.io/v1beta2); "
        "1 not: forbidden (RBAC: needs delete on devicetaintrules.resource.k8s.io)",
        "cleanup: removed the GPUsUsable condition from 0 Nodes; 1 not: forbidden (RBAC: needs patch on nodes/status)",
        f"cleanup: removed taint {NODE_TAINT} from 0 Nodes; 1 not: forbidden (RBAC: needs patch on nodes)",
    ]
    assert len(ours(world)) == 1 and "GPUsUsable" in condition_types(world, node) and taint_keys(world, node)


@pytest.mark.slow
def test_cleanup_on_exit_the_leader_removes_its_writes_and_gives_up_the_lease_without_it_they_stay(
    world: Scene,
) -> None:
    """A DRA node with a quarantined GPU (a rule) and a device-plugin node whose every GPU is
    quarantined (GPUsUsable=False and, with --node-taint on, the node taint), beside a foreign taint.
    Without --cleanup-on-exit a SIGTERM leaves them. With it, the leader's SIGTERM removes exactly
    ours, logs what, and gives the Lease up. (A replica that does not lead removes nothing:
    tests/extender/test_app_cleanup_on_exit.py.)"""
    kube = world.kube
    dra = quarantined_dra_node(world)
    plugin = world.node("p", H100, 2, events=[{"at_s": 0.2, "gpus": [0, 1], "xid": 79}])
    kube.merge_patch(f"/api/v1/nodes/{plugin}", {"spec": {"taints": [_taint("example.com/maintenance")]}})
    flags = ("--device-taint-after", "1", "--device-taint-clear-after", "1", "--busy-hold", "1", "--node-taint", "on")

    def written() -> bool:
        return (
            f"gpu-extender.{dra}.gpu-0" in ours(world)
            and "GPUsUsable" in condition_types(world, plugin)
            and NODE_TAINT in taint_keys(world, plugin)
        )

    ext = world.extender(*flags)
    agents = [world.agent(dra, ext), world.agent(plugin, ext)]
    wait_for("the rule, the condition and the node taint", written, 60)
    assert ext.stop() == 0
    assert written(), "without --cleanup-on-exit a SIGTERM removes nothing"
    assert "cleanup on exit" not in ext.log()
    for agent in agents:
        agent.stop()
    kube.delete(LEASE, grace_seconds=None)  # not given up: the next leader would wait for it to expire

    leader = world.extender(*flags, "--cleanup-on-exit")
    for n in (dra, plugin):
        world.agent(n, leader)
    wait_for("the leader", lambda: mode(world, leader) == "writing" or None, 60)
    # A new leader follows its agents from cold: until the XIDs have been seen for the hold it may
    # take down what the first one wrote, and writes it again then.
    wait_for("the leader's rule, condition and node taint", written, 60)

    assert leader.stop() == 0
    assert ours(world) == {}
    assert condition_types(world, plugin) == ["Ready"]
    assert taint_keys(world, plugin) == ["example.com/maintenance"]
    said = [line.split("cleanup on exit: ", 1)[1] for line in leader.log().splitlines() if "cleanup on exit: " in line]
    assert said == [line.removeprefix("cleanup: ") for line in counted(1, 1, 1)], leader.log()[-3000:]
    assert "gave up the Lease gpu-extender/gpu-extender-device-taints" in leader.log()
    assert "holderIdentity" not in kube.get(LEASE)["spec"]
