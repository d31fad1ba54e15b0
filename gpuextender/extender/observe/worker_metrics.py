"""The ingest workers' series on the extender's /metrics: what each last sent (workers/supervisor.py),
summed over the workers, and the workers' own count and restarts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

RESTART_REASONS = ("exited", "silent")


class WorkerMetrics(Collector):
    """Each worker's series as it last sent them; `refresh` asks every worker for them now (a
    scrape then shows every report acked before it). The workers count the same series (the
    same code, a share of the agents each): a sample is the sum over workers of the samples of
    its name and labels, which is right for the counters and for these gauges (open streams,
    held unknown nodes, paced streams: each a count of the worker's own)."""

    def __init__(self, ask: Callable[[], Awaitable[None]]) -> None:
        self.texts: dict[int, str] = {}  # worker index -> its exposition
        self._ask = ask  # every worker's series, now (the supervisor's)
        self.workers_running = 0
        self.restarts = dict.fromkeys(RESTART_REASONS, 0)

    async def refresh(self) -> None:
        await self._ask()

    def received(self, index: int, text: str) -> None:
        """Worker `index` sent its series."""
        self.texts[index] = text

    def running(self, count: int) -> None:
        self.workers_running = count

    def ended(self, index: int, reason: str) -> None:
        """Worker `index` is gone (RESTART_REASONS): its streams with it, so its gauges must not
        stand (its counters restart with it, which Prometheus's rate() reads as a reset)."""
        self.workers_running -= 1
        self.texts.pop(index, None)
        self.restarts[reason] += 1

    def restarted(self) -> None:
        self.workers_running += 1

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        sums: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
        for text in self.texts.values():
            for family in text_string_to_metric_families(text):
                if family.name not in merged:
                    merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                for sample in family.samples:
                    key = (family.name, sample.name, tuple(sorted(sample.labels.items())))
                    sums[key] = sums.get(key, 0.0) + sample.value
        for (name, sample_name, labels), value in sums.items():
            merged[name].add_sample(sample_name, dict(labels), value)
        yield from merged.values()
        running = GaugeMetricFamily(
            "gpu_extender_ingest_workers", "Ingest worker processes serving the agents' gRPC port now."
        )
        running.add_metric([], self.workers_running)
        yield running
        restarts = CounterMetricFamily(
            "gpu_extender_ingest_worker_restarts",
            "Ingest workers started again, by reason: exited (it ended), silent (no frame for "
            "supervisor.WORKER_SILENT_S: stopped or stuck, so it was killed).",
            labels=["reason"],
        )
        for reason, count in self.restarts.items():
            restarts.add_metric([reason], count)
        yield restarts
