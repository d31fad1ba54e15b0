"""The extender's live GPU state: the summary of the latest report per node.

Written by the gRPC ingest path, read by request handlers. Everything runs on
one asyncio loop, so plain dicts are safe; readers see either the old or the
new entry of a node, never a half-written one.

Besides the live summary, each node's static GPU facts (product name, memory
total, compute capability) are kept for AcceleratorClass capability checks.
They change only when a node's GPUs do (first report, hardware change, node
forgotten), and listeners hear of exactly those changes, so the class
membership built from them is updated per node instead of per report.

A report arrives here (`ingest`: --ingest-in-process) or already summarized by an ingest
worker (`store`: the summary and facts the worker made of it with the same functions;
`store_readings`: a light heartbeat's readings, applied to the summary of the full report it repeats).

Decisions read `summary(node)`: the report's summary less the GPUs of pods bound to the node
that its agent does not attribute yet (bound_pods.py), kept up to date on every report and on
every change of the node's pods in the ledger; `reported(node)` is the agent's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.state.bound_pods import offered, pending
from gpuextender.extender.state.facts_reader import FactsReader
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize, with_inferred_sharing
from gpuextender.extender.state.pod_ledger import BoundPod
from gpuextender.extender.state.summary_codec import Base, Readings, with_readings
from gpuextender.v1 import gpu_state_pb2 as pb

FactsListener = Callable[[str], None]  # called with the node name whose GPU facts changed


class GpuState:
    def __init__(self, rule: IdleRule) -> None:
        self.rule = rule
        # Only the summary of a report is kept: a parsed 8-GPU report holds ~8 KB (40 MiB at
        # 5,000 nodes), and every decision reads the summary.
        self._summaries: dict[str, NodeSummary] = {}
        self._facts: dict[str, tuple[GpuFacts, ...]] = {}
        self._facts_reader = FactsReader()  # for reports summarized here (`ingest`)
        self._facts_listeners: list[FactsListener] = []
        # What the decisions read: each summary less the bound pods its agent does not attribute
        # yet (bound_pods.py); the same object for a node with none.
        self._offered: dict[str, NodeSummary] = {}
        self._offered_listeners: list[Callable[[str], None]] = []
        self._settle_listeners: list[Callable[[], None]] = []
        self._allocatable: Callable[[str], int | None] = lambda _node: None
        self._raw: dict[str, NodeSummary] = {}  # summaries whose sharing may be read off allocatable
        # Per node, the full report its summary comes from: (sequence, received_at), what a light
        # heartbeat's readings name (`store_readings`).
        self._bases: dict[str, Base] = {}
        self._pods_on: Callable[[str], Iterable[BoundPod]] = lambda _node: ()
        # The request path's lookup: a bound dict.get, no Python frame per node.
        self.summary = self._offered.get
        # The agent's own numbers, before bound pods are taken off (explain shows both).
        self.reported = self._summaries.get

    def ingest(self, report: pb.NodeReport, received_at: float) -> bool:
        """Store a full snapshot; the one received last wins (snapshots are idempotent).

        Ordered by `received_at`, the extender's monotonic clock, never by `sample_time`:
        that is the node's clock, and one report stamped in the future (an NTP step) would
        make every later one look older and the node go stale. Returns False, storing
        nothing, only for a report received before the stored one (a caller's older time)."""
        current = self._summaries.get(report.node_name)
        if current is not None and received_at < current.received_at:
            return False
        return self.store(summarize(report, self.rule, received_at), self._facts_reader.read(report))

    def store(self, summary: NodeSummary, facts: tuple[GpuFacts, ...]) -> bool:
        """A report as summarized where it arrived (`ingest`, or an ingest worker): ordered by its
        `received_at` as `ingest` says. Facts listeners hear only of facts that differ."""
        node = summary.node
        current = self._summaries.get(node)
        if current is not None and summary.received_at < current.received_at:
            return False
        self._bases[node] = (summary.sequence, summary.received_at)
        self._put(node, summary)
        known = self._facts.get(node)
        if known is not facts and known != facts:
            self._facts[node] = facts
            self._facts_changed(node)
        return True

    def store_readings(self, node: str, base: Base, changes: Readings) -> bool:
        """A light heartbeat relayed by an ingest worker: `changes` to the summary of the node's full
        report `base`. False, storing nothing, when the node's summary is not of that report (a
        newer full report came through another worker, or the node was forgotten) or the stored one
        was received after the heartbeat."""
        if self._bases.get(node) != base:
            return False
        current = self._raw.get(node) or self._summaries[node]  # the agent's own, sharing not inferred
        summary = with_readings(current, changes)
        if summary.received_at < current.received_at:
            return False
        self._put(node, summary)
        return True

    def _put(self, node: str, summary: NodeSummary) -> None:
        if summary.sharing_unknown:
            self._raw[node] = summary
            summary = with_inferred_sharing(summary, self._allocatable(node))
        else:
            self._raw.pop(node, None)
        self._summaries[node] = summary
        pods = self._pods_on(node)
        self._offered[node] = offered(summary, pending(summary, pods)) if pods else summary
        for listener in self._offered_listeners:
            listener(node)

    def has_data(self, node: str) -> bool:
        """A report of the node is held (ingest.service.ReportStore)."""
        return node in self._summaries

    def facts(self, node: str) -> tuple[GpuFacts, ...] | None:
        """The node's GPUs as its agent last reported them; None before its first report."""
        return self._facts.get(node)

    def on_facts_change(self, listener: FactsListener) -> None:
        self._facts_listeners.append(listener)

    def _facts_changed(self, node: str) -> None:
        for listener in self._facts_listeners:
            listener(node)

    @property
    def offered_summaries(self) -> Mapping[str, NodeSummary]:
        """Every node's `summary` (read-only: the decisions' lookup)."""
        return self._offered

    def on_offered_change(self, listener: Callable[[str], None]) -> None:
        """`listener(node)` after a node's `summary` changed or went (a report, its bound pods)."""
        self._offered_listeners.append(listener)

    def on_settle(self, listener: Callable[[], None]) -> None:
        """`listener()` at `settle`: what it derives from the changes heard so far may be brought up
        to date then, between two batches of reports, rather than on a scheduler call's path."""
        self._settle_listeners.append(listener)

    def settle(self) -> None:
        """A batch of changes is stored (ingest_workers: a slice of a relayed frame)."""
        for listener in self._settle_listeners:
            listener()

    def read_allocatable(self, allocatable: Callable[[str], int | None]) -> None:
        """Where agents cannot tell how GPUs are shared, read it off the Node's allocatable
        (gpu_summary.with_inferred_sharing); call `allocatable_changed` when it may have changed."""
        self._allocatable = allocatable
        self.allocatable_changed()

    def allocatable_changed(self) -> None:
        for node, raw in self._raw.items():
            summary = with_inferred_sharing(raw, self._allocatable(node))
            if summary == self._summaries.get(node):
                continue
            self._summaries[node] = summary
            pods = self._pods_on(node)
            self._offered[node] = offered(summary, pending(summary, pods)) if pods else summary
            for listener in self._offered_listeners:
                listener(node)

    def count_bound_pods(self, pods_on: Callable[[str], Iterable[BoundPod]]) -> None:
        """Take each node's ledger pods (pod_ledger.PodLedger.pods_on) off what it offers; call
        `bound_pods_changed(node)` whenever a node's pods change."""
        self._pods_on = pods_on
        for node in self._summaries:
            self.bound_pods_changed(node)

    def bound_pods_changed(self, node: str) -> None:
        summary = self._summaries.get(node)
        if summary is not None:
            pods = self._pods_on(node)
            self._offered[node] = offered(summary, pending(summary, pods)) if pods else summary
            for listener in self._offered_listeners:
                listener(node)

    def summaries(self) -> list[NodeSummary]:
        return list(self._summaries.values())

    def forget_older_than(self, cutoff: float) -> list[str]:
        """Drop nodes whose last report arrived before `cutoff` (monotonic); return their names."""
        gone = [name for name, s in self._summaries.items() if s.received_at < cutoff]
        for name in gone:
            del self._summaries[name]
            del self._offered[name]
            self._raw.pop(name, None)
            self._bases.pop(name, None)
            for listener in self._offered_listeners:
                listener(name)
            self._facts_reader.forget(name)
            if self._facts.pop(name, None) is not None:
                self._facts_changed(name)
        return gone

    def __len__(self) -> int:
        return len(self._summaries)

    def node_names(self) -> list[str]:
        """The nodes holding GPU data."""
        return list(self._summaries)
