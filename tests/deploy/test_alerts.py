"""deploy/components/alerts: the PrometheusRule's alerts, checked for real.

- `promtool check rules` parses spec.groups with Prometheus's own PromQL parser and template checks.
- `promtool test rules tests/deploy/alerts_tests.yaml` runs every alert on input series: each one
  fires with exact labels and annotations, and stays quiet exactly at its threshold (or healthy
  value) and one evaluation before its `for:` bound.
- Mutation: each alert is mutated (comparison made strict/non-strict or negated, threshold moved to
  the value the firing case uses, `for:` one evaluation interval shorter and longer) and the unit
  tests must fail on every mutant: that is what proves every bound is tested on both sides.
- Metric names: the programs' /metrics are built from their real registries (ExtenderMetrics with
  the silent-nodes collector app.py adds, AgentMetrics), populated with one report/sample, and
  parsed back with prometheus_client's parser. promtool has no AST dump, so the names in an
  expression come from test_dashboard.metric_names (identifiers that are not functions, keywords,
  label names, durations or strings; tested there). Every one must be a sample name in that
  exposition, or one of the few named in NOT_OURS with its source. The unit tests tie this to
  PromQL: their input series must use exposed names as well, and every alert fires on them, so an
  expression naming a series the programs do not expose could not pass.

Requires promtool (Debian/Ubuntu package `prometheus`); without it those tests skip with one line.
Written against promtool 2.42 (Debian 12). The exact-threshold cases sample counters every 2 minutes
so that rate()/increase() are exact in floating point under both the 2.x (closed) and 3.x
(left-open) range windows; only 2.x has been run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.model.readings import ALLOCATION_KUBELET, GpuReading, Holder, NodeSample
from gpuextender.agent.settings import build_parser as agent_parser
from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.flags import build_parser as extender_parser
from gpuextender.extender.observe.metrics import LATENCY_BUCKETS, ExtenderMetrics
from gpuextender.extender.observe.silent_nodes import SilentNodesCollector
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.pod_ledger import PodLedger
from tests.deploy import manifests as m
from tests.deploy.test_dashboard import label_names, metric_names, relay_registry
from tests.extender.builders import gpu, report

COMPONENT = m.COMPONENTS / "alerts"
UNIT_TESTS = Path(__file__).with_name("alerts_tests.yaml")
RULES_NAME = "gpu-extender-alerts.rules.yaml"  # what alerts_tests.yaml's rule_files names
README = m.DEPLOY / "README.md"
RUNBOOK = "https://github.com/kube-gpu-extender/kube-gpu-extender/blob/main/deploy/README.md#"

PROMTOOL = shutil.which("promtool")
NO_PROMTOOL = "promtool is not installed (apt-get install prometheus): it parses and unit-tests the alerting rules"

# Names the programs do not expose, with where they come from. Readiness is not in /metrics (a
# replica that is not ready is still scraped), so only kube-state-metrics can tell it.
NOT_OURS = {
    "up": "Prometheus, per scrape target",
    "kube_deployment_status_replicas_available": "kube-state-metrics",
    "kube_deployment_spec_replicas": "kube-state-metrics",
}
KUBE_STATE_METRICS_ALERTS = {"GPUExtenderNotReady"}

# The value on the other side of each numeric threshold that alerts_tests.yaml uses (the firing
# value for `>`, the healthy value for `== 0`): moving the threshold there must break a test.
OTHER_SIDE = {
    "GPUExtenderDown": 0,  # absent(up == 1): a down target is 0
    "GPUExtenderFilterFallbacks": 1,  # one fallback in the window
    "GPUExtenderBindingRaces": 1,  # one race in the window
    "GPUExtenderLatencyNearTimeout": 1.75,  # the histogram's next step above 1 s at 100 calls/s
    "GPUAgentDown": 1,
    "GPUNodesWithoutAgentData": 1,
    "GPUNodeDataStale": 10.5,
    "GPUAgentNVMLUnavailable": 1,
    "GPUAgentNVMLErrors": 7 / 120,  # 7 failures per 2 minutes; the threshold is 6 per 2 minutes
    "GPUUnhealthy": 1,
    "GPUAllocatedButIdle": 1,
    "GPURelayDown": 1,
    "GPURelayExtendersUnreached": 1,  # found one replica (and reaches it): quiet; the mutant `== 1` fires
}

SEVERITIES = {"critical", "warning", "info"}
# The labels a scrape puts on every series (Prometheus Operator's defaults), by job.
AGENT_JOB = "gpu-extender/gpu-agent"
EXTENDER_JOB = "gpu-extender"
RELAY_JOB = "gpu-extender/gpu-relay"
TARGET_LABELS = {
    AGENT_JOB: {"job", "instance", "namespace", "pod", "container", "endpoint", "node"},  # node: relabeled
    EXTENDER_JOB: {"job", "instance", "namespace", "pod", "container", "endpoint", "service"},
    RELAY_JOB: {"job", "instance", "namespace", "pod", "container", "endpoint"},
}
KSM_LABELS = {"job", "instance", "namespace", "deployment"}
COMPARISON = re.compile(r" (>=|<=|==|!=|>|<) ")  # the rules write comparisons with spaces around
THRESHOLD = re.compile(r" (>=|<=|==|!=|>|<) (\d+(?:\.\d+)?)(?![\w.])")
FLIPPED = {">": ">=", ">=": ">", "<": "<=", "<=": "<", "==": "!=", "!=": "=="}


# -- the rule and its pieces ------------------------------------------------------------------------


def rule_object() -> m.KubeObject:
    return m.one(m.load_source(COMPONENT), "PrometheusRule", "gpu-extender-alerts", m.NAMESPACE)


def groups() -> list[dict[str, Any]]:
    return rule_object()["spec"]["groups"]


def alerts() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for group in groups():
        for rule in group["rules"]:
            assert "alert" in rule, f"group {group['name']}: only alerting rules here, found {rule}"
            assert rule["alert"] not in found, f"{rule['alert']} defined twice"
            found[rule["alert"]] = rule
    return found


def minutes(duration: str) -> int:
    match = re.fullmatch(r"(\d+)([mh])", duration)
    assert match, f"use whole minutes or hours for `for:`, not {duration}"
    return int(match.group(1)) * (60 if match.group(2) == "h" else 1)


def write_rules(directory: Path, rule_groups: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RULES_NAME
    path.write_text(yaml.safe_dump({"groups": rule_groups}, sort_keys=False))
    return path


def unit_tests() -> dict[str, Any]:
    return yaml.safe_load(UNIT_TESTS.read_text())


def alerts_in(case: dict[str, Any]) -> set[str]:
    return {t["alertname"] for t in case.get("alert_rule_test", [])}


def series_name(series: str) -> str:
    return series.split("{", 1)[0].strip()


@pytest.fixture(scope="module")
def promtool() -> str:
    if PROMTOOL is None:
        pytest.skip(NO_PROMTOOL)
    return PROMTOOL


def run_unit_tests(promtool: str, files: list[Path]) -> dict[Path, str]:
    """`promtool test rules` over several test files (absolute paths) at once: each file's output block."""
    proc = subprocess.run(
        [promtool, "test", "rules", *map(str, files)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    out = proc.stdout
    blocks: dict[Path, str] = {}
    for block in out.split("Unit Testing:")[1:]:
        name, _, body = block.partition("\n")
        blocks[Path(name.strip()).resolve()] = body
    assert len(blocks) == len(files), f"promtool printed {len(blocks)} results for {len(files)} files:\n{out}"
    return blocks


# -- promtool ---------------------------------------------------------------------------------------


def test_promtool_check_rules(tmp_path: Path, promtool: str) -> None:
    path = write_rules(tmp_path, groups())
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in proc.stdout, proc.stdout


def test_promtool_unit_tests_pass(tmp_path: Path, promtool: str) -> None:
    write_rules(tmp_path / "rules", groups())
    shutil.copy(UNIT_TESTS, tmp_path / "rules" / UNIT_TESTS.name)
    [(_, result)] = run_unit_tests(promtool, [tmp_path / "rules" / UNIT_TESTS.name]).items()
    assert result.strip() == "SUCCESS", result


def test_every_alert_is_unit_tested_firing_and_quiet() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in unit_tests()["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = set(alerts())
    assert names == firing == quiet, f"never firing: {names - firing}, never quiet: {names - quiet}"


def mutants() -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(alert, what changed, the rule groups with that one change)."""
    found = []

    def with_rule(alert: str, change: dict[str, Any]) -> list[dict[str, Any]]:
        copy = yaml.safe_load(yaml.safe_dump(groups()))
        for group in copy:
            for rule in group["rules"]:
                if rule["alert"] == alert:
                    rule.update(change)
        return copy

    for name, rule in alerts().items():
        expr, hold = rule["expr"], minutes(rule["for"])
        for match in COMPARISON.finditer(expr):
            op = match.group(1)
            mutated = expr[: match.start(1)] + FLIPPED[op] + expr[match.end(1) :]
            found.append((name, f"{op} -> {FLIPPED[op]}", with_rule(name, {"expr": mutated})))
        thresholds = list(THRESHOLD.finditer(expr))
        assert len(thresholds) <= 1, f"{name}: one numeric threshold per alert, found {len(thresholds)}"
        if thresholds:
            assert name in OTHER_SIDE, f"{name}: say in OTHER_SIDE which value its unit tests use beyond the threshold"
            match = thresholds[0]
            moved = expr[: match.start(2)] + repr(OTHER_SIDE[name]) + expr[match.end(2) :]
            change = f"threshold {match.group(2)} -> {OTHER_SIDE[name]!r}"
            found.append((name, change, with_rule(name, {"expr": moved})))
        for delta in (-1, 1):
            found.append((name, f"for {rule['for']} -> {hold + delta}m", with_rule(name, {"for": f"{hold + delta}m"})))
    return found


def test_unit_tests_catch_every_mutant(tmp_path: Path, promtool: str) -> None:
    """Each mutant runs with the unit tests of its own alert only (all mutants in one promtool run)."""
    doc = unit_tests()
    files, labels = [], {}
    for i, (alert, change, mutated) in enumerate(mutants()):
        directory = tmp_path / f"mutant{i:02d}"
        write_rules(directory, mutated)
        cases = [c for c in doc["tests"] if alert in alerts_in(c)]
        for case in cases:
            case["alert_rule_test"] = [t for t in case["alert_rule_test"] if t["alertname"] == alert]
        (directory / UNIT_TESTS.name).write_text(yaml.safe_dump({**doc, "tests": cases}, sort_keys=False))
        files.append((directory / UNIT_TESTS.name).resolve())
        labels[files[-1]] = f"{alert}: {change}"
    assert len(files) >= 4 * len(alerts()) - len(KUBE_STATE_METRICS_ALERTS)
    results = run_unit_tests(promtool, files)
    survivors = [labels[f] for f in files if results[f].strip() == "SUCCESS"]
    assert not survivors, "mutants the unit tests do not catch:\n" + "\n".join(survivors)
    for f in files:  # every mutant failed on a test, not on a broken file
        assert "alertname:" in results[f], f"{labels[f]}: {results[f]}"


# -- the names and labels are the programs' own ------------------------------------------------------


def exposition() -> dict[str, set[str]]:
    """Sample name -> label names in the two programs' /metrics, from their real registries with
    one node's report (extender) and one sample of a held, idle, unhealthy GPU (agent)."""
    state = GpuState(IdleRule())
    assert state.ingest(report("gpu-node-1", [gpu(0)]), received_at=0.0)
    extender = ExtenderMetrics(state, InventoryStore(), clock=lambda: 5.0)
    extender.registry.register(SilentNodesCollector(state, InventoryView))  # as gpuextender/extender/app.py
    # Registers the binding and bound-pod metrics, as app.py.
    SchedulerApi(state, extender, ApiSettings(DecisionPolicy()), sources=ClusterSources(PodLedger(("nvidia.com/gpu",))))
    extender.request_duration.labels(verb="filter").observe(0.01)
    extender.requests.labels(verb="filter", code="200").inc()
    extender.filter_fallbacks.inc()

    now = [0.0]
    agent = AgentMetrics("gpu-node-1", idle_window_s=600, clock=lambda: now[0])
    held = Holder("team-a", "train-0", "main", "nvidia.com/gpu", "GPU-0")
    idle_unhealthy = GpuReading(
        index=0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3", utilization_gpu_percent=0, healthy=False, holders=[held]
    )
    sample = NodeSample(
        sample_time=1.0,
        duration_s=0.01,
        driver_version="550.127.05",
        gpus=[idle_unhealthy],
        allocation_source=ALLOCATION_KUBELET,
    )
    agent.observe_sample(sample)
    now[0] = 601.0
    agent.observe_sample(sample)
    agent.count_nvml_error("nvmlDeviceGetPowerUsage", "Timeout")

    labels: dict[str, set[str]] = {}
    for registry in (extender.registry, agent.registry, relay_registry()):
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            for s in family.samples:
                labels.setdefault(s.name, set()).update(s.labels)
    return labels


def job_of(name: str) -> str:
    if name.startswith("gpu_relay_"):
        return RELAY_JOB
    return AGENT_JOB if name.startswith(("gpu_agent_", "DCGM_")) else EXTENDER_JOB


def test_the_exposition_has_what_the_alerts_need() -> None:
    exposed = exposition()
    assert {
        "gpu_extender_request_duration_seconds_bucket",
        "gpu_extender_filter_fallbacks_total",
        "gpu_agent_nvml_errors_total",
        "gpu_agent_pod_idle_gpus",
        "gpu_relay_extenders",
        "gpu_relay_extenders_connected",
    } <= set(exposed)
    assert not set(NOT_OURS) & set(exposed)


def test_every_metric_in_the_alerts_is_exposed_by_the_programs() -> None:
    exposed = exposition()
    for name, rule in alerts().items():
        used = metric_names(rule["expr"])
        assert used, f"{name}: no metric found in {rule['expr']}"
        unknown = used - set(exposed) - set(NOT_OURS)
        assert not unknown, f"{name}: {sorted(unknown)} is not in the programs' /metrics"
        if name not in KUBE_STATE_METRICS_ALERTS:
            assert used - set(exposed) <= {"up"}, f"{name}: only GPUExtenderNotReady may need kube-state-metrics"


def test_unit_test_series_use_exposed_names_and_labels() -> None:
    exposed = exposition()
    for case in unit_tests()["tests"]:
        for series in case["input_series"]:
            name = series_name(series["series"])
            if name in NOT_OURS:
                continue
            assert name in exposed, f"{case['name']}: {name} is not in the programs' /metrics"
            given = set(re.findall(r"(\w+)=\"", series["series"]))
            allowed = exposed[name] | TARGET_LABELS[job_of(name)]
            assert given <= allowed, f"{case['name']}: {name} never has {sorted(given - allowed)}"


def test_labels_the_alerts_use_exist() -> None:
    """Labels in matchers, by/without clauses and $labels in annotations: on the series the
    programs expose, or added by the scrape (and, for kube-state-metrics, its own)."""
    exposed = exposition()
    for name, rule in alerts().items():
        available: set[str] = set()
        for metric in metric_names(rule["expr"]):
            if metric == "up":
                available |= set().union(*TARGET_LABELS.values())
            elif metric in NOT_OURS:
                available |= KSM_LABELS
            else:
                available |= exposed[metric] | TARGET_LABELS[job_of(metric)]
        used = label_names(rule["expr"]) | set(re.findall(r"\$labels\.(\w+)", yaml.safe_dump(rule["annotations"])))
        assert used <= available, f"{name}: {sorted(used - available)} is on none of its series"


# -- consistent with the deployment ------------------------------------------------------------------


def test_up_selects_the_jobs_the_monitors_create(base_objects: list[m.KubeObject]) -> None:
    """Prometheus Operator names a PodMonitor's job <namespace>/<name> and a ServiceMonitor's job
    after the Service, unless jobLabel says otherwise."""
    monitors = m.load_source(m.COMPONENTS / "monitoring")
    pm = m.one(monitors, "PodMonitor", "gpu-agent", m.NAMESPACE)
    relays = m.one(monitors, "PodMonitor", "gpu-relay", m.NAMESPACE)
    sm = m.one(monitors, "ServiceMonitor", "gpu-extender", m.NAMESPACE)
    assert "jobLabel" not in pm["spec"] and "jobLabel" not in sm["spec"] and "jobLabel" not in relays["spec"]
    assert AGENT_JOB == f"{pm['metadata']['namespace']}/{pm['metadata']['name']}"
    assert RELAY_JOB == f"{relays['metadata']['namespace']}/{relays['metadata']['name']}"
    services = [
        s
        for s in m.find(base_objects, "Service", namespace=m.NAMESPACE)
        if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in services] == [EXTENDER_JOB]
    jobs = {j for rule in alerts().values() for j in re.findall(r'\bjob="([^"]*)"', rule["expr"])}
    assert jobs == {AGENT_JOB, EXTENDER_JOB, RELAY_JOB}
    assert "node" in {r["targetLabel"] for r in pm["spec"]["podMetricsEndpoints"][0]["relabelings"]}


def deployed_args(base_objects: list[m.KubeObject], kind: str, name: str, parser) -> Any:
    workload = m.one(base_objects, kind, name, m.NAMESPACE)
    return parser().parse_args(workload["spec"]["template"]["spec"]["containers"][0]["args"])


def threshold(rule: dict[str, Any]) -> float:
    [match] = THRESHOLD.finditer(rule["expr"])
    return float(match.group(2))


def test_latency_alert_fires_before_the_scheduler_times_out(scheduler_config: dict) -> None:
    [extender] = scheduler_config["extenders"]
    timeout = extender["httpTimeout"]
    assert re.fullmatch(r"\d+s", timeout), f"httpTimeout {timeout}: update the alert's arithmetic"
    rule = alerts()["GPUExtenderLatencyNearTimeout"]
    limit = threshold(rule)
    # A bucket bound, so "p99 > limit" is exactly "more than 1 % of calls took longer than limit".
    assert limit in LATENCY_BUCKETS and 0 < limit <= int(timeout[:-1]) / 2
    assert f"near the {timeout} httpTimeout" in rule["annotations"]["summary"]
    assert f"httpTimeout ({timeout})" in rule["annotations"]["description"]
    assert {extender["filterVerb"], extender["prioritizeVerb"]} == {"filter", "prioritize"}
    assert 'verb=~"filter|prioritize"' in rule["expr"]


def test_stale_alert_uses_the_extenders_stale_bound(base_objects: list[m.KubeObject]) -> None:
    args = deployed_args(base_objects, "Deployment", "gpu-extender", extender_parser)
    rule = alerts()["GPUNodeDataStale"]
    assert threshold(rule) == args.stale_after
    assert f"--stale-after ({args.stale_after:g}s)" in rule["annotations"]["description"]


def test_idle_alert_states_the_agents_idle_settings(base_objects: list[m.KubeObject]) -> None:
    args = deployed_args(base_objects, "DaemonSet", "gpu-agent", agent_parser)
    rule = alerts()["GPUAllocatedButIdle"]
    assert f"--idle-threshold ({args.idle_threshold:g} %)" in rule["annotations"]["description"]
    assert minutes(rule["for"]) >= 60 and args.idle_window <= 3600, "idle for hours, not minutes"


# -- shape, runbooks, rendering ----------------------------------------------------------------------


def test_every_alert_has_severity_for_and_annotations() -> None:
    for name, rule in alerts().items():
        assert re.fullmatch(r"GPU[A-Za-z]+", name)
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert minutes(rule["for"]) > 0, name
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}, name
        assert rule["annotations"]["runbook_url"] == RUNBOOK + name.lower(), name


def test_every_alert_has_a_runbook_in_the_readme() -> None:
    text = README.read_text()
    section = re.search(r"^## Alerts\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "deploy/README.md has no `## Alerts` section"
    headings = re.findall(r"^### (\S+)\s*$", section.group(1), re.M)
    assert headings == list(alerts()), "one `### <alert>` runbook per alert, in the rule's order"
    # GitHub's anchor for `### GPUAgentDown` is #gpuagentdown (the runbook_url's, checked above).
    bodies = re.split(r"^### \S+\s*$", section.group(1), flags=re.M)[1:]
    metrics = set(exposition())
    for name, body in zip(alerts(), bodies, strict=True):
        checks = "kubectl" in body or any(metric in body for metric in metrics)
        assert checks, f"{name}: its runbook names no first check (a kubectl command or a metric)"
    assert "components/alerts" in text


def test_component_shape() -> None:
    doc = m.load_yaml_docs(COMPONENT / "kustomization.yaml")[0]
    assert doc["kind"] == "Component" and doc["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    rule = rule_object()
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == m.NAMESPACE


@pytest.mark.skipif(m.KUBECTL is None, reason=m.NO_KUBECTL)
def test_component_renders_with_the_monitors_labels(tmp_path: Path) -> None:
    objects = m.kustomize_with(tmp_path, [m.DEPLOY], [m.COMPONENTS / "monitoring", COMPONENT])
    rule = m.one(objects, "PrometheusRule", "gpu-extender-alerts", m.NAMESPACE)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == rule_object()["spec"], "kustomize must not change the rules"
    sm = m.one(objects, "ServiceMonitor", "gpu-extender", m.NAMESPACE)
    labels, convention = rule["metadata"]["labels"], sm["metadata"]["labels"]
    assert set(convention) <= set(labels), f"missing {set(convention) - set(labels)}"
    assert labels["app.kubernetes.io/part-of"] == convention["app.kubernetes.io/part-of"] == "kube-gpu-extender"
    assert labels["app.kubernetes.io/name"] == "gpu-extender"
