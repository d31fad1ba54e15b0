"""Dead and missing agents, with real processes: a node whose verdict rests on assumed data never
attracts a pod while a node with fresh data fits, and what was last known to be broken stays broken."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import yaml

from tests.harness import FIXTURES, Cluster, cluster, metric, post_json, request_for, scrape, url, wait_until

SCENARIOS = FIXTURES / "scenarios"
REPORTING = [f"fresh-{i}" for i in range(5)]  # 8 idle GPUs each, agents running
SILENT = [f"silent-{i}" for i in range(4)]  # 8 allocatable GPUs, no agent ever
LOST = "lost-node"  # 4 GPUs, GPU 1 falls off the bus; its agent is killed later


def _inventory(directory: Path) -> Path:
    def node(name: str, gpus: int) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
        }

    items = [node(n, 8) for n in REPORTING + SILENT] + [node(LOST, 4)]
    (directory / "nodes.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return directory


def _nodes(c: Cluster, names: list[str], gpus: int) -> dict[str, dict]:
    status, answer = post_json(url(c.procs[0], "/explain"), request_for(names, gpus))
    assert status == 200, answer
    return {n["node"]: n for n in answer["nodes"]}


def test_silent_and_stale_nodes_never_take_a_pod_a_reporting_node_can_take(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        # (5 s: with both cores busy an agent's report can come over 2 s apart, and a reporting node must stay fresh.)
        ext = c.extender("--inventory", str(_inventory(tmp_path)), "--stale-after", "5", "--prioritize-answer", "full")
        for name in REPORTING:
            c.agent(name, SCENARIOS / "idle8.yaml", ext)
        lost_agent = c.agent(LOST, SCENARIOS / "lost.yaml", ext)
        wait_until(
            "every agent reported, GPU 1 of the lost node lost",
            lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=LOST) == 3,
        )
        samples = scrape(url(ext, "/metrics"))
        assert metric(samples, "gpu_extender_gpu_nodes_without_agent_data") == len(SILENT)
        wait_until(
            "the silent nodes named in a warning",
            lambda: (
                "4 GPU node(s) in the inventory have no data from "
                "their agent (silent-0, silent-1, silent-2, silent-3)" in ext.log()
            ),
            timeout=20,
        )

        # A burst of one-GPU pods, decided as kube-scheduler would: filter, then the best prioritize score.
        names = SILENT[:2] + REPORTING + SILENT[2:] + [LOST]
        for _ in range(20):
            body = request_for(names, 1)
            status, filtered = post_json(url(ext, "/filter"), body)
            assert status == 200
            assert sorted(filtered["NodeNames"]) == sorted([*REPORTING, LOST])
            assert {filtered["FailedNodes"][n] for n in SILENT} == {
                "gpu-extender: no fresh GPU data while reporting nodes fit (NoFreshGPUData)"
            }
            args = json.loads(body)
            args["NodeNames"] = filtered["NodeNames"]
            status, scores = post_json(url(ext, "/prioritize"), json.dumps(args).encode())
            best = max(scores, key=lambda s: s["Score"])["Host"]
            assert best in REPORTING
        silent = _nodes(c, names, 1)["silent-0"]
        assert (silent["assumedData"], silent["idleGpus"], silent["reasonCode"]) == (True, 1, "NoFreshGPUData")

        # The lost node's agent dies: once stale, its lost GPU still counts as lost (fail-open assumes the rest).
        lost_agent.stop(signal.SIGKILL)
        wait_until("the lost node's data is stale", lambda: _nodes(c, [LOST], 4)[LOST]["data"] == "stale")
        stale = _nodes(c, [LOST], 4)[LOST]
        assert (stale["result"], stale["reasonCode"], stale["healthyGpus"]) == ("fail", "InsufficientHealthyGPUs", 3)
        status, filtered = post_json(url(ext, "/filter"), request_for([LOST], 4))
        assert filtered["NodeNames"] == [] and LOST in filtered["FailedAndUnresolvableNodes"]
        # Three GPUs it may still have: it passes, on assumed data, only because no reporting node is a candidate.
        status, filtered = post_json(url(ext, "/filter"), request_for([LOST], 3))
        assert filtered["NodeNames"] == [LOST]
        # filter answers, then records: the scrape is answered after its metrics and log line.
        assert metric(scrape(url(ext, "/metrics")), "gpu_extender_filter_assumed_passes_total") >= 1
        assert "on assumed data: no node with fresh GPU data fits; lost-node" in ext.log()
