"""The two inputs of a decision besides the pod: the call's candidate nodes, and a
`Snapshot` of what the extender knows, fixed for the whole request."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuextender.extender.decide import whole_gpus
from gpuextender.extender.decide.fit_index import FitIndex
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.live_classes import ClassesByNode, nodes_in_classes
from gpuextender.extender.state.pod_ledger import BoundPod
from gpuextender.extender.state.publication import NodePublished


@dataclass(frozen=True, slots=True)
class Candidates:
    names: Sequence[str]  # in request order
    allocatable: Mapping[str, int]  # allocatable GPUs per node (from the request's Nodes, or the inventory)


@dataclass(frozen=True, slots=True)
class Snapshot:
    summary: whole_gpus.SummaryLookup  # the node's GPU summary from its agent, or None
    view: InventoryView
    classes_by_node: ClassesByNode  # labels, refined by NVML facts where the agent reported
    now: float  # monotonic seconds: data age is judged on it
    policy: DecisionPolicy
    # Cached per membership version by extender.state.live_classes.LiveClasses; computed here if not given.
    nodes_in: Callable[[tuple[str, ...]], frozenset[str]] | None = None
    # Classes a node's labels match but its GPUs do not, with why (explain shows them).
    excluded: Callable[[str], Mapping[str, Any]] = field(default=lambda node: {})
    # The node's bound pods from the ledger (explain lists those its data does not account for),
    # and the agent's own summary before they are taken off.
    bound_pods: Callable[[str], Iterable[BoundPod]] = field(default=lambda node: ())
    reported: whole_gpus.SummaryLookup | None = None
    # Per node, which ResourceClaim (namespace/name) holds each DRA device (state/claim_ledger.py).
    claim_holders: Callable[[str], Mapping[tuple[str, str, str], str]] = field(default=lambda node: {})
    # The fresh verdicts and rankings over the same summaries `summary` looks up (fit_index.py);
    # None where `summary` is another view (DRA): then every call judges each node itself.
    fit_index: FitIndex | None = None
    # What the device-taint writer publishes for the node (taint rules, GPUsUsable): explain only.
    published: Callable[[str], NodePublished | None] = field(default=lambda node: None)
    # The ComputeDomains whose IMEX channel or daemon claims hold on the node (state/claim_ledger.py).
    compute_domains_on: Callable[[str], frozenset[str]] = field(default=lambda node: frozenset())

    def nodes_of(self, classes: tuple[str, ...]) -> frozenset[str]:
        """The nodes in at least one of `classes`."""
        if self.nodes_in is not None:
            return self.nodes_in(classes)
        return nodes_in_classes(self.classes_by_node, classes)
