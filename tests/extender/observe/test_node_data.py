"""Per-node gauges computed at scrape time: which reading judged each node's GPUs."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.observe.node_data import NodeDataCollector
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.harness import metric, parse_metrics


def _sm(g: pb.GpuSample, percent: float) -> pb.GpuSample:
    g.gpm.sm_active_percent = percent
    return g


def _judged(state: GpuState) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    registry.register(NodeDataCollector(state, None, lambda: 0.0))
    samples = parse_metrics(generate_latest(registry).decode())
    return {
        (node, rule): value
        for node in ("mixed", "plain", "lost", "broken")
        for rule in ("sm-active", "utilization")
        if (value := metric(samples, "gpu_extender_node_gpus_judged", node=node, rule=rule)) is not None
    }


def _fleet(state: GpuState) -> GpuState:
    mixed = [_sm(gpu(0, 100), 0.75), _sm(gpu(1), 99.0), gpu(2, 100), gpu(3, None, None, healthy=False)]
    state.ingest(report("mixed", mixed), 0.0)
    state.ingest(report("plain", [gpu(0), gpu(1, 95)]), 0.0)
    state.ingest(report("lost", [gpu(0, None, None, healthy=False)]), 0.0)
    state.ingest(report("broken", [gpu(0)], node_error="DriverNotLoaded"), 0.0)
    return state


def test_healthy_gpus_are_counted_by_the_reading_that_judged_them() -> None:
    judged = _judged(_fleet(GpuState(IdleRule())))
    # The unhealthy GPU, and every GPU of a node whose NVML is broken, is judged by neither rule.
    assert judged == {("mixed", "sm-active"): 2, ("mixed", "utilization"): 1, ("plain", "utilization"): 2}


def test_with_the_sm_rule_off_utilization_judges_every_gpu() -> None:
    judged = _judged(_fleet(GpuState(IdleRule(30.0, 50.0, None))))
    assert judged == {("mixed", "utilization"): 3, ("plain", "utilization"): 2}
