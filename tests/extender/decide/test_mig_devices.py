"""MIG devices (issue 12): `nvidia.com/mig-<profile>` requests matched to free MIG instances of
that profile (gpuextender.extender.decide.mig_devices), from the pod's spec through the summary to the
filter, prioritize and explain answers of the in-process SchedulerApi."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.mig_devices import filter_mig
from gpuextender.extender.model.pod_gpus import mig_profile
from gpuextender.extender.model.pod_request import read_pod
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import GIB, gpu, report

NOW = 100.0
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"
RESOURCES = ("nvidia.com/gpu", MIG_1G, MIG_3G)


def mig_gpu(index: int, *instances: tuple[str, bool, float], healthy: bool = True) -> pb.GpuSample:
    """A GPU in MIG mode with (profile, held, memory used %) instances."""
    g = gpu(index, None, 1, healthy=healthy)
    g.sharing.mode = pb.SHARING_MIG
    for slot, (profile, held, used) in enumerate(instances):
        inst = g.mig_instances.add(uuid=f"MIG-{index}-{slot}", profile=profile, gpu_instance_id=slot)
        inst.memory_total_bytes = 10 * GIB
        inst.memory_used_bytes = int(10 * GIB * used / 100)
        if held:
            inst.holders.add(
                namespace="ns",
                pod=f"p{index}-{slot}",
                container="c",
                resource_name=f"nvidia.com/mig-{profile}",
                device_id=inst.uuid,
            )
    return g


def node(name: str, gpus: list[pb.GpuSample], source: int = pb.ALLOCATION_KUBELET, at: float = NOW) -> NodeSummary:
    r = report(name, gpus)
    r.allocation_source = source  # type: ignore[assignment]
    return summarize(r, IdleRule(), at)


def pod(requests: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}]},
    }


def table(*summaries: NodeSummary) -> Callable[[str], NodeSummary | None]:
    return {s.node: s for s in summaries}.get


def test_mig_profile_of_a_resource_name() -> None:
    assert mig_profile(MIG_1G) == "1g.10gb" and mig_profile("nvidia.com/mig-") is None
    assert mig_profile("nvidia.com/gpu") is None and mig_profile("example.com/mig-1g") is None


def test_the_pod_asks_per_profile_and_only_for_configured_resources() -> None:
    asked = read_pod(pod({MIG_1G: "2", MIG_3G: "1", "nvidia.com/mig-7g.80gb": "1"}), RESOURCES, "spread", "")
    assert asked.mig_needed == (("1g.10gb", 2), ("3g.40gb", 1)) and asked.gpus_needed == 0
    both = read_pod(pod({"nvidia.com/gpu": "1", MIG_1G: "1"}), RESOURCES, "spread", "")
    assert (both.gpus_needed, both.mig_needed) == (1, (("1g.10gb", 1),))
    # MIG resources not configured with --gpu-resource are not the extender's business.
    assert read_pod(pod({MIG_1G: "2"}), ("nvidia.com/gpu",), "spread", "").mig_needed == ()


def test_instances_per_profile_free_means_unheld_and_idle() -> None:
    s = node(
        "n",
        [
            mig_gpu(0, ("1g.10gb", False, 1), ("1g.10gb", True, 1), ("1g.10gb", False, 60), ("3g.40gb", False, 0)),
            mig_gpu(1, ("1g.10gb", False, 0), healthy=False),
            gpu(2),
        ],
    )
    assert s.mig_gpus == 2 and s.gpu_count == 1  # MIG GPUs offer no whole GPU
    assert s.mig_instances == (("1g.10gb", 3), ("3g.40gb", 1))  # the unhealthy GPU's instance does not count
    assert s.mig_free == (("1g.10gb", 1), ("3g.40gb", 1))  # held and busy (60 % memory) ones are not free
    unknown = node("n", [mig_gpu(0, ("1g.10gb", True, 1), ("1g.10gb", False, 60))], pb.ALLOCATION_UNAVAILABLE)
    assert unknown.mig_free == (("1g.10gb", 1),)  # allocation unknown: holders ignored, readings decide


@pytest.mark.parametrize(
    ("free", "total", "count", "reason"),
    [
        (2, 2, 2, None),  # free == asked: fits
        (1, 2, 2, reasons.INSUFFICIENT_FREE_MIG_DEVICES),  # one short, but the node has them: soft
        (1, 1, 2, reasons.INSUFFICIENT_MIG_DEVICES),  # not that many on the node at all
        (0, 0, 1, reasons.INSUFFICIENT_MIG_DEVICES),
    ],
)
def test_fresh_verdict_bounds(free: int, total: int, count: int, reason: reasons.Reason | None) -> None:
    instances = [("1g.10gb", i >= free, 1) for i in range(total)]
    s = node("n", [mig_gpu(0, *instances)])
    outcome = filter_mig((("1g.10gb", count),), ["n"], table(s), NOW, DecisionPolicy(no_fit_policy="reject"))
    assert (outcome.passed, outcome.failed.get("n")) == ((["n"], None) if reason is None else ([], reason))


def test_every_requested_profile_must_fit() -> None:
    s = node("n", [mig_gpu(0, ("1g.10gb", False, 1), ("3g.40gb", True, 1))])
    need = (("1g.10gb", 1), ("3g.40gb", 1))
    assert filter_mig(need, ["n"], table(s), NOW, DecisionPolicy(no_fit_policy="reject")).failed == {
        "n": reasons.INSUFFICIENT_FREE_MIG_DEVICES
    }


def test_stale_or_unknown_nodes_only_when_no_fresh_node_fits() -> None:
    fresh = node("fresh", [mig_gpu(0, ("1g.10gb", False, 1))])
    stale = node("stale", [mig_gpu(0, ("1g.10gb", False, 1))], at=NOW - 60)
    need = (("1g.10gb", 1),)
    out = filter_mig(need, ["fresh", "stale", "silent"], table(fresh, stale), NOW, DecisionPolicy())
    assert out.passed == ["fresh"]
    assert out.failed == {"stale": reasons.NO_FRESH_GPU_DATA, "silent": reasons.NO_FRESH_GPU_DATA}
    alone = filter_mig(need, ["stale", "silent"], table(stale), NOW, DecisionPolicy())
    assert alone.passed == ["stale", "silent"] and alone.assumed == ["stale", "silent"]
    closed = filter_mig(
        need, ["stale"], table(stale), NOW, DecisionPolicy(stale_policy="fail-closed", no_fit_policy="reject")
    )
    assert closed.failed == {"stale": reasons.STALE_GPU_DATA}


def test_pass_all_lets_only_soft_failures_through() -> None:
    busy = node("busy", [mig_gpu(0, ("1g.10gb", True, 1))])
    none = node("none", [mig_gpu(0, ("3g.40gb", False, 1))])
    out = filter_mig((("1g.10gb", 1),), ["busy", "none"], table(busy, none), NOW, DecisionPolicy())
    assert out.fallback and out.passed == ["busy"] and out.failed == {"none": reasons.INSUFFICIENT_MIG_DEVICES}


def test_through_the_scheduler_api() -> None:
    state = GpuState(IdleRule())
    for r in (
        report("mig", [mig_gpu(0, ("1g.10gb", False, 1), ("1g.10gb", False, 1))]),
        report("taken", [mig_gpu(0, ("1g.10gb", True, 1), ("1g.10gb", False, 1))]),
        report("whole", [gpu(i) for i in range(8)]),
    ):
        r.allocation_source = pb.ALLOCATION_KUBELET
        state.ingest(r, NOW)
    api = SchedulerApi(
        state, ExtenderMetrics(state), ApiSettings(DecisionPolicy(), gpu_resources=RESOURCES), clock=lambda: NOW
    )
    names = ["whole", "taken", "mig"]

    def args(requests: dict[str, str]) -> Any:
        return parse_extender_args(json.dumps({"Pod": pod(requests), "NodeNames": names}).encode())

    answer = api.filter(args({MIG_1G: "2"}))
    assert answer["NodeNames"] == ["mig"]
    assert answer["FailedNodes"] == {"taken": reasons.INSUFFICIENT_FREE_MIG_DEVICES.message}
    assert answer["FailedAndUnresolvableNodes"] == {"whole": reasons.INSUFFICIENT_MIG_DEVICES.message}
    # A whole-GPU pod: the MIG nodes are partitioned, the whole one takes it.
    whole = api.filter(args({"nvidia.com/gpu": "1"}))
    assert whole["NodeNames"] == ["whole"]
    assert set(whole["FailedAndUnresolvableNodes"].values()) == {reasons.MIG_PARTITIONED.message}
    # Both kinds at once: no node has both.
    both = api.filter(args({"nvidia.com/gpu": "1", MIG_1G: "1"}))
    assert both["NodeNames"] == [] and set(both["FailedAndUnresolvableNodes"]) == set(names)
    scores = {s["Host"]: s["Score"] for s in api.prioritize(args({"nvidia.com/gpu": "1", MIG_1G: "1"}))}
    assert all(score == 0 for score in scores.values())
    why = api.explain(args({MIG_1G: "2"}))
    assert why["migDevicesNeeded"] == {"1g.10gb": 2}
    rows = {r["node"]: r for r in why["nodes"]}
    assert rows["mig"]["migDevicesFree"] == {"1g.10gb": 2} and rows["taken"]["migDevicesFree"] == {"1g.10gb": 1}
    assert rows["whole"]["reasonCode"] == "InsufficientMigDevices" and rows["mig"]["result"] == "pass"
