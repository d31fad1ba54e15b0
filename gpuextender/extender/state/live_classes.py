"""AcceleratorClass membership as the request path uses it: the inventory's label
membership, refined with what the agents' NVML says about each node's GPUs.

A node is in a class by its labels (`extender.model.ome.node_class`, computed once per
inventory version). Once its agent has reported, the class `capabilities` must
also hold for its GPUs (memory total, compute capability): a node labelled
H100-80GB whose GPUs are 40 GB A100s is a mislabelled node, and placing an
80 GB model there would fail at load time. Such a node leaves the class; the
extender logs it once per node, class and cause, counts it in a gauge, and
/explain shows why. A node without a report keeps its label classes.

Updates are incremental and happen off the request path: a node whose GPU
facts change (`GpuState.on_facts_change`: first report, new GPUs, node
forgotten) is re-checked alone, at ingest; a new inventory version re-checks
every reported node that has classes (O(nodes x their classes)) when the view
is rebuilt (`ViewBuilder.on_rebuild`, wired in app.py). A request that still
sees an unknown version rebuilds first, so the answer is never stale. Requests
get a plain dict, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from gpuextender.common.log_once import EVER, OncePer
from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.model.ome.node_class import MEMORY_TOLERANCE, ClassMatcher, Mismatch
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView

log = logging.getLogger("gpu_extender.classes")

_NODES_IN_CACHE = 256  # distinct allowed-class lists (runtimes x policies); cleared when full


# node -> the AcceleratorClasses it is in. A mapping, not a function: the per-node
# loops of the decision use its C-level .get.
ClassesByNode = Mapping[str, tuple[str, ...]]


def nodes_in_classes(classes_by_node: ClassesByNode, classes: Sequence[str]) -> frozenset[str]:
    """The nodes in at least one of `classes`."""
    wanted = set(classes)
    return frozenset(node for node, cs in classes_by_node.items() if not wanted.isdisjoint(cs))


class LiveClasses:
    def __init__(self, state: GpuState, *, memory_tolerance: float = MEMORY_TOLERANCE) -> None:
        self._state = state
        self._tolerance = memory_tolerance
        self._version = -1
        self._base: Mapping[str, tuple[str, ...]] = {}
        self._matchers: dict[str, ClassMatcher] = {}
        self._by_node: dict[str, tuple[str, ...]] = {}
        self._excluded: dict[str, dict[str, Mismatch]] = {}  # node -> class -> why NVML disagrees
        # The nodes of a class list (a plan's allowed classes): filter's membership test
        # becomes one set lookup per candidate. Cleared whenever membership changes.
        self._nodes_in: dict[tuple[str, ...], frozenset[str]] = {}
        self._say = OncePer(EVER)  # each (node, class, detail) once (bounded)
        state.on_facts_change(self._facts_changed)

    def classes_by_node(self, view: InventoryView) -> Mapping[str, tuple[str, ...]]:
        """node -> its classes: labels and, where the agent reported, capabilities."""
        if view.version != self._version:
            self._rebuild(view)
        return self._by_node

    def _facts_changed(self, node: str) -> None:
        if self._version >= 0:  # before the first build there is nothing to refine
            self._refine(node)

    def nodes_in(self, view: InventoryView, classes: tuple[str, ...]) -> frozenset[str]:
        """The nodes in at least one of `classes`, cached until membership changes."""
        by_node = self.classes_by_node(view)
        found = self._nodes_in.get(classes)
        if found is None:
            if len(self._nodes_in) >= _NODES_IN_CACHE:
                self._nodes_in.clear()
            found = self._nodes_in[classes] = nodes_in_classes(by_node, classes)
        return found

    def excluded(self, view: InventoryView, node: str) -> Mapping[str, Mismatch]:
        """The classes `node` matches by labels but not by its GPUs, with the reason."""
        self.classes_by_node(view)
        return self._excluded.get(node, {})

    def excluded_pairs(self, view: InventoryView) -> int:
        self.classes_by_node(view)
        return sum(len(classes) for classes in self._excluded.values())

    def _rebuild(self, view: InventoryView) -> None:
        self._version = view.version
        self._base = view.membership.classes_by_node
        self._matchers = {name: ClassMatcher(cls) for name, cls in view.classes.items()}
        self._by_node = dict(self._base)
        self._excluded = {}
        self._nodes_in.clear()
        facts = self._state.facts
        for node, classes in self._base.items():
            if classes and facts(node):
                self._refine(node)

    def _refine(self, node: str) -> None:
        if node not in self._base:  # not in the inventory: no classes either way
            return
        label_classes = self._base[node]
        facts = self._state.facts(node)
        self._excluded.pop(node, None)
        before = self._by_node.get(node)
        if not facts or not label_classes:
            self._by_node[node] = label_classes
        else:
            self._by_node[node] = self._check(node, label_classes, facts)
        if self._by_node[node] != before:
            self._nodes_in.clear()

    def _check(self, node: str, label_classes: tuple[str, ...], facts: tuple[GpuFacts, ...]) -> tuple[str, ...]:
        """The label classes whose capabilities the node's GPUs meet; records the others."""
        kept: list[str] = []
        excluded: dict[str, Mismatch] = {}
        for name in label_classes:
            mismatch = self._matchers[name].capability_mismatch(facts, self._tolerance)
            if mismatch is None:
                kept.append(name)
                continue
            excluded[name] = mismatch
            if self._say(node, name, mismatch.detail):
                log.warning(
                    "node %s matches AcceleratorClass %s by its labels but not by its GPUs (%s): "
                    "left out of the class; check the node's labels",
                    node,
                    name,
                    mismatch.detail,
                )
        if excluded:
            self._excluded[node] = excluded
        return tuple(kept)
