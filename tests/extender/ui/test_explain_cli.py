"""`gpu-extender explain`: what it sends (a file: ExtenderArgs or a Pod manifest; the nodes it picks
from a cluster), how it orders and renders the answer, and its errors and TLS hint. The real
extender answers in the tests at the end (a file inventory, agents on fake NVML, HTTPS with a
trustme CA); tests/kube/test_explain_pod.py asks a real API server."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from gpuextender.extender.ui import explain_cli
from gpuextender.extender.ui.explain_lookup import SourceError, candidate_nodes, question_from_file
from tests.harness import FIXTURES, Cluster, cluster, metric, scrape, url, wait_until, write_ca, write_leaf

HINT = "give the pod template as a Pod, or use --pod for a running pod"
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "llm"},
    "spec": {
        "containers": [
            {"name": "main", "image": "registry.example/llm:1", "resources": {"limits": {"nvidia.com/gpu": "6"}}}
        ]
    },
}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- the file: ExtenderArgs or a Pod manifest ------------------------------------------------------


def test_an_extender_args_body_is_sent_unchanged() -> None:
    raw = (FIXTURES / "extender-requests" / "filter-request-nodecache-true.json").read_bytes()
    question = question_from_file(raw, "request.json")
    assert question.body == raw and question.pod is None
    lower = b'{"pod": {"metadata": {"name": "x"}}, "nodenames": ["a"]}'  # Go reads keys case-insensitively
    assert question_from_file(lower, "r.json").body == lower


@pytest.mark.parametrize("text", [yaml.safe_dump(POD), json.dumps(POD), "---\n" + yaml.safe_dump(POD) + "---\n"])
def test_a_pod_manifest_becomes_a_request_without_candidates(text: str) -> None:
    question = question_from_file(text.encode(), "pod.yaml")
    sent = json.loads(question.body)
    assert list(sent) == ["Pod"]  # no NodeNames: the extender explains every node it knows
    assert sent["Pod"]["metadata"] == {"name": "llm", "namespace": "default"}  # where kubectl would put it
    assert sent["Pod"]["spec"] == POD["spec"] and question.pod == sent["Pod"]


def test_a_manifest_keeps_its_namespace_and_namespace_fills_a_missing_one() -> None:
    pod = {**POD, "metadata": {"name": "llm", "namespace": "serving"}}
    assert (
        json.loads(question_from_file(json.dumps(pod).encode(), "p", "other").body)["Pod"]["metadata"]["namespace"]
        == "serving"
    )
    assert (
        json.loads(question_from_file(json.dumps(POD).encode(), "p", "other").body)["Pod"]["metadata"]["namespace"]
        == "other"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (yaml.safe_dump_all([POD, POD]), f"pod.yaml holds 2 YAML documents (Pod, Pod), not one Pod: {HINT}"),
        (json.dumps([POD]), f"pod.yaml is a list of 1 objects, not one Pod: {HINT}"),
        (
            yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [POD, POD]}),
            f"pod.yaml is a List of 2 objects, not one Pod: {HINT}",
        ),
        (
            yaml.safe_dump(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "llm"},
                    "spec": {"template": {"spec": POD["spec"]}},
                }
            ),
            f"pod.yaml is a Deployment, not a Pod: {HINT}",
        ),
        (
            yaml.safe_dump({"metadata": {"name": "x"}}),
            "pod.yaml is neither an ExtenderArgs body (no Pod key) nor a Pod manifest (no kind: Pod)",
        ),
        ("", "pod.yaml is empty"),
        ("42", "pod.yaml is not an object (a int): expected an ExtenderArgs body or a Pod manifest"),
        ("kind: Pod\nspec: [\n", "pod.yaml is neither JSON nor YAML: "),
        ("kind: Pod\nmetadata: {name: x}\n", "pod.yaml: the Pod has no spec"),
        ("[" * 100_000 + "]" * 100_000, "pod.yaml is nested too deeply to be a Pod or an ExtenderArgs body"),
        ("spec: " + "[" * 100_000 + "]" * 100_000, "pod.yaml is neither JSON nor YAML: "),
    ],
)
def test_what_is_not_one_pod_is_refused_with_one_line(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SourceError) as caught:
        question_from_file(text.encode(), "pod.yaml")
    assert str(caught.value).startswith(message), caught.value
    path = _write(tmp_path, "pod.yaml", text)
    assert explain_cli.main([str(path), "--url", "http://127.0.0.1:1"]) == 2  # refused before any request
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gpu-extender explain: {path}") and "Traceback" not in err


def test_flags_for_the_cluster_do_not_apply_to_an_extender_args_body(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = _write(tmp_path, "request.json", '{"Pod": {}, "NodeNames": ["a"]}')
    assert explain_cli.main([str(request), "--kubeconfig", str(tmp_path / "kc")]) == 2
    assert "names its own candidates" in capsys.readouterr().err


def test_file_and_pod_are_exclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], [str(tmp_path / "pod.yaml"), "--pod", "ns/name"]):
        with pytest.raises(SystemExit) as exited:
            explain_cli.main(argv)
        assert exited.value.code == 2
        assert "give either FILE or --pod NAMESPACE/NAME" in capsys.readouterr().err


@pytest.mark.parametrize("ref", ["name", "/name", "ns/", "a/b/c"])
def test_a_pod_reference_is_namespace_slash_name(ref: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert explain_cli.main(["--pod", ref, "--kubeconfig", "/nonexistent"]) == 2
    assert capsys.readouterr().err == f"gpu-extender explain: --pod {ref}: expected NAMESPACE/NAME\n"


def test_a_missing_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert explain_cli.main(["--pod", "ns/name", "--kubeconfig", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no kubeconfig file at --kubeconfig" in err, err
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert explain_cli.main(["--pod", "ns/name"]) == 2
    assert f"no kubeconfig file at the default {tmp_path}/.kube/config" in capsys.readouterr().err


def test_an_unreachable_api_server_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = _write(
        tmp_path,
        "kubeconfig",
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        ),
    )
    assert explain_cli.main(["--pod", "ns/name", "--kubeconfig", str(kubeconfig), "--timeout", "3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-extender explain: cannot reach the Kubernetes API server http://127.0.0.1:1")
    assert err.count("\n") == 1 and "Traceback" not in err


# -- the nodes kube-scheduler would send -----------------------------------------------------------


def _node(name: str, labels: dict[str, str] | None = None, cordoned: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"unschedulable": True} if cordoned else {}}


NODES = [
    _node("a", {"pool": "gpu"}),
    _node("b", {"pool": "gpu"}, cordoned=True),
    _node("c", {"pool": "cpu"}),
    _node("d"),
]


def test_candidates_leave_out_cordoned_nodes_and_those_the_node_selector_excludes() -> None:
    plain = candidate_nodes(POD, NODES)
    assert plain.names == ["a", "c", "d"] and dict(plain.skipped) == {"cordoned": 1} and plain.total == 4
    selective = candidate_nodes({"spec": {"nodeSelector": {"pool": "gpu"}}}, NODES)
    assert selective.names == ["a"]
    assert dict(selective.skipped) == {"cordoned": 1, "not matching the pod's nodeSelector": 2}
    assert candidate_nodes({"spec": {"nodeSelector": {"pool": "gpu"}}}, NODES, every=True).names == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    "toleration",
    [
        {"operator": "Exists"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    ],
)
def test_a_pod_tolerating_the_cordon_taint_may_go_to_cordoned_nodes(toleration: dict[str, str]) -> None:
    assert candidate_nodes({"spec": {"tolerations": [toleration]}}, NODES).names == ["a", "b", "c", "d"]
    other = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}
    assert "b" not in candidate_nodes({"spec": {"tolerations": [other]}}, NODES).names


# -- ordering and rendering ------------------------------------------------------------------------


def _row(node: str, result: str, score: int, code: str | None = None, reason: str | None = None) -> dict[str, Any]:
    return {
        "node": node,
        "classes": [],
        "data": "fresh",
        "gpus": 8,
        "healthyGpus": 8,
        "idleGpus": 8,
        "meanUtilization": 1.0,
        "assumedData": False,
        "result": result,
        "shortlisted": True if result == "pass" else None,
        "reasonCode": code,
        "reason": reason,
        "classRank": None,
        "score": score,
    }


def _answer(nodes: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "pod": "ns/llm",
        "gpusNeeded": 6,
        "resolved": {"nodeStrategy": "spread"},
        "fallback": False,
        "passedOnAssumedData": [],
        "formulas": {"node": "f", "class": None},
        "nodes": nodes,
        **extra,
    }


def _table(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NODE"))
    end = lines.index("", start)
    return [line.split()[0] for line in lines[start + 1 : end]]


def test_rows_are_best_first_then_failing_nodes_with_their_reason() -> None:
    nodes = [
        _row("fail-b", "fail", 0, "InsufficientIdleGPUs", "too few idle GPUs"),
        _row("good-5", "pass", 5),
        _row("fail-a", "fail", 0, "StaleGPUData", "node GPU data is stale"),
        _row("best-9", "pass", 9),
        _row("zero-pass", "pass", 0),
        _row("also-5", "pass", 5),
    ]
    text = explain_cli.render(_answer(nodes))
    assert _table(text) == ["best-9", "also-5", "good-5", "zero-pass", "fail-a", "fail-b"]
    rows = {
        line.split()[0]: line
        for line in text.splitlines()
        if line.split() and line.split()[0] in {n["node"] for n in nodes}
    }
    assert rows["fail-b"].endswith("FAIL InsufficientIdleGPUs: too few idle GPUs")
    assert rows["fail-a"].endswith("FAIL StaleGPUData: node GPU data is stale")
    assert rows["best-9"].endswith("    9  pass")


def test_long_node_names_keep_the_columns_aligned() -> None:
    long = "ip-10-0-123-45.eu-west-1.compute.internal"
    text = explain_cli.render(_answer([_row(long, "pass", 7), _row("n", "fail", 0, "StaleGPUData", "stale")]))
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("NODE"))
    row = next(line for line in lines if line.startswith(long))
    assert header.index("SCORE") + len("SCORE") == row.index("  pass")


def test_the_rule_that_judged_each_gpu_is_said_where_sm_activity_judged_one() -> None:
    mixed = _row("mixed", "pass", 5)
    mixed["gpuIdleRule"] = [
        {"gpu": 0, "judgedBy": "sm-active", "smActivePercent": 0.75},
        {"gpu": 1, "judgedBy": "utilization", "utilizationPercent": 100},
        {"gpu": 2, "judgedBy": "sm-active", "smActivePercent": 96.5},
    ]
    plain = _row("plain", "pass", 4)
    plain["gpuIdleRule"] = [{"gpu": 0, "judgedBy": "utilization", "utilizationPercent": 3}]
    lines = explain_cli.render(_answer([mixed, plain])).splitlines()
    at = lines.index(next(line for line in lines if line.startswith("mixed")))
    assert lines[at + 1] == "  idle judged by SM activity on GPU 0 (0.75 %), 2 (96.5 %); by utilization on GPU 1"
    after_plain = lines[lines.index(next(line for line in lines if line.startswith("plain"))) + 1]
    assert "judged" not in after_plain  # utilization judged every GPU: the UTIL column says it


def test_the_candidates_line() -> None:
    every = explain_cli.render(_answer([], candidates={"source": "every known node", "known": 6000, "explained": 5000}))
    assert "  candidates: every known node: 5000 of 6000 explained (the first 5000 by name" in every
    assert "(no candidate nodes)" in every
    cluster_nodes = candidate_nodes({"spec": {"nodeSelector": {"pool": "gpu"}}}, NODES)
    text = explain_cli.render(_answer([], candidates=cluster_nodes.describe()))
    assert (
        "  candidates: the cluster's nodes kube-scheduler would send: 1 of 4 explained (left out: 1 cordoned, "
        "2 not matching the pod's nodeSelector)"
    ) in text


# -- against the real extender -----------------------------------------------------------------------

INVENTORY_NODES = {"idle-node": "idle8.yaml", "half-node": "half8.yaml", "busy-node": "busy8.yaml", "silent-node": None}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("pki")
    ca, stranger = trustme.CA(), trustme.CA()
    cert, key = write_leaf(directory, ca, "extender", "127.0.0.1")
    return {
        "ca": write_ca(directory, ca, "ca"),
        "stranger": write_ca(directory, stranger, "stranger"),
        "cert": cert,
        "key": key,
    }


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """An extender on a file inventory of four 8-GPU nodes (no cluster); three have agents on fake
    NVML: 8, 4 and 1 idle GPUs; silent-node has none."""
    workdir = tmp_path_factory.mktemp("explain")
    inventory = workdir / "inventory"
    inventory.mkdir()
    docs = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
        for name in INVENTORY_NODES
    ]
    (inventory / "nodes.yaml").write_text(yaml.safe_dump_all(docs))
    with cluster(workdir) as c:
        ext = c.extender("--inventory", str(inventory))
        for node, scenario in INVENTORY_NODES.items():
            if scenario:
                c.agent(node, FIXTURES / "scenarios" / scenario, ext)
        for node, idle in (("idle-node", 8), ("half-node", 4), ("busy-node", 1)):
            wait_until(
                f"{node} data",
                lambda node=node, idle=idle: (
                    metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=node) == idle
                ),
            )
        yield c


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuextender.extender", "explain", *args], capture_output=True, text=True, timeout=60
    )


def test_a_pod_manifest_is_explained_against_every_node_the_extender_knows(live: Cluster, tmp_path: Path) -> None:
    manifest = _write(tmp_path, "pod.yaml", yaml.safe_dump({**POD, "metadata": {"name": "llm", "namespace": "ml"}}))
    cli = _cli(str(manifest), "--url", url(live.procs[0], ""))
    assert cli.returncode == 0, cli.stderr
    out = cli.stdout
    assert out.startswith("pod ml/llm needs 6 GPU(s)\n"), out
    assert "  candidates: every known node: 4 of 4 explained" in out
    assert _table(out) == ["idle-node", "busy-node", "half-node", "silent-node"]  # the pass, then failures by name
    rows = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in INVENTORY_NODES}
    assert rows["idle-node"].endswith("  pass") and " 8/8/8 " in rows["idle-node"]
    assert rows["half-node"].endswith("FAIL InsufficientIdleGPUs: too few idle GPUs")
    assert rows["busy-node"].endswith("FAIL InsufficientIdleGPUs: too few idle GPUs")
    assert rows["silent-node"].endswith("FAIL NoFreshGPUData: no fresh GPU data while reporting nodes fit")
    raw = _cli(str(manifest), "--url", url(live.procs[0], ""), "--json")
    assert json.loads(raw.stdout)["candidates"] == {"source": "every known node", "known": 4, "explained": 4}


def test_a_manifest_from_stdin_and_an_extender_args_file(live: Cluster, tmp_path: Path) -> None:
    piped = subprocess.run(
        [sys.executable, "-m", "gpuextender.extender", "explain", "-", "--url", url(live.procs[0], "")],
        input=json.dumps(POD),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert piped.returncode == 0 and piped.stdout.startswith("pod default/llm needs 6 GPU(s)"), piped.stderr
    request = _write(tmp_path, "request.json", json.dumps({"Pod": POD, "NodeNames": ["half-node", "idle-node"]}))
    named = _cli(str(request), "--url", url(live.procs[0], ""))
    assert named.returncode == 0, named.stderr
    assert _table(named.stdout) == ["idle-node", "half-node"] and "candidates:" not in named.stdout


def test_an_https_extender_whose_certificate_cannot_be_verified_gets_a_hint(
    pki: dict[str, Any], tmp_path: Path
) -> None:
    manifest = _write(tmp_path, "pod.json", json.dumps(POD))
    with cluster(tmp_path) as c:
        trusting = ssl.create_default_context(cafile=str(pki["ca"]))
        ext = c.extender("--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]), ssl_context=trusting)
        base = f"https://127.0.0.1:{ext.ports['http']}"
        kubectl = (
            "kubectl -n gpu-extender get secret gpu-extender-tls -o jsonpath='{.data.ca\\.crt}' | base64 -d > ca.crt"
        )

        unverified = _cli(str(manifest), "--url", base)
        assert unverified.returncode == 2 and "Traceback" not in unverified.stderr
        first, hint = unverified.stderr.splitlines()
        assert first.startswith(f"gpu-extender explain: cannot verify {base}/explain: ") and "certificate" in first
        assert hint.startswith("hint: pass --cacert with the CA that signed the extender's certificate")
        assert kubectl in hint

        wrong = _cli(str(manifest), "--url", base, "--cacert", str(pki["stranger"]))
        assert wrong.returncode == 2
        assert f"hint: --cacert {pki['stranger']} did not sign the extender's certificate" in wrong.stderr

        misnamed = _cli(str(manifest), "--url", f"https://localhost:{ext.ports['http']}", "--cacert", str(pki["ca"]))
        assert misnamed.returncode == 2
        assert "hint: the extender's certificate does not name the host in --url" in misnamed.stderr

        verified = _cli(str(manifest), "--url", base, "--cacert", str(pki["ca"]))
        assert verified.returncode == 0, verified.stderr
        assert verified.stdout.startswith("pod default/llm needs 6 GPU(s)")


# -- errors before and after the request -------------------------------------------------------------


def test_unreadable_request_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert explain_cli.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_bad_ca_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = _write(tmp_path, "request.json", '{"Pod": {}}')
    bad = _write(tmp_path, "ca.crt", "not a certificate")
    assert explain_cli.main([str(request), "--url", "https://127.0.0.1:1", "--cacert", str(bad)]) == 2
    assert f"--cacert {bad}:" in capsys.readouterr().err


def test_unreachable_extender(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = _write(tmp_path, "request.json", '{"Pod": {}}')
    assert explain_cli.main([str(request), "--url", "http://127.0.0.1:1", "--timeout", "2"]) == 2
    assert "cannot reach http://127.0.0.1:1/explain" in capsys.readouterr().err


def test_bound_pods_not_yet_attributed_are_listed_under_their_node() -> None:
    row = _row("n1", "fail", 0, "GPUsTakenByBoundPods", "too few GPUs left by pods bound here and not yet running")
    row |= {
        "boundPodsPendingGpus": 3,
        "boundPodsPending": [
            {"pod": "ml/a", "gpus": 1, "phase": "Pending", "ageSeconds": 4.6},
            {"pod": "ml/b", "gpus": 2, "phase": None, "ageSeconds": 0.2},
        ],
    }
    lines = explain_cli.render(_answer([row, _row("n2", "pass", 5)])).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("n1 "))
    assert lines[at + 1] == (
        "  bound here, not yet attributed by the agent (3 GPU taken off): "
        "ml/a (1 GPU, Pending, 5s), ml/b (2 GPU, no phase, 0s)"
    )
    assert not any("bound here" in line for line in lines[at + 2 :])
