"""GPM end to end on the fake NVML (issue 27): agent -> report -> the extender's SM-activity idle
rule -> DCGM_FI_PROF_* scraped by a real Prometheus and read back through the dashboard's own
profiling queries.

The node has the two GPUs measured on an H100 (bench/RESULTS-gpu.md): one running a one-thread
spin kernel (utilization 100 %, SM active 0.75 %) and one running matrix products (100 %, 96 %).
Under the utilization rule (--idle-max-sm-active off) both are busy; under the default SM rule the
spinning one is idle. A second node's agent reads no GPM (--no-gpm, as an agent before 0.5 or a GPU
before Hopper): the same extender judges its GPUs by utilization, and says which rule judged each
GPU in /explain and in gpu_extender_node_gpus_judged.

The Prometheus part needs the `prometheus` binary (Debian package `prometheus`; .ci/run installs
it) and skips with one line without it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import Proc, cluster, free_port, http, metric, post_json, request_for, scrape, url, wait_until

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "gpu-extender-dashboard.json"
NODE = "gpu-node-1"
NO_GPM_NODE = "gpu-node-2"
H100 = {"product": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "compute_capability": "9.0", "memory_used_percent": 1}
SPIN = {"sm_active": 0.75, "sm_occupancy": 0.01, "tensor_active": 0, "dram_active": 0, "graphics_active": 99.5}
MATMUL = {"sm_active": 96.5, "sm_occupancy": 14.4, "tensor_active": 93.5, "dram_active": 25.6, "graphics_active": 99.8}
PROMETHEUS = shutil.which("prometheus")


def write_scenario(path: Path) -> Path:
    gpus = [{**H100, "utilization_percent": 100, "gpm": SPIN}, {**H100, "utilization_percent": 100, "gpm": MATMUL}]
    path.write_text(yaml.safe_dump({"gpus": gpus}))
    return path


def write_inventory(directory: Path) -> Path:
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "status": {"allocatable": {"nvidia.com/gpu": "2"}},
        }
        for name in (NODE, NO_GPM_NODE)
    ]
    directory.mkdir()
    (directory / "nodes.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    return directory


def idle(ext: Proc, node: str = NODE) -> float | None:
    return metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=node)


def judged(ext: Proc, node: str, rule: str) -> float | None:
    return metric(scrape(url(ext, "/metrics")), "gpu_extender_node_gpus_judged", node=node, rule=rule)


def test_the_sm_activity_rule_counts_a_spinning_gpu_idle_by_default_through_the_real_processes(
    tmp_path: Path,
) -> None:
    scenario = write_scenario(tmp_path / "node.yaml")
    inventory = write_inventory(tmp_path / "inventory")
    with cluster(tmp_path) as c:
        # --no-fit-policy reject: a node without a fit is failed, not passed with all the others.
        by_default = c.extender("--inventory", str(inventory), "--no-fit-policy", "reject")
        by_utilization = c.extender(
            "--inventory", str(inventory), "--no-fit-policy", "reject", "--idle-max-sm-active", "off"
        )
        c.agent(NODE, scenario, by_utilization, by_default, extra=("--interval", "0.2"))
        c.agent(NO_GPM_NODE, scenario, by_default, extra=("--interval", "0.2", "--no-gpm"))
        # GPM needs two samples: the first report has none, so the SM rule falls back to utilization.
        wait_until("the SM rule to count the spinning GPU idle", lambda: idle(by_default) == 1.0)
        wait_until("the GPM-less node's report", lambda: idle(by_default, NO_GPM_NODE) is not None)
        assert idle(by_utilization) == 0.0
        assert idle(by_default, NO_GPM_NODE) == 0.0  # no GPM: utilization (100 %) judges both GPUs busy
        assert (judged(by_default, NODE, "sm-active"), judged(by_default, NODE, "utilization")) == (2.0, None)
        assert (judged(by_default, NO_GPM_NODE, "sm-active"), judged(by_default, NO_GPM_NODE, "utilization")) == (
            None,
            2.0,
        )
        assert (judged(by_utilization, NODE, "sm-active"), judged(by_utilization, NODE, "utilization")) == (None, 2.0)
        status, answer = post_json(url(by_default, "/filter"), request_for([NODE, NO_GPM_NODE], gpus=1))
        assert status == 200 and answer["NodeNames"] == [NODE], answer
        assert NO_GPM_NODE in answer["FailedNodes"], answer
        status, answer = post_json(url(by_utilization, "/filter"), request_for([NODE], gpus=1))
        assert status == 200 and answer["NodeNames"] == [] and NODE in answer["FailedNodes"], answer
        status, explained = post_json(url(by_default, "/explain"), request_for([NODE, NO_GPM_NODE], gpus=1))
        assert status == 200, explained
        rules = {n["node"]: n["gpuIdleRule"] for n in explained["nodes"]}
        assert rules[NODE] == [
            {"gpu": 0, "judgedBy": "sm-active", "smActivePercent": 0.75},
            {"gpu": 1, "judgedBy": "sm-active", "smActivePercent": 96.5},
        ]
        assert rules[NO_GPM_NODE] == [
            {"gpu": 0, "judgedBy": "utilization", "utilizationPercent": 100},
            {"gpu": 1, "judgedBy": "utilization", "utilizationPercent": 100},
        ]


def _profiling_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of the dashboard's GPM panels, its variables set to match all."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    found = []
    for panel in panels:
        targets = panel.get("targets", [])
        if any("DCGM_FI_PROF_" in t["expr"] for t in targets):
            found += [(panel["title"], re.sub(r"\$\w+", ".*", t["expr"])) for t in targets]
    return found


def _query(port: int, expr: str) -> list[dict[str, Any]]:
    status, body = http("GET", f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(expr)}")
    assert status == 200, body
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (apt-get install prometheus)")
def test_a_real_prometheus_answers_the_dashboards_profiling_panels(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "node.yaml")
    with cluster(tmp_path) as c:
        agent = c.agent(NODE, scenario, extra=("--interval", "0.2"))
        port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "gpu-agent", "static_configs": [{"targets": [url(agent, "")[7:]]}]}],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = open(tmp_path / "prometheus.log", "wb")
        prometheus = subprocess.Popen(
            [
                str(PROMETHEUS),
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            queries = _profiling_queries()
            assert len(queries) >= 3, queries  # SM activity (and utilization), tensor pipes, DRAM
            wait_until(
                "Prometheus to have scraped GPM readings",
                lambda: prometheus.poll() is None and _query(port, "DCGM_FI_PROF_SM_ACTIVE") != [],
                timeout=60.0,
            )
            answers = {expr: _query(port, expr) for _, expr in queries}
        finally:
            prometheus.terminate()
            prometheus.wait(30)
            log.close()
    by_gpu = {
        expr: {r["metric"]["gpu"]: float(r["value"][1]) for r in result if "gpu" in r["metric"]}
        for expr, result in answers.items()
    }
    sm = next(v for e, v in by_gpu.items() if e.startswith("max by (Hostname, gpu) (DCGM_FI_PROF_SM_ACTIVE"))
    util = next(v for e, v in by_gpu.items() if "DCGM_FI_DEV_GPU_UTIL" in e)
    tensor = next(v for e, v in by_gpu.items() if "PIPE_TENSOR_ACTIVE" in e)
    dram = next(v for e, v in by_gpu.items() if "DRAM_ACTIVE" in e)
    assert sm == pytest.approx({"0": 0.0075, "1": 0.965}) and util == {"0": 1.0, "1": 1.0}
    assert tensor == pytest.approx({"0": 0.0, "1": 0.935}) and dram == pytest.approx({"0": 0.0, "1": 0.256})
