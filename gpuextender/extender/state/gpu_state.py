"""The extender's live GPU state: the summary of the latest report per node.

Written by the gRPC ingest path, read by request handlers. Everything runs on
one asyncio loop, so plain dicts are safe; readers see either the old or the
new entry of a node, never a half-written one.

Besides the live summary, each node's static GPU facts (product name, memory
total, compute capability) are kept for AcceleratorClass capability checks.
They change only when a node's GPUs do (first report, hardware change, node
forgotten), and listeners hear of exactly those changes, so the class
membership built from them is updated per node instead of per report.

Decisions read `summary(node)`: the report's summary less the GPUs of pods bound to the node
that its agent does not attribute yet (bound_pods.py), kept up to date on every report and on
every change of the node's pods in the ledger; `reported(node)` is the agent's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.ome.node_class import GpuFacts, facts_from_report
from gpuextender.extender.state.bound_pods import offered, pending
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize, with_inferred_sharing
from gpuextender.extender.state.pod_ledger import BoundPod
from gpuextender.v1 import gpu_state_pb2 as pb

FactsListener = Callable[[str], None]  # called with the node name whose GPU facts changed

_FACTS_POOL_SIZE = 4096  # distinct hardware configurations; cleared (not evicted) when full


class GpuState:
    def __init__(self, rule: IdleRule) -> None:
        self.rule = rule
        # Only the summary of a report is kept: a parsed 8-GPU report holds ~8 KB (40 MiB at
        # 5,000 nodes), and every decision reads the summary.
        self._summaries: dict[str, NodeSummary] = {}
        self._facts: dict[str, tuple[GpuFacts, ...]] = {}
        self._fingerprints: dict[str, int] = {}
        self._incomplete: set[str] = set()  # nodes with a GPU whose facts are not all known yet
        # Nodes of one hardware type report equal facts: they share one tuple (5,000 nodes
        # would otherwise hold 40,000 copies of "NVIDIA H100 80GB HBM3").
        self._facts_pool: dict[tuple[GpuFacts, ...], tuple[GpuFacts, ...]] = {}
        self._facts_listeners: list[FactsListener] = []
        # What the decisions read: each summary less the bound pods its agent does not attribute
        # yet (bound_pods.py); the same object for a node with none.
        self._offered: dict[str, NodeSummary] = {}
        self._offered_listeners: list[Callable[[str], None]] = []
        self._allocatable: Callable[[str], int | None] = lambda _node: None
        self._raw: dict[str, NodeSummary] = {}  # summaries whose sharing may be read off allocatable
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
        summary = summarize(report, self.rule, received_at)
        if summary.sharing_unknown:
            self._raw[report.node_name] = summary
            summary = with_inferred_sharing(summary, self._allocatable(report.node_name))
        else:
            self._raw.pop(report.node_name, None)
        self._summaries[report.node_name] = summary
        pods = self._pods_on(report.node_name)
        self._offered[report.node_name] = offered(summary, pending(summary, pods)) if pods else summary
        for listener in self._offered_listeners:
            listener(report.node_name)
        # Facts are re-read when the node's GPUs change (their UUIDs), and on every report
        # while they are incomplete: the agent sends a GPU's UUID even when NVML could not
        # give its name, memory or compute capability yet. Once complete, a report costs one
        # hash of the UUIDs (3 us instead of 10 us for 8 GPUs); a collision would only delay
        # a facts update.
        fingerprint = hash(tuple([g.uuid for g in report.gpus]))
        if self._fingerprints.get(report.node_name) != fingerprint or report.node_name in self._incomplete:
            self._fingerprints[report.node_name] = fingerprint
            facts = facts_from_report(report)
            if len(self._facts_pool) >= _FACTS_POOL_SIZE:
                self._facts_pool.clear()
            facts = self._facts_pool.setdefault(facts, facts)
            if all(f.name and f.memory_total_bytes is not None and f.compute_capability for f in facts):
                self._incomplete.discard(report.node_name)
            else:
                self._incomplete.add(report.node_name)
            if self._facts.get(report.node_name) != facts:
                self._facts[report.node_name] = facts
                self._facts_changed(report.node_name)
        return True

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
            for listener in self._offered_listeners:
                listener(name)
            del self._fingerprints[name]
            self._incomplete.discard(name)
            if self._facts.pop(name, None) is not None:
                self._facts_changed(name)
        return gone

    def __len__(self) -> int:
        return len(self._summaries)

    def node_names(self) -> list[str]:
        """The nodes holding GPU data."""
        return list(self._summaries)
