"""The real-GPU check's agent -> extender path (tests/gpu/live.py, bench/gpu_check.py) run here on
the fake NVML, so that the code a lent GPU machine runs, rarely, is the code CI keeps working."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.gpu import live

ROOT = Path(__file__).resolve().parents[2]
SPIN = {"sm_active": 0.75, "sm_occupancy": 0.01, "graphics_active": 99.5}


def test_the_check_passes_and_scores_a_node_and_reads_the_agents_metrics(tmp_path: Path) -> None:
    scenario = tmp_path / "gpu.yaml"
    gpu = {"product": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "utilization_percent": 100, "gpm": SPIN}
    scenario.write_text(yaml.safe_dump({"gpus": [gpu]}))
    seen = live.run_agent_and_extender(
        ROOT,
        loads=("idle",),
        extender_args=("--idle-max-sm-active", "10", "--no-fit-policy", "reject"),
        agent_args=("--fake", str(scenario), "--interval", "0.2"),
        load_seconds=1.5,
        gpus=(1, "NVIDIA H100 80GB HBM3"),
    )
    idle = seen["idle"]
    assert idle["filter_status"] == 200 and idle["filter"]["NodeNames"] == [live.NODE], idle
    assert idle["idle_gpus"] == 1.0 and idle["explain"]["meanUtilization"] == 100.0  # idle by SM activity
    assert [e["Score"] for e in idle["prioritize"]] and idle["prioritize"][0]["Score"] > 0
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE"} <= set(seen["agent_metric_names"])
    assert seen["agent_dcgm_series"]["DCGM_FI_PROF_SM_ACTIVE"] == 0.0075
    assert seen["agent_rss_kib"]["VmRSS"] > 0
