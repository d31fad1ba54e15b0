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
