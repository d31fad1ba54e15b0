"""`gpu-extender explain --pod NS/NAME` against the real apiserver: the CLI (a subprocess) reads the
pending pod and the cluster's Nodes with a kubeconfig, keeps the nodes kube-scheduler would send
(not cordoned, matching the pod's nodeSelector) and asks the real extender (HTTPS, Nodes from the
apiserver's watch, agents on fake NVML) over /explain. Errors (pod not found, 401, 403) are one
line with exit status 2."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.control_plane import kubeconfig_yaml
from tests.harness import Proc
from tests.kube.scene import H100, NODE_LABEL, Scene


def explain(world: Scene, ext: Proc, *args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    kubeconfig = kubeconfig or world.plane.kubeconfig
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuextender.extender",
            "explain",
            *args,
            "--kubeconfig",
            str(kubeconfig),
            "--url",
            world.url(ext),
            "--cacert",
            str(world.ca_file),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def rows(out: str) -> dict[str, str]:
    """NODE -> its table row, in the order printed (indented lines belong to the row above)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NODE"))
    return {line.split()[0]: line for line in lines[start + 1 : lines.index("", start)] if not line.startswith(" ")}


def setup(world: Scene) -> tuple[Proc, dict[str, str]]:
    """Four GPU nodes of the test (8, 4 and 1 idle GPUs, and one cordoned with 8 idle) and one more
    without the test's label; agents on fake NVML for the first four."""
    n = {
        "idle": world.node("idle", H100, 8),
        "half": world.node("half", H100, 4, 4),
        "busy": world.node("busy", H100, 1, 7),
        "cordoned": world.node("cordoned", H100, 8),
    }
    world.kube.merge_patch(f"/api/v1/nodes/{n['cordoned']}", {"spec": {"unschedulable": True}})
    n["elsewhere"] = f"{world.ns}-elsewhere"
    world.kube.create_node(n["elsewhere"], 8, {"nvidia.com/gpu.product": H100["label"]})  # not the pod's selector
    world.nodes.append(n["elsewhere"])
    ext = world.extender("--stale-after", "3")
    for short in ("idle", "half", "busy", "cordoned"):
        world.agent(n[short], ext)
    for short, idle in (("idle", 8), ("half", 4), ("busy", 1), ("cordoned", 8)):
        world.wait_idle(ext, n[short], idle)
    return ext, n


def test_explain_a_pending_pod_of_the_cluster(world: Scene, tmp_path: Path) -> None:
    ext, n = setup(world)
    world.pod("llm", 6)  # no scheduler runs: it stays pending
    cli = explain(world, ext, "--pod", f"{world.ns}/llm")
    assert cli.returncode == 0, cli.stderr
    out = cli.stdout
    assert out.startswith(f"pod {world.ns}/llm needs 6 GPU(s)\n"), out
    # The cordoned node and the one the nodeSelector excludes are not sent (kube-scheduler would not).
    line = next(line for line in out.splitlines() if line.startswith("  candidates: "))
    assert re.fullmatch(
        r"  candidates: the cluster's nodes kube-scheduler would send: 3 of \d+ explained "
        r"\(left out: 1 cordoned, \d+ not matching the pod's nodeSelector\)",
        line,
    ), line
    table = rows(out)
    assert list(table) == [n["idle"], n["busy"], n["half"]]  # the pass first, then failures by name
    assert table[n["idle"]].endswith("  pass") and " 8/8/8 " in table[n["idle"]]
    assert table[n["half"]].endswith("FAIL InsufficientIdleGPUs: too few idle GPUs")
    assert table[n["busy"]].endswith("FAIL InsufficientIdleGPUs: too few idle GPUs")

    # 1 GPU: every sent node fits; spread puts the most idle first.
    world.pod("small", 1)
    small = explain(world, ext, "--pod", f"{world.ns}/small")
    assert small.returncode == 0, small.stderr
    assert list(rows(small.stdout)) == [n["idle"], n["half"], n["busy"]]
    assert all(row.endswith("  pass") for row in rows(small.stdout).values())

    # --all-nodes sends the cordoned node and the unlabelled one too (the latter has no agent).
    every = explain(world, ext, "--pod", f"{world.ns}/small", "--all-nodes")
    assert every.returncode == 0, every.stderr
    assert {n["cordoned"], n["elsewhere"]} <= set(rows(every.stdout))

    # A pod already bound: explained as the extender would decide now, with a note.
    world.kube.create(
        f"/api/v1/namespaces/{world.ns}/pods",
        {
            "metadata": {"name": "bound"},
            "spec": {
                "nodeName": n["half"],
                "nodeSelector": {NODE_LABEL: world.ns},
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/llm:1",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    )
    bound = explain(world, ext, "--pod", f"{world.ns}/bound")
    assert bound.returncode == 0, bound.stderr
    note = f"  note: the pod is already bound to {n['half']}: this is what the extender would decide now"
    assert note in bound.stdout

    # A Pod manifest with --kubeconfig: the same candidates, from the same cluster.
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "draft", "namespace": world.ns},
                "spec": {
                    "nodeSelector": {NODE_LABEL: world.ns},
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/llm:1",
                            "resources": {"limits": {"nvidia.com/gpu": "6"}},
                        }
                    ],
                },
            }
        )
    )
    drafted = explain(world, ext, str(manifest))
    assert drafted.returncode == 0, drafted.stderr
    assert drafted.stdout.startswith(f"pod {world.ns}/draft needs 6 GPU(s)")
    assert list(rows(drafted.stdout)) == [n["idle"], n["busy"], n["half"]]
    # The pod bound to `half` a moment ago, which no agent attributes (no kubelet here), is counted.
    assert f"  bound here, not yet attributed by the agent (1 GPU taken off): {world.ns}/bound (1 GPU" in drafted.stdout


def test_explain_errors_are_one_line(world: Scene, tmp_path: Path) -> None:
    ext = world.extender()
    missing = explain(world, ext, "--pod", f"{world.ns}/nowhere")
    assert (missing.returncode, missing.stderr) == (2, f"gpu-extender explain: pod {world.ns}/nowhere not found\n")

    stranger = tmp_path / "stranger.kubeconfig"
    stranger.write_text(kubeconfig_yaml(world.plane.server, world.plane.ca_file, "no-such-token"))
    refused = explain(world, ext, "--pod", f"{world.ns}/nowhere", kubeconfig=stranger)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "refused the kubeconfig's credentials (401 Unauthorized)" in refused.stderr

    # A ServiceAccount with no RBAC: authenticated, but may not read pods.
    token = world.kube.create(
        f"/api/v1/namespaces/{world.ns}/serviceaccounts/default/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    unprivileged = tmp_path / "sa.kubeconfig"
    unprivileged.write_text(kubeconfig_yaml(world.plane.server, world.plane.ca_file, token["status"]["token"]))
    forbidden = explain(world, ext, "--pod", f"{world.ns}/nowhere", kubeconfig=unprivileged)
    assert forbidden.returncode == 2 and forbidden.stderr.count("\n") == 1, forbidden.stderr
    user = f"system:serviceaccount:{world.ns}:default"
    assert forbidden.stderr.startswith(
        f'gpu-extender explain: forbidden: pods "nowhere" is forbidden: User "{user}" cannot get resource "pods"'
    )
    assert "Traceback" not in missing.stderr + refused.stderr + forbidden.stderr
