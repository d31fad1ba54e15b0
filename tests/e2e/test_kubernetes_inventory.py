"""The real extender process on `--kubernetes`, against the in-test list/watch API server:
adding, changing and deleting OME objects changes the next decision without a restart."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_accelerator_classes import ome_request
from tests.harness import ROOT, cluster, http, metric, post_json, scrape, url, wait_until
from tests.kube_apiserver import KubeApiServer

NODES = ["h100-node", "a100-40-node"]


class ThreadedApiServer:
    """KubeApiServer on its own event loop thread, driven from a synchronous test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = self.call(lambda: KubeApiServer())
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the server's loop (its state is not thread-safe) and return its result."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def api() -> Iterator[ThreadedApiServer]:
    server = ThreadedApiServer()
    try:
        yield server
    finally:
        server.close()


def examples(kind: str, name: str) -> dict:
    for path in (ROOT / "examples" / "ome").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == kind and doc["metadata"]["name"] == name:
                return doc
    raise KeyError(name)


def node(name: str, product: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }


def test_watched_objects_drive_decisions(api: ThreadedApiServer, tmp_path: Path) -> None:
    s = api.server
    api.call(lambda: s.add("Node", node("h100-node", "NVIDIA-H100-80GB-HBM3")))
    api.call(lambda: s.add("Node", node("a100-40-node", "NVIDIA-A100-SXM4-40GB")))
    for name in ("nvidia-h100-80gb", "nvidia-a100-40gb"):
        api.call(lambda name=name: s.add("AcceleratorClass", examples("AcceleratorClass", name)))
    api.call(lambda: s.add("ClusterServingRuntime", examples("ClusterServingRuntime", "vllm-llama-small")))
    api.call(lambda: s.add("ClusterBaseModel", examples("ClusterBaseModel", "llama-3-1-8b-instruct")))
    api.call(lambda: s.add("InferenceService", examples("InferenceService", "llama-8b-pinned-a100")))
    api.call(lambda: s.uninstall("BaseModel"))  # an OME CRD that is not installed: empty, not fatal
    kubeconfig = s.write_kubeconfig(tmp_path / "kubeconfig")
    pinned = ome_request("llama-8b-pinned-a100", "vllm-llama-small", NODES)
    with cluster(tmp_path) as c:
        ext = c.extender("--kubernetes", "--kubeconfig", str(kubeconfig))
        assert http("GET", url(ext, "/readyz"))[0] == 200
        wait_until(
            "isvc listed",
            lambda: (
                metric(scrape(url(ext, "/metrics")), "gpu_extender_inventory_objects", kind="InferenceService") == 1
            ),
        )
        _, first = post_json(url(ext, "/filter"), pinned)
        assert first["NodeNames"] == ["a100-40-node"]
        assert first["FailedAndUnresolvableNodes"]["h100-node"].endswith("(AcceleratorClassNotAllowed)")

        # MODIFIED: the class now selects H100 nodes.
        changed = examples("AcceleratorClass", "nvidia-a100-40gb")
        changed["spec"]["discovery"]["nodeSelector"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
        api.call(lambda: s.modify("AcceleratorClass", changed))
        wait_until(
            "decision follows the modified class",
            lambda: post_json(url(ext, "/filter"), pinned)[1]["NodeNames"] == ["h100-node"],
        )

        # DELETED: the class is gone, so the explicit request cannot be met on any node.
        api.call(lambda: s.delete("AcceleratorClass", "nvidia-a100-40gb"))
        wait_until(
            "decision follows the deleted class",
            lambda: (
                all(
                    m.endswith("(AcceleratorClassIncompatible)")
                    for m in post_json(url(ext, "/filter"), pinned)[1]["FailedAndUnresolvableNodes"].values()
                )
                and len(post_json(url(ext, "/filter"), pinned)[1]["FailedAndUnresolvableNodes"]) == 2
            ),
        )

        # ADDED: a ServingRuntime in the namespace beats the cluster one of the same name (OME's order).
        runtime = examples("ClusterServingRuntime", "vllm-llama-small")
        runtime["kind"] = "ServingRuntime"
        runtime["metadata"] = {"name": "vllm-llama-small", "namespace": "llm"}
        runtime["spec"]["acceleratorRequirements"]["acceleratorClasses"] = ["nvidia-h100-80gb"]
        api.call(lambda: s.add("ServingRuntime", runtime))
        api.call(lambda: s.add("InferenceService", {**examples("InferenceService", "llama-8b-cheapest")}))
        cheap = ome_request("llama-8b-cheapest", "vllm-llama-small", NODES)
        wait_until(
            "namespaced runtime used", lambda: post_json(url(ext, "/filter"), cheap)[1]["NodeNames"] == ["h100-node"]
        )
        assert "inventory: BaseModel: CRD not installed" in ext.log() and ext.alive()


def gpu_pod(name: str, node: str | None, gpus: str = "1", phase: str = "Pending") -> dict:
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "llm", "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": phase},
    }


def bound_pods(ext: Any) -> float | None:
    return metric(scrape(url(ext, "/metrics")), "gpu_extender_bound_pods")


def test_the_pod_watch_feeds_the_ledger_and_readiness_waits_for_its_first_list(
    api: ThreadedApiServer, tmp_path: Path
) -> None:
    s = api.server
    api.call(lambda: s.add("Node", node("h100-node", "NVIDIA-H100-80GB-HBM3")))
    api.call(lambda: s.add("Pod", gpu_pod("serving", "h100-node", "2")))
    api.call(lambda: s.add("Pod", gpu_pod("waiting", None)))  # unbound: not selected
    api.call(lambda: s.add("Pod", gpu_pod("done", "h100-node", phase="Succeeded")))  # finished: not selected
    api.call(lambda: s.uninstall("Pod"))  # pods cannot be listed yet (404): not ready
    kubeconfig = s.write_kubeconfig(tmp_path / "kubeconfig")
    with cluster(tmp_path) as c:
        ext = c.extender("--kubernetes", "--kubeconfig", str(kubeconfig), wait_ready=False)
        wait_until("the Pod list tried", lambda: api.call(lambda: s.list_count("Pod")) >= 1)
        status, body = http("GET", url(ext, "/readyz"))
        assert status == 503 and b"inventory" in body, body
        api.call(
            lambda: s.install(
                "Pod",
                [
                    gpu_pod("serving", "h100-node", "2"),
                    gpu_pod("waiting", None),
                    gpu_pod("done", "h100-node", phase="Succeeded"),
                ],
            )
        )
        wait_until("ready once pods are listed", lambda: http("GET", url(ext, "/readyz"))[0] == 200)
        assert bound_pods(ext) == 1
        requests = api.call(lambda: [r.field_selector for r in s.list_requests if r.kind == "Pod"])
        # The bound pods' watch, and the pending group members' (state/pending_members.py).
        assert set(requests) == {
            "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
            "spec.nodeName=,status.phase=Pending",
        }

        api.call(lambda: s.add("Pod", gpu_pod("waiting", "h100-node")))  # bound now
        wait_until("the bound pod counted", lambda: bound_pods(ext) == 2)
        api.call(lambda: s.close_watches())
        wait_until(
            "the restart counted",
            lambda: (
                (
                    metric(
                        scrape(url(ext, "/metrics")),
                        "gpu_extender_inventory_watch_restarts_total",
                        kind="Pod",
                        cause="server_closed",
                    )
                    or 0
                )
                >= 1
            ),
        )
        api.call(lambda: s.add("Pod", gpu_pod("serving", "h100-node", "2", phase="Succeeded")))  # finished
        wait_until("the finished pod gone", lambda: bound_pods(ext) == 1)
        samples = scrape(url(ext, "/metrics"))
        assert metric(samples, "gpu_extender_inventory_objects", kind="Pod") is None  # never in the store
        assert metric(samples, "gpu_extender_inventory_watch_restarts_total", kind="Pod", cause="error") >= 1  # 404s
        assert ext.alive()


def test_the_file_inventory_feeds_the_ledger(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "nodes.yaml").write_text(yaml.safe_dump(node("h100-node", "NVIDIA-H100-80GB-HBM3")))
    pods = inventory / "pods.yaml"
    pods.write_text(yaml.safe_dump_all([gpu_pod("serving", "h100-node"), gpu_pod("waiting", None)]))
    with cluster(tmp_path) as c:
        ext = c.extender("--inventory", str(inventory))
        assert bound_pods(ext) == 1
        pods.unlink()
        wait_until("the pod's file removed", lambda: bound_pods(ext) == 0)
