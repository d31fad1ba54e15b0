"""The NVML event thread through the real pynvml on the fake library: scripted XIDs and ECC events
reach the store and the callback at once, ignored XIDs do not, unsupported GPUs are logged once,
waits honour their timeout, errors back off, shutdown frees everything, and --clear-xid works."""

from __future__ import annotations

import asyncio
import io
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.report.latest import LatestReport
from gpuextender.agent.rules.health import HealthEnricher, HealthPolicy
from gpuextender.agent.sampling.sample_loop import SampleLoop
from gpuextender.agent.sources.nvml_events import (
    CLEAR_PREFIX,
    WATCHED_EVENTS,
    ClearRequests,
    EventStore,
    GpuEvent,
    NvmlEventWatcher,
    request_clear,
)
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.agent.fake_gpus import H100, Clock, install_fake, restored_pynvml, start_reader


@pytest.fixture(autouse=True)
def _restore_pynvml() -> Iterator[None]:
    with restored_pynvml():
        yield


class Recorder:
    """An on_event callback: thread-safe, records what arrived and when."""

    def __init__(self) -> None:
        self.events: list[tuple[float, GpuEvent]] = []
        self.arrived = threading.Event()

    def __call__(self, event: GpuEvent) -> None:
        self.events.append((time.monotonic(), event))
        self.arrived.set()

    def wait(self, count: int, timeout: float = 5.0) -> list[GpuEvent]:
        deadline = time.monotonic() + timeout
        while len(self.events) < count and time.monotonic() < deadline:
            time.sleep(0.005)
        return [e for _, e in self.events]


def watch(store: EventStore, on_event: Recorder | None = None, **kwargs: object) -> NvmlEventWatcher:
    watcher = NvmlEventWatcher(store, on_event, **{"wait_timeout_s": 0.2, **kwargs})  # type: ignore[arg-type]
    watcher.start()
    assert watcher.ready.wait(5)
    return watcher


def test_a_scripted_xid_reaches_the_callback_and_is_reported_before_the_next_sample(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The whole path an XID takes: fake driver -> nvmlEventSetWait -> store -> callback ->
    SampleLoop.wake_now -> a sample classified UNHEALTHY, published long before the interval."""
    reader, lib = start_reader({"gpus": [{**H100, "count": 2}], "events": [{"at_s": 0.4, "gpus": [1], "xid": 79}]})
    store = EventStore()
    latest = LatestReport()
    interval_s = 30.0
    sampler = SampleLoop(
        reader,
        latest,
        AgentMetrics("n1"),
        node_name="n1",
        interval_s=interval_s,
        agent_version="t",
        enrichers=[HealthEnricher(HealthPolicy(), store.snapshot)],
    )
    recorder = Recorder()

    def on_event(event: GpuEvent) -> None:
        recorder(event)
        sampler.wake_now()

    async def scenario() -> tuple[float, float, pb.NodeReport]:
        task = asyncio.create_task(sampler.run())
        while latest.version < 1:
            await asyncio.sleep(0.005)
        first_sample = time.monotonic()
        watcher = watch(store, on_event)  # type: ignore[arg-type]
        try:
            _version, report = await asyncio.wait_for(latest.newer_than(1), timeout=10)
            published = time.monotonic()
        finally:
            task.cancel()
            watcher.stop()
        return first_sample, published, report

    first_sample, published, report = asyncio.run(scenario())
    reader.close()
    ((arrived, event),) = recorder.events
    assert (event.gpu_index, event.kind, event.data, event.uuid) == (1, "xid", 79, report.gpus[1].uuid)
    # Ordering: the event came, then the report saying so, both before the next scheduled sample.
    assert first_sample < arrived < published < first_sample + interval_s
    assert report.sequence == 2
    assert report.gpus[1].health == pb.HEALTH_UNHEALTHY and list(report.gpus[1].health_reasons) == ["XidCritical"]
    assert [x.xid for x in report.gpus[1].xids] == [79] and not report.gpus[1].healthy
    assert report.gpus[0].health == pb.HEALTH_HEALTHY
    due = lib._started + 0.4
    with capsys.disabled():
        print(
            f"\n  XID due -> callback {1000 * (arrived - due):.1f} ms, "
            f"-> report published {1000 * (published - due):.1f} ms "
            f"(next scheduled sample was {interval_s:.0f} s away)"
        )


def test_ignored_xids_are_counted_not_recorded_and_do_not_wake(caplog: pytest.LogCaptureFixture) -> None:
    install_fake({"gpus": [H100], "events": [{"at_s": 0, "gpus": [0], "xid": 13}, {"at_s": 0, "gpus": [0], "xid": 43}]})
    store, recorder = EventStore(), Recorder()
    with caplog.at_level(logging.INFO, logger="gpu_agent.events"):
        watcher = watch(store, recorder)
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
        deadline = time.monotonic() + 5
        while store.ignored_xid_count(uuid) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        watcher.stop()
    assert store.ignored_xid_count(uuid) == 2
    assert recorder.events == [] and store.snapshot()[uuid].xids == ()
    assert "XID 13 ignored" in caplog.text and "XID 43 ignored" in caplog.text


def test_the_ignore_list_is_the_stores() -> None:
    install_fake({"gpus": [H100], "events": [{"at_s": 0, "gpus": [0], "xid": 13}]})
    store, recorder = EventStore(ignored_xids=()), Recorder()
    watcher = watch(store, recorder)
    assert [e.data for e in recorder.wait(1)] == [13]
    watcher.stop()


def test_dbe_unavailable_and_recovery_events_are_recorded() -> None:
    lib = install_fake(
        {
            "gpus": [{**H100, "count": 3}],
            "events": [
                {"at_s": 0, "gpus": [0], "type": "dbe"},
                {"at_s": 0, "gpus": [1], "type": "gpu_unavailable"},
                {"at_s": 0, "gpus": [2], "type": "recovery_action", "action": "drain_and_reset"},
            ],
        }
    )
    store, recorder = EventStore(), Recorder()
    watcher = watch(store, recorder)
    kinds = sorted((e.gpu_index, e.kind, e.data) for e in recorder.wait(3))
    assert kinds == [(0, "dbe", 0), (1, "gpu_unavailable", 0), (2, "recovery_action", 4)]
    snapshot = {e.gpu_index: store.snapshot()[e.uuid] for e in recorder.wait(3)}  # by index, for reading
    assert snapshot[0].double_bit_ecc == 1 and snapshot[1].gpu_unavailable and snapshot[2].recovery_action == 4
    # A recovery action NONE afterwards clears the action (and wakes: health changed); the same again does not.
    lib.push_event(2, "recovery_action", 0)
    lib.push_event(2, "recovery_action", 0)
    assert len(recorder.wait(4)) == 4
    time.sleep(0.3)
    assert len(recorder.events) == 4
    watcher.stop()
    gpu2 = next(e.uuid for e in recorder.wait(3) if e.gpu_index == 2)
    assert store.snapshot()[gpu2].recovery_action == 0


def test_single_bit_ecc_is_not_watched_by_default() -> None:
    assert not WATCHED_EVENTS & pynvml.nvmlEventTypeSingleBitEccError
    install_fake(
        {"gpus": [H100], "events": [{"at_s": 0, "gpus": [0], "type": "sbe"}, {"at_s": 0.05, "gpus": [0], "xid": 79}]}
    )
    store, recorder = EventStore(), Recorder()
    watcher = watch(store, recorder)
    assert [e.kind for e in recorder.wait(1)] == ["xid"]
    assert watcher.registered == {0: WATCHED_EVENTS}
    watcher.stop()


def test_a_gpu_without_events_is_logged_once_and_the_others_are_watched(caplog: pytest.LogCaptureFixture) -> None:
    install_fake(
        {"gpus": [{**H100, "events_supported": False}, H100], "events": [{"at_s": 0, "gpus": [0, 1], "xid": 79}]}
    )
    store, recorder = EventStore(), Recorder()
    with caplog.at_level(logging.INFO, logger="gpu_agent.events"):
        watcher = watch(store, recorder)
        registered = dict(watcher.registered)
        events = recorder.wait(1)
        time.sleep(0.3)
        watcher.stop()
    assert registered == {1: WATCHED_EVENTS}
    assert [e.gpu_index for e in events] == [1] and len(recorder.events) == 1
    assert caplog.text.count("GPU 0: NVML events not supported") == 1
    assert "watching NVML events on 1 of 2 GPU(s)" in caplog.text


def test_wait_blocks_for_its_timeout_and_answers_timeout() -> None:
    install_fake({"gpus": [H100]})
    pynvml.nvmlInit()
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), WATCHED_EVENTS, event_set)
    started = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(event_set, 150)
    waited = time.monotonic() - started
    assert 0.14 <= waited < 2.0
    with pytest.raises(pynvml.NVMLError_NotSupported):  # SBE storms: types beyond the GPU's support
        pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), 1 << 40, event_set)
    pynvml.nvmlEventSetFree(event_set)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetWait(event_set, 10)
    pynvml.nvmlShutdown()


def test_a_manual_clock_delivers_when_moved_and_woken() -> None:
    clock = Clock()
    lib = install_fake({"gpus": [H100], "events": [{"at_s": 10, "gpus": [0], "xid": 79}]}, clock)
    store, recorder = EventStore(), Recorder()
    watcher = watch(store, recorder, wait_timeout_s=2.0)
    time.sleep(0.1)
    assert recorder.events == []
    clock.t = 10.0
    woken = time.monotonic()
    lib.wake()
    assert [e.data for e in recorder.wait(1, timeout=3.0)] == [79]
    assert recorder.events[0][0] - woken < 1.0  # the wake, not the 2 s wait timeout, delivered it
    watcher.stop()


def test_stop_frees_the_event_set_and_the_nvml_reference() -> None:
    reader, lib = start_reader({"gpus": [H100]})
    watcher = watch(EventStore())
    assert lib._init_count == 2 and len(lib._event_sets) == 1
    started = time.monotonic()
    assert watcher.stop()
    assert time.monotonic() - started < 2.0  # about one wait timeout (0.2 s here)
    assert lib._event_sets == {} and lib._init_count == 1
    reader.close()
    assert lib._init_count == 0


def test_wait_errors_back_off_and_recover(caplog: pytest.LogCaptureFixture) -> None:
    lib = install_fake(
        {
            "gpus": [H100],
            "errors": [{"call": "nvmlEventSetWait", "error": "Unknown", "for_s": 0.6}],
            "events": [{"at_s": 0.8, "gpus": [0], "xid": 79}],
        }
    )
    store, recorder = EventStore(), Recorder()
    with caplog.at_level(logging.INFO, logger="gpu_agent.events"):
        calls_before = lib.calls
        watcher = watch(store, recorder)
        assert [e.data for e in recorder.wait(1)] == [79]
        watcher.stop()
    assert lib.calls - calls_before < 60  # backed off: no spinning on the failing wait
    assert caplog.text.count("nvmlEventSetWait failed with Unknown") == 1
    assert "nvmlEventSetWait works again (was Unknown)" in caplog.text


def test_a_driver_that_goes_away_is_set_up_again() -> None:
    lib = install_fake(
        {
            "gpus": [H100],
            "errors": [{"call": "nvmlEventSetWait", "error": "DriverNotLoaded", "for_s": 0.3}],
            "events": [{"at_s": 0.5, "gpus": [0], "xid": 79}],
        }
    )
    store, recorder = EventStore(), Recorder()
    watcher = watch(store, recorder, retry_s=0.2)
    assert [e.data for e in recorder.wait(1)] == [79]
    assert len(lib._event_sets) == 1  # the first set was freed, a new one made
    watcher.stop()
    assert lib._event_sets == {} and lib._init_count == 0


def test_nvml_missing_at_start_is_retried() -> None:
    lib = install_fake(
        {
            "gpus": [H100],
            "errors": [{"call": "nvmlInit", "error": "DriverNotLoaded", "for_s": 0.3}],
            "events": [{"at_s": 0.4, "gpus": [0], "xid": 79}],
        }
    )
    store, recorder = EventStore(), Recorder()
    watcher = watch(store, recorder, retry_s=0.1)
    assert [e.data for e in recorder.wait(1)] == [79]
    watcher.stop()
    assert lib._init_count == 0


def test_events_unsupported_on_the_node_are_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    lib = install_fake({"gpus": [H100], "errors": [{"call": "nvmlEventSetCreate", "error": "NotSupported"}]})
    with caplog.at_level(logging.WARNING, logger="gpu_agent.events"):
        watcher = watch(EventStore(), retry_s=0.05)
        time.sleep(0.3)
        watcher.stop()
    assert caplog.text.count("NVML events are not supported here (NotSupported)") == 1
    assert lib._init_count == 0


def test_a_failing_callback_is_logged_and_watching_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    install_fake(
        {"gpus": [H100], "events": [{"at_s": 0, "gpus": [0], "xid": 79}, {"at_s": 0.05, "gpus": [0], "xid": 48}]}
    )
    seen: list[int] = []

    def bad(event: GpuEvent) -> None:
        seen.append(event.data)
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="gpu_agent.events"):
        watcher = watch(EventStore(), bad)  # type: ignore[arg-type]
        deadline = time.monotonic() + 5
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        watcher.stop()
    assert seen == [79, 48] and "the NVML event callback failed" in caplog.text


# -- clearing ------------------------------------------------------------------------------------------


def _event(index: int, uuid: str, xid: int, at: float) -> GpuEvent:
    return GpuEvent(
        gpu_index=index, uuid=uuid, kind="xid", event_type=pynvml.nvmlEventTypeXidCriticalError, data=xid, time=at
    )


def test_store_clear_forgets_up_to_the_request_time_by_index_uuid_or_all() -> None:
    store = EventStore()
    store.record(_event(0, "GPU-a", 79, 100.0))
    store.record(_event(0, "GPU-a", 48, 200.0))
    store.record(_event(1, "GPU-b", 79, 100.0))
    store.record(GpuEvent(1, "GPU-b", "dbe", pynvml.nvmlEventTypeDoubleBitEccError, 0, 100.0))
    assert store.clear("0", before=150.0) == ["GPU 0 (GPU-a): cleared XID 79"]
    assert [x.xid for x in store.snapshot()["GPU-a"].xids] == [48]  # after the request: kept
    assert store.clear("GPU-a", before=150.0) == []
    assert store.clear("all", before=300.0) == [
        "GPU 0 (GPU-a): cleared XID 48",
        "GPU 1 (GPU-b): cleared XID 79; 1 double-bit ECC event(s)",
    ]
    assert all(not e.xids and not e.double_bit_ecc for e in store.snapshot().values())


def test_clear_xid_request_is_answered_by_the_running_watcher(tmp_path: Path) -> None:
    install_fake({"gpus": [{**H100, "count": 2}], "events": [{"at_s": 0, "gpus": [0, 1], "xid": 79}]})
    control = tmp_path / "control"
    clear = ClearRequests(control)
    assert clear.enabled and (control.stat().st_mode & 0o777) == 0o700
    store, recorder = EventStore(), Recorder()
    watcher = watch(store, recorder, clear_requests=clear)
    uuids = {e.gpu_index: e.uuid for e in recorder.wait(2)}
    out = io.StringIO()
    assert request_clear(control, ["1"], timeout_s=5.0, out=out) == 0  # from "another process": a file
    assert out.getvalue() == f"GPU 1 ({uuids[1]}): cleared XID 79\n"
    snapshot = store.snapshot()
    assert len(snapshot[uuids[0]].xids) == 1 and snapshot[uuids[1]].xids == ()
    out = io.StringIO()
    assert request_clear(control, ["5"], timeout_s=5.0, out=out) == 0
    assert out.getvalue() == "GPU 5: nothing recorded to clear\n"
    watcher.stop()
    assert list(control.iterdir()) == []  # requests and answers are gone


def test_clear_xid_without_a_running_agent_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    control = tmp_path / "control"
    ClearRequests(control)
    out = io.StringIO()
    assert request_clear(control, ["0"], timeout_s=0.2, out=out) == 1
    assert "no running agent answered within 0.2s" in out.getvalue()
    assert list(control.iterdir()) == []
    assert request_clear(tmp_path / "missing", ["0"], timeout_s=0.2, out=out) == 1
    assert "cannot write the request" in out.getvalue()


def test_an_unsafe_control_dir_disables_clearing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with caplog.at_level(logging.WARNING):
        assert not ClearRequests(shared).enabled
    assert "writable by it alone" in caplog.text
    (shared / f"{CLEAR_PREFIX}1.json").write_text('{"targets": ["all"], "time": 1}')
    ClearRequests(shared).poll(EventStore())
    assert (shared / f"{CLEAR_PREFIX}1.json").exists()  # not read


def test_a_malformed_request_is_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    control = tmp_path / "c"
    clear = ClearRequests(control)
    (control / f"{CLEAR_PREFIX}1.json").write_text("not json")
    with caplog.at_level(logging.WARNING):
        clear.poll(EventStore())
    assert list(control.iterdir()) == [] and "ignoring the XID clear request" in caplog.text
