"""Small agent pieces: reconnect backoff, the latest-report slot, proto conversion."""

from __future__ import annotations

import asyncio
import random

from gpuextender.agent.model.readings import GpuReading, NodeSample
from gpuextender.agent.report.encode import sample_to_report
from gpuextender.agent.report.latest import LatestReport
from gpuextender.common.backoff import Backoff
from gpuextender.v1 import gpu_state_pb2 as pb


def test_backoff_grows_with_jitter_up_to_the_cap_and_resets() -> None:
    backoff = Backoff(initial_s=0.2, max_s=5.0, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(12)]
    ceilings = [min(5.0, 0.2 * 2**n) for n in range(12)]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert 0.1 <= delay <= ceiling
    assert max(delays[6:]) > 2.5  # reached the upper range
    assert len(set(delays)) == len(delays)  # jittered
    backoff.reset()
    assert backoff.next_delay() <= 0.2


def test_latest_report_skips_to_the_newest_instead_of_queueing() -> None:
    async def scenario() -> tuple[int, int]:
        latest = LatestReport()
        for seq in range(1, 11):
            latest.publish(pb.NodeReport(node_name="n", sequence=seq))
        version, report = await latest.newer_than(0)
        waiter = asyncio.create_task(latest.newer_than(version))
        await asyncio.sleep(0)
        assert not waiter.done()  # nothing newer yet: it waits
        latest.publish(pb.NodeReport(node_name="n", sequence=11))
        _, newer = await asyncio.wait_for(waiter, 1)
        return report.sequence, newer.sequence

    assert asyncio.run(scenario()) == (10, 11)


def test_sample_to_report_keeps_absent_readings_absent() -> None:
    sample = NodeSample(
        sample_time=1700000000.25,
        duration_s=0.001,
        driver_version="550.1",
        gpus=[
            GpuReading(
                index=0,
                uuid="GPU-a",
                name="NVIDIA H100 80GB HBM3",
                compute_capability=(9, 0),
                memory_total_bytes=10,
                memory_used_bytes=0,
                utilization_gpu_percent=0,
                power_watts=None,
            ),
            GpuReading(index=1, healthy=False, unhealthy_reasons=["GpuIsLost"]),
        ],
    )
    report = sample_to_report(sample, node_name="n1", sequence=3, agent_version="0.1.0")
    assert (report.node_name, report.sequence, report.agent_version, report.driver_version) == (
        "n1",
        3,
        "0.1.0",
        "550.1",
    )
    assert report.sample_time.seconds == 1700000000 and report.sample_time.nanos == 250_000_000
    first, second = report.gpus
    assert first.HasField("utilization_gpu_percent") and first.utilization_gpu_percent == 0
    assert first.HasField("memory_used_bytes") and not first.HasField("power_watts")
    assert (first.compute_capability.major, first.compute_capability.minor) == (9, 0)
    assert not second.healthy and list(second.unhealthy_reasons) == ["GpuIsLost"]
    assert not second.HasField("memory_total_bytes")
    assert pb.NodeReport.FromString(report.SerializeToString()) == report
