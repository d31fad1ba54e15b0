"""Which domains of a group level are still whole (issue 53 item 1): every node the inventory
labels with the domain's value reports every GPU free and idle, as every pod reads it (the offered
summaries: bound pods and group holds taken). A single pod ranks the nodes of whole domains after
those of domains already broken open, so the largest group waiting keeps a home
(decide/README.md, "Whole domains kept whole").

Kept as reports arrive, like the fit index: a GpuState listener marks a node whose summary changed;
a question applies the marks (a node's wholeness moves its domain's count of broken nodes). Per
label, at most MAX_LEVELS kept; a new inventory version (another LevelIndex mapping) counts again.
A node without data, or with an NVML error, is not whole: unknown is never idle. Staleness is not
read: a stale node's domain holds no group room anyway (group_domains counts fresh data only), and
a single pod does not pass there while a fresh node fits.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping

from gpuextender.extender.state.gpu_summary import NodeSummary

MAX_LEVELS = 4  # labels counted at once (the configured group levels' first)


def node_whole(summary: NodeSummary | None) -> bool:
    """Every GPU of the node free and idle (so healthy), as every pod reads it."""
    return summary is not None and not summary.node_error and 0 < summary.gpu_count == summary.idle_gpus


class _Level:
    def __init__(self, value_of: Mapping[str, str], summaries: Mapping[str, NodeSummary]) -> None:
        self.value_of = value_of
        self.broken: Counter[str] = Counter()  # value -> its nodes not whole
        self.counted: dict[str, bool] = {}  # labelled node -> whole, as counted
        self.values = frozenset(value_of.values())
        self._nodes: frozenset[str] | None = None  # the whole domains' nodes
        get = summaries.get
        for node, value in value_of.items():
            whole = self.counted[node] = node_whole(get(node))
            if not whole:
                self.broken[value] += 1
        self._whole: frozenset[str] | None = None

    def update(self, node: str, summary: NodeSummary | None) -> None:
        value = self.value_of.get(node)
        if value is None:
            return
        whole = node_whole(summary)
        if self.counted[node] != whole:
            self.counted[node] = whole
            self.broken[value] += -1 if whole else 1
            self._whole = self._nodes = None

    def whole(self) -> frozenset[str]:
        if self._whole is None:
            broken = self.broken
            self._whole = frozenset(v for v in self.values if broken[v] <= 0)
        return self._whole

    def nodes(self, nodes_of: Mapping[str, frozenset[str]]) -> frozenset[str]:
        if self._nodes is None:
            self._nodes = frozenset().union(*(nodes_of.get(v, ()) for v in self.whole()))
        return self._nodes


class WholeDomains:
    """The whole domains per level label, over `summaries` (GpuState.offered_summaries)."""

    def __init__(self, summaries: Mapping[str, NodeSummary]) -> None:
        self._summaries = summaries
        self._levels: OrderedDict[str, _Level] = OrderedDict()
        self._marked: set[str] = set()

    def changed(self, node: str) -> None:
        """A GpuState listener: `node`'s offered summary changed or went."""
        if self._levels:
            self._marked.add(node)

    def whole(self, level: str, value_of: Mapping[str, str]) -> frozenset[str]:
        """The values of `level` (node -> value: `value_of`, one inventory version's) whose every
        labelled node is whole now."""
        return self._level(level, value_of).whole()

    def whole_nodes(
        self, level: str, value_of: Mapping[str, str], nodes_of: Mapping[str, frozenset[str]]
    ) -> frozenset[str]:
        """The nodes of those domains (`nodes_of`: value -> its nodes, the same version's)."""
        return self._level(level, value_of).nodes(nodes_of)

    def _level(self, level: str, value_of: Mapping[str, str]) -> _Level:
        kept = self._levels.get(level)
        if kept is None or kept.value_of is not value_of:  # (counted afresh: marks change nothing)
            kept = self._levels[level] = _Level(value_of, self._summaries)
            while len(self._levels) > MAX_LEVELS:
                self._levels.popitem(last=False)
        else:
            self._levels.move_to_end(level)
            self._apply(self._levels.values())
        return kept

    def _apply(self, levels: Iterable[_Level]) -> None:
        marked = self._marked
        if marked:
            get = self._summaries.get
            for kept in levels:
                for node in marked:
                    kept.update(node, get(node))
            marked.clear()
