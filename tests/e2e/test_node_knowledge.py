"""What gpu-agent now knows of its node, through the real processes: a real extender, a real agent
on fake NVML (scripted XID), and a fake kubelet serving PodResources on a real unix socket.

- A critical XID reaches the extender at once, not at the next sample (the agent samples every
  30 s here): the extender counts one idle GPU less before that sample could have come.
- `gpu-agent --clear-xid` lifts the quarantine, and the extender hears of it at once too.
- The kubelet's allocation shows in the agent's dcgm-compatible metrics (pod/namespace/container)
  and in allocated-but-idle; a kubelet that goes away leaves the agent sampling and reporting
  allocation as unknown."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.harness import Cluster, Proc, cluster, metric, scrape, url, wait_until

NODE = "gpu-node-1"
H100 = {
    "product": "NVIDIA H100 80GB HBM3",
    "memory_gib": 80,
    "compute_capability": "9.0",
    "utilization_percent": 0,
    "memory_used_percent": 1,
}
XID_AT_S = 4.0


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths are limited to ~107 bytes: pytest's tmp_path can be longer."""
    with tempfile.TemporaryDirectory(prefix="gk-") as folder:
        yield Path(folder)


def _idle(ext: Proc) -> float | None:
    return metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=NODE)


def test_a_critical_xid_reaches_the_extender_before_the_next_sample_and_clears_on_request(
    tmp_path: Path, short_dir: Path
) -> None:
    scenario = tmp_path / "node.yaml"
    scenario.write_text(
        yaml.safe_dump({"gpus": [{**H100, "count": 8}], "events": [{"at_s": XID_AT_S, "gpus": [2], "xid": 79}]})
    )
    control = short_dir / "control"
    with cluster(tmp_path) as c:
        ext = c.extender("--stale-after", "120")
        started = time.monotonic()
        agent = c.agent(NODE, scenario, ext, extra=("--interval", "30", "--control-dir", str(control)))
        wait_until("the first report", lambda: _idle(ext) == 8)
        wait_until("the XID's report", lambda: _idle(ext) == 7, timeout=25)
        arrived = time.monotonic() - started
        # The next scheduled sample is 30 s after the first; the XID fires XID_AT_S after start.
        assert arrived < 30, arrived
        print(f"XID 79 scripted at ~{XID_AT_S:.0f} s after the agent started; extender had it at {arrived:.2f} s")
        samples = scrape(url(agent, "/metrics"))
        gpu2 = {"gpu": "2", "UUID": _uuid(samples, "2")}
        assert _dcgm(samples, "DCGM_FI_DEV_XID_ERRORS", **gpu2) == 79
        assert (
            metric(samples, "gpu_agent_gpu_healthy", node=NODE, gpu="2", uuid=gpu2["UUID"], model=H100["product"]) == 0
        )
        assert "GPU 2: NVML event xid 79" in agent.log()

        # The operator clears it (kubectl exec POD -- gpu-agent --clear-xid 2).
        cleared = subprocess.run(
            [sys.executable, "-m", "gpuextender.agent", "--clear-xid", "2", "--control-dir", str(control)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert cleared.returncode == 0, cleared.stdout + cleared.stderr
        assert "GPU 2" in cleared.stdout + cleared.stderr
        wait_until("the cleared GPU back in the extender", lambda: _idle(ext) == 8, timeout=25)
        assert time.monotonic() - started < 60  # on the clear, not at a later sample


def _uuid(samples: dict, gpu: str) -> str:
    for (name, labels), _ in samples.items():
        labels = dict(labels)
        if name == "DCGM_FI_DEV_GPU_UTIL" and labels.get("gpu") == gpu:
            return str(labels["UUID"])
    raise AssertionError(f"no DCGM_FI_DEV_GPU_UTIL for GPU {gpu}")


def _dcgm(samples: dict, name: str, **wanted: str) -> float | None:
    """The value of the one series of `name` whose labels include `wanted`."""
    found = [
        v
        for (n, labels), v in samples.items()
        if n == name and all(dict(labels).get(k) == x for k, x in wanted.items())
    ]
    assert len(found) <= 1, found
    return found[0] if found else None


def _series(samples: dict, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (n, labels), _ in samples.items() if n == name]


def _fake_kubelet(c: Cluster, socket: Path, scenario: Path) -> Proc:
    proc = c.spawn(
        "fake-kubelet",
        "gpuextender.agent.fakes.kubelet",
        ["--socket", str(socket), "--scenario", str(scenario), "--node", NODE],
    )
    wait_until("the fake kubelet's socket", socket.exists)
    return proc


def test_allocation_from_the_kubelet_labels_metrics_and_survives_the_kubelet_going_away(
    tmp_path: Path, short_dir: Path
) -> None:
    scenario = tmp_path / "node.yaml"
    scenario.write_text(yaml.safe_dump({"gpus": [{**H100, "count": 4}]}))
    kubelet_file = tmp_path / "kubelet.yaml"
    kubelet_file.write_text(
        yaml.safe_dump(
            {
                "allocatable": {"nvidia.com/gpu": [{"gpus": 4}]},
                "pods": [
                    {
                        "namespace": "llm",
                        "name": "vllm-0",
                        "containers": [{"name": "engine", "devices": {"nvidia.com/gpu": [{"gpu": 1}]}}],
                    }
                ],
            }
        )
    )
    socket = short_dir / "kubelet.sock"
    with cluster(tmp_path) as c:
        kubelet = _fake_kubelet(c, socket, kubelet_file)
        ext = c.extender()
        agent = c.agent(
            NODE,
            scenario,
            ext,
            extra=("--interval", "0.2", "--pod-resources-socket", str(socket), "--idle-window", "1"),
        )
        wait_until(
            "GPU 1 held by llm/vllm-0 in the agent's dcgm series",
            lambda: any(
                s.get("gpu") == "1"
                and (s.get("namespace"), s.get("pod"), s.get("container")) == ("llm", "vllm-0", "engine")
                for s in _series(scrape(url(agent, "/metrics")), "DCGM_FI_DEV_GPU_UTIL")
            ),
        )
        samples = scrape(url(agent, "/metrics"))
        unheld = [s for s in _series(samples, "DCGM_FI_DEV_GPU_UTIL") if s["gpu"] != "1"]
        assert len(unheld) == 3 and all(s["pod"] == s["namespace"] == s["container"] == "" for s in unheld)
        # Held and idle (0 % utilization) for more than the 1 s window: the waste gauge names the pod.
        wait_until(
            "llm/vllm-0 holding an idle GPU",
            lambda: (
                metric(
                    scrape(url(agent, "/metrics")), "gpu_agent_pod_idle_gpus", node=NODE, namespace="llm", pod="vllm-0"
                )
                == 1
            ),
        )

        kubelet.stop()  # the kubelet restarts, or the socket is gone
        socket.unlink(missing_ok=True)
        wait_until(
            "allocation unknown, said once",
            lambda: "socket_missing" in agent.log() or "kubelet_unavailable" in agent.log(),
        )
        before = metric(scrape(url(agent, "/metrics")), "gpu_agent_last_sample_timestamp_seconds")
        wait_until(
            "sampling goes on",
            lambda: (
                (metric(scrape(url(agent, "/metrics")), "gpu_agent_last_sample_timestamp_seconds") or 0) > (before or 0)
            ),
        )
        assert agent.alive() and _idle(ext) == 4
        log = agent.log()
        assert log.count("socket_missing") + log.count("kubelet_unavailable") <= 2, log  # once, not per sample
