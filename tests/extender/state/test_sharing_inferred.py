"""Sharing read off a Node's allocatable where no agent can tell (gpu_summary.with_inferred_sharing;
issue 26): time-slicing advertises GPUs x replicas, so 32 nvidia.com/gpu on a node of 8 GPUs whose
agent reports no sharing (no kubelet access, no GFD labels) are 4 replicas each. Before, every pod of
more than 8 replicas failed "too few GPUs" on every such node and stayed Pending. Bounds at exactly
their values, on both sides."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import MAX_INFERRED_REPLICAS, summarize, with_inferred_sharing
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report

NOW = 1000.0


def node_report(idle: int = 8, busy: int = 0, **edit: Any) -> pb.NodeReport:
    r = report("ts-1", [gpu(i, 0, 1) for i in range(idle)] + [gpu(idle + i, 95, 90) for i in range(busy)])
    for key, value in edit.items():
        setattr(r, key, value)
    return r


@pytest.mark.parametrize(
    ("allocatable", "replicas"),
    [
        (None, 0),
        (8, 0),  # as many as the GPUs: nothing to infer
        (9, 0),  # not a whole multiple
        (16, 2),
        (32, 4),
        (31, 0),
        (8 * MAX_INFERRED_REPLICAS, MAX_INFERRED_REPLICAS),
        (8 * (MAX_INFERRED_REPLICAS + 1), 0),
        (7, 0),  # fewer than the GPUs
    ],
)
def test_a_whole_multiple_of_the_gpus_is_read_as_replicas(allocatable: int | None, replicas: int) -> None:
    s = with_inferred_sharing(summarize(node_report(6, 2), IdleRule(), NOW), allocatable)
    assert s.inferred_replicas == replicas
    units = replicas or 1
    assert (s.gpu_count, s.healthy_gpus, s.idle_gpus) == (8 * units, 8 * units, 6 * units)
    assert len(s.quality) == min(6 * units, 64) + 1 and s.free_gpus is None


def test_nothing_is_inferred_where_the_agent_knows_or_the_node_is_not_plain() -> None:
    def inferred(r: pb.NodeReport) -> int:
        return with_inferred_sharing(summarize(r, IdleRule(), NOW), 32).inferred_replicas

    assert inferred(node_report()) == 4
    # Allocation known (the kubelet read): the agent's own count decides.
    assert inferred(node_report(allocation_source=pb.ALLOCATION_KUBELET)) == 0
    for mode, count in ((pb.SHARING_EXCLUSIVE, 1), (pb.SHARING_TIME_SLICING, 4), (pb.SHARING_MPS, 2)):
        r = node_report()
        r.gpus[3].sharing.mode, r.gpus[3].sharing.replicas = mode, count
        assert inferred(r) == 0, mode  # one GPU that says how it is shared: nothing inferred
    r = node_report()
    for g in r.gpus:
        g.sharing.mode = pb.SHARING_TIME_SLICING  # time-slicing without a count: the count is inferred
    assert inferred(r) == 4
    r = node_report()
    r.gpus[0].sharing.mode = pb.SHARING_MIG
    assert inferred(r) == 0
    assert inferred(node_report(node_error="DriverNotLoaded")) == 0


def api_with(allocatable: int | None) -> tuple[SchedulerApi, PodLedger]:
    state = GpuState(IdleRule())
    settings = ApiSettings(DecisionPolicy(no_fit_policy="reject"), shortlist=0)
    ledger = PodLedger(("nvidia.com/gpu",))
    ledger.replace_all(POD_KIND, [])
    api = SchedulerApi(state, ExtenderMetrics(state), settings, clock=lambda: NOW, sources=ClusterSources(ledger))
    if allocatable is not None:
        state.read_allocatable({"ts-1": allocatable}.get)
    state.ingest(node_report(), NOW)
    return api, ledger


def args(gpus: int) -> Any:
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u-p"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }
    return parse_extender_args(json.dumps({"Pod": pod, "NodeNames": ["ts-1"]}).encode())


@pytest.mark.parametrize(("gpus", "passes"), [(32, True), (33, False)])
def test_a_pod_of_more_replicas_than_gpus_is_placed_where_allocatable_says_they_are(gpus: int, passes: bool) -> None:
    api, _ = api_with(32)
    assert api.filter(args(gpus))["NodeNames"] == (["ts-1"] if passes else [])
    row = api.explain(args(gpus))["nodes"][0]
    assert row["gpus"] == 32 and row["sharingInferred"].startswith("4 replicas per GPU")
    # Without the Node's allocatable (before), 12 replicas failed on a node that holds 32.
    before, _ = api_with(None)
    answer = before.filter(args(12))
    assert answer["NodeNames"] == [] and "too few GPUs" in answer["FailedAndUnresolvableNodes"]["ts-1"]


def test_bound_pods_and_a_changed_allocatable_follow() -> None:
    api, ledger = api_with(32)
    bound = {
        "metadata": {"name": "b", "namespace": "ml", "uid": "u-b"},
        "spec": {"nodeName": "ts-1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "30"}}}]},
        "status": {"phase": "Pending"},
    }
    ledger.upsert(POD_KIND, bound)
    assert api.filter(args(2))["NodeNames"] == ["ts-1"] and api.filter(args(3))["NodeNames"] == []
    changed: list[str] = []
    api.state.on_offered_change(changed.append)
    api.state.read_allocatable({"ts-1": 8}.get)  # reconfigured: one replica per GPU
    assert changed == ["ts-1"] and api.filter(args(1))["NodeNames"] == []  # 8 - 30 bound: none
