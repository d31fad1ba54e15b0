"""The DRA device-taint writer at scrape time (issue 25): which mode it is in (off, unsupported:
the API serves no DeviceTaintRules, forbidden: no RBAC, standby: another replica leads, writing),
how many rules the leader keeps, and its writes by operation."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuextender.extender.state.device_taints import MODES, TaintWriterStatus


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
