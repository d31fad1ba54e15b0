"""The preempt verb's per-node facts, kept between calls (issue 51, item 7).

kube-scheduler proposes up to a tenth of the nodes per preempt call, 500 of 10 victims each at 5,000
nodes, and asks again for the next pod: most of those nodes' pods and GPU summaries have not changed
in between. What `preempt_victims.plan` reads of a node (`NodeFacts`, with its `VictimTable`: what
evicting each of its pods frees) is therefore kept per node, and used again only while it is exactly
what would be made now: the same summary object (a report, a bound pod or a group's hold makes a new
one), the same reported summary, and the same pods (`PodLedger.version`). At most `limit` nodes are
kept, the oldest kept first to go.

A node's table is made the second time its facts are read unchanged, not the first: agents report at
least every --heartbeat (3 s), each report a new summary, so where preempt calls are seconds apart
every read is a first one, and making a table then (~1.2x the call) would only cost; in a burst of
calls (a preemption storm) the nodes are read again within seconds and judged from their tables.
A table also keeps the two judgements used last (`VictimTable.judged`): the next pod of the same shape
(priority and GPUs) that meets the same proposal there is answered with the same plan. One that read
the PodDisruptionBudgets (victims added) is kept for the budgets' generation it read
(`Budgets.generation`): they change without the node. With them a node's entry is ~3 KiB: ~15 MiB
at the 5,000 bound.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuextender.extender.decide.preempt_victims import NodeFacts, victim_table
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.pod_ledger import PodLedger

# Every candidate of the largest preempt call (wire.PREEMPT_MAX_CANDIDATES); ~3 KiB a node of 8 pods.
DEFAULT_LIMIT = 5_000

Lookup = Callable[[str], "NodeSummary | None"]
_Entry = tuple["NodeSummary | None", "NodeSummary | None", int, NodeFacts]  # (summary, reported, version, facts)


class PreemptFacts:
    """The NodeFacts of one ledger's nodes: kept, or made and kept."""

    def __init__(self, ledger: PodLedger, limit: int = DEFAULT_LIMIT) -> None:
        self.ledger = ledger
        self._limit = limit
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def facts(
        self, node: str, summary: NodeSummary | None, reported: NodeSummary | None, *, table: bool = True
    ) -> NodeFacts:
        """The node's facts over `summary` (what the decision reads) and `reported` (the agent's own);
        with its VictimTable where `table`, the node has a summary and was read so before (`lookup`)."""
        return self.lookup(lambda _n: summary, lambda _n: reported, table=table)(node)

    def lookup(self, summary: Lookup, reported: Lookup, *, table: bool = True) -> Callable[[str], NodeFacts]:
        """`facts` for one call's lookups, read per node (one Python frame per candidate: a call reads
        500). A group's call reads up to 5,000 nodes and never a table (preempt_group.py judges each
        node itself): `table=False` makes none, and takes facts kept without one."""
        entries, version, made = self._entries, self.ledger.versions(), self._made

        def facts(node: str) -> NodeFacts:
            s, r, e = summary(node), reported(node), entries.get(node)
            if e is not None and e[0] is s and e[1] is r and e[2] == version(node, 0):
                f = e[3]
                if f.table is not None or s is None or not table:
                    return f
                return made(node, s, r, True)  # read again unchanged: its table pays now
            return made(node, s, r, False)  # first read since the node changed: judged as before

        return facts

    def _made(self, node: str, summary: NodeSummary | None, reported: NodeSummary | None, table: bool) -> NodeFacts:
        version = self.ledger.version(node)
        here = self.ledger.on_node(node)
        pods = here.values()
        t = victim_table(summary, reported, pods) if table and summary is not None else None
        f = NodeFacts(summary, reported, pods, here, t)
        if self._entries.pop(node, None) is None and len(self._entries) >= self._limit:
            del self._entries[next(iter(self._entries))]  # the oldest kept
        self._entries[node] = (summary, reported, version, f)
        return f
