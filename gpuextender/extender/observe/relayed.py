"""The ingest process's series on the extender's /metrics: the text it last sent (ingest/relay.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector


class RelayedMetrics(Collector):
    """The ingest process's series, as it last sent them (relay.py); `refresh` asks it
    for them now (a scrape then shows every report it acked before)."""

    def __init__(self) -> None:
        self.text = ""
        self.ask: Callable[[], Awaitable[None]] | None = None

    async def refresh(self) -> None:
        if self.ask is not None:
            await self.ask()

    def collect(self) -> Iterator[Metric]:
        yield from text_string_to_metric_families(self.text)
