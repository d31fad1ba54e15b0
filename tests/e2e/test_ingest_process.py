"""The ingest workers (issues 13, 36): gpu-extender receives agent reports in other processes
and stores what they relay, so a scheduling call never waits behind a burst of reports. Real
processes: the extender, its ingest workers, a real agent on fake NVML."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import yaml

from tests.harness import Proc, cluster, metric, scrape, url, wait_until

NODE = "gpu-node-1"
H100 = {"product": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "compute_capability": "9.0", "memory_used_percent": 1}


def scenario(path: Path) -> Path:
    path.write_text(yaml.safe_dump({"gpus": [{**H100, "count": 8, "utilization_percent": 2}]}))
    return path


def ingest_pids(ext: Proc) -> list[int]:
    wait_until("the ingest workers line", lambda: "serve the agents' gRPC port" in ext.log())
    found = re.search(r"(\d+) ingest worker\(s\) \(pid ([\d, ]+)\) serve", ext.log())
    assert found is not None, ext.log()
    pids = [int(p) for p in found.group(2).split(", ")]
    assert len(pids) == int(found.group(1))
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not alive
        return f.read().split(")")[-1].split()[0] != "Z"


def test_reports_and_metrics_come_through_the_ingest_workers(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender("--ingest-workers", "2")
        pids = ingest_pids(ext)
        assert len(pids) == 2 and ext.popen.pid not in pids
        for pid in pids:
            assert "gpuextender.extender.workers.worker_main" in Path(f"/proc/{pid}/cmdline").read_text()
        c.agent(NODE, scenario(tmp_path / "node.yaml"), ext)
        wait_until(
            "the node's data in the extender",
            lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=NODE) == 8,
        )
        # The ingest series are asked of the ingest process at scrape time: one scrape shows the
        # accepted reports behind the data it already has, and the open stream.
        samples = scrape(url(ext, "/metrics"))
        assert (metric(samples, "gpu_extender_reports_total", result="accepted") or 0) >= 1
        assert metric(samples, "gpu_extender_connected_agents") == 1  # summed over the workers
        assert metric(samples, "gpu_extender_nodes_with_data") == 1
        assert metric(samples, "gpu_extender_ingest_workers") == 2


def test_a_killed_worker_is_started_again_and_the_agent_comes_back(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender("--ingest-workers", "1")
        (pid,) = ingest_pids(ext)
        c.agent(NODE, scenario(tmp_path / "node.yaml"), ext)
        wait_until(
            "the agent's stream", lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_connected_agents") == 1
        )
        os.kill(pid, signal.SIGKILL)
        wait_until(
            "the worker started again", lambda: "ingest worker 1/1 exited (code -9): starting it again" in ext.log()
        )
        # The agent reconnects to the new worker: its stream and its reports are back.
        wait_until("the new worker", lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_ingest_workers") == 1)
        wait_until(
            "the agent's stream again",
            lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_connected_agents") == 1,
        )
        samples = scrape(url(ext, "/metrics"))
        assert metric(samples, "gpu_extender_ingest_worker_restarts_total", reason="exited") == 1
        assert (metric(samples, "gpu_extender_reports_total", result="accepted") or 0) >= 1  # the new worker's
        assert ext.alive()


def test_the_ingest_workers_end_with_the_extender(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender("--ingest-workers", "2")
        pids = ingest_pids(ext)
        ext.popen.kill()  # no goodbye: the workers see their links close
        ext.popen.wait(timeout=10)
        wait_until("the ingest workers gone", lambda: not any(alive(pid) for pid in pids), timeout=10)


def test_in_process_ingest_needs_no_second_process(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender("--ingest-in-process")
        c.agent(NODE, scenario(tmp_path / "node.yaml"), ext)
        wait_until(
            "the node's data in the extender",
            lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=NODE) == 8,
        )
        assert metric(scrape(url(ext, "/metrics")), "gpu_extender_connected_agents") == 1
        assert "ingest worker" not in ext.log()
