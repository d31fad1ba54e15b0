"""/readyz's answer: serving, the first full inventory list, and (under --readiness-grace) every
GPU node's agent data.

A replica that has just started has no GPU data: every node would look idle to it until the
agents find it (their next --resolve-interval). Under --readiness-grace it stays unready until
every GPU node in the inventory has reported, or the grace has passed; then it is ready for good
(no flapping)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView

log = logging.getLogger("gpu_extender.http")


class Readiness:
    def __init__(
        self,
        state: GpuState,
        inventory: Callable[[], InventoryView],
        grace_s: float,
        clock: Callable[[], float],
        inventory_ready: Callable[[], bool],  # the first full list of every kind (cluster_sources.py)
    ) -> None:
        self._serving = False  # True once every port is up, False from shutdown on (app.py)
        self._inventory_ready = inventory_ready
        self._state = state
        self._inventory = inventory
        self._grace_s = grace_s
        self._clock = clock
        self._grace_deadline: float | None = None  # set by the first check
        self._agents_in = False

    def set_serving(self, serving: bool) -> None:
        self._serving = serving

    def not_ready_reason(self) -> str | None:
        """None when ready, else why not (one line for /readyz)."""
        if not self._serving:
            return "starting"
        if not self._inventory_ready():
            return "waiting for the first full inventory list"
        return self._waiting_for_agents()

    def _waiting_for_agents(self) -> str | None:
        grace = self._grace_s
        if self._agents_in or grace <= 0:
            return None
        now = self._clock()
        if self._grace_deadline is None:
            self._grace_deadline = now + grace
        view = self._inventory()
        gpu_nodes = [n for n, count in view.allocatable_gpus.items() if count > 0]
        missing = sum(1 for n in gpu_nodes if self._state.summary(n) is None)
        if now >= self._grace_deadline or (gpu_nodes and not missing):
            self._agents_in = True
            log.info(
                "ready: %d of %d GPU node(s) have reported (%s)",
                len(gpu_nodes) - missing,
                len(gpu_nodes),
                "all in" if not missing else f"--readiness-grace {grace:g}s passed",
            )
            return None
        return (
            f"waiting for agent data: {missing} of {len(gpu_nodes)} GPU node(s) not reported yet "
            f"(--readiness-grace, {self._grace_deadline - now:.0f}s left)"
        )
