"""The newest report, shared by every extender stream: a slot, not a queue.

Each stream waits for a version newer than the one it sent last and then sends
whatever is newest. A slow or reconnecting stream therefore skips snapshots
instead of building a backlog.
"""

from __future__ import annotations

import asyncio

from gpuextender.v1 import gpu_state_pb2 as pb


class LatestReport:
    def __init__(self) -> None:
        self._report: pb.NodeReport | None = None
        self._version = 0
        self._changed = asyncio.Event()
        # The newest report's gate epoch and heartbeat flag (read with it: newer_than returns
        # without a suspension point in between).
        self.epoch = 0
        self.repeats = False

    @property
    def version(self) -> int:
        return self._version

    @property
    def report(self) -> pb.NodeReport | None:
        return self._report

    def publish(self, report: pb.NodeReport, epoch: int = 0, repeats: bool = False) -> None:
        """`epoch` and `repeats`: the gate's (report/gate.py) for this report; a report that
        repeats its epoch's key may go light to a stream holding a full report of that epoch."""
        self._report = report
        self.epoch, self.repeats = epoch, repeats
        self._version += 1
        self._changed.set()
        self._changed = asyncio.Event()  # waiters hold the set one; new waiters get a fresh one

    async def newer_than(self, version: int) -> tuple[int, pb.NodeReport]:
        """Wait until a report newer than `version` exists; return (version, report)."""
        while self._version <= version or self._report is None:
            await self._changed.wait()
        return self._version, self._report
