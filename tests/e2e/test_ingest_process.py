"""The ingest process (issue 13): gpu-extender receives agent reports in a second process and
stores what it relays, so a scheduling call never waits behind a burst of reports. Real
processes: the extender, its ingest process, a real agent on fake NVML."""

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


def ingest_pid(ext: Proc) -> int:
    wait_until("the ingest process line", lambda: "serves the agents' gRPC port" in ext.log())
    found = re.search(r"ingest process (\d+) serves", ext.log())
    assert found is not None
    return int(found.group(1))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not alive
        return f.read().split(")")[-1].split()[0] != "Z"


def test_reports_and_metrics_come_through_the_ingest_process(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender()
        pid = ingest_pid(ext)
        assert pid != ext.popen.pid
        assert "gpuextender.extender.ingest_process" in Path(f"/proc/{pid}/cmdline").read_text()
        c.agent(NODE, scenario(tmp_path / "node.yaml"), ext)
        wait_until(
            "the node's data in the extender",
            lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=NODE) == 8,
        )
        # The ingest series are asked of the ingest process at scrape time: one scrape shows the
        # accepted reports behind the data it already has, and the open stream.
        samples = scrape(url(ext, "/metrics"))
        assert (metric(samples, "gpu_extender_reports_total", result="accepted") or 0) >= 1
        assert metric(samples, "gpu_extender_connected_agents") == 1
        assert metric(samples, "gpu_extender_nodes_with_data") == 1


def test_the_extender_exits_when_its_ingest_process_dies(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender()
        os.kill(ingest_pid(ext), signal.SIGKILL)
        assert ext.popen.wait(timeout=15) == 1
        assert "the ingest process exited" in ext.log() and "stopping" in ext.log()


def test_the_ingest_process_ends_with_the_extender(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender()
        pid = ingest_pid(ext)
        ext.popen.kill()  # no goodbye: the ingest process sees its link close
        ext.popen.wait(timeout=10)
        wait_until("the ingest process gone", lambda: not alive(pid), timeout=10)


def test_in_process_ingest_needs_no_second_process(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender("--ingest-in-process")
        c.agent(NODE, scenario(tmp_path / "node.yaml"), ext)
        wait_until(
            "the node's data in the extender",
            lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=NODE) == 8,
        )
        assert metric(scrape(url(ext, "/metrics")), "gpu_extender_connected_agents") == 1
        assert "ingest process" not in ext.log()
