"""What a relay holds per node and per replica (relay/forward_store.py): the newest full report
and heartbeat per node, in the order nodes changed; messages cut at exactly their bound; a
replica that opens gets every held node; a node goes when its last agent stream does."""

from __future__ import annotations

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.relay.forward_store import WRAP_BYTES, ForwardStore, Pending
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report

RULE = IdleRule(30.0, 50.0, None)


def full(node: str, seq: int) -> pb.NodeReport:
    return report(node, [gpu(0, 5, 10)], seq=seq)


def heartbeat(node: str, seq: int, of: int) -> pb.NodeReport:
    return pb.NodeReport(node_name=node, sequence=seq, heartbeat_of=of, heartbeat_utilization_percent=[7])


def sent(pending: Pending, max_bytes: int = 1 << 20) -> list[list[tuple[int, str, int, bool]]]:
    """Each message as (stream, node, sequence, closed) per report."""
    out = []
    for message in pending.take(max_bytes):
        assert len(message) <= max_bytes
        batch = pb.RelayBatch.FromString(message)
        rows = []
        for item in batch.reports:
            r = pb.NodeReport.FromString(item.report)
            rows.append((item.stream, r.node_name, r.sequence, item.closed))
        out.append(rows)
    return out


def opened(store: ForwardStore, *reports: pb.NodeReport) -> None:
    for r in reports:
        if not store.has_data(r.node_name):
            store.stream_opened(r.node_name)
        if r.heartbeat_of:
            assert store.refresh(r, 0.0) is None
        else:
            assert store.ingest(r, 0.0)


def test_a_replica_gets_each_nodes_newest_full_report_then_its_heartbeat_in_the_order_nodes_changed() -> None:
    store = ForwardStore(RULE)
    pending = store.replica_opened("a")
    opened(store, full("n1", 1), full("n2", 1), full("n1", 2), heartbeat("n1", 3, 2), heartbeat("n1", 4, 2))
    # n1's full report 1 is superseded by 2; the newest heartbeat waits behind the full report it repeats.
    assert sent(pending) == [[(2, "n2", 1, False), (1, "n1", 2, False), (1, "n1", 4, False)]]
    opened(store, heartbeat("n1", 5, 2))
    assert sent(pending) == [[(1, "n1", 5, False)]]  # its full report went already
    assert sent(pending) == []


def test_a_replica_that_opens_is_sent_every_held_node_and_one_that_closed_nothing() -> None:
    store = ForwardStore(RULE)
    first = store.replica_opened("a")
    opened(store, full("n1", 1), heartbeat("n1", 2, 1), full("n2", 7))
    sent(first)
    late = store.replica_opened("b")
    assert sent(late) == [[(1, "n1", 1, False), (1, "n1", 2, False), (2, "n2", 7, False)]]
    store.replica_closed("a")
    opened(store, full("n2", 8))
    assert sent(first) == []
    assert sent(late) == [[(2, "n2", 8, False)]]


def test_messages_are_cut_at_exactly_their_bound() -> None:
    store = ForwardStore(RULE)
    pending = store.replica_opened("a")
    reports = [full(f"n{i}", 1) for i in range(3)]
    opened(store, *reports)
    sizes = [r.ByteSize() for r in reports]
    bound = sizes[0] + sizes[1] + 2 * WRAP_BYTES  # two fit exactly
    assert [len(m) for m in sent(pending, bound)] == [2, 1]
    opened(store, *(full(f"n{i}", 2) for i in range(3)))
    assert [len(m) for m in sent(pending, bound - 1)] == [1, 1, 1]


def test_a_node_goes_when_its_last_stream_ends_after_what_it_sent() -> None:
    store = ForwardStore(RULE)
    pending = store.replica_opened("a")
    opened(store, full("n1", 1))
    store.stream_opened("n1")  # a second stream of the node (the agent reconnected before the first ended)
    assert store.ingest(full("n1", 1), 0.0)
    store.stream_closed("n1")  # the older one ends: the node stays
    assert store.has_data("n1") and len(store) == 1
    store.stream_closed("n1")
    assert not store.has_data("n1") and len(store) == 0
    # Its report on the second relayed stream, then the end of the first (the second opened) and of
    # the second (the older agent stream ended: the survivor goes on under a third, once it sends).
    assert sent(pending) == [[(2, "n1", 1, False), (1, "", 0, True), (2, "", 0, True)]]
    assert sent(store.replica_opened("b")) == []


def test_the_survivor_of_two_streams_of_a_node_goes_on_under_a_new_relayed_stream() -> None:
    """Two agents of one node stream here for a moment (their sequences mix on the node's relayed
    stream); when either ends, the other's heartbeats are refused until it sends a full report,
    which goes out on a new relayed stream: the replicas check its own sequences from there."""
    store = ForwardStore(RULE)
    pending = store.replica_opened("a")
    opened(store, full("n1", 900))  # the old agent, long running
    store.stream_opened("n1")  # a new agent of the same node
    opened(store, full("n1", 1), full("n1", 901))  # both send, on relayed stream 2
    assert sent(pending) == [[(2, "n1", 901, False), (1, "", 0, True)]]
    store.stream_closed("n1")  # one of them ends
    problem = store.refresh(heartbeat("n1", 2, 1), 0.0)
    assert problem is not None and "send a full report" in problem
    assert sent(pending) == [[(2, "", 0, True)]]  # the mixed relayed stream ends at the replicas
    opened(store, full("n1", 3))
    assert sent(pending) == [[(3, "n1", 3, False)]]
    assert store.refresh(heartbeat("n1", 4, 3), 0.0) is None
    store.stream_closed("n1")
    assert not store.has_data("n1")
    assert sent(pending) == [[(3, "n1", 4, False), (3, "", 0, True)]]


def test_a_heartbeat_must_repeat_the_full_report_held_on_its_stream() -> None:
    store = ForwardStore(RULE)
    opened(store, full("n1", 3))
    problem = store.refresh(heartbeat("n1", 4, 2), 0.0)
    assert problem is not None and "report 2 of node n1 is not held here" in problem
    store.stream_opened("n1")  # a new stream: what the old one sent is not what a heartbeat repeats
    problem = store.refresh(heartbeat("n1", 4, 3), 0.0)
    assert problem is not None and "send a full report" in problem


def test_a_refusal_upstream_makes_the_agents_next_heartbeat_refused_with_its_reason() -> None:
    store = ForwardStore(RULE)
    opened(store, full("n1", 1))
    store.refused("n1", "node 'n1' is not in the extender's inventory")
    store.refused("gone", "ignored: no such node here")
    problem = store.refresh(heartbeat("n1", 2, 1), 0.0)
    assert problem is not None and "not in the extender's inventory" in problem and "send a full report" in problem
    assert store.refresh(heartbeat("n1", 3, 1), 0.0) is not None  # the full report is needed again
    opened(store, full("n1", 4), heartbeat("n1", 5, 4))  # which is then taken, and its heartbeats
    assert not store.has_data("gone")


def test_a_full_report_of_the_shape_before_on_its_stream_is_known_and_checked_for_its_readings() -> None:
    """An agent before 0.6 sends each heartbeat as a full report: IngestService checks only its
    readings when the store knows its shape (as an ingest worker does); a new stream starts over."""
    store = ForwardStore(RULE)
    first = full("n1", 1)
    assert not store.known_shape(first)  # nothing held
    opened(store, first)
    readings_only = report("n1", [gpu(0, 9, 30)], seq=2, seconds=1001)
    assert store.known_shape(readings_only)
    opened(store, readings_only)
    assert not store.known_shape(report("n1", [gpu(0, 9, 30)], seq=3, node_error="driver gone"))
    assert not store.known_shape(report("n1", [gpu(0, 9, 30), gpu(1, 0, 0)], seq=3))
    store.stream_opened("n1")
    assert not store.known_shape(report("n1", [gpu(0, 9, 30)], seq=1))
