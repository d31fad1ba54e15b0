"""GPU nodes in the inventory whose agent has never reported (or was forgotten).

Their filter verdicts rest on assumed data (see `extender.decide.decision`): a dead or
missing agent must be visible to an operator before it costs placements. The
set is a gauge computed at scrape time, and a warning whenever it changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView

log = logging.getLogger("gpu_extender.silent_nodes")

_NAMED = 10  # nodes named in one warning line; the rest are counted


def silent_gpu_nodes(view: InventoryView, state: GpuState) -> list[str]:
    """Nodes with allocatable GPUs, or GPUs through DRA, and no data from their agent, sorted."""
    gpu_nodes = {node for node, count in view.allocatable_gpus.items() if count > 0}.union(view.dra.gpu_devices)
    return sorted(node for node in gpu_nodes if state.summary(node) is None)


class SilentNodesCollector(Collector):
    def __init__(self, state: GpuState, inventory: Callable[[], InventoryView]) -> None:
        self._state = state
        self._inventory = inventory

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "gpu_extender_gpu_nodes_without_agent_data",
            "Nodes with allocatable GPUs in the inventory whose agent has not reported (or was forgotten): "
            "their verdicts rest on assumed data.",
            value=len(silent_gpu_nodes(self._inventory(), self._state)),
        )


class SilentNodesWarning:
    """Logs the silent set when it changes (called periodically)."""

    def __init__(self, state: GpuState, inventory: Callable[[], InventoryView]) -> None:
        self._state = state
        self._inventory = inventory
        self._last: list[str] = []

    def check(self) -> list[str]:
        silent = silent_gpu_nodes(self._inventory(), self._state)
        if silent != self._last:
            if silent:
                more = f" and {len(silent) - _NAMED} more" if len(silent) > _NAMED else ""
                log.warning(
                    "%d GPU node(s) in the inventory have no data from their agent (%s%s): their verdicts "
                    "rest on assumed data; is gpu-agent running there?",
                    len(silent),
                    ", ".join(silent[:_NAMED]),
                    more,
                )
            else:
                log.info("every GPU node in the inventory has reported")
            self._last = silent
        return silent

    async def run(self, first_after_s: float, every_s: float) -> None:
        """First look once agents have had time to report, then every `every_s`."""
        await asyncio.sleep(first_after_s)
        while True:
            self.check()
            await asyncio.sleep(every_s)
