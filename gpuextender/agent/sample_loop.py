"""Samples NVML every interval and publishes the result as the latest report."""

from __future__ import annotations

import asyncio
import logging

from gpuextender.agent.latest import LatestReport
from gpuextender.agent.metrics import AgentMetrics
from gpuextender.agent.nvml_reader import NvmlReader
from gpuextender.agent.report import sample_to_report

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
    ) -> None:
        self._reader = reader
        self._latest = latest
        self._metrics = metrics
        self._node_name = node_name
        self._agent_version = agent_version
        self.interval_s = interval_s
        self.sequence = 0
        self.last_sample_monotonic: float | None = None

    def set_interval(self, interval_s: float) -> None:
        """Adopt an interval an extender asked for, within sane bounds."""
        bounded = min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, interval_s))
        if bounded != self.interval_s:
            log.info("sample interval %.2fs -> %.2fs (requested by extender)", self.interval_s, bounded)
            self.interval_s = bounded

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            # NVML calls block (and can stall on a sick GPU): keep them off the event loop.
            sample = await asyncio.to_thread(self._reader.sample)
            self.sequence += 1
            self.last_sample_monotonic = loop.time()
            self._metrics.observe_sample(sample)
            report = sample_to_report(
                sample, node_name=self._node_name, sequence=self.sequence, agent_version=self._agent_version
            )
            self._latest.publish(report)
            await asyncio.sleep(max(0.0, started + self.interval_s - loop.time()))
