"""The sample loop samples at its interval, at once when woken from another thread (a health
event), and never closer than MIN_INTERVAL_S however often it is woken."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.model.readings import GpuReading, NodeSample
from gpuextender.agent.report.latest import LatestReport
from gpuextender.agent.sampling.sample_loop import MIN_INTERVAL_S, SampleLoop


class Reader:
    """Stands in for NvmlReader: records when it was asked."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.clock: Callable[[], float] = time.monotonic

    def sample(self) -> NodeSample:
        self.times.append(self.clock())
        return NodeSample(sample_time=time.time(), duration_s=0.0, gpus=[GpuReading(index=0)])


def _loop(reader: Reader, interval_s: float, enrichers: tuple = ()) -> SampleLoop:
    return SampleLoop(
        reader,
        LatestReport(),
        AgentMetrics("n1"),
        node_name="n1",
        interval_s=interval_s,  # type: ignore[arg-type]
        agent_version="t",
        enrichers=enrichers,
    )


async def _until(what: str, check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll `check` on the event loop; fail (never hang) when it stays false."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def _run_until(loop: SampleLoop, reader: Reader, samples: int, timeout: float = 5.0) -> None:
    task = asyncio.create_task(loop.run())
    try:
        await _until(f"{samples} samples", lambda: len(reader.times) >= samples, timeout)
    finally:
        task.cancel()


def test_a_wake_from_another_thread_samples_at_once() -> None:
    async def scenario() -> None:
        reader = Reader()
        sampler = _loop(reader, interval_s=30.0)
        task = asyncio.create_task(sampler.run())
        await _until("the first sample", lambda: bool(reader.times))
        await asyncio.sleep(MIN_INTERVAL_S)
        woken_at = time.monotonic()
        threading.Thread(target=sampler.wake_now).start()  # as the NVML event thread does
        await _until("the sample after the wake", lambda: len(reader.times) >= 2)
        task.cancel()
        # The next sample came on the wake, not 30 s later.
        assert reader.times[1] - woken_at < 5.0
        assert reader.times[1] >= woken_at

    asyncio.run(scenario())


def test_a_storm_of_wakes_keeps_samples_min_interval_apart() -> None:
    async def scenario() -> None:
        reader = Reader()
        sampler = _loop(reader, interval_s=30.0)
        # The bound is on when reads begin, as the loop sees it: a busy machine may start the
        # sampling thread late, which moves a later read, never an earlier one.
        reader.clock = lambda: sampler.read_started
        stop = threading.Event()

        def storm() -> None:
            while not stop.is_set():
                sampler.wake_now()
                time.sleep(0.001)

        thread = threading.Thread(target=storm)
        task = asyncio.create_task(sampler.run())
        await asyncio.sleep(0.01)
        thread.start()
        try:
            await _until("5 samples under the storm", lambda: len(reader.times) >= 5)
        finally:
            stop.set()
        thread.join()
        task.cancel()
        gaps = [b - a for a, b in zip(reader.times, reader.times[1:], strict=False)]
        # asyncio may run a timer up to its clock's resolution early; nothing else moves it.
        assert min(gaps) >= MIN_INTERVAL_S - time.get_clock_info("monotonic").resolution - 1e-9, gaps

    asyncio.run(scenario())


def test_enrichers_run_on_each_sample_in_order() -> None:
    seen: list[str] = []

    def first(sample: NodeSample) -> None:
        seen.append("allocation")
        sample.allocation_source = "kubelet"

    def second(sample: NodeSample) -> None:
        seen.append(f"health after {sample.allocation_source}")

    async def scenario() -> None:
        reader = Reader()
        sampler = _loop(reader, interval_s=MIN_INTERVAL_S, enrichers=(first, second))
        await _run_until(sampler, reader, 2)

    asyncio.run(scenario())
    assert seen[:2] == ["allocation", "health after kubelet"]
