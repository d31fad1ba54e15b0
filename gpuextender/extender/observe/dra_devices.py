"""GPUs that come through DRA, per node and state, at scrape time: how many a pod could still be
given (free), how many ResourceClaims hold (claimed), and how many a NoSchedule / NoExecute taint
keeps from the allocator (tainted). A device both claimed and tainted counts as claimed. And the
ResourceClaims the extender holds, allocated or not (a pod's GPU demand comes from them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuextender.extender.state.claim_ledger import ClaimLedger
from gpuextender.extender.state.inventory_view import InventoryView

STATES = ("free", "claimed", "tainted")


class DraDevicesCollector(Collector):
    def __init__(self, inventory: Callable[[], InventoryView], claims: ClaimLedger) -> None:
        self._inventory = inventory
        self._claims = claims

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "gpu_extender_node_dra_gpus",
            "Whole GPUs a node's DRA ResourceSlices publish for a GPU DeviceClass, by state: free (no claim "
            "holds it, no NoSchedule/NoExecute taint), claimed (a ResourceClaim holds it), tainted.",
            labels=["node", "state"],
        )
        for node, devices in sorted(self._inventory().dra.gpu_devices.items()):
            held = self._claims.allocated_on(node)
            counts = dict.fromkeys(STATES, 0)
            for ref, device in devices:
                counts["claimed" if ref in held else "free" if device.allocatable else "tainted"] += 1
            for state in STATES:
                family.add_metric([node, state], counts[state])
        yield family
        claims = GaugeMetricFamily(
            "gpu_extender_resource_claims",
            "ResourceClaims in the extender's claim ledger (every claim, GPU or not), by whether they are allocated.",
            labels=["allocated"],
        )
        allocated = self._claims.allocated_count()
        claims.add_metric(["true"], allocated)
        claims.add_metric(["false"], len(self._claims) - allocated)
        yield claims
