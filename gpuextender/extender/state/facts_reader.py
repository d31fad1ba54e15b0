"""Each node's static GPU facts (product name, memory total, compute capability) from its reports.

They change only when a node's GPUs do, so they are re-read only then: when the UUIDs differ
from the last report's, and on every report while they are incomplete (the agent sends a GPU's
UUID even when NVML could not give its name, memory or compute capability yet). Once complete, a
report costs one hash of its UUIDs (3 us instead of 10 us for 8 GPUs); a collision would only
delay a facts update. Nodes of one hardware type report equal facts: they share one tuple
(5,000 nodes would otherwise hold 40,000 copies of "NVIDIA H100 80GB HBM3").

Used where reports are summarized: the extender's GpuState with --ingest-in-process, else each
ingest worker (workers/worker_main.py), which relays the facts with every summary.
"""

from __future__ import annotations

from typing import TypeVar

from gpuextender.extender.model.gpu_facts import GpuFacts, facts_from_report
from gpuextender.v1 import gpu_state_pb2 as pb

POOL_SIZE = 4096  # distinct hardware configurations; cleared (not evicted) when full
T = TypeVar("T")


class FactsReader:
    def __init__(self) -> None:
        self._fingerprints: dict[str, int] = {}
        self._current: dict[str, tuple[GpuFacts, ...]] = {}
        self._incomplete: set[str] = set()  # nodes with a GPU whose facts are not all known yet
        self._pool: dict[tuple[GpuFacts, ...], tuple[GpuFacts, ...]] = {}

    def read(self, report: pb.NodeReport) -> tuple[GpuFacts, ...]:
        """The report's facts: the node's last tuple while its GPUs stay the same."""
        node = report.node_name
        fingerprint = hash(tuple([g.uuid for g in report.gpus]))
        if self._fingerprints.get(node) == fingerprint and node not in self._incomplete:
            return self._current[node]
        self._fingerprints[node] = fingerprint
        facts = pooled(self._pool, facts_from_report(report))
        if all(f.name and f.memory_total_bytes is not None and f.compute_capability for f in facts):
            self._incomplete.discard(node)
        else:
            self._incomplete.add(node)
        self._current[node] = facts
        return facts

    def forget(self, node: str) -> None:
        self._fingerprints.pop(node, None)
        self._current.pop(node, None)
        self._incomplete.discard(node)


def pooled(pool: dict[T, T], value: T) -> T:
    """The pool's equal value (`value` itself the first time); a full pool is cleared, so it never
    holds more than POOL_SIZE values."""
    if len(pool) >= POOL_SIZE and value not in pool:
        pool.clear()
    return pool.setdefault(value, value)
