"""Reports on change, heartbeats otherwise (issue 13), through the real processes: a real agent on
fake NVML streaming to a real extender, whose acks tell the agent its idle rule and TTL.

- A quiet node sends a heartbeat, not every sample, and never goes stale while its agent lives;
  its heartbeats are light (contract 0.6: the readings only) and every one is taken.
- A decision-relevant change (a GPU turning busy) reaches the extender at once, long before the
  next heartbeat is due; the measured delay is printed.
- A restarted extender has the node again as soon as the agent reconnects, not a heartbeat later."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from tests.harness import Proc, Samples, cluster, metric, scrape, url, wait_until

NODE = "gpu-node-1"
H100 = {"product": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "compute_capability": "9.0", "memory_used_percent": 1}


def write(path: Path, busy: int) -> Path:
    groups = [{**H100, "count": 8 - busy, "utilization_percent": 2}]
    if busy:
        groups.append({**H100, "count": busy, "utilization_percent": 95})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"gpus": groups}))
    tmp.replace(path)  # the agent follows the file: atomically, as a real edit would be
    return path


def idle(ext: Proc) -> float | None:
    return metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=NODE)


def sent(agent: Proc, name: str = "gpu_agent_reports_sent_total") -> float:
    return sent_of(scrape(url(agent, "/metrics")), name)


def sent_of(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def reports_and_light(agent: Proc) -> tuple[float, float]:
    """Reports sent and light heartbeats among them, from one scrape (the agent sends meanwhile)."""
    samples = scrape(url(agent, "/metrics"))
    return sent_of(samples, "gpu_agent_reports_sent_total"), sent_of(samples, "gpu_agent_light_heartbeats_sent_total")


def test_a_quiet_node_sends_heartbeats_and_stays_fresh(tmp_path: Path) -> None:
    scenario = write(tmp_path / "node.yaml", busy=0)
    with cluster(tmp_path) as c:
        # --stale-after 3: the agent's heartbeat becomes 1 s (a third of it), not its own 2 s.
        ext = c.extender("--stale-after", "3")
        agent = c.agent(NODE, scenario, ext, extra=("--interval", "0.2", "--heartbeat", "2"))
        wait_until("the node in the extender", lambda: idle(ext) == 8)
        time.sleep(1.0)  # past the first acks: the agent knows the rule
        (before, light_before), started = reports_and_light(agent), time.monotonic()
        oldest = 0.0
        while time.monotonic() - started < 4.0:  # 20 samples
            age = metric(scrape(url(ext, "/metrics")), "gpu_extender_node_data_age_seconds", node=NODE)
            oldest = max(oldest, age or 0.0)
            time.sleep(0.1)
        after, light_after = reports_and_light(agent)
        reports = after - before
        skipped = metric(scrape(url(agent, "/metrics")), "gpu_agent_samples_not_streamed_total")
        print(f"4 s of a quiet node at 0.2 s samples: {reports:.0f} reports sent, oldest data {oldest:.2f} s")
        assert 3 <= reports <= 6  # one a second, not five
        assert skipped is not None and skipped >= 10
        assert oldest < 3  # never stale
        # Contract 0.6: the extender's workers hold the full report, so the heartbeats went light,
        # and every one was taken (a refused one would have been followed by a full report).
        assert light_after - light_before == reports
        refused = metric(scrape(url(ext, "/metrics")), "gpu_extender_reports_rejected_total", reason="heartbeat")
        assert refused in (None, 0.0)


def test_a_change_reaches_the_extender_at_once_and_a_restarted_extender_at_reconnect(tmp_path: Path) -> None:
    scenario = write(tmp_path / "node.yaml", busy=0)
    with cluster(tmp_path) as c:
        ext = c.extender("--stale-after", "120")  # heartbeat: the flag's 30 s (120 / 3 = 40)
        agent = c.agent(
            NODE, scenario, ext, extra=("--interval", "0.2", "--heartbeat", "30", "--reconnect-max-backoff", "0.5")
        )
        wait_until("the node in the extender", lambda: idle(ext) == 8)
        time.sleep(1.0)
        quiet = sent(agent)
        write(scenario, busy=3)
        changed = time.monotonic()
        wait_until("three GPUs busy in the extender", lambda: idle(ext) == 5, timeout=10)
        delay = time.monotonic() - changed
        print(f"a GPU turning busy reached the extender {delay:.2f} s after the edit (heartbeat 30 s)")
        assert delay < 10  # the heartbeat is 30 s away: this came with the change
        assert sent(agent) - quiet <= 3  # the change, not a stream of samples

        grpc_port = ext.ports["grpc"]
        ext.stop()
        restarted = c.extender("--stale-after", "120", grpc_port=grpc_port)
        back = time.monotonic()
        wait_until("the node in the restarted extender", lambda: idle(restarted) == 5, timeout=15)
        print(f"restarted extender whole {time.monotonic() - back:.2f} s after it was ready (heartbeat 30 s)")
        assert time.monotonic() - back < 10
