"""/readyz under --readiness-grace: a new replica is not ready until the agents of every
GPU node in its inventory have reached it (or the grace has passed)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import FIXTURES, cluster, http, url, wait_until

IDLE = FIXTURES / "scenarios" / "idle8.yaml"


def write_nodes(directory: Path) -> None:
    nodes = [("gpu-node-1", "8"), ("gpu-node-2", "8"), ("cpu-node", "0")]
    docs = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}, "status": {"allocatable": {"nvidia.com/gpu": g}}}
        for n, g in nodes
    ]
    (directory / "nodes.yaml").write_text("\n---\n".join(json.dumps(d) for d in docs))


def readyz(ext) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    status, body = http("GET", url(ext, "/readyz"))
    return status, body.decode()


def test_ready_once_every_gpu_node_has_reported(tmp_path: Path) -> None:
    write_nodes(tmp_path)
    with cluster(tmp_path) as c:
        ext = c.extender("--inventory", str(tmp_path), "--readiness-grace", "600", wait_ready=False)
        wait_until(
            "the inventory in, no agent yet",
            lambda: "waiting for agent data: 2 of 2 GPU node(s) not reported yet" in readyz(ext)[1],
        )
        assert readyz(ext)[0] == 503
        c.agent("gpu-node-1", IDLE, ext)
        wait_until("one node in", lambda: "1 of 2 GPU node(s) not reported yet" in readyz(ext)[1])
        assert readyz(ext)[0] == 503  # the CPU node needs no agent; gpu-node-2 does
        c.agent("gpu-node-2", IDLE, ext)
        wait_until("ready", lambda: readyz(ext)[0] == 200)
        assert "ready: 2 of 2 GPU node(s) have reported (all in)" in ext.log()


def test_ready_when_the_grace_has_passed_without_every_agent(tmp_path: Path) -> None:
    write_nodes(tmp_path)
    with cluster(tmp_path) as c:
        ext = c.extender("--inventory", str(tmp_path), "--readiness-grace", "1", wait_ready=False)
        wait_until("ready after the grace", lambda: readyz(ext)[0] == 200)
        assert "ready: 0 of 2 GPU node(s) have reported (--readiness-grace 1s passed)" in ext.log()
