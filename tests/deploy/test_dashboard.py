"""deploy/grafana/gpu-extender-dashboard.json: valid JSON, and every metric its queries use is
one the programs export. The exported names come from the metric registries themselves
(AgentMetrics, ExtenderMetrics, a relay's), built without starting anything, with the sample names
Prometheus sees (`_total` for counters, `_bucket`/`_sum`/`_count` for histograms). The panels on
dcgm-exporter's names also only use labels the agent really puts on those series."""

from __future__ import annotations

import json
import re

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.model.readings import ALLOCATION_KUBELET, GpmReading, GpuReading, Holder, MigReading, NodeSample
from gpuextender.common.dial import DialSettings
from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.ingest.service import IngestService
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.relay.forward_store import ForwardStore
from gpuextender.extender.relay.relay_app import Relay
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from tests.deploy import manifests as m

DASHBOARD = m.DEPLOY / "grafana" / "gpu-extender-dashboard.json"

SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "untyped": ("",),
}
PROMQL_WORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
}


def relay_registry() -> CollectorRegistry:
    """A relay's /metrics registry (gpu-extender relay: its agents' side's and its own)."""
    metrics, store = IngestMetrics(), ForwardStore(IdleRule())
    Relay(store, IngestService(store, IngestMetrics()), DialSettings(), metrics)
    return metrics.registry


def exported_names() -> set[str]:
    registries = [
        AgentMetrics("gpu-node-1").registry,
        ExtenderMetrics(GpuState(IdleRule()), InventoryStore()).registry,
        relay_registry(),
    ]
    names = set()
    for registry in registries:
        for family in registry.collect():
            names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    return names


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords,
    label names (inside {...}, by(...), on(...)) or durations/strings."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, $variables)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(\s*\()?", text):
        word, is_call = match.group(1), match.group(2)
        if not is_call and word.lower() not in PROMQL_WORDS:
            names.add(word)
    return names


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dash: dict):
    for panel in dash["panels"]:
        yield panel
        yield from panel.get("panels", [])


def label_names(expr: str) -> set[str]:
    """Label names in a PromQL expression's matchers and by/without/on/ignoring clauses."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    names = set()
    for matchers in re.findall(r"\{([^}]*)\}", text):
        names |= set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
    for clause in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", text):
        names |= {n.strip() for n in clause.split(",") if n.strip()}
    return names


def queries(dash: dict) -> list[str]:
    exprs = [t["expr"] for p in panels(dash) for t in p.get("targets", [])]
    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            found = re.fullmatch(r"label_values\(\s*([^,]+?)\s*,\s*\w+\s*\)", query)
            assert found, f"variable {var['name']}: unexpected query {query}"
            exprs.append(found.group(1))
    return exprs


def test_extractor_finds_metric_names_only() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, verb) (rate(gpu_extender_request_duration_seconds_bucket"
        '{verb="filter", node=~"$node"}[$__rate_interval]))) / on(node) group_left time() '
        "- gpu_agent_last_sample_timestamp_seconds or vector(0)"
    )
    expected = {"gpu_extender_request_duration_seconds_bucket", "gpu_agent_last_sample_timestamp_seconds"}
    assert metric_names(expr) == expected


def test_the_check_catches_an_unknown_metric() -> None:
    assert metric_names("sum(rate(gpu_agent_reports_sent[5m]))") - exported_names() == {"gpu_agent_reports_sent"}


def test_every_dashboard_metric_is_exported() -> None:
    exported = exported_names()
    used = set().union(*(metric_names(e) for e in queries(dashboard())))
    assert used, "no queries found"
    assert used <= exported, (
        "not exported by gpuextender/agent/export/metrics.py or gpuextender/extender/observe/metrics.py: "
        f"{sorted(used - exported)}"
    )


def test_dashboard_covers_the_agent_and_the_extender() -> None:
    exprs = queries(dashboard())
    used = set().union(*(metric_names(e) for e in exprs))
    required = {
        # agent GPU gauges and the agent's own cost
        "gpu_agent_gpu_utilization_percent",
        "gpu_agent_gpu_memory_used_bytes",
        "gpu_agent_gpu_memory_total_bytes",
        "gpu_agent_gpu_temperature_celsius",
        "gpu_agent_gpu_power_watts",
        "gpu_agent_gpu_healthy",
        "gpu_agent_sample_duration_seconds_sum",
        "gpu_agent_stream_connected",
        # extender: latency, decisions, reasons, streams, data age
        "gpu_extender_request_duration_seconds_bucket",
        "gpu_extender_requests_total",
        "gpu_extender_filter_nodes_total",
        "gpu_extender_filter_failures_total",
        "gpu_extender_connected_agents",
        "gpu_extender_reports_total",
        "gpu_extender_node_data_age_seconds",
        # relays (components/relay)
        "gpu_relay_extenders",
        "gpu_relay_extenders_connected",
        "gpu_relay_nodes",
    }
    assert required <= used, sorted(required - used)
    assert any(
        re.search(r"histogram_quantile\(.*by \(le, verb\).*gpu_extender_request_duration_seconds_bucket", e)
        for e in exprs
    ), "no latency quantile per verb"


def test_dashboard_is_importable() -> None:
    dash = dashboard()
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in panels(dash):
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]


# Labels Prometheus puts on every agent series itself: the target's, and `node` from the PodMonitor.
TARGET_LABELS = {"instance", "job", "node"}


def agent_series_labels() -> dict[str, set[str]]:
    """Label names per metric in the agent's /metrics for a node with a held GPU and a MIG instance."""
    metrics = AgentMetrics("gpu-node-1")
    held = Holder("team", "train", "main", "nvidia.com/gpu", "GPU-0")
    mig = MigReading(
        "MIG-1",
        "1g.10gb",
        1,
        0,
        memory_total_bytes=10 << 30,
        memory_used_bytes=1 << 30,
        holders=[Holder("team", "small", "main", "nvidia.com/mig-1g.10gb", "MIG-1")],
        gpm=GpmReading(sm_active=5.0, sm_occupancy=2.0, tensor_active=1.0, dram_active=1.0, graphics_active=9.0),
    )
    gpus = [
        GpuReading(
            index=0,
            uuid="GPU-0",
            name="NVIDIA H100 80GB HBM3",
            utilization_gpu_percent=0,
            memory_used_bytes=1 << 30,
            temperature_celsius=40,
            power_watts=70.0,
            holders=[held],
            gpm=GpmReading(sm_active=1.0, sm_occupancy=1.0, tensor_active=0.0, dram_active=2.0, graphics_active=100.0),
        ),
        GpuReading(index=1, uuid="GPU-1", name="NVIDIA A100-SXM4-80GB", memory_used_bytes=1 << 30, mig_instances=[mig]),
    ]
    metrics.observe_sample(
        NodeSample(
            sample_time=1.0,
            duration_s=0.01,
            driver_version="550.127.05",
            gpus=gpus,
            allocation_source=ALLOCATION_KUBELET,
        )
    )
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def dcgm_panels(dash: dict) -> list[dict]:
    return [
        p
        for p in panels(dash)
        if any("DCGM_" in t["expr"] or "gpu_agent_pod_idle_gpus" in t["expr"] for t in p.get("targets", []))
    ]


def test_dashboard_has_the_dcgm_panels_and_variables() -> None:
    dash = dashboard()
    used = set().union(*(metric_names(t["expr"]) for p in dcgm_panels(dash) for t in p["targets"]))
    required = {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_XID_ERRORS",
        "gpu_agent_pod_idle_gpus",
    }
    assert required <= used, sorted(required - used)
    variables = {v["name"]: v["query"]["query"] for v in dash["templating"]["list"] if v["type"] == "query"}
    # As NVIDIA's dcgm-exporter dashboard builds them (peers.md §4.1), per host rather than per instance.
    assert variables["Hostname"] == "label_values(DCGM_FI_DEV_GPU_TEMP, Hostname)"
    assert re.fullmatch(r"label_values\(DCGM_FI_DEV_GPU_TEMP(\{.*\})?, gpu\)", variables["gpu"])


def test_dcgm_panels_use_only_labels_the_agent_serves() -> None:
    served = agent_series_labels()
    dash = dashboard()
    checked = 0
    for panel in dcgm_panels(dash):
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            available = set().union(*(served[n] for n in names)) | TARGET_LABELS
            used = label_names(target["expr"]) | set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target["legendFormat"]))
            assert used <= available, f"{panel['title']}: {sorted(used - available)} not on {sorted(names)}"
            checked += 1
    for var in dash["templating"]["list"]:
        found = re.fullmatch(r"label_values\((\w+)(\{.*\})?, (\w+)\)", str(var.get("definition", "")))
        if found and found.group(1).startswith("DCGM_"):
            assert found.group(3) in served[found.group(1)], var["name"]
            checked += 1
    assert checked >= 8


def test_label_extractor() -> None:
    expr = 'max by (Hostname, gpu) (DCGM_FI_DEV_FB_USED{Hostname=~"$Hostname", GPU_I_ID!="a,b"}) > on(node) x'
    assert label_names(expr) == {"Hostname", "gpu", "GPU_I_ID", "node"}
