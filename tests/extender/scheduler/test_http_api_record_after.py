"""filter answers first and records after (http_api.SchedulerApi.answer_filter): the binding gate
hears of the answer before anything else runs, the metrics and the waiting pods are there before the
server reads the next call, and a failure while recording is logged with the answer already sent."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler import http_api
from gpuextender.extender.scheduler.http_api import SchedulerApi, build_app
from gpuextender.extender.scheduler.wire import parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from tests.extender.builders import gpu, report, serve

NOW = 100.0
POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
}


def make_api() -> SchedulerApi:
    state = GpuState(IdleRule())
    state.ingest(report("idle", [gpu(i) for i in range(4)]), NOW)
    state.ingest(report("busy", [gpu(i, 95, 90) for i in range(4)]), NOW)
    view = InventoryView(version=1)
    api = SchedulerApi(state, ExtenderMetrics(state), ApiSettings(DecisionPolicy()), lambda: view, lambda: NOW)
    api.set_serving(True)
    return api


def body(*names: str) -> bytes:
    return json.dumps({"Pod": POD, "NodeNames": list(names)}).encode()


def filter_nodes_total(api: SchedulerApi, result: str) -> float | None:
    return api.metrics.registry.get_sample_value("gpu_extender_filter_nodes_total", {"result": result})


def test_the_gate_hears_of_the_answer_before_it_is_recorded() -> None:
    api = make_api()
    answer, record = api.answer_filter(parse_extender_args(body("idle", "busy")))
    assert answer["NodeNames"] == ["idle"]
    assert api.bindings.gate.open_count() == 1  # before the record step ran
    assert filter_nodes_total(api, "passed") is None
    record()
    assert filter_nodes_total(api, "passed") == 1
    assert filter_nodes_total(api, "failed") == 1


def run(api: SchedulerApi, test: Any) -> None:
    serve(build_app(api), test)


def test_over_http_the_record_is_there_before_the_next_call_is_read() -> None:
    api = make_api()

    async def check(client: TestClient[Any, Any]) -> None:
        for calls in (1, 2, 3):
            answer = await client.post("/filter", data=body("idle", "busy"))
            assert answer.status == 200
            assert (await answer.json())["NodeNames"] == ["idle"]
            metrics = await (await client.get("/metrics")).text()
            assert f'gpu_extender_filter_nodes_total{{result="passed"}} {calls}.0' in metrics

    run(api, check)


def test_a_failure_while_recording_is_logged_and_the_answer_stands(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    api = make_api()

    def broken(*_: Any) -> None:
        raise RuntimeError("metrics registry gone")

    monkeypatch.setattr(http_api, "record_filter", broken)

    async def check(client: TestClient[Any, Any]) -> None:
        answer = await client.post("/filter", data=body("idle", "busy"))
        assert answer.status == 200
        assert (await answer.json())["NodeNames"] == ["idle"]
        await asyncio.sleep(0)  # the record step runs on the loop's next turn
        assert (await client.get("/healthz")).status == 200

    run(api, check)
    assert "recording a decision failed (its answer was sent)" in caplog.text
    assert "metrics registry gone" in caplog.text
