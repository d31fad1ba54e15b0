"""The extender's live GPU state: the latest report and its summary per node.

Written by the gRPC ingest path, read by request handlers. Everything runs on
one asyncio loop, so plain dicts are safe; readers see either the old or the
new entry of a node, never a half-written one.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuextender.v1 import gpu_state_pb2 as pb

from extender.gpu_summary import IdleRule, NodeSummary, summarize


@dataclass(frozen=True, slots=True)
class NodeEntry:
    report: pb.NodeReport
    summary: NodeSummary


class GpuState:
    def __init__(self, rule: IdleRule) -> None:
        self.rule = rule
        self._nodes: dict[str, NodeEntry] = {}
        self._summaries: dict[str, NodeSummary] = {}
        # The request path's lookup: a bound dict.get, no Python frame per node.
        self.summary = self._summaries.get

    def ingest(self, report: pb.NodeReport, received_at: float) -> bool:
        """Store a full snapshot. An out-of-order one (older sample than stored) is
        dropped and False returned: snapshots are idempotent, the newest wins."""
        current = self._nodes.get(report.node_name)
        if current is not None and _sample_key(report) < _sample_key(current.report):
            return False
        entry = NodeEntry(report, summarize(report, self.rule, received_at))
        self._nodes[report.node_name] = entry
        self._summaries[report.node_name] = entry.summary
        return True

    def summaries(self) -> list[NodeSummary]:
        return list(self._summaries.values())

    def forget_older_than(self, cutoff: float) -> list[str]:
        """Drop nodes whose last report arrived before `cutoff` (monotonic); return their names."""
        gone = [name for name, e in self._nodes.items() if e.summary.received_at < cutoff]
        for name in gone:
            del self._nodes[name]
            del self._summaries[name]
        return gone

    def __len__(self) -> int:
        return len(self._nodes)


def _sample_key(report: pb.NodeReport) -> tuple[int, int]:
    return report.sample_time.seconds, report.sample_time.nanos
