"""GPUs that come through DRA, per node and state, at scrape time: how many a pod could still be
given (free), how many ResourceClaims hold (claimed), and how many a NoSchedule / NoExecute taint
keeps from the allocator (tainted). A device both claimed and tainted counts as claimed. Of each
state, how many the node's agent reads idle (fresh data only: a node without it has no idle series,
as unknown is not idle); claimed and idle is DRA's allocated-but-idle. And the ResourceClaims the
extender holds, allocated or not (a pod's GPU demand comes from them). MIG devices the same way,
per profile and state."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuextender.extender.state.claim_ledger import ClaimLedger
from gpuextender.extender.state.freshness import is_fresh
from gpuextender.extender.state.gpu_summary import GPU_ALLOCATED_IDLE, GPU_FREE_IDLE, NodeSummary
from gpuextender.extender.state.inventory_view import InventoryView

STATES = ("free", "claimed", "tainted")


IDLE_CELLS = frozenset({GPU_FREE_IDLE, GPU_ALLOCATED_IDLE})  # the agent's idle rule, held or not


class DraDevicesCollector(Collector):
    def __init__(
        self,
        inventory: Callable[[], InventoryView],
        claims: ClaimLedger,
        reported: Callable[[str], NodeSummary | None] = lambda node: None,
        clock: Callable[[], float] = time.monotonic,
        stale_after_s: float = 0.0,
    ) -> None:
        """`reported`: a node's summary as its agent reported it (GpuState.reported), judged fresh
        on `clock` as the decisions judge it (`stale_after_s`)."""
        self._inventory = inventory
        self._claims = claims
        self._reported, self._clock, self._stale_after_s = reported, clock, stale_after_s

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "gpu_extender_node_dra_gpus",
            "Whole GPUs a node's DRA ResourceSlices publish for a GPU DeviceClass, by state: free (no claim "
            "holds it, no NoSchedule/NoExecute taint), claimed (a ResourceClaim holds it), tainted.",
            labels=["node", "state"],
        )
        idle = GaugeMetricFamily(
            "gpu_extender_node_dra_gpus_idle",
            "Of gpu_extender_node_dra_gpus in each state, those the node's agent reads idle (fresh data only; "
            "no series without it). claimed and idle: allocated to a claim but doing nothing.",
            labels=["node", "state"],
        )
        now = self._clock()
        for node, devices in sorted(self._inventory().dra.gpu_devices.items()):
            held = self._claims.allocated_on(node)
            summary = self._reported(node)
            if summary is not None and (
                summary.positions is None or not is_fresh(summary.received_at, now, self._stale_after_s)
            ):
                summary = None  # no idle series: GPUs not known by position, or data not fresh
            counts = dict.fromkeys(STATES, 0)
            idle_counts = dict.fromkeys(STATES, 0)
            for ref, device in devices:
                state = "claimed" if ref in held else "free" if device.allocatable else "tainted"
                counts[state] += 1
                if summary is not None:
                    idle_counts[state] += summary.gpu_state(device.uuid, device.name) in IDLE_CELLS
            for state in STATES:
                family.add_metric([node, state], counts[state])
                if summary is not None:
                    idle.add_metric([node, state], idle_counts[state])
        yield family
        yield idle
        mig = GaugeMetricFamily(
            "gpu_extender_node_dra_mig_devices",
            "MIG devices a node's DRA ResourceSlices publish for a MIG DeviceClass, by profile and state "
            "(free, claimed, tainted: as gpu_extender_node_dra_gpus).",
            labels=["node", "profile", "state"],
        )
        for node, devices in sorted(self._inventory().dra.mig_devices.items()):
            held = self._claims.allocated_on(node)
            per_profile: dict[str, dict[str, int]] = {}
            for ref, device in devices:
                counts = per_profile.setdefault(device.profile, dict.fromkeys(STATES, 0))
                counts["claimed" if ref in held else "free" if device.allocatable else "tainted"] += 1
            for profile, counts in sorted(per_profile.items()):
                for state in STATES:
                    mig.add_metric([node, profile, state], counts[state])
        yield mig
        claims = GaugeMetricFamily(
            "gpu_extender_resource_claims",
            "ResourceClaims in the extender's claim ledger (every claim, GPU or not), by whether they are allocated.",
            labels=["allocated"],
        )
        allocated = self._claims.allocated_count()
        claims.add_metric(["true"], allocated)
        claims.add_metric(["false"], len(self._claims) - allocated)
        yield claims
