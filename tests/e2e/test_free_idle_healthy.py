"""Free ∧ idle ∧ healthy through the real processes (issue 12): real agents on fake NVML, each
with a fake kubelet serving PodResources on a unix socket, streaming to a real extender that
answers filter, prioritize and explain over HTTP.

- `half`: 8 quiet GPUs, 6 of them held by pods that do nothing: 2 free, 6 allocated-but-idle;
- `empty`: 8 quiet GPUs, none held;
- `sliced`: 8 quiet GPUs shared by time-slicing, 4 replicas each (the kubelet lists
  GPU-<uuid>::0..3): 32 replicas, 5 held;
- `no-kubelet`: 8 quiet GPUs, 6 "held", but its agent cannot read the kubelet: allocation is
  unknown, the idle readings alone decide (and explain says so)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import Cluster, Proc, cluster, metric, post_json, request_for, scrape, url, wait_until

H100 = {
    "product": "NVIDIA H100 80GB HBM3",
    "memory_gib": 80,
    "compute_capability": "9.0",
    "utilization_percent": 0,
    "memory_used_percent": 1,
}
NODES = ("half", "empty", "sliced", "no-kubelet")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths are limited to ~107 bytes: pytest's tmp_path can be longer."""
    with tempfile.TemporaryDirectory(prefix="fih-") as folder:
        yield Path(folder)


def _pods(gpu_refs: list[dict[str, int]], namespace: str) -> list[dict[str, Any]]:
    return [
        {
            "namespace": namespace,
            "name": f"idle-{i}",
            "containers": [{"name": "engine", "devices": {"nvidia.com/gpu": [ref]}}],
        }
        for i, ref in enumerate(gpu_refs)
    ]


KUBELETS: dict[str, dict[str, Any]] = {
    "half": {"allocatable": {"nvidia.com/gpu": [{"gpus": 8}]}, "pods": _pods([{"gpu": g} for g in range(6)], "team-a")},
    "empty": {"allocatable": {"nvidia.com/gpu": [{"gpus": 8}]}, "pods": []},
    "sliced": {
        "allocatable": {"nvidia.com/gpu": [{"gpus": 8, "replicas": 4}]},
        "pods": _pods([{"gpu": 0, "replica": r} for r in range(4)] + [{"gpu": 1, "replica": 0}], "team-b"),
    },
}


def _start(c: Cluster, tmp_path: Path, sockets: Path, ext: Proc) -> dict[str, Proc]:
    scenario = tmp_path / "node.yaml"
    scenario.write_text(yaml.safe_dump({"gpus": [{**H100, "count": 8}]}))
    agents = {}
    for node in NODES:
        socket = sockets / f"{node}.sock"
        if node in KUBELETS:
            spec = tmp_path / f"kubelet-{node}.yaml"
            spec.write_text(yaml.safe_dump(KUBELETS[node]))
            c.spawn(
                f"kubelet-{node}",
                "gpuextender.agent.fakes.kubelet",
                ["--socket", str(socket), "--scenario", str(spec), "--node", node],
            )
            wait_until(f"{node}'s fake kubelet", socket.exists)
        agents[node] = c.agent(node, scenario, ext, extra=("--interval", "0.5", "--pod-resources-socket", str(socket)))
    return agents


def _call(ext: Proc, verb: str, gpus: int) -> Any:
    status, answer = post_json(url(ext, f"/{verb}"), request_for(list(NODES), gpus=gpus))
    assert status == 200, answer
    return answer


def test_free_idle_healthy_with_real_agents_and_kubelets(tmp_path: Path, short_dir: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender("--stale-after", "60")
        _start(c, tmp_path, short_dir, ext)

        def idle() -> dict[str, float | None]:
            samples = scrape(url(ext, "/metrics"))
            return {n: metric(samples, "gpu_extender_node_idle_gpus", node=n) for n in NODES}

        wait_until(
            "every node's allocation in the extender",
            lambda: idle() == {"half": 2, "empty": 8, "sliced": 27, "no-kubelet": 8},
            timeout=30,
        )

        # 3 GPUs: `half` has 2 free (its 6 others are held, however quiet).
        answer = _call(ext, "filter", 3)
        assert sorted(answer["NodeNames"]) == ["empty", "no-kubelet", "sliced"]
        assert answer["FailedNodes"] == {"half": "gpu-extender: too few free GPUs (InsufficientFreeGPUs)"}
        # 12 replicas on the time-sliced node (27 free, 32 advertised): it fits; whole-GPU nodes do not.
        twelve = _call(ext, "filter", 12)
        assert twelve["NodeNames"] == ["sliced"], twelve

        # 1 GPU: spread ranks the node with more free idle GPUs first; `half` last. The wire answer
        # is compacted (the lowest score subtracted, zeros left out): explain has the scores themselves.
        scores = {row["Host"]: row["Score"] for row in _call(ext, "prioritize", 1)}
        assert scores["sliced"] > scores["empty"] > scores.get("half", 0) == 0
        status, one = post_json(url(ext, "/explain"), request_for(list(NODES), gpus=1))
        assert {r["node"]: r["score"] for r in one["nodes"]}["half"] > 0  # it fits, ranked last

        status, why = post_json(url(ext, "/explain"), request_for(list(NODES), gpus=3))
        assert status == 200
        rows = why["nodes"]
        assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
        by_node = {r["node"]: r for r in rows}
        assert rows[-1]["node"] == "half" and by_node["half"]["score"] == 0
        assert (by_node["half"]["allocation"], by_node["half"]["freeGpus"], by_node["half"]["allocatedIdleGpus"]) == (
            "kubelet",
            2,
            6,
        )
        assert by_node["half"]["allocatedIdleByNamespace"] == {"team-a": 6}
        assert by_node["sliced"]["allocatedIdleByNamespace"] == {"team-b": 2}
        assert by_node["no-kubelet"]["allocation"].endswith("idle readings alone decide")
        assert by_node["no-kubelet"]["allocatedIdleByNamespace"] is None  # unknown, not zero
        assert by_node["no-kubelet"]["freeGpus"] is None
        print(json.dumps({n: (r["score"], r["allocation"]) for n, r in by_node.items()}))

        # The waste, per node and per namespace, in the extender's metrics.
        samples = scrape(url(ext, "/metrics"))
        assert metric(samples, "gpu_extender_node_allocated_idle_gpus", node="half") == 6
        assert metric(samples, "gpu_extender_node_allocated_idle_gpus", node="sliced") == 2
        assert metric(samples, "gpu_extender_namespace_allocated_idle_gpus", namespace="team-a") == 6
        assert metric(samples, "gpu_extender_namespace_allocated_idle_gpus", namespace="team-b") == 2
        assert metric(samples, "gpu_extender_node_allocated_idle_gpus", node="no-kubelet") is None  # unknown


def _islands() -> dict[str, Any]:
    """Two NVLink islands of 4 GPUs (0-3, 4-7), one per NUMA node, as the fake NVML scripts it."""
    nvlinks = [
        {"gpus": [a, b], "links": 4}
        for island in ((0, 1, 2, 3), (4, 5, 6, 7))
        for i, a in enumerate(island)
        for b in island[i + 1 :]
    ]
    return {
        "pcie": "system",
        "nvlinks": nvlinks,
        "pcie_groups": [{"gpus": [0, 1, 2, 3], "relation": "node"}, {"gpus": [4, 5, 6, 7], "relation": "node"}],
    }


def test_a_multi_gpu_pod_goes_where_its_gpus_share_nvlink(tmp_path: Path, short_dir: Path) -> None:
    """`linked`: GPUs 4-7 held, one island free (4 NVLinked GPUs). `scattered`: 5 free GPUs, at
    most 3 on one island. For 4 GPUs `linked` wins although `scattered` has more idle GPUs."""
    scenario = tmp_path / "islands.yaml"
    scenario.write_text(yaml.safe_dump({"gpus": [{**H100, "count": 8}], "topology": _islands()}))
    held = {"linked": [4, 5, 6, 7], "scattered": [2, 3, 7]}
    with cluster(tmp_path) as c:
        ext = c.extender("--stale-after", "60")
        for node, gpus in held.items():
            socket, spec = short_dir / f"{node}.sock", tmp_path / f"kubelet-{node}.yaml"
            spec.write_text(
                yaml.safe_dump(
                    {
                        "allocatable": {"nvidia.com/gpu": [{"gpus": 8}]},
                        "pods": _pods([{"gpu": g} for g in gpus], "train"),
                    }
                )
            )
            c.spawn(
                f"kubelet-{node}",
                "gpuextender.agent.fakes.kubelet",
                ["--socket", str(socket), "--scenario", str(spec), "--node", node],
            )
            wait_until(f"{node}'s fake kubelet", socket.exists)
            c.agent(node, scenario, ext, extra=("--interval", "0.5", "--pod-resources-socket", str(socket)))
        wait_until(
            "both nodes' allocation",
            lambda: (
                {n: metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=n) for n in held}
                == {"linked": 4, "scattered": 5}
            ),
            timeout=30,
        )

        status, four = post_json(url(ext, "/explain"), request_for(list(held), gpus=4))
        assert status == 200
        rows = {r["node"]: r for r in four["nodes"]}
        assert (rows["linked"]["gpuSet"], rows["scattered"]["gpuSet"]) == ("nvlink", "apart-or-unknown")
        assert rows["linked"]["score"] > rows["scattered"]["score"] > 0
        assert [r["node"] for r in four["nodes"]] == ["linked", "scattered"]
        # One GPU: topology does not matter, more idle GPUs first.
        status, one = post_json(url(ext, "/explain"), request_for(list(held), gpus=1))
        assert [r["node"] for r in one["nodes"]] == ["scattered", "linked"] and one["nodes"][0]["gpuSet"] is None


def test_mig_devices_are_matched_per_profile(tmp_path: Path, short_dir: Path) -> None:
    """`mig`: one GPU in MIG mode with three 1g.10gb devices, one held by a pod (fake kubelet) and
    one busy (60 % of its memory): one free. A pod asking for nvidia.com/mig-1g.10gb: 1 fits it,
    2 does not; a whole-GPU pod fails there as MigPartitioned."""
    scenario = tmp_path / "mig.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "gpus": [
                    {
                        **H100,
                        "count": 1,
                        "mig": [
                            {"profile": "1g.10gb", "count": 2, "memory_used_percent": 1},
                            {"profile": "1g.10gb", "count": 1, "memory_used_percent": 60},
                        ],
                    }
                ]
            }
        )
    )
    spec = tmp_path / "kubelet-mig.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "allocatable": {
                    "nvidia.com/mig-1g.10gb": [{"gpu": 0, "mig": m, "profile": "1g.10gb"} for m in range(3)]
                },
                "pods": [
                    {
                        "namespace": "llm",
                        "name": "small-0",
                        "containers": [
                            {
                                "name": "c",
                                "devices": {"nvidia.com/mig-1g.10gb": [{"gpu": 0, "mig": 0, "profile": "1g.10gb"}]},
                            }
                        ],
                    }
                ],
            }
        )
    )
    socket = short_dir / "mig.sock"
    with cluster(tmp_path) as c:
        # --no-fit-policy reject: the lone node's soft failure is not passed through by the fallback.
        ext = c.extender(
            "--stale-after",
            "60",
            "--no-fit-policy",
            "reject",
            "--gpu-resource",
            "nvidia.com/gpu",
            "--gpu-resource",
            "nvidia.com/mig-1g.10gb",
        )
        c.spawn(
            "kubelet-mig",
            "gpuextender.agent.fakes.kubelet",
            ["--socket", str(socket), "--scenario", str(spec), "--node", "mig"],
        )
        wait_until("the fake kubelet", socket.exists)
        c.agent("mig", scenario, ext, extra=("--interval", "0.5", "--pod-resources-socket", str(socket)))

        def ask(requests: dict[str, str]) -> Any:
            body = json.loads(request_for(["mig"]))
            for container in body["Pod"]["spec"]["containers"]:
                container["resources"] = {"requests": requests, "limits": requests}
            status, answer = post_json(url(ext, "/explain"), json.dumps(body).encode())
            assert status == 200, answer
            return answer["nodes"][0]

        row = wait_until(
            "the MIG devices in the extender",
            lambda: (r := ask({"nvidia.com/mig-1g.10gb": "1"}))["migDevicesFree"] == {"1g.10gb": 1} and r,
        )
        assert row["migDevices"] == {"1g.10gb": 3} and row["result"] == "pass"
        two = ask({"nvidia.com/mig-1g.10gb": "2"})
        assert (two["result"], two["reasonCode"]) == ("fail", "InsufficientFreeMigDevices")
        whole = ask({"nvidia.com/gpu": "1"})
        assert (whole["result"], whole["reasonCode"]) == ("fail", "MigPartitioned")
