"""The DRA device-taint writer at scrape time (issues 25, 35): which mode it is in (off,
unsupported: the API serves no DeviceTaintRules, forbidden: no RBAC, standby: another replica
leads, writing), how many rules the leader keeps, its writes by operation; what stands by taint
key and device-plugin nodes by GPUsUsable status (every replica), the node-status writer's mode
and writes, and the writes the budget put off."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuextender.extender.state.device_taints import MODES, NODE_MODES, TaintWriterStatus


class DeviceTaintsCollector(Collector):
    def __init__(self, status: TaintWriterStatus) -> None:
        self._status = status

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        status = self._status
        mode = GaugeMetricFamily(
            "gpu_extender_device_taints_mode",
            "1 for the DRA device-taint writer's mode: off, unsupported (no DeviceTaintRules API: the "
            "filter alone keeps failing GPUs from DRA pods' nodes), forbidden (no RBAC), standby (another "
            "replica writes), writing.",
            labels=["mode"],
        )
        for m in MODES:
            mode.add_metric([m], 1 if status.mode == m else 0)
        yield mode
        yield GaugeMetricFamily(
            "gpu_extender_device_taint_rules", "DeviceTaintRules this replica keeps (the leader).", value=status.rules
        )
        writes = CounterMetricFamily(
            "gpu_extender_device_taint_writes", "DeviceTaintRule writes by this replica, by operation.", labels=["op"]
        )
        for op, count in sorted(status.writes.items()):
            writes.add_metric([op], count)
        yield writes
        standing = GaugeMetricFamily(
            "gpu_extender_device_taints_standing",
            "DeviceTaintRules that stand now by this replica's data (written by the leader), by taint key: "
            "gpu-extender.io/unhealthy, .../degraded, .../busy-outside-kubernetes.",
            labels=["key"],
        )
        for key, count in sorted(status.standing.items()):
            standing.add_metric([key], count)
        yield standing
        conditions = GaugeMetricFamily(
            "gpu_extender_gpus_usable_nodes",
            "Device-plugin GPU nodes by their GPUsUsable condition (False: no GPU usable; Unknown: no agent data).",
            labels=["status"],
        )
        for value, count in sorted(status.nodes_by_condition.items()):
            conditions.add_metric([value], count)
        yield conditions
        node_mode = GaugeMetricFamily(
            "gpu_extender_node_status_mode",
            "1 for the node-status writer's mode (GPUsUsable conditions, node taints): off, forbidden "
            "(no RBAC), standby (another replica writes), writing.",
            labels=["mode"],
        )
        for m in NODE_MODES:
            node_mode.add_metric([m], 1 if status.node_mode == m else 0)
        yield node_mode
        node_writes = CounterMetricFamily(
            "gpu_extender_node_status_writes",
            "Node writes by this replica: condition, taint (added), untaint (removed), event (AllocatedGPUsIdle).",
            labels=["op"],
        )
        for op, count in sorted(status.node_writes.items()):
            node_writes.add_metric([op], count)
        yield node_writes
        idle_nodes = GaugeMetricFamily(
            "gpu_extender_node_gpus_idle_past_window",
            "GPUs pods or claims hold on the node that read idle for over --idle-window without a break "
            "(a reclaim or scale-down signal; nodes with none are not listed).",
            labels=["node"],
        )
        for node, count in sorted(status.idle_by_node.items()):
            idle_nodes.add_metric([node], count)
        yield idle_nodes
        idle_claims = GaugeMetricFamily(
            "gpu_extender_claim_gpus_idle_past_window",
            "GPUs of a ResourceClaim, every one of which read idle for over --idle-window without a break.",
            labels=["namespace", "claim"],
        )
        for key, count in sorted(status.idle_claims.items()):
            namespace, _, name = key.partition("/")
            idle_claims.add_metric([namespace, name], count)
        yield idle_claims
        yield CounterMetricFamily(
            "gpu_extender_publish_writes_deferred",
            "Writes the budget (--publish-writes-per-second) refused: each ends the leader's pass, the rest waits "
            "for the next.",
            value=status.deferred,
        )
