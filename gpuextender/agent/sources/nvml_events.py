"""NVML events (XIDs, double-bit ECC errors...) on a dedicated thread, so a sick GPU is reported at
once instead of at the next sample, and XIDs, which no per-sample call can read, are seen at all.

- `NvmlEventWatcher`: a daemon thread. It takes its own NVML reference (nvmlInit; NVML counts
  them), creates one event set, registers every GPU for the subset of WATCHED_EVENTS that
  nvmlDeviceGetSupportedEventTypes allows, and waits in nvmlEventSetWait with a short timeout
  (1 s: a Timeout is the normal answer, and lets the thread notice stop()). A GPU without event
  support is logged once; its ECC/remap counters are still read every sample by the reader.
- `EventStore`: thread-safe; what the events said, per GPU UUID. The watcher records into it; the
  sampling thread reads `snapshot()` (health.HealthEnricher). XIDs on the ignore list are counted
  and dropped here, so a flood of application XIDs cannot push out a critical one.
- The callback `on_event(GpuEvent)` runs on the watcher thread after an event that changes a
  GPU's health was recorded; it must be quick and thread-safe (SampleLoop.wake_now is: it
  hands the wake-up to the event loop with call_soon_threadsafe). Exceptions are logged.

Single-bit ECC events are deliberately not watched: they are corrected errors, can come in
storms on a wearing HBM stack (one wake-up each), and change no verdict; the reader's
per-sample corrected counters and remapped rows already show wear.

Clearing an XID quarantine: XIDs are only known from events since the agent started (NVML keeps
no history), so restarting the agent pod clears them all. To clear one GPU without a restart,
run `gpu-agent --clear-xid GPU` in the agent's container (`kubectl exec POD -- gpu-agent
--clear-xid 3`): it drops a request file into the agent's private control directory (mode 0700,
owned by the agent's user: whoever can write there can already exec into the pod) and waits for
the running agent to answer. The agent forgets what the events recorded for that GPU (XIDs, DBE,
unavailable, recovery action) up to the time of the request; a later event counts again.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pynvml

from gpuextender.agent.model.readings import XidEvent
from gpuextender.agent.rules.health import DEFAULT_IGNORED_XIDS, MAX_REPORTED_XIDS, RECOVERY_NONE, GpuEvents
from gpuextender.agent.sources.nvml_errors import ErrorGroup, classify, error_name

log = logging.getLogger("gpu_agent.events")

XID = pynvml.nvmlEventTypeXidCriticalError
DOUBLE_BIT_ECC = pynvml.nvmlEventTypeDoubleBitEccError
SINGLE_BIT_ECC = pynvml.nvmlEventTypeSingleBitEccError
# Newer than nvidia-ml-py 12.535 (our floor): the values from nvml.h.
GPU_UNAVAILABLE = getattr(pynvml, "nvmlEventTypeGpuUnavailableError", 0x4000)
RECOVERY_ACTION = getattr(pynvml, "nvmlEventTypeGpuRecoveryAction", 0x8000)
WATCHED_EVENTS = XID | DOUBLE_BIT_ECC | GPU_UNAVAILABLE | RECOVERY_ACTION
EVENT_KINDS = {
    XID: "xid",
    DOUBLE_BIT_ECC: "dbe",
    SINGLE_BIT_ECC: "sbe",
    GPU_UNAVAILABLE: "gpu_unavailable",
    RECOVERY_ACTION: "recovery_action",
}
_NO_INSTANCE = 0xFFFFFFFF

CLEAR_PREFIX = "clear-xid-"
_REQUEST_MAX_BYTES = 4096


@dataclass(frozen=True, slots=True)
class GpuEvent:
    gpu_index: int  # -1 when NVML named a device the watcher did not register
    uuid: str
    kind: str  # "xid", "dbe", "gpu_unavailable", "recovery_action", or the type in hex
    event_type: int  # nvmlEventType* bit
    data: int  # the XID, the recovery action, ...
    time: float  # Unix seconds (node clock) when the agent received it
    gpu_instance_id: int | None = None  # MIG instance the event is about, if any
    compute_instance_id: int | None = None


@dataclass(slots=True)
class _Record:
    index: int
    xids: deque[XidEvent] = field(default_factory=lambda: deque(maxlen=MAX_REPORTED_XIDS))
    ignored_xids: int = 0
    dbe: int = 0
    dbe_time: float = 0.0
    unavailable_time: float | None = None
    recovery_action: int = RECOVERY_NONE
    recovery_time: float = 0.0


class EventStore:
    """Thread-safe record of events, per GPU UUID: written by the watcher, read per sample."""

    def __init__(self, ignored_xids: Iterable[int] = DEFAULT_IGNORED_XIDS) -> None:
        self._ignored = frozenset(ignored_xids)
        self._lock = threading.Lock()
        self._records: dict[str, _Record] = {}
        self._logged_ignored: set[tuple[str, int]] = set()

    def record(self, event: GpuEvent) -> bool:
        """Store one event; True when it changes the GPU's health (the caller reports at once)."""
        with self._lock:
            rec = self._records.get(event.uuid)
            if rec is None:
                rec = self._records[event.uuid] = _Record(event.gpu_index)
            if event.event_type == XID:
                if event.data in self._ignored:
                    rec.ignored_xids += 1
                    first = (event.uuid, event.data) not in self._logged_ignored
                    self._logged_ignored.add((event.uuid, event.data))
                    log.log(
                        logging.INFO if first else logging.DEBUG,
                        "GPU %d: XID %d ignored (an application error; --ignore-xids)",
                        event.gpu_index,
                        event.data,
                    )
                    return False
                rec.xids.append(XidEvent(xid=event.data, time=event.time))
            elif event.event_type == DOUBLE_BIT_ECC:
                rec.dbe += 1
                rec.dbe_time = event.time
            elif event.event_type == GPU_UNAVAILABLE:
                rec.unavailable_time = event.time
            elif event.event_type == RECOVERY_ACTION:
                changed = rec.recovery_action != event.data
                rec.recovery_action, rec.recovery_time = event.data, event.time
                return changed
            else:
                return False
            return True

    def snapshot(self) -> dict[str, GpuEvents]:
        with self._lock:
            return {
                uuid: GpuEvents(
                    xids=tuple(rec.xids),
                    double_bit_ecc=rec.dbe,
                    gpu_unavailable=rec.unavailable_time is not None,
                    recovery_action=rec.recovery_action,
                )
                for uuid, rec in self._records.items()
            }

    def ignored_xid_count(self, uuid: str) -> int:
        with self._lock:
            rec = self._records.get(uuid)
            return rec.ignored_xids if rec is not None else 0

    def clear(self, target: str, before: float) -> list[str]:
        """Forget what was recorded up to `before` for the GPU `target` (index, UUID or "all").
        Returns one line per GPU that had something to forget."""
        lines: list[str] = []
        with self._lock:
            for uuid, rec in sorted(self._records.items(), key=lambda item: item[1].index):
                if target not in ("all", uuid, str(rec.index)):
                    continue
                dropped = [x.xid for x in rec.xids if x.time <= before]
                rec.xids = deque((x for x in rec.xids if x.time > before), maxlen=MAX_REPORTED_XIDS)
                what = [f"XID {', '.join(map(str, dropped))}"] if dropped else []
                if rec.dbe and rec.dbe_time <= before:
                    what.append(f"{rec.dbe} double-bit ECC event(s)")
                    rec.dbe = 0
                if rec.unavailable_time is not None and rec.unavailable_time <= before:
                    what.append("GPU unavailable")
                    rec.unavailable_time = None
                if rec.recovery_action != RECOVERY_NONE and rec.recovery_time <= before:
                    what.append(f"recovery action {rec.recovery_action}")
                    rec.recovery_action = RECOVERY_NONE
                if what:
                    lines.append(f"GPU {rec.index} ({uuid}): cleared {'; '.join(what)}")
        return lines


class ClearRequests:
    """The agent's side of `gpu-agent --clear-xid`: answers request files in its control directory."""

    def __init__(self, control_dir: Path) -> None:
        self.control_dir = control_dir
        self.enabled = _prepare_control_dir(control_dir)

    def poll(self, store: EventStore) -> bool:
        """Answer every pending request (called by the watcher about once a second); True when
        there was one."""
        if not self.enabled:
            return False
        try:
            names = sorted(
                e.name
                for e in os.scandir(self.control_dir)
                if e.name.startswith(CLEAR_PREFIX) and e.name.endswith(".json")
            )
        except OSError:
            return False
        for name in names:
            self._answer(self.control_dir / name, store)
        return bool(names)

    def _answer(self, path: Path, store: EventStore) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                request = json.loads(f.read(_REQUEST_MAX_BYTES + 1)[:_REQUEST_MAX_BYTES])
            targets = [str(t) for t in request["targets"]][:64]
            before = min(float(request["time"]), time.time())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the XID clear request %s: %s", path.name, exc)
            _unlink(path)
            return
        lines: list[str] = []
        for target in targets:
            lines += store.clear(target, before) or [f"GPU {target}: nothing recorded to clear"]
        for line in lines:
            log.warning("--clear-xid: %s", line)
        _write_atomically(path.with_suffix(".result"), "\n".join(lines) + "\n")
        _unlink(path)


def request_clear(
    control_dir: Path, targets: Sequence[str], *, timeout_s: float = 10.0, out: TextIO | None = None
) -> int:
    """`gpu-agent --clear-xid`: ask the agent running in this container to clear, print its answer.
    Exit code 0 when it answered, 1 when no agent did within `timeout_s`."""
    stream = out or sys.stdout
    name = f"{CLEAR_PREFIX}{time.time_ns()}-{os.getpid()}.json"
    request = control_dir / name
    result = request.with_suffix(".result")
    try:
        _write_atomically(request, json.dumps({"targets": list(targets), "time": time.time()}))
    except OSError as exc:
        print(
            f"gpu-agent: cannot write the request into {control_dir}: {exc.strerror or exc} "
            "(run this in the agent's container, with the agent's --control-dir)",
            file=stream,
        )
        return 1
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            answer = result.read_text()
        except FileNotFoundError:
            time.sleep(0.05)
            continue
        _unlink(result)
        stream.write(answer)
        return 0
    _unlink(request)
    _unlink(result)  # an answer that came just too late
    print(
        f"gpu-agent: no running agent answered within {timeout_s:g}s (is it running here, with health "
        f"events on and --control-dir {control_dir}?); restarting the agent pod also clears XIDs",
        file=stream,
    )
    return 1


def _prepare_control_dir(path: Path) -> bool:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        log.warning(
            "--clear-xid unavailable: cannot create %s (%s); restarting the agent clears XIDs",
            path,
            exc.strerror or exc,
        )
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        log.warning(
            "--clear-xid unavailable: %s must be a directory owned by uid %d and writable by it alone",
            path,
            os.geteuid(),
        )
        return False
    log.info("answering `gpu-agent --clear-xid` requests in %s", path)
    return True


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    # Readable by all: the directory (0700) is the gate. A root `kubectl exec` and a non-root
    # agent can then read each other's request and answer.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


EventCallback = Callable[[GpuEvent], None]


class NvmlEventWatcher:
    """The event thread. start() once, stop() at shutdown (frees the event set, drops its NVML
    reference). Never raises into the agent: an NVML that cannot give events is logged, retried
    every `retry_s` if it was an error (driver not loaded yet), left alone if unsupported."""

    def __init__(
        self,
        store: EventStore,
        on_event: EventCallback | None = None,
        *,
        wait_timeout_s: float = 1.0,
        retry_s: float = 30.0,
        clear_requests: ClearRequests | None = None,
        event_types: int = WATCHED_EVENTS,
        on_clear: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._on_event = on_event
        self._wait_ms = max(1, int(wait_timeout_s * 1000))
        self._retry_s = retry_s
        self._clear = clear_requests
        self._on_clear = on_clear  # after a --clear-xid request: report the lifted quarantine at once
        self._wanted = event_types
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set: Any | None = None
        self._nvml_ref = False
        self._devices: dict[int, tuple[int, str]] = {}  # handle address -> (index, UUID)
        self._next_setup = 0.0
        self._failing = ""  # the wait error logged last, so a repeated error is logged once
        self._backoff_s = 0.0
        self.registered: dict[int, int] = {}  # GPU index -> registered event types (for logs and tests)
        self.ready = threading.Event()  # set after the first setup attempt

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("NvmlEventWatcher.start() called twice")
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop the thread and wait for it (at most one wait timeout and a bit); True if it ended."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout_s if timeout_s is not None else self._wait_ms / 1000 + 2.0)
        return not self._thread.is_alive()

    # -- the thread ------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._set is None and time.monotonic() >= self._next_setup:
                    self._setup()
                    self.ready.set()
                if self._set is not None and self._devices:
                    self._wait_once()
                else:
                    self._stop.wait(self._wait_ms / 1000)
                if self._clear is not None and self._clear.poll(self._store) and self._on_clear is not None:
                    self._on_clear()
        except Exception:
            log.exception("NVML event thread failed; XIDs are no longer watched")
        finally:
            self._teardown()
            self.ready.set()

    def _setup(self) -> None:
        self._next_setup = time.monotonic() + self._retry_s  # unless it completes
        try:
            if not self._nvml_ref:
                pynvml.nvmlInit()
                self._nvml_ref = True
            self._set = pynvml.nvmlEventSetCreate()
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            if classify(exc) is ErrorGroup.ABSENT:
                log.warning(
                    "NVML events are not supported here (%s): XIDs will not be seen; memory errors "
                    "are still read every sample",
                    error_name(exc),
                )
                self._next_setup = float("inf")
            else:
                log.warning("NVML events unavailable (%s): retrying in %.0fs", error_name(exc), self._retry_s)
            self._teardown()
            return
        for index in range(count):
            self._register(index)
        self._next_setup = float("inf")
        if self._devices:
            log.info("watching NVML events on %d of %d GPU(s)", len(self._devices), count)

    def _register(self, index: int) -> None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            try:
                supported = int(pynvml.nvmlDeviceGetSupportedEventTypes(handle))
            except pynvml.NVMLError as exc:
                if classify(exc) is not ErrorGroup.ABSENT:
                    raise
                supported = 0
            mask = supported & self._wanted
            if not mask:
                log.warning(
                    "GPU %d: NVML events not supported: its XIDs will not be seen; memory errors are "
                    "still read every sample",
                    index,
                )
                return
            if mask != self._wanted:
                missing = [k for bit, k in EVENT_KINDS.items() if self._wanted & bit and not mask & bit]
                log.info("GPU %d: NVML events %s not supported; watching the others", index, ", ".join(missing))
            pynvml.nvmlDeviceRegisterEvents(handle, mask, self._set)
        except pynvml.NVMLError as exc:
            log.warning("GPU %d: cannot watch NVML events (%s): relying on per-sample reads", index, error_name(exc))
            return
        self._devices[_address(handle)] = (index, uuid)
        self.registered[index] = mask

    def _wait_once(self) -> None:
        try:
            data = pynvml.nvmlEventSetWait(self._set, self._wait_ms)
        except pynvml.NVMLError_Timeout:
            self._recovered()
            return
        except pynvml.NVMLError as exc:
            self._wait_failed(exc)
            return
        self._recovered()
        self._deliver(data)

    def _deliver(self, data: Any) -> None:
        index, uuid = self._devices.get(_address(data.device), (-1, ""))
        event_type, payload = int(data.eventType), int(data.eventData)
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        event = GpuEvent(
            gpu_index=index,
            uuid=uuid,
            kind=EVENT_KINDS.get(event_type, f"0x{event_type:x}"),
            event_type=event_type,
            data=payload,
            time=time.time(),
            gpu_instance_id=None if gi == _NO_INSTANCE else gi,
            compute_instance_id=None if ci == _NO_INSTANCE else ci,
        )
        if not self._store.record(event):
            return
        where = f" (MIG GPU instance {event.gpu_instance_id})" if event.gpu_instance_id is not None else ""
        log.warning("GPU %d%s: NVML event %s %d", index, where, event.kind, payload)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:
                log.exception("the NVML event callback failed")

    def _wait_failed(self, exc: pynvml.NVMLError) -> None:
        name = error_name(exc)
        if name != self._failing:
            log.warning("nvmlEventSetWait failed with %s: retrying", name)
            self._failing = name
        if classify(exc) is ErrorGroup.NODE_FATAL:  # the driver went away: start over when it is back
            self._teardown()
            self._next_setup = time.monotonic() + self._retry_s
            return
        # Anything else (a lost GPU...) may repeat at once: back off so the thread cannot spin.
        self._backoff_s = min(5.0, max(0.1, self._backoff_s * 2))
        self._stop.wait(self._backoff_s)

    def _recovered(self) -> None:
        if self._failing:
            log.info("nvmlEventSetWait works again (was %s)", self._failing)
            self._failing = ""
        self._backoff_s = 0.0

    def _teardown(self) -> None:
        if self._set is not None:
            try:
                pynvml.nvmlEventSetFree(self._set)
            except pynvml.NVMLError as exc:
                log.debug("nvmlEventSetFree failed: %s", error_name(exc))
            self._set = None
        self._devices = {}
        self.registered = {}
        if self._nvml_ref:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as exc:
                log.debug("nvmlShutdown failed: %s", error_name(exc))
            self._nvml_ref = False


def _address(handle: Any) -> int:
    """A device handle's pointer value: how an event's `device` is matched to a registered GPU."""
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
