"""What a relay holds: each connected agent's newest full report and light heartbeat, and for
each extender replica what it has not been sent yet.

The relay is the agents' extender (IngestService over this store: it paces, authenticates and
checks each report, and acks it once held here); the replicas get what it holds, many nodes per
message (upstream.py). Per node it keeps the last full report and the newest heartbeat after it,
as bytes: a replica whose stream opens is sent every held node at once, so it does not wait for
each agent's next full report; one that falls behind gets the newest per node, never a backlog.
A node is forgotten when its last agent stream here ends (its data at the extenders ages there as
a silent node's does): what it holds is bounded by the agents connected.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.ingest.limits import WRAP_BYTES
from gpuextender.extender.state.summary_refresh import shape_key
from gpuextender.v1 import gpu_state_pb2 as pb


class _Node:
    __slots__ = ("forwarded", "full", "heartbeat", "key", "open", "sequence", "stream")

    def __init__(self, stream: int) -> None:
        self.stream = stream  # its relayed stream's number here (RelayedReport.stream)
        self.forwarded = False  # a report went to the replicas on it: they are told when it ends
        self.open = 0  # agent streams of the node open here
        self.full = b""  # its last full report (b"": none yet on this stream)
        self.sequence = 0  # that report's sequence: what a heartbeat must repeat
        self.heartbeat = b""  # the newest light heartbeat after it (b"": none)
        self.key: int | None = None  # its summary_refresh.shape_key (None: none yet on this stream)


class Pending:
    """What one replica has not been sent yet: per node (its stream, full report, heartbeat), in
    the order the nodes last changed, and the agent streams that ended."""

    def __init__(self) -> None:
        self.reports: dict[str, tuple[int, bytes, bytes]] = {}
        self.closed: list[int] = []
        self.ready = asyncio.Event()  # set: something to send

    def put(self, node: str, stream: int, full: bytes, heartbeat: bytes) -> None:
        if full == b"" and (waiting := self.reports.get(node)) is not None and waiting[0] == stream:
            full = waiting[1]  # a heartbeat waits behind the full report it repeats, not yet sent
        self.reports.pop(node, None)  # re-inserted last: sent in the order nodes changed
        self.reports[node] = (stream, full, heartbeat)
        self.ready.set()

    def close(self, stream: int) -> None:
        """Agent stream `stream` ended: said after what it sent (which is still sent)."""
        self.closed.append(stream)
        self.ready.set()

    def take(self, max_bytes: int) -> Iterator[bytes]:
        """Serialized RelayBatch messages of at most `max_bytes` each (a report is at most
        max_bytes - WRAP_BYTES: the relay's transport refused larger), emptying this: each node's
        full report and heartbeat, then the streams that ended."""
        reports, closed = self.reports, self.closed
        self.reports, self.closed = {}, []
        self.ready.clear()
        batch = pb.RelayBatch()
        size = 0
        items = itertools.chain(
            (
                (stream, data, False)
                for stream, full, heartbeat in reports.values()
                for data in (full, heartbeat)
                if data
            ),
            ((stream, b"", True) for stream in closed),
        )
        for stream, data, is_close in items:
            if size + len(data) + WRAP_BYTES > max_bytes and size:
                yield batch.SerializeToString()
                batch, size = pb.RelayBatch(), 0
            batch.reports.add(stream=stream, report=data, closed=is_close)
            size += len(data) + WRAP_BYTES
        if size:
            yield batch.SerializeToString()


class ForwardStore:
    """The relay's ReportStore (ingest/service.py's HeartbeatStore): takes light heartbeats
    against the full report it holds for the node, from the same agent stream."""

    def __init__(self, rule: IdleRule) -> None:
        self.rule = rule
        self._nodes: dict[str, _Node] = {}
        self._streams = itertools.count(1)
        self._replicas: dict[str, Pending] = {}
        self._refused: dict[str, str] = {}  # node -> why a replica refused what it was sent
        self._keyed: tuple[pb.NodeReport, int] | None = None  # the report known_shape keyed last

    def __len__(self) -> int:
        return len(self._nodes)

    def has_data(self, node: str) -> bool:
        return node in self._nodes

    def known_shape(self, report: pb.NodeReport) -> bool:
        """Only readings changed since the node's last full report on this stream (an agent before
        0.6 at its heartbeat): IngestService then checks only what readings can break, as an
        ingest worker does; the report is forwarded whole all the same."""
        keyed = self._keyed = (report, shape_key(report))  # kept for its `ingest`, next
        held = self._nodes.get(report.node_name)
        return held is not None and held.key == keyed[1]

    def stream_opened(self, node: str) -> None:
        held = self._nodes.get(node)
        if held is None:
            held = self._nodes[node] = _Node(0)
        self._new_relayed_stream(held)
        held.open += 1
        self._refused.pop(node, None)

    def stream_closed(self, node: str) -> None:
        held = self._nodes.get(node)
        if held is None:
            return
        held.open -= 1
        if held.open > 0:
            # Another agent stream of the node is still open here (two agents of one node for a
            # moment): what went out on the relayed stream may carry either one's sequences, and
            # the replicas would refuse the survivor's lower ones for good. It goes on under a new
            # relayed stream from its next full report (its heartbeats are refused until then).
            self._new_relayed_stream(held)
            return
        del self._nodes[node]
        self._refused.pop(node, None)
        self._end_relayed_stream(held)

    def _new_relayed_stream(self, held: _Node) -> None:
        """The node's reports go out on a new relayed stream, from its next full report."""
        self._end_relayed_stream(held)
        held.stream = next(self._streams)
        held.full, held.sequence, held.heartbeat, held.key = b"", 0, b"", None

    def _end_relayed_stream(self, held: _Node) -> None:
        if held.forwarded:
            held.forwarded = False
            for pending in self._replicas.values():
                pending.close(held.stream)

    def ingest(self, report: pb.NodeReport, received_at: float) -> bool:
        held = self._nodes[report.node_name]  # stream_opened came first (IngestService)
        keyed, self._keyed = self._keyed, None
        held.key = keyed[1] if keyed is not None and keyed[0] is report else shape_key(report)
        held.full, held.sequence, held.heartbeat = report.SerializeToString(), report.sequence, b""
        held.forwarded = True
        self._refused.pop(report.node_name, None)
        for pending in self._replicas.values():
            pending.put(report.node_name, held.stream, held.full, b"")
        return True

    def refresh(self, heartbeat: pb.NodeReport, received_at: float) -> str | None:
        node = heartbeat.node_name
        held = self._nodes.get(node)
        if held is None or not held.full or held.sequence != heartbeat.heartbeat_of:
            return f"report {heartbeat.heartbeat_of} of node {node} is not held here: send a full report"
        refused = self._refused.pop(node, None)
        if refused is not None:
            held.full, held.sequence, held.heartbeat, held.key = b"", 0, b"", None
            return f"an extender refused what this relay sent of node {node} ({refused}): send a full report"
        held.heartbeat = heartbeat.SerializeToString()
        for pending in self._replicas.values():
            pending.put(node, held.stream, b"", held.heartbeat)
        return None

    def refused(self, node: str, reason: str) -> None:
        """A replica refused a report of `node`: its agent's next heartbeat is refused here, with
        the reason, so that it sends a full report."""
        if node in self._nodes:
            self._refused[node] = reason

    def replica_opened(self, target: str) -> Pending:
        """A stream to replica `target` opened: what it is to be sent, every held node first."""
        pending = self._replicas[target] = Pending()
        for node, held in self._nodes.items():
            if held.full:
                pending.put(node, held.stream, held.full, held.heartbeat)
        return pending

    def replica_closed(self, target: str) -> None:
        self._replicas.pop(target, None)
