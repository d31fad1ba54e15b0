"""Rules of a light heartbeat's readings (state/summary_refresh.py) that mutation testing (mutmut)
found no test holding; each test fails on a one-line change to the module: a heartbeat short of
utilization readings alone is refused, and its sample time is seconds plus nanoseconds / 1e9; a
GPU that a heartbeat would turn idle is named so; a report's shape key does not depend on the order
its sharing labels were set in."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.state.gpu_summary import GPU_FREE_BUSY, GPU_UNHEALTHY
from gpuextender.extender.state.summary_refresh import FullAsHeartbeat, RefreshBase, refreshed_readings, shape_key
from gpuextender.v1 import gpu_state_pb2 as pb

RULE = IdleRule(30.0, 50.0, 40.0)
BASE = RefreshBase(((0, GPU_UNHEALTHY, None, None), (1, GPU_UNHEALTHY, None, None)), (None, None), (None, None), "")


def test_a_heartbeat_short_of_utilization_readings_only_is_refused() -> None:
    beat = FullAsHeartbeat(2, Timestamp(seconds=1000), [5], [-1, -1], [-1.0, -1.0])
    assert refreshed_readings(BASE, beat, RULE, 7.0) == "a heartbeat for 2 GPUs carries 1/2/2 readings"


def test_the_sample_time_is_seconds_plus_nanoseconds_over_1e9() -> None:
    broken = BASE._replace(node_error="NVML_ERROR_DRIVER_NOT_LOADED")
    beat = FullAsHeartbeat(2, Timestamp(seconds=1000, nanos=500_000_000), [-1, -1], [-1, -1], [-1.0, -1.0])
    assert refreshed_readings(broken, beat, RULE, 7.0) == {"sequence": 2, "sample_time": 1000.5, "received_at": 7.0}


def test_a_gpu_a_heartbeat_would_turn_idle_is_named_so() -> None:
    busy = RefreshBase(((0, GPU_FREE_BUSY, 90, 10.0),), (100,), (True,), "")
    beat = FullAsHeartbeat(2, Timestamp(seconds=1000), [0], [0], [-1.0])
    assert refreshed_readings(busy, beat, RULE, 7.0) == "GPU 0 turns idle: send a full report"


def test_the_shape_key_does_not_depend_on_the_order_of_sharing_labels() -> None:
    keys = [f"nvidia.com/label-{i}" for i in range(32)]
    reports = []
    for turn in range(len(keys)):  # each rotation of the keys, forwards and backwards
        for order in (keys[turn:] + keys[:turn], (keys[turn:] + keys[:turn])[::-1]):
            report = pb.NodeReport(node_name="n")
            for key in order:
                report.sharing_labels[key] = "v"
            reports.append(report)
    assert len({shape_key(r) for r in reports}) == 1
