"""A Node file emptied or garbled under a running extender (issue item 8): the real
`gpuextender.extender --inventory DIR` with the OME objects of examples/ome/. Before the fix
a truncated Node file took the Nodes to 0 and an OME pod then failed every node; now
the Nodes and the verdicts stay until the file holds objects again, and removing the
file is what removes them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.harness import ROOT, Proc, cluster, fixture_bytes, metric, post_json, scrape, url, wait_until

PRODUCTS = {
    "h100-node": "NVIDIA-H100-80GB-HBM3",
    "a100-80-node": "NVIDIA-A100-SXM4-80GB",
    "a100-40-node": "NVIDIA-A100-SXM4-40GB",
    "l40s-node": "NVIDIA-L40S",
}
NODES = list(PRODUCTS)


def node_count(extender: Proc) -> float | None:
    return metric(scrape(url(extender, "/metrics")), "gpu_extender_inventory_objects", kind="Node")


def write_nodes(path: Path) -> None:
    items = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
        for name, product in PRODUCTS.items()
    ]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1))


def ome_pod_filter() -> bytes:
    """The engine pod of InferenceService llm/llama-8b-cheapest: its runtime allows every class here."""
    args = json.loads(fixture_bytes("filter-request-nodecache-true.json"))
    pod = args["Pod"]
    pod["metadata"]["namespace"] = "llm"
    pod["metadata"]["labels"] = {
        "ome.io/inferenceservice": "llama-8b-cheapest",
        "component": "engine",
        "serving-runtime": "vllm-llama-small",
    }
    for container in pod["spec"]["containers"]:
        for key in ("requests", "limits"):
            container["resources"][key]["nvidia.com/gpu"] = "1"
    args["NodeNames"] = NODES
    return json.dumps(args).encode()


def test_a_truncated_node_file_keeps_the_nodes_until_it_is_removed(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    for source in (ROOT / "examples" / "ome").glob("*.yaml"):
        shutil.copy(source, inventory / source.name)
    nodes = inventory / "nodes.yaml"
    write_nodes(nodes)
    with cluster(tmp_path) as c:
        ext = c.extender("--inventory", str(inventory))
        assert node_count(ext) == len(NODES)
        status, before = post_json(url(ext, "/filter"), ome_pod_filter())
        assert status == 200 and sorted(before["NodeNames"]) == sorted(NODES)

        nodes.write_bytes(b"")  # the first step of every non-atomic save
        wait_until("the truncation noticed", lambda: f"{nodes} is empty" in ext.log())
        assert node_count(ext) == len(NODES)
        assert post_json(url(ext, "/filter"), ome_pod_filter()) == (200, before)

        nodes.write_text("hello\n")  # parses, as a scalar
        wait_until("the scalar noticed", lambda: "is str 'hello', not a Kubernetes object" in ext.log())
        assert node_count(ext) == len(NODES)
        assert post_json(url(ext, "/filter"), ome_pod_filter()) == (200, before)
        assert ext.log().count(f"{nodes} is empty") == 1  # once per change, not once per poll
        assert "keeping its previous content (4 object(s)): delete the file to remove them" in ext.log()

        nodes.unlink()  # how a file's objects are removed
        wait_until("the Nodes removed", lambda: node_count(ext) == 0)
        status, after = post_json(url(ext, "/filter"), ome_pod_filter())
        assert status == 200 and after["NodeNames"] == []  # nodes in no AcceleratorClass
