"""The link between gpu-extender and its ingest workers: frames, and the relay store's batch of
summaries (made with the functions the extender would use)."""

from __future__ import annotations

import asyncio

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.gpu_facts import facts_from_report
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.extender.state.summary_codec import decode_facts, decode_readings, decode_summary
from gpuextender.extender.workers import frames as frames
from gpuextender.extender.workers import summary_store
from gpuextender.extender.workers.summary_store import FLUSH_BYTES, SummaryStore
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.state.test_summary_refresh import heartbeat_of


def relayed(batch: bytes) -> list[NodeSummary]:
    """The summaries of a batch, checking each one's facts are those of its node's report."""
    entries = list(frames.summary_entries(batch))
    assert all(tag == frames.FULL for tag, _, _ in entries)
    return [decode_summary(summary) for _, summary, _ in entries]


def summary_of(r: pb.NodeReport, received_at: float) -> NodeSummary:
    return summarize(r, IdleRule(), received_at)


def read_all(data: bytes) -> list[tuple[bytes, bytes] | None]:
    async def go() -> list[tuple[bytes, bytes] | None]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        out: list[tuple[bytes, bytes] | None] = []
        while True:
            got = await frames.read_frame(reader)
            out.append(got)
            if got is None:
                return out

    return asyncio.run(go())


def test_frames_round_trip_and_end_cleanly() -> None:
    entries = (
        frames.summary_entry(b"abc", b"de")
        + frames.summary_entry(b"", b"")
        + frames.readings_entry(b"gh")
        + frames.summary_entry(b"f", b"")
    )
    data = frames.frame(frames.SUMMARIES, entries) + frames.frame(frames.READY) + frames.frame(frames.KNOWN, b"a\nb")
    got = read_all(data)
    assert got == [(frames.SUMMARIES, entries), (frames.READY, b""), (frames.KNOWN, b"a\nb"), None]
    full, readings = frames.FULL, frames.READINGS
    assert list(frames.summary_entries(entries)) == [
        (full, b"abc", b"de"),
        (full, b"", b""),
        (readings, b"gh", b""),
        (full, b"f", b""),
    ]
    assert frames.names(b"a\nb") == ["a", "b"] and frames.names(b"") == []


@pytest.mark.parametrize("cut", [1, 4, 6])
def test_a_stream_cut_inside_a_frame_is_an_error(cut: int) -> None:
    data = frames.frame(frames.METRICS, b"xyz")
    with pytest.raises(frames.FrameError):
        read_all(data[:cut])


def test_a_cut_summary_entry_is_an_error() -> None:
    entry = frames.summary_entry(b"abcdef", b"gh")
    assert list(frames.summary_entries(entry)) == [(frames.FULL, b"abcdef", b"gh")]  # whole: read
    for cut in (3, 9, len(entry) - 1):  # in the lengths, in the summary, in the facts
        with pytest.raises(frames.FrameError, match="cut short"):
            list(frames.summary_entries(entry[:cut]))


def test_an_entry_of_an_unknown_tag_is_an_error() -> None:
    readings = frames.readings_entry(b"x")
    assert readings[0] == frames.READINGS == 1 and frames.FULL == 0  # the last tag there is
    with pytest.raises(frames.FrameError, match="tagged 2"):
        list(frames.summary_entries(b"\x02" + readings[1:]))


def test_frame_sizes_are_bounded_at_exactly_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frames, "MAX_FRAME_BYTES", 8)
    assert read_all(frames.frame(frames.METRICS, b"x" * 8))[0] == (frames.METRICS, b"x" * 8)
    with pytest.raises(frames.FrameError, match="frame of 10 bytes"):
        read_all(frames.frame(frames.METRICS, b"x" * 9))
    with pytest.raises(frames.FrameError, match="frame of 0 bytes"):
        read_all(b"\x00\x00\x00\x00Y")


def test_the_summary_store_batches_reports_and_remembers_which_nodes_have_data() -> None:
    async def go() -> None:
        store = SummaryStore(IdleRule())
        r = report("n1", [gpu(0)], seq=3)
        assert not store.has_data("n1")
        assert store.ingest(r, 7.0) is True
        assert store.has_data("n1") and not store.has_data("n2")
        batch = store.take()
        assert relayed(batch) == [summary_of(r, 7.0)]
        ((_, _, facts),) = frames.summary_entries(batch)
        assert decode_facts(facts) == facts_from_report(r)
        assert store.take() == b""
        store.forget(["n1", "never-seen"])
        assert not store.has_data("n1")

    asyncio.run(go())


def test_a_batch_is_sent_at_once_when_it_reaches_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    async def go() -> None:
        store = SummaryStore(IdleRule())
        r1, r2 = report("n1", [gpu(0)]), report("n2", [gpu(0)])
        store.ingest(r1, 1.0)
        size = len(store.take())
        monkeypatch.setattr(summary_store, "FLUSH_BYTES", 2 * size)
        store.ingest(r1, 1.0)
        store.stream_opened("n1")  # (a new stream: its first report is summarized, not taken as readings)
        store.ingest(r1, 1.5)  # replaces n1's: the batch does not grow
        assert not store.full.is_set()  # one entry: below the size
        store.ingest(r2, 2.0)
        assert store.full.is_set()  # exactly the size
        store.take()
        assert not store.full.is_set()

    assert FLUSH_BYTES == 1024 * 1024
    asyncio.run(go())


def test_the_summary_store_keeps_only_the_newest_report_of_a_node() -> None:
    """A slow extender costs one waiting report per node, never a backlog; arrival order is kept."""

    async def go() -> None:
        store = SummaryStore(IdleRule())
        old, other = report("n1", [gpu(0)], seq=1), report("n2", [gpu(0)], seq=1)
        new = report("n1", [gpu(0, 50)], seq=2)  # busy now: summarized, not taken as readings
        store.ingest(old, 1.0)
        store.ingest(other, 2.0)
        store.ingest(new, 3.0)
        assert relayed(store.take()) == [summary_of(other, 2.0), summary_of(new, 3.0)]

    asyncio.run(go())


def test_a_heartbeats_readings_wait_behind_its_full_report_and_only_the_newest_wait() -> None:
    """A light heartbeat travels as the readings it changes (frames.READINGS); the full report they
    apply to is never dropped for them, and a full report drops the readings before it."""

    def at(seq: int, util: int) -> pb.NodeReport:
        return report("n1", [gpu(0, util, 10), gpu(1, 2, 20)], seq=seq, seconds=1000 + seq)

    def entries(store: SummaryStore) -> list[tuple[int, int]]:
        """(tag, the sequence it carries) per entry of the next batch."""
        out = []
        for tag, first, _ in frames.summary_entries(store.take()):
            if tag == frames.READINGS:
                node, base, changes = decode_readings(first)
                assert (node, base) == ("n1", (1, 1.0))  # the full report's sequence and receipt time
                out.append((tag, dict(changes)["sequence"]))
            else:
                out.append((tag, decode_summary(first).sequence))
        return out

    async def go() -> None:
        store, first = SummaryStore(IdleRule()), at(1, 0)
        store.ingest(first, 1.0)
        assert store.refresh(heartbeat_of(first, at(2, 1), 2), 2.0) is None
        assert store.refresh(heartbeat_of(first, at(3, 2), 3), 3.0) is None
        assert entries(store) == [(frames.FULL, 1), (frames.READINGS, 3)]
        assert store.refresh(heartbeat_of(first, at(4, 3), 4), 4.0) is None
        assert entries(store) == [(frames.READINGS, 4)]  # the full report went with the last batch
        assert store.refresh(heartbeat_of(first, at(5, 3), 5), 5.0) is None
        store.ingest(at(6, 40), 6.0)  # GPU 0 busy: summarized
        assert [tag for tag, _, _ in frames.summary_entries(store.take())] == [frames.FULL]

    asyncio.run(go())


@pytest.mark.parametrize("over", [0, 1])
def test_a_batch_of_a_full_report_and_readings_is_sent_at_its_size(over: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch's size counts the full report and the readings waiting behind it."""
    first = report("n1", [gpu(0, 0, 10)], seq=1, seconds=1000)
    heartbeat = heartbeat_of(first, report("n1", [gpu(0, 1, 10)], seq=2, seconds=1001), 2)

    async def size_of_both() -> int:
        store = SummaryStore(IdleRule())
        store.ingest(first, 1.0)
        store.refresh(heartbeat, 2.0)
        return len(store.take())

    size = asyncio.run(size_of_both())

    async def go() -> None:
        monkeypatch.setattr(summary_store, "FLUSH_BYTES", size + over)
        store = SummaryStore(IdleRule())
        store.ingest(first, 1.0)
        assert not store.full.is_set()
        assert store.refresh(heartbeat, 2.0) is None
        assert store.full.is_set() == (over == 0)

    asyncio.run(go())
