"""GPUs a pod or a ResourceClaim holds while they stay idle: the reclaim and scale-down signal
(issue 35). Per node, the held GPUs its agent reads idle (the idle rule); per ResourceClaim, the
claim whose every GPU on its node is idle. publication.py holds each back for the idle window
(Hysteresis: idle without a break for the window; busy once, and it starts over), so a model
server between bursts is not a signal, a pod that has done nothing for half an hour is.

Where the holders are known only: a device-plugin node's GPUs from the kubelet's allocation (the
agent read it), a DRA node's from the allocated claims. Fresh data only: a GPU whose agent went
silent is unknown, never idle. Pure.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from gpuextender.extender.model.dra import DeviceRef
from gpuextender.extender.state.dra_inventory import NodeDevices
from gpuextender.extender.state.gpu_summary import GPU_ALLOCATED_IDLE, GPU_FREE_IDLE, NodeSummary
from gpuextender.extender.state.node_gpu_status import mark_key


def held_idle_gpus(node: str, summary: NodeSummary) -> list[str]:
    """A device-plugin node's GPUs a container holds (per the kubelet) that read idle, as mark keys."""
    return [mark_key(node, i) for i, cell in enumerate(summary.gpus) if cell[1] == GPU_ALLOCATED_IDLE]


def idle_claims(
    node: str, summary: NodeSummary, devices: NodeDevices, holders: Mapping[DeviceRef, str]
) -> tuple[list[str], dict[str, int]]:
    """A DRA node's GPUs an allocated claim holds that read idle (mark keys), and each claim whose
    every GPU device on the node reads idle, with its count of GPUs."""
    positions = summary.positions
    if positions is None or not holders:
        return [], {}
    marks: list[str] = []
    idle: dict[str, int] = {}
    busy: set[str] = set()
    for ref, device in devices:
        claim = holders.get(ref)
        if claim is None:
            continue
        at = positions.position(device.uuid, device.name)
        # Free or held per the agent: it may not attribute DRA devices; the claim says who holds it.
        if at is not None and at < len(summary.gpus) and summary.gpus[at][1] in (GPU_FREE_IDLE, GPU_ALLOCATED_IDLE):
            marks.append(mark_key(node, at))
            idle[claim] = idle.get(claim, 0) + 1
        else:  # busy, unhealthy, degraded or not joined: this claim is not idle
            busy.add(claim)
    return marks, {claim: n for claim, n in idle.items() if claim not in busy}


class IdleWindows:
    """Keys (held GPUs' marks, or claims) idle without a break for `window_s`, kept per node and
    updated only for the nodes that changed: a key stands once `window_s` has passed since it was
    first asked for, and goes at once when it is not asked for any more. Deadlines wait in a heap,
    so a tick costs the changes and the keys that come due, not the fleet (10,000 held idle GPUs
    settled as a whole took ~30 ms of the event loop)."""

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._since: dict[str, float] = {}  # key -> when it was first asked for (pending or standing)
        self.standing: dict[str, int] = {}  # key -> its value (GPUs of a claim; 1 for a GPU)
        self._values: dict[str, int] = {}
        self._by_node: dict[str, frozenset[str]] = {}
        self._due: list[tuple[float, str]] = []  # (deadline, key): one entry per key at most
        self._queued: set[str] = set()
        self.version = 0  # moves whenever `standing` does

    def set_node(self, node: str, asked: Mapping[str, int], now: float) -> None:
        """What `node` asks for now (an empty mapping: nothing, or unknown)."""
        keys = frozenset(asked)
        old = self._by_node.get(node, frozenset())
        for key in old - keys:
            del self._since[key]
            self._values.pop(key, None)
            if self.standing.pop(key, None) is not None:
                self.version += 1
        for key in keys - old:
            self._since[key] = now
            if key not in self._queued:  # else its entry, due earlier, is pushed on when it comes due
                self._queued.add(key)
                heapq.heappush(self._due, (now + self._window_s, key))
        for key in keys:
            value = asked[key]
            if self._values.get(key) != value:
                self._values[key] = value
                if key in self.standing:
                    self.standing[key] = value
                    self.version += 1
        if keys:
            self._by_node[node] = keys
        else:
            self._by_node.pop(node, None)

    def promote(self, now: float) -> None:
        """Every key whose window has passed without a break stands."""
        due = self._due
        while due and due[0][0] <= now:
            _, key = heapq.heappop(due)
            self._queued.discard(key)
            since = self._since.get(key)
            if since is None or key in self.standing:
                continue  # not asked for any more, or standing already
            deadline = since + self._window_s  # later than the entry's when it was asked for again
            if deadline <= now:
                self.standing[key] = self._values[key]
                self.version += 1
            else:
                self._queued.add(key)
                heapq.heappush(due, (deadline, key))
