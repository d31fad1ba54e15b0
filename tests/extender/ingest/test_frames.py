"""The link between gpu-extender and its ingest workers: frames, and the relay store's batch of
summaries (made with the functions the extender would use)."""

from __future__ import annotations

import asyncio

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender import ingest_process
from gpuextender.extender.ingest import frames as frames
from gpuextender.extender.ingest_process import FLUSH_BYTES, RelayStore
from gpuextender.extender.model.gpu_facts import facts_from_report
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.extender.state.summary_codec import decode_facts, decode_summary
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report


def relayed(batch: bytes) -> list[NodeSummary]:
    """The summaries of a batch, checking each one's facts are those of its node's report."""
    return [decode_summary(summary) for summary, _ in frames.summary_entries(batch)]


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
    entries = frames.summary_entry(b"abc", b"de") + frames.summary_entry(b"", b"") + frames.summary_entry(b"f", b"")
    data = frames.frame(frames.SUMMARIES, entries) + frames.frame(frames.READY) + frames.frame(frames.KNOWN, b"a\nb")
    got = read_all(data)
    assert got == [(frames.SUMMARIES, entries), (frames.READY, b""), (frames.KNOWN, b"a\nb"), None]
    assert list(frames.summary_entries(entries)) == [(b"abc", b"de"), (b"", b""), (b"f", b"")]
    assert frames.names(b"a\nb") == ["a", "b"] and frames.names(b"") == []


@pytest.mark.parametrize("cut", [1, 4, 6])
def test_a_stream_cut_inside_a_frame_is_an_error(cut: int) -> None:
    data = frames.frame(frames.METRICS, b"xyz")
    with pytest.raises(frames.FrameError):
        read_all(data[:cut])


def test_a_cut_summary_entry_is_an_error() -> None:
    entry = frames.summary_entry(b"abcdef", b"gh")
    assert list(frames.summary_entries(entry)) == [(b"abcdef", b"gh")]  # whole: read
    for cut in (3, 8, len(entry) - 1):  # in the lengths, in the summary, in the facts
        with pytest.raises(frames.FrameError, match="cut short"):
            list(frames.summary_entries(entry[:cut]))


def test_frame_sizes_are_bounded_at_exactly_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frames, "MAX_FRAME_BYTES", 8)
    assert read_all(frames.frame(frames.METRICS, b"x" * 8))[0] == (frames.METRICS, b"x" * 8)
    with pytest.raises(frames.FrameError, match="frame of 10 bytes"):
        read_all(frames.frame(frames.METRICS, b"x" * 9))
    with pytest.raises(frames.FrameError, match="frame of 0 bytes"):
        read_all(b"\x00\x00\x00\x00Y")


def test_the_relay_store_batches_reports_and_remembers_which_nodes_have_data() -> None:
    async def go() -> None:
        store = RelayStore(IdleRule())
        r = report("n1", [gpu(0)], seq=3)
        assert not store.has_data("n1")
        assert store.ingest(r, 7.0) is True
        assert store.has_data("n1") and not store.has_data("n2")
        batch = store.take()
        assert relayed(batch) == [summary_of(r, 7.0)]
        ((_, facts),) = frames.summary_entries(batch)
        assert decode_facts(facts) == facts_from_report(r)
        assert store.take() == b""
        store.forget(["n1", "never-seen"])
        assert not store.has_data("n1")

    asyncio.run(go())


def test_a_batch_is_sent_at_once_when_it_reaches_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    async def go() -> None:
        store = RelayStore(IdleRule())
        r1, r2 = report("n1", [gpu(0)]), report("n2", [gpu(0)])
        store.ingest(r1, 1.0)
        size = len(store.take())
        monkeypatch.setattr(ingest_process, "FLUSH_BYTES", 2 * size)
        store.ingest(r1, 1.0)
        store.ingest(r1, 1.5)  # replaces n1's: the batch does not grow
        assert not store.full.is_set()  # one entry: below the size
        store.ingest(r2, 2.0)
        assert store.full.is_set()  # exactly the size
        store.take()
        assert not store.full.is_set()

    assert FLUSH_BYTES == 1024 * 1024
    asyncio.run(go())


def test_the_relay_store_keeps_only_the_newest_report_of_a_node() -> None:
    """A slow extender costs one waiting report per node, never a backlog; arrival order is kept."""

    async def go() -> None:
        store = RelayStore(IdleRule())
        old, other, new = report("n1", [gpu(0)], seq=1), report("n2", [gpu(0)], seq=1), report("n1", [gpu(0)], seq=2)
        store.ingest(old, 1.0)
        store.ingest(other, 2.0)
        store.ingest(new, 3.0)
        assert relayed(store.take()) == [summary_of(other, 2.0), summary_of(new, 3.0)]

    asyncio.run(go())
