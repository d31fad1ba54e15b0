"""AcceleratorClass and serving-runtime rules end to end: the real extender on a file
inventory of OME objects (examples/ome/), fed scheduler requests for OME pods."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.harness import FIXTURES, ROOT, cluster, fixture_bytes, metric, post_json, scrape, url, wait_until

PRODUCTS = {
    "h100-node": "NVIDIA-H100-80GB-HBM3",
    "a100-80-node": "NVIDIA-A100-SXM4-80GB",
    "a100-40-node": "NVIDIA-A100-SXM4-40GB",
    "l40s-node": "NVIDIA-L40S",
}
NODES = list(PRODUCTS)


def write_inventory(directory: Path) -> None:
    for source in (ROOT / "examples" / "ome").glob("*.yaml"):
        shutil.copy(source, directory / source.name)
    docs = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
        for name, product in PRODUCTS.items()
    ]
    (directory / "nodes.yaml").write_text("\n---\n".join(json.dumps(d) for d in docs))


def ome_request(isvc: str, runtime: str, nodes: list[str], gpus: int = 1, component: str = "engine") -> bytes:
    args = json.loads(fixture_bytes("filter-request-nodecache-true.json"))
    pod = args["Pod"]
    pod["metadata"]["namespace"] = "llm"
    pod["metadata"]["labels"] = {"ome.io/inferenceservice": isvc, "component": component, "serving-runtime": runtime}
    for container in pod["spec"]["containers"]:
        for key in ("requests", "limits"):
            container["resources"][key]["nvidia.com/gpu"] = str(gpus)
    args["NodeNames"] = nodes
    return json.dumps(args).encode()


def scores(ext, body: bytes) -> dict[str, int]:
    status, answer = post_json(url(ext, "/prioritize"), body)
    assert status == 200
    return {e["Host"]: e["Score"] for e in answer}


def test_classes_runtimes_and_policies_decide_placement(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    write_inventory(inventory)
    with cluster(tmp_path) as c:
        ext = c.extender("--inventory", str(inventory), "--prioritize-answer", "full")
        samples = scrape(url(ext, "/metrics"))
        assert metric(samples, "gpu_extender_inventory_objects", kind="AcceleratorClass") == 4
        assert metric(samples, "gpu_extender_inventory_objects", kind="InferenceService") == 9

        # An explicit class: only that class's node passes; the others cannot be fixed by preemption.
        _, pinned = post_json(url(ext, "/filter"), ome_request("llama-8b-pinned-a100", "vllm-llama-small", NODES))
        assert pinned["NodeNames"] == ["a100-40-node"]
        assert set(pinned["FailedAndUnresolvableNodes"]) == {"h100-node", "a100-80-node", "l40s-node"}
        assert all(m.endswith("(AcceleratorClassNotAllowed)") for m in pinned["FailedAndUnresolvableNodes"].values())
        scrape(url(ext, "/metrics"))  # answered after the filter's record step: its log line is written
        assert "h100-node: AcceleratorClassNotAllowed (idle 1, healthy 8/8, data none, assumed)" in ext.log()

        # A class the runtime does not support: every node fails, with that reason.
        _, impossible = post_json(url(ext, "/filter"), ome_request("deepseek-on-l40s", "sglang-deepseek-fp8", NODES, 8))
        assert impossible["NodeNames"] == [] and len(impossible["FailedAndUnresolvableNodes"]) == 4
        assert all(
            m.endswith("(AcceleratorClassIncompatible)") for m in impossible["FailedAndUnresolvableNodes"].values()
        )
        scrape(url(ext, "/metrics"))  # as above: the filter's log line is written before this answer
        assert "not supported by runtime sglang-deepseek-fp8" in ext.log()

        # The runtime's list is the allow-list; Cheapest ranks by hourly cost, spot where given:
        # L40S 1.10 < A100-40GB 2.21 < H100 2.40 (spot) < A100-80GB 3.67.
        cheap = ome_request("llama-8b-cheapest", "vllm-llama-small", NODES)
        _, allowed = post_json(url(ext, "/filter"), cheap)
        assert sorted(allowed["NodeNames"]) == sorted(NODES)
        ranked = scores(ext, cheap)
        assert ranked["l40s-node"] > ranked["a100-40-node"] > ranked["h100-node"] > ranked["a100-80-node"] > 0

        # A runtime that cannot serve the model (70B on a 1B-13B runtime): warn (the default)
        # logs and counts it, enforce fails every node.
        mismatch = ome_request("llama-70b-on-small-runtime", "vllm-llama-small", NODES)
        counted = metric(scrape(url(ext, "/metrics")), "gpu_extender_runtime_incompatible_total", mode="warn") or 0
        assert counted == 1  # deepseek-on-l40s above: OME's ValidateRuntime also rejects the L40S request
        _, warned = post_json(url(ext, "/filter"), mismatch)
        assert sorted(warned["NodeNames"]) == sorted(NODES)
        # The scrape is answered after the filter's record step: its log line is written by then.
        assert metric(scrape(url(ext, "/metrics")), "gpu_extender_runtime_incompatible_total", mode="warn") == 2
        assert "runtime cannot serve the model (--runtime-check warn, not enforced)" in ext.log()
        strict = c.extender("--inventory", str(inventory), "--runtime-check", "enforce")
        _, enforced = post_json(url(strict, "/filter"), mismatch)
        assert enforced["NodeNames"] == [] and len(enforced["FailedAndUnresolvableNodes"]) == 4
        assert all(m.endswith("(RuntimeIncompatible)") for m in enforced["FailedAndUnresolvableNodes"].values())
        strict.stop()

        # The router is CPU-only and neutral; a non-OME pod gets only the GPU rules.
        _, router = post_json(
            url(ext, "/filter"), ome_request("llama-8b-pinned-a100", "vllm-llama-small", NODES, component="router")
        )
        assert sorted(router["NodeNames"]) == sorted(NODES)

        # FirstAvailable follows the runtime's order (H100 first) while H100 nodes are free ...
        first = ome_request("llama-70b-first-available", "vllm-llama-large", NODES, gpus=2)
        _, large = post_json(url(ext, "/filter"), first)
        assert sorted(large["NodeNames"]) == ["a100-80-node", "h100-node"]
        before = scores(ext, first)
        assert before["h100-node"] > before["a100-80-node"] > 0 and before["l40s-node"] == 0
        # ... and skips the class once its only node is busy (OME issue #622).
        c.agent("h100-node", FIXTURES / "scenarios" / "busy8.yaml", ext)
        wait_until(
            "h100 data",
            lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node="h100-node") == 1,
        )
        after = scores(ext, first)
        assert after["a100-80-node"] > after["h100-node"] == 0

        # /explain says the same, with the reasons and where each choice came from.
        status, why = post_json(url(ext, "/explain"), first)
        assert status == 200 and why["gpusNeeded"] == 2
        assert why["resolved"]["policy"] == "FirstAvailable (from InferenceService acceleratorSelector)"
        assert why["resolved"]["runtime"] == "ClusterServingRuntime vllm-llama-large"
        assert why["classRanking"]["omeWouldChoose"] == "nvidia-h100-80gb"  # OME ignores availability (#622)
        assert [r["class"] for r in why["classRanking"]["ranked"]] == ["nvidia-a100-80gb"]
        assert why["classRanking"]["excluded"] == [
            {
                "class": "nvidia-h100-80gb",
                "stage": "Unavailable",
                "reason": "no node of this class can take the pod now",
            }
        ]
        nodes = {n["node"]: n for n in why["nodes"]}
        h100 = nodes["h100-node"]
        assert (h100["result"], h100["reasonCode"], h100["data"], h100["idleGpus"]) == (
            "fail",
            "InsufficientIdleGPUs",
            "fresh",
            1,
        )
        assert nodes["l40s-node"]["reasonCode"] == "AcceleratorClassNotAllowed" and nodes["l40s-node"]["unresolvable"]
        assert nodes["a100-80-node"]["score"] == after["a100-80-node"] and nodes["a100-80-node"]["classRank"] == 0
        request_file = tmp_path / "request.json"
        request_file.write_bytes(first)
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuextender.extender",
                "explain",
                str(request_file),
                "--url",
                f"http://127.0.0.1:{ext.ports['http']}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert cli.returncode == 0, cli.stderr
        assert "excluded nvidia-h100-80gb: Unavailable: no node of this class can take the pod now" in cli.stdout
        assert "OME alone would choose: nvidia-h100-80gb" in cli.stdout
        assert any(
            line.startswith("h100-node") and "FAIL InsufficientIdleGPUs" in line for line in cli.stdout.splitlines()
        )

        # Editing an AcceleratorClass changes the next decision, without a restart.
        classes = inventory / "accelerator-classes.yaml"
        text = classes.read_text().replace(
            "nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.product: NVIDIA L40S"
        )  # raw NVML name style
        classes.write_text(text)
        os.utime(classes, (classes.stat().st_mtime + 5, classes.stat().st_mtime + 5))

        def pinned_now() -> list[str]:
            return post_json(url(ext, "/filter"), ome_request("llama-8b-pinned-a100", "vllm-llama-small", NODES))[1][
                "NodeNames"
            ]

        wait_until("the class to follow the edited nodeSelector", lambda: pinned_now() == ["l40s-node"])

        # A broken AcceleratorClass is skipped with a log line and a metric; the rest keep working.
        classes.write_text(text.replace("memoryGB: 48Gi", 'memoryGB: "eighty"'))
        os.utime(classes, (classes.stat().st_mtime + 10, classes.stat().st_mtime + 10))
        wait_until(
            "invalid class counted",
            lambda: (
                metric(
                    scrape(url(ext, "/metrics")),
                    "gpu_extender_inventory_invalid_objects_total",
                    kind="AcceleratorClass",
                )
                == 1
            ),
        )
        assert "AcceleratorClass nvidia-l40s skipped" in ext.log() and "eighty" in ext.log()
        assert ext.alive()
        _, still = post_json(url(ext, "/filter"), ome_request("llama-8b-pinned-a100", "vllm-llama-small", NODES))
        assert still["NodeNames"] == ["l40s-node"]  # nvidia-a100-40gb itself is still valid


def test_a_node_whose_gpus_contradict_its_class_labels_leaves_the_class(tmp_path: Path) -> None:
    """The node is labelled A100-80GB, but its agent reports 40 GB A100s: once the report
    arrives, the node is out of the 80 GB class, with a log line, a gauge and /explain."""
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    write_inventory(inventory)
    scenario = tmp_path / "a100-40.yaml"
    scenario.write_text(
        "gpus:\n  - count: 8\n    product: NVIDIA A100-SXM4-40GB\n    memory_gib: 40\n"
        "    compute_capability: '8.0'\n    utilization_percent: 0\n    memory_used_percent: 0\n"
    )
    large = ome_request("llama-70b-first-available", "vllm-llama-large", NODES, gpus=2)
    with cluster(tmp_path) as c:
        ext = c.extender("--inventory", str(inventory))
        _, before = post_json(url(ext, "/filter"), large)
        assert sorted(before["NodeNames"]) == ["a100-80-node", "h100-node"]  # labels only: no report yet
        assert (
            metric(scrape(url(ext, "/metrics")), "gpu_extender_class_nodes", accelerator_class="nvidia-a100-80gb") == 1
        )

        c.agent("a100-80-node", scenario, ext)
        wait_until(
            "the mislabelled node to leave its class",
            lambda: post_json(url(ext, "/filter"), large)[1]["NodeNames"] == ["h100-node"],
        )
        _, after = post_json(url(ext, "/filter"), large)
        assert after["FailedAndUnresolvableNodes"]["a100-80-node"].endswith("(AcceleratorClassNotAllowed)")
        assert (
            "node a100-80-node matches AcceleratorClass nvidia-a100-80gb by its labels but not by its GPUs "
            "(GPU 0 (NVIDIA A100-SXM4-40GB) has 40.0 GiB; class needs 80.0 GiB"
        ) in ext.log()
        samples = scrape(url(ext, "/metrics"))
        assert metric(samples, "gpu_extender_class_capability_mismatches") == 1
        assert metric(samples, "gpu_extender_class_nodes", accelerator_class="nvidia-a100-80gb") == 0
        assert metric(samples, "gpu_extender_class_nodes", accelerator_class="nvidia-h100-80gb") == 1

        _, why = post_json(url(ext, "/explain"), large)
        node = next(n for n in why["nodes"] if n["node"] == "a100-80-node")
        assert node["classes"] == [] and node["reasonCode"] == "AcceleratorClassNotAllowed"
        assert "class needs 80.0 GiB" in node["classesExcludedByGpus"]["nvidia-a100-80gb"]
        request_file = tmp_path / "request.json"
        request_file.write_bytes(large)
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuextender.extender",
                "explain",
                str(request_file),
                "--url",
                f"http://127.0.0.1:{ext.ports['http']}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert cli.returncode == 0, cli.stderr
        assert (
            "  not in nvidia-a100-80gb although its labels match: GPU 0 (NVIDIA A100-SXM4-40GB) has 40.0 GiB"
            in cli.stdout
        )
