"""Issue 52 item 0: the rules of the leader's writers that a one-line change would break unseen, each
writer real (its kubernetes-asyncio client too) against a loopback HTTP server that records every
request (fake clocks): the GPUsUsable condition's lastTransitionTime (inventory/node_status_writer.py),
the Event after a 403 (inventory/idle_events.py), and the write budget of a pass
(inventory/device_taint_writer.py). The writers on the real API server: tests/kube/test_publish.py."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client as k8s

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.inventory.device_taint_writer import DeviceTaintWriter, WriterPace
from gpuextender.extender.inventory.idle_events import FORBIDDEN_RETRY_S, IdleEventWriter
from gpuextender.extender.inventory.node_status_writer import NodeStatusWriter
from gpuextender.extender.model.dra import parse_device_class, parse_resource_slice
from gpuextender.extender.state.device_taints import TaintWriterStatus
from gpuextender.extender.state.dra_inventory import build_dra
from gpuextender.extender.state.gpu_summary import summarize
from gpuextender.extender.state.node_gpu_status import CONDITION_TYPE, NodeGpuStatus
from gpuextender.extender.state.publication import Publication, PublishInputs
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.dra_objects import device_class, gpu_slice

NODE = "gpu-1"
THEN = "2020-01-01T00:00:00Z"
NOW = datetime(2030, 1, 1, tzinfo=UTC)
NOW_STAMP = "2030-01-01T00:00:00Z"
STAMP_HEX = f"{int(NOW.timestamp() * 1e6):x}"  # an Event's name suffix at NOW


def sent_event(
    involved: dict[str, str], namespace: str, reason: str, message: str, kind: str = "Normal"
) -> dict[str, Any]:
    """An Event about `involved` (its object reference) as the writers POST it at NOW."""
    return {
        "metadata": {"name": f"{involved['name']}.{STAMP_HEX}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": "gpu-extender"},
        "reportingComponent": "gpu-extender",
        "reportingInstance": f"{socket.gethostname()}-{os.getpid()}",
        "firstTimestamp": NOW_STAMP,
        "lastTimestamp": NOW_STAMP,
        "count": 1,
    }


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RecordingApi:
    """An API server that records each request (method, path, JSON body) and answers it with
    `status_of`'s status (default 201), the body sent echoed back."""

    def __init__(self, status_of: Callable[[str, str], int] = lambda _method, _path: 201) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self._status_of = status_of
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self._server = TestServer(app, host="127.0.0.1")

    async def _answer(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = orjson.loads(raw) if raw else None
        self.requests.append((request.method, request.path, body))
        status = self._status_of(request.method, request.path)
        return web.Response(status=status, body=orjson.dumps(body or {}), content_type="application/json")

    def posts(self) -> list[Any]:
        return [body for method, _path, body in self.requests if method == "POST"]

    async def serve(self, test: Callable[[k8s.ApiClient], Awaitable[None]]) -> None:
        await self._server.start_server()
        try:
            async with k8s.ApiClient(k8s.Configuration(host=str(self._server.make_url("")).rstrip("/"))) as client:
                await test(client)
        finally:
            await self._server.close()


def always() -> bool:
    return True


# -- the GPUsUsable condition: lastTransitionTime ------------------------------------------------


@pytest.mark.parametrize(
    ("status", "moved"),
    [
        (NodeGpuStatus("True", "GPUsUsable", "3 of 4 GPUs usable; 1 unhealthy"), False),
        (NodeGpuStatus("False", "NoUsableGPU", "0 of 4 GPUs usable; 4 unhealthy", no_usable_gpu=True), True),
    ],
    ids=["message-only", "status"],
)
def test_last_transition_time_moves_only_when_the_status_does(status: NodeGpuStatus, moved: bool) -> None:
    have = {
        "metadata": {"name": NODE},
        "status": {
            "conditions": [
                {
                    "type": CONDITION_TYPE,
                    "status": "True",
                    "reason": "GPUsUsable",
                    "message": "4 of 4 GPUs usable",
                    "lastHeartbeatTime": THEN,
                    "lastTransitionTime": THEN,
                }
            ]
        },
    }
    writer = NodeStatusWriter(
        {NODE: have}.get,
        TaintWriterStatus(),
        taint=False,
        taint_key="gpu-extender.io/no-usable-gpu",
        taint_effect="NoSchedule",
        clock=Clock(),
        wall=lambda: NOW,
    )
    pub = Publication(3.0, 60.0)
    pub.nodes, pub.nodes_changed = {NODE: status}, {NODE}
    api = RecordingApi(lambda _method, _path: 200)
    asyncio.run(api.serve(lambda client: writer.reconcile(client, pub, always)))
    [(method, path, body)] = api.requests
    assert (method, path) == ("PATCH", f"/api/v1/nodes/{NODE}/status")
    [cond] = body["status"]["conditions"]
    assert (cond["status"], cond["message"], cond["lastHeartbeatTime"]) == (status.status, status.message, NOW_STAMP)
    assert cond["lastTransitionTime"] == (NOW_STAMP if moved else THEN)


# -- AllocatedGPUsIdle Events after a 403 --------------------------------------------------------


def test_after_a_403_the_next_event_waits_for_the_retry_not_for_the_idle_window() -> None:
    clock, window = Clock(), 1800.0
    writer = IdleEventWriter(
        TaintWriterStatus(), window_s=window, node_uid=lambda _n: "uid-1", claim_uid=lambda _c: "", clock=clock
    )
    refusals = [403]  # the RBAC component is applied after the first try
    api = RecordingApi(lambda _method, _path: refusals.pop() if refusals else 201)

    async def go(client: k8s.ApiClient) -> None:
        for clock.now in (0.0, FORBIDDEN_RETRY_S - 0.5, FORBIDDEN_RETRY_S, FORBIDDEN_RETRY_S + 1.0):
            await writer.reconcile(client, {NODE: 2}, {}, always)

    asyncio.run(api.serve(go))
    # Refused at 0 s; nothing tried before the retry; sent at the retry, then once per window.
    assert [(method, path) for method, path, _ in api.requests] == [("POST", "/api/v1/namespaces/default/events")] * 2
    assert writer.status.node_writes["event"] == 1
    assert api.posts()[1]["involvedObject"]["name"] == NODE


# -- the DeviceTaintRule writer's write budget ---------------------------------------------------


def unhealthy_gpus(count: int) -> PublishInputs:
    """A DRA node of `count` GPUs, each reported unhealthy (a health rule each)."""
    gpus = []
    for i in range(count):
        g = gpu(i, 0, 1, healthy=False)
        g.health = pb.HEALTH_UNHEALTHY
        g.health_reasons.append("XidCritical")
        gpus.append(g)
    summary = summarize(report(NODE, gpus), IdleRule(), 0.0)
    dra = build_dra(
        [parse_resource_slice(gpu_slice(NODE, count, uuid_of=lambda m: f"GPU-{m}"))],
        [parse_device_class(device_class())],
        ("nvidia.com/gpu",),
    )
    return PublishInputs(dra, {}, {NODE: summary}.get, None)


BUDGET = 4  # writes_per_s, and the burst of a pass (a power of two: exact token times)


@pytest.mark.parametrize("wanted", [BUDGET, BUDGET + 1])
def test_a_pass_writes_at_most_the_budget_and_the_rest_at_a_later_pass(wanted: int) -> None:
    clock = Clock()
    inputs = unhealthy_gpus(wanted)
    writer = DeviceTaintWriter(
        k8s.Configuration(host="http://127.0.0.1:1"),  # unused: the pass is given its client
        Publication(0.0, 60.0),
        lambda: inputs,
        namespace="gx",
        pace=WriterPace(writes_per_s=BUDGET),
        clock=clock,
    )
    api = RecordingApi()
    created: list[int] = []

    async def go(client: k8s.ApiClient) -> None:
        rules = k8s.CustomObjectsApi(client)
        for clock.now in (0.0, 0.0, 0.5 / BUDGET, 1.0 / BUDGET):
            await writer._pass(client, rules, "v1")
            created.append(len(api.posts()))

    asyncio.run(api.serve(go))
    assert len(writer.publication.rules) == wanted
    # The first pass spends the budget; one at once, or half a token later, has none left; a token
    # after the first, the rest.
    assert created == [BUDGET, BUDGET, BUDGET, wanted]
    assert writer.status.deferred == 3 * (wanted - BUDGET)  # the one past the budget, deferred by three passes
    assert {path for _method, path, _body in api.requests} == {"/apis/resource.k8s.io/v1/devicetaintrules"}
