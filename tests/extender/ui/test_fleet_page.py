"""The fleet page's HTTP side (aiohttp, in process): /ui, /ui/fleet.json, /ui/explain, the
off switch, the shared cache and the sliced build."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.app import http_app
from gpuextender.extender.model.kube_objects import KINDS
from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import ExtenderArgs, parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import InventoryView, ViewBuilder
from gpuextender.extender.ui.fleet_page import FleetCache, build_fleet, load_one_object
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report, serve
from tests.harness import ROOT

NOW = 5_000.0
PRODUCTS = {"h100-node": "NVIDIA-H100-80GB-HBM3", "l40s-node": "NVIDIA-L40S", "plain-node": "none"}


def inventory() -> InventoryView:
    store = InventoryStore()
    views = ViewBuilder(store, ("nvidia.com/gpu",))
    objects: dict[str, list[Any]] = {}
    for source in sorted((ROOT / "examples" / "ome").glob("*.yaml")):
        for doc in yaml.safe_load_all(source.read_text()):
            if doc:
                objects.setdefault(doc["kind"], []).append(doc)
    objects["Node"] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}},
        }
        for name, product in PRODUCTS.items()
    ]
    for kind in KINDS:
        store.replace_all(kind.kind, objects.get(kind.kind, []))
    return views.current


def read_kubelet(r: pb.NodeReport) -> pb.NodeReport:
    """As an agent that reads the kubelet's allocation reports it (nobody holds these GPUs)."""
    r.allocation_source = pb.ALLOCATION_KUBELET
    return r


def make_api(**settings: Any) -> SchedulerApi:
    state = GpuState(IdleRule())
    state.ingest(read_kubelet(report("h100-node", [gpu(0, 0, 1), gpu(1, 90, 80), gpu(2, 0, 1), gpu(3, 0, 1)])), NOW)
    state.ingest(read_kubelet(report("plain-node", [gpu(0, 95, 90), gpu(1, 0, 1)])), NOW)
    view = inventory()
    api = SchedulerApi(
        state,
        ExtenderMetrics(state),
        ApiSettings(DecisionPolicy(), **settings),
        inventory=lambda: view,
        clock=lambda: NOW,
    )
    api.set_serving(True)
    return api


def run(api: SchedulerApi, test: Callable[[TestClient[Any, Any]], Awaitable[None]]) -> None:
    serve(http_app(api), test)


POD = """
apiVersion: v1
kind: Pod
metadata: {name: trial, namespace: research, uid: u-1}
spec:
  containers:
  - name: main
    resources: {limits: {nvidia.com/gpu: 2}}
"""


def test_the_page_is_served_with_a_strict_content_security_policy() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        page = await client.get("/ui")
        assert page.status == 200 and page.content_type == "text/html"
        text = await page.text()
        assert 'data-base=""' in text and "Where would this pod go?" in text
        csp = page.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'sha256-" in csp and "frame-ancestors 'none'" in csp
        assert "http" not in text.split("<script>")[1]  # no CDN, no external anything
        root = await client.get("/", allow_redirects=False)
        assert root.status == 302 and root.headers["Location"] == "/ui"

    run(make_api(), check)


def test_the_page_follows_the_path_prefix() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        assert 'data-base="/gx"' in await (await client.get("/gx/ui")).text()
        root = await client.get("/gx/", allow_redirects=False)
        assert root.headers["Location"] == "/gx/ui"
        assert (await client.get("/gx/ui/fleet.json")).status == 200
        assert (await client.get("/ui")).status == 404

    run(make_api(path_prefix="/gx"), check)


def test_fleet_json_groups_the_nodes_by_class_and_marks_unknown() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        response = await client.get("/ui/fleet.json", headers={"Accept-Encoding": "identity"})
        assert response.status == 200 and response.headers["Cache-Control"] == "no-store"
        doc = await response.json()
        groups = {g["class"]: g for g in doc["classes"]}
        assert set(groups) == {"nvidia-h100-80gb", "nvidia-a100-80gb", "nvidia-a100-40gb", "nvidia-l40s", None}
        (h100,) = groups["nvidia-h100-80gb"]["rows"]
        assert h100["node"] == "h100-node" and h100["data"] == "fresh"
        assert [doc["states"][c[1]] for c in h100["gpus"]] == ["free-idle", "free-busy", "free-idle", "free-idle"]
        (l40s,) = groups["nvidia-l40s"]["rows"]
        assert l40s["data"] == "none" and {doc["states"][c[1]] for c in l40s["gpus"]} == {"unknown"}
        assert [r["node"] for r in groups[None]["rows"]] == ["plain-node"]
        assert doc["totals"]["counts"]["unknown"] == 4 and doc["totals"]["nodes"] == 3

    run(make_api(), check)


def test_pods_the_filter_found_no_place_for_are_listed_with_why_until_one_fits() -> None:
    """Issue 26: "why is my pod pending?" on the page: the latest filter verdict per GPU pod."""
    api = make_api()
    big = filter_args(gpus=16, name="too-big")
    api.filter(big)
    small = filter_args(gpus=1, name="fits")
    api.filter(small)

    async def check(client: TestClient[Any, Any]) -> None:
        doc = await (await client.get("/ui/fleet.json", headers={"Accept-Encoding": "identity"})).json()
        (waiting,) = doc["waiting"]
        assert waiting["pod"] == "default/too-big" and waiting["gpus"] == 16 and waiting["filterCalls"] == 1
        assert waiting["verdict"] == "no node fits" and waiting["nodes"] == 2
        assert waiting["reasons"] == [{"code": "InsufficientGPUs", "sentence": "node has too few GPUs", "nodes": 2}]

    run(api, check)


def filter_args(*, gpus: int, name: str) -> ExtenderArgs:
    pod = {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }
    return parse_extender_args(json.dumps({"Pod": pod, "NodeNames": ["h100-node", "plain-node"]}).encode())


def test_an_unhealthy_gpu_says_why_on_the_page() -> None:
    api = make_api()
    lost = gpu(2, 0, 1)
    lost.healthy = False
    lost.health = pb.HEALTH_UNHEALTHY
    lost.health_reasons.append("XidCritical")
    lost.xids.add(xid=79)
    api.state.ingest(read_kubelet(report("h100-node", [gpu(0, 0, 1), gpu(1, 90, 80), lost, gpu(3, 0, 1)])), NOW)

    async def check(client: TestClient[Any, Any]) -> None:
        doc = await (await client.get("/ui/fleet.json", headers={"Accept-Encoding": "identity"})).json()
        (row,) = [r for g in doc["classes"] for r in g["rows"] if r["node"] == "h100-node"]
        assert [len(c) for c in row["gpus"]] == [4, 4, 5, 4]  # a reason only where there is one
        assert doc["states"][row["gpus"][2][1]] == "unhealthy" and row["gpus"][2][4] == "xid-79"

    run(api, check)


def test_the_page_can_be_turned_off() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        for path in ("/", "/ui", "/ui/fleet.json", "/ui/history.json"):
            assert (await client.get(path)).status == 404, path
        assert (await client.post("/ui/explain", data=POD)).status in (404, 405)
        assert (await client.get("/healthz")).status == 200

    run(make_api(fleet_page=False), check)


def test_the_form_answers_what_post_explain_answers_for_the_same_pod() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        ui = await client.post("/ui/explain", data=POD, headers={"Content-Type": "application/yaml"})
        assert ui.status == 200
        answer = await ui.json()
        direct = await (await client.post("/explain", data=json.dumps({"Pod": yaml.safe_load(POD)}))).json()
        assert answer.pop("input") == {"kind": "Pod"}
        assert answer == direct
        assert answer["gpusNeeded"] == 2 and answer["candidates"]["explained"] == 3
        scores = [(n["node"], n["score"], n["result"]) for n in answer["nodes"]]
        assert scores[0][0] == "h100-node" and scores[0][2] == "pass"  # 3 idle GPUs
        assert {n["node"]: n["reasonCode"] for n in answer["nodes"]}["plain-node"] == "InsufficientIdleGPUs"

    run(make_api(), check)


def test_an_inference_service_is_explained_as_its_engine_pod() -> None:
    isvc = {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llama-8b-cheapest", "namespace": "llm"},
        "spec": {
            "model": {"name": "llama-3-1-8b-instruct"},
            "runtime": {"name": "vllm-llama-small"},
            "acceleratorSelector": {"policy": "Cheapest"},
        },
    }

    async def check(client: TestClient[Any, Any]) -> None:
        answer = await (await client.post("/ui/explain", data=yaml.safe_dump(isvc))).json()
        assert answer["pod"] == "llm/llama-8b-cheapest-engine"
        assert answer["input"]["labels"] == {
            "ome.io/inferenceservice": "llama-8b-cheapest",
            "component": "engine",
            "serving-runtime": "vllm-llama-small",
            "base-model-name": "llama-3-1-8b-instruct",
        }
        # No resources on the InferenceService: the runtime's container asks for 1 GPU.
        assert answer["input"]["gpusFrom"] == "ClusterServingRuntime vllm-llama-small container 'ome-container'"
        assert answer["gpusNeeded"] == 1 and "note" not in answer["input"]
        assert answer["resolved"]["inferenceService"] == "llm/llama-8b-cheapest"
        assert answer["resolved"]["runtime"] == "ClusterServingRuntime vllm-llama-small"
        by_node = {n["node"]: n for n in answer["nodes"]}
        assert by_node["plain-node"]["reasonCode"] == "AcceleratorClassNotAllowed"  # in no class

        # The engine's own runner resources win; an InferenceService not in the inventory is said so.
        other = {**isvc, "metadata": {"name": "new-one", "namespace": "llm"}}
        other["spec"] = {**isvc["spec"], "engine": {"runner": {"resources": {"limits": {"nvidia.com/gpu": "2"}}}}}
        answer = await (await client.post("/ui/explain", data=yaml.safe_dump(other))).json()
        assert answer["gpusNeeded"] == 2 and answer["input"]["gpusFrom"] == "spec.engine.runner.resources"
        assert "not in the extender's inventory" in answer["input"]["note"]

    run(make_api(), check)


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ("kind: Pod\nmetadata: {name: [", 400, "malformed_yaml"),
        ("kind: Pod\n---\nkind: Pod\n", 400, "multiple_documents"),
        ("a: &x [1, 2]\nb: *x\n", 400, "yaml_alias"),
        ("- kind: Pod\n", 400, "not_an_object"),
        ("just text", 400, "not_an_object"),
        ("", 400, "empty"),
        ("apiVersion: apps/v1\nkind: Deployment\n", 400, "not_a_pod"),
        ("metadata: {name: x}\n", 400, "not_a_pod"),
        (POD.replace("nvidia.com/gpu: 2", "nvidia.com/gpu: lots"), 400, "bad_quantity"),
        ("kind: InferenceService\nmetadata: {namespace: x}\n", 400, "missing_name"),
        ("kind: Pod\nx: " + "y" * 5000 + "\n", 413, "too_large"),
    ],
)
def test_refused_bodies_get_a_reason(body: str, status: int, reason: str) -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        response = await client.post("/ui/explain", data=body.encode())
        assert response.status == status
        answer = await response.json()
        assert answer["reason"] == reason and answer["error"]

    run(make_api(max_body_bytes=4096), check)


def test_not_utf8_and_too_many_values_are_refused() -> None:
    with pytest.raises(InvalidInput) as not_text:
        load_one_object(b"\xff\xfe kind: Pod", 100)
    assert not_text.value.code == "not_utf8"
    with pytest.raises(InvalidInput) as deep:
        load_one_object(("kind: Pod\nitems: [" + "1, " * 200 + "1]\n").encode(), 100)
    assert deep.value.code == "too_complex"


def test_browsers_share_one_build_per_cache_period() -> None:
    api = make_api()
    clock = [0.0]

    async def go() -> None:
        cache = FleetCache(api, ttl_s=1.5, clock=lambda: clock[0])
        bodies = await asyncio.gather(*(cache.get() for _ in range(20)))
        assert cache.builds == 1 and len({id(b) for b in bodies}) == 1
        clock[0] = 1.4
        await cache.get()
        assert cache.builds == 1
        clock[0] = 1.6
        await cache.get()
        assert cache.builds == 2

    asyncio.run(go())


def test_the_build_yields_to_the_loop_between_slices() -> None:
    api = make_api()
    turns = 0

    async def other_work() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    async def go() -> bytes:
        task = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        before = turns
        body = await build_fleet(api, slice_s=0.0, pause_s=0.0)  # 3 nodes: a pause after each
        task.cancel()
        assert turns - before >= 3
        return body

    doc = json.loads(asyncio.run(go()))
    assert doc["totals"]["nodes"] == 3


def test_gzip_is_served_to_browsers_that_accept_it() -> None:
    api = make_api()
    for i in range(100):
        api.state.ingest(report(f"more-{i:03}", [gpu(g, 0, 1) for g in range(8)]), NOW)

    async def check(client: TestClient[Any, Any]) -> None:
        plain = await client.get("/ui/fleet.json", headers={"Accept-Encoding": "identity"})
        assert "Content-Encoding" not in plain.headers
        packed = await client.get("/ui/fleet.json", headers={"Accept-Encoding": "gzip, deflate"})
        assert packed.headers["Content-Encoding"] == "gzip"
        assert await packed.json() == await plain.json()  # the client inflates it
        assert int(packed.headers["Content-Length"]) < len(await plain.read()) / 4

    run(api, check)


def test_the_html_has_no_external_reference() -> None:
    from gpuextender.extender.ui import fleet_page_html

    page = Path(fleet_page_html.__file__).read_text()
    assert "http://" not in page and "https://" not in page and "@import" not in page
