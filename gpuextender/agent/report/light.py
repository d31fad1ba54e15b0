"""A light heartbeat (contract 0.6, NodeReport.heartbeat_of): a report reduced to the readings an
extender takes from a heartbeat, for a stream whose extender holds the full report it repeats.

The gate (report/gate.py) sends a heartbeat when nothing an extender decides with changed; the
extender's workers then only need the readings that rank a node within its class, not the whole
snapshot to validate and summarize again (4-6x less of their CPU per report: bench/bench_apply.py,
bench/RESULTS.md, issue 36). Which report a stream may send light, and when it must send a full one, is the
stream's to say (stream/streamer.py).
"""

from __future__ import annotations

from gpuextender.common.heartbeat_readings import heartbeat_readings
from gpuextender.v1 import gpu_state_pb2 as pb


def light_heartbeat(report: pb.NodeReport, repeats: int) -> pb.NodeReport:
    """`report`'s readings, for the stream's extender that ACCEPTED full report `repeats`."""
    utils, used, sm_active = heartbeat_readings(report.gpus)
    light = pb.NodeReport(
        node_name=report.node_name,
        sequence=report.sequence,
        heartbeat_of=repeats,
        heartbeat_utilization_percent=utils,
        heartbeat_memory_used_bytes=used,
        heartbeat_sm_active_percent=sm_active,
    )
    light.sample_time.CopyFrom(report.sample_time)
    return light
