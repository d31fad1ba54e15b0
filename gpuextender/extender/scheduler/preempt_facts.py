"""The preempt verb's per-node facts, kept between calls (issue 51, item 7).

kube-scheduler proposes up to a tenth of the nodes per preempt call, 500 of 10 victims each at 5,000
nodes, and asks again for the next pod: most of those nodes' pods and GPU summaries have not changed
in between. What `preempt_victims.plan` reads of a node (`NodeFacts`, with its `VictimTable`: what
evicting each of its pods frees) is therefore kept per node, and used again only while it is what
would be made now: the same pods (`PodLedger.version`), and the same summary and reported summary
objects. Every report makes new ones (its `received_at`: at least every agent --heartbeat, 3 s), a
bound pod or a group's hold too; new facts are then made over them, keeping the node's table where
the new summaries read as the old (`preempt_victims.room_key`: the idle, healthy and held GPUs and
what each pod holds; a heartbeat that changes none of them). The node's state tells of each new
summary as it is stored (`summary_changed`, from GpuState.on_offered_change): the facts move onto it
then, or go, so the summaries they held are freed with the report that replaced them rather than in
the next preempt call (a third of a call at 500 candidates each re-reported since). At most `limit`
nodes are kept, the oldest kept first to go.

A node's table is made the second time its facts are read unchanged (or over a report that reads
alike), not the first: where preempt calls are seconds apart most reads are first ones, and making a
table then (~1.2x the call) would only cost; in a burst of calls (a preemption storm) the nodes are
read again within seconds and judged from their tables.
A table also keeps the two judgements used last (`VictimTable.judged`): the next pod of the same shape
(priority and GPUs) that meets the same proposal there is answered with the same plan. One that read
the PodDisruptionBudgets (victims added) is kept for the budgets' generation it read
(`Budgets.generation`): they change without the node. With them a node's entry is ~3 KiB: ~15 MiB
at the 5,000 bound.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuextender.extender.decide.preempt_victims import NodeFacts, rebased, room_key, victim_table
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.pod_ledger import PodLedger

# Every candidate of the largest preempt call (wire.PREEMPT_MAX_CANDIDATES); ~3 KiB a node of 8 pods.
DEFAULT_LIMIT = 5_000

Lookup = Callable[[str], "NodeSummary | None"]
# (summary, reported, version, facts, unread): `unread`, whether a report came since it was last read
_Entry = tuple["NodeSummary | None", "NodeSummary | None", int, NodeFacts, bool]


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
        entries, version, made, kept = self._entries, self.ledger.versions(), self._made, self._kept

        def facts(node: str) -> NodeFacts:
            s, r, e = summary(node), reported(node), entries.get(node)
            if e is None or e[2] != version(node, 0):
                return made(node, s, r, False)  # first read since its pods changed: judged as before
            f = e[3]
            if e[0] is s and e[1] is r:
                if f.table is not None or s is None or not table:
                    if e[4]:  # (read since the report it followed: it follows the next too)
                        entries[node] = (s, r, e[2], f, False)
                    return f
                return made(node, s, r, True)  # read again unchanged: its table pays now
            if not table or s is None or e[0] is None:
                return made(node, s, r, False)
            if f.table is None:  # another report: read again where it reads alike
                return made(node, s, r, room_key(e[0], e[1]) == room_key(s, r))
            t = rebased(f.table, s, r)  # another report: the table kept where it reads alike
            return made(node, s, r, False) if t is None else kept(node, NodeFacts(s, r, f.pods, f.by_uid, t), e[2])

        return facts

    def follower(self, summary: Lookup, reported: Lookup) -> Callable[[str], None]:
        """A listener for GpuState.on_offered_change: `summary_changed` with the node's summaries
        now (read only for a node kept: every report of every node calls it)."""
        entries = self._entries

        def changed(node: str) -> None:
            if node in entries:
                self.summary_changed(node, summary(node), reported(node))

        return changed

    def summary_changed(self, node: str, summary: NodeSummary | None, reported: NodeSummary | None) -> None:
        """The node's summaries are now `summary` and `reported` (GpuState.on_offered_change: a report,
        its bound pods): its facts follow them where they read alike (`room_key`), else go. The
        summaries they held are then freed with the report that replaced them, not in the preempt
        call that next reads the node (a third of such a call at 500 candidates, where each had a
        report since)."""
        e = self._entries.get(node)
        if e is None or (e[0] is summary and e[1] is reported):
            return
        f = e[3]
        # Not read since the last report it followed (no preempt call proposed the node since), or
        # changed: it goes (read again, it is made again). Once preemption stops, each node's facts
        # follow one report more at most: no cost on every later report.
        if e[4] or summary is None or e[0] is None or e[2] != self.ledger.version(node):
            del self._entries[node]
        elif f.table is None:
            if room_key(e[0], e[1]) == room_key(summary, reported):  # (still read once: a table at the next)
                self._entries[node] = (summary, reported, e[2], NodeFacts(summary, reported, f.pods, f.by_uid), True)
            else:
                del self._entries[node]
        elif (t := rebased(f.table, summary, reported)) is not None:
            self._entries[node] = (summary, reported, e[2], NodeFacts(summary, reported, f.pods, f.by_uid, t), True)
        else:
            del self._entries[node]

    def _made(self, node: str, summary: NodeSummary | None, reported: NodeSummary | None, table: bool) -> NodeFacts:
        version = self.ledger.version(node)
        here = self.ledger.on_node(node)
        pods = here.values()
        t = victim_table(summary, reported, pods) if table and summary is not None else None
        return self._kept(node, NodeFacts(summary, reported, pods, here, t), version)

    def _kept(self, node: str, f: NodeFacts, version: int) -> NodeFacts:
        """`f` kept for `node` at the ledger's `version` of it, the newest entry."""
        if self._entries.pop(node, None) is None and len(self._entries) >= self._limit:
            del self._entries[next(iter(self._entries))]  # the oldest kept
        self._entries[node] = (f.summary, f.reported, version, f, False)
        return f
