"""IngestProcess.apply, in-process: a relayed frame's summaries stored in order, the state settled
after each slice of SLICE of them and at the frame's end (GpuState.settle: the fit index applies
its marks then, off the scheduler's calls). Worker processes themselves: workers/test_worker_processes.py."""

from __future__ import annotations

import asyncio

import orjson

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide.fit_index import FitIndex
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.workers.summary_store import SummaryStore
from gpuextender.extender.workers.supervisor import SLICE, IngestProcess
from gpuextender.extender.workers.worker_args import Worker
from tests.extender.builders import gpu, report

RULE = IdleRule(30.0, 50.0, None)


def frame(nodes: int, utilization: int = 0) -> bytes:
    relay = SummaryStore(RULE)
    for i in range(nodes):
        assert relay.ingest(report(f"node-{i}", [gpu(0, utilization, 10)]), 50.0)
    return relay.take()


def applied(state: GpuState, payload: bytes) -> None:
    asyncio.run(IngestProcess([], Worker(0, 1, 1), state, lambda _i, _t: None).apply(payload))


def test_the_state_is_settled_after_every_slice_and_at_the_end_of_a_frame() -> None:
    state = GpuState(RULE)
    stores: list[str] = []
    settled: list[int] = []  # how many summaries were stored at each settle
    state.on_offered_change(stores.append)
    state.on_settle(lambda: settled.append(len(stores)))
    applied(state, frame(2 * SLICE + 1))
    assert settled == [SLICE, 2 * SLICE, 2 * SLICE + 1]
    stores.clear(), settled.clear()
    applied(state, frame(SLICE, utilization=1))  # exactly one slice: settled after it and at the end
    assert settled == [SLICE, SLICE]


def test_after_a_frame_the_fit_index_has_applied_its_marks_a_call_finds_none() -> None:
    state = GpuState(RULE)
    index = FitIndex(state.offered_summaries)
    state.on_offered_change(index.changed)
    state.on_settle(index.catch_up)
    names = [f"node-{i}" for i in range(8)]
    applied(state, frame(8))
    assert index.filter(1, names, {}, 50.0, DecisionPolicy()) is not None  # size 1 kept from now
    applied(state, frame(2, utilization=40))  # 2 of 8 changed (busy now): a quarter, applied in place
    assert index._marked == set()
    outcome = index.filter(1, names, {}, 50.0, DecisionPolicy())
    assert outcome is not None and outcome.failed.keys() == {"node-0", "node-1"}


def test_the_scheduler_api_has_its_fit_index_caught_up_when_the_state_settles() -> None:
    state = GpuState(RULE)
    api = SchedulerApi(state, ExtenderMetrics(state), ApiSettings(DecisionPolicy()))
    applied(state, frame(8))
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    body = {"Pod": pod, "NodeNames": [f"node-{i}" for i in range(8)]}
    assert len(api.filter(parse_extender_args(orjson.dumps(body)))["NodeNames"]) == 8
    applied(state, frame(2, utilization=40))
    assert api.decisions._fits._marked == set()
