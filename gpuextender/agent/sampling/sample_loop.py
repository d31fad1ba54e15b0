"""Samples NVML every interval and publishes the result as the latest report (when the report
gate says the extenders need it: report_gate; every sample feeds /metrics).

A health event (e.g. an XID, from the NVML event thread) calls `wake_now()`: the next sample is
taken at once instead of at the next interval, so the extender hears of it in well under a
second. Samples stay at least MIN_INTERVAL_S apart, so an event storm cannot spin the loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.model.readings import NodeSample
from gpuextender.agent.report.encode import sample_to_report
from gpuextender.agent.report.gate import ReportGate
from gpuextender.agent.report.latest import LatestReport
from gpuextender.agent.sources.nvml_reader import NvmlReader

log = logging.getLogger("gpu_agent.sampler")

MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 60.0


class SampleLoop:
    def __init__(
        self,
        reader: NvmlReader,
        latest: LatestReport,
        metrics: AgentMetrics,
        *,
        node_name: str,
        interval_s: float,
        agent_version: str,
        enrichers: Sequence[Callable[[NodeSample], None]] = (),
        gate: ReportGate | None = None,
    ) -> None:
        self._reader = reader
        # Run on the sample, in the sampling thread, in order: allocation from the kubelet, health.
        self._enrichers = tuple(enrichers)
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._latest = latest
        self._gate = gate  # None: every sample is streamed
        self._metrics = metrics
        self._node_name = node_name
        self._agent_version = agent_version
        self.interval_s = interval_s
        self.sequence = 0
        self.last_sample_monotonic: float | None = None
        # When the newest read began, in the sampling thread (the loop's clock: time.monotonic). The
        # next read begins MIN_INTERVAL_S after it at the earliest, however late the thread started.
        self.read_started = 0.0

    def set_interval(self, interval_s: float) -> None:
        """Adopt an interval an extender asked for, within sane bounds."""
        bounded = min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, interval_s))
        if bounded != self.interval_s:
            log.info("sample interval %.2fs -> %.2fs (requested by extender)", self.interval_s, bounded)
            self.interval_s = bounded

    def wake_now(self) -> None:
        """Sample again now (after MIN_INTERVAL_S at least). Safe to call from any thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def _read(self) -> NodeSample:
        self.read_started = time.monotonic()
        sample = self._reader.sample()
        for enrich in self._enrichers:
            enrich(sample)
        return sample

    async def run(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()  # an event from here on triggers the next sample early
            # NVML and kubelet calls block (and can stall on a sick GPU): keep them off the event loop.
            sample = await asyncio.to_thread(self._read)
            self.sequence += 1
            self.last_sample_monotonic = loop.time()
            self._metrics.observe_sample(sample)
            report = sample_to_report(
                sample, node_name=self._node_name, sequence=self.sequence, agent_version=self._agent_version
            )
            if self._gate is None:
                self._latest.publish(report)
            elif self._gate.admit(report, loop.time()):
                self._latest.publish(report, self._gate.epoch, self._gate.repeats)
            else:
                self._metrics.samples_not_streamed.inc()
            started = self.read_started
            await asyncio.sleep(max(0.0, started + MIN_INTERVAL_S - loop.time()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, started + self.interval_s - loop.time()))
