"""A bound pod's start time (issue 51): `BoundPod.started` is status.startTime in Unix seconds, 0.0
when it is absent or unreadable; and `untrusted.timestamp`, the lenient RFC 3339 reader behind it
(a zone required, at most 64 characters read)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from gpuextender.extender.model.untrusted import timestamp
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger

GPU = "nvidia.com/gpu"
START = "2026-12-07T05:58:29Z"
START_S = datetime(2026, 12, 7, 5, 58, 29, tzinfo=UTC).timestamp()
MAX_TIME_CHARS = 64  # untrusted._MAX_TIME_CHARS


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pod(name: str = "p", *, status: Any = None, start: Any = "absent", phase: str = "Running") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "resources": {"requests": {GPU: "1"}}}]},
    }
    if status is not None:
        obj["status"] = status
    else:
        obj["status"] = {"phase": phase}
        if start != "absent":
            obj["status"]["startTime"] = start
    return obj


@pytest.fixture
def ledger() -> PodLedger:
    return PodLedger([GPU], clock=Clock())


# -- BoundPod.started ------------------------------------------------------------------------------


def test_start_time_is_read_as_unix_seconds(ledger: PodLedger) -> None:
    record = ledger.slim(pod(start=START), seen_at=5.0)
    assert record is not None
    assert record.started == START_S == 1796623109.0
    assert record.seen_at == 5.0  # the monotonic first-seen time is a different clock


@pytest.mark.parametrize(
    ("start", "seconds"),
    [
        ("2026-12-07T07:58:29+02:00", START_S),
        ("2026-12-07T00:28:29-05:30", START_S),
        ("2026-12-07T05:58:29.250Z", START_S + 0.25),
        ("2026-12-07T05:58:29.000000001Z", START_S),  # beyond microseconds: truncated
        ("1970-01-01T00:00:01Z", 1.0),
    ],
)
def test_offsets_and_fractions_are_the_same_instant(ledger: PodLedger, start: str, seconds: float) -> None:
    record = ledger.slim(pod(start=start), seen_at=0.0)
    assert record is not None
    assert record.started == pytest.approx(seconds, abs=1e-6)


@pytest.mark.parametrize(
    "start",
    [
        "absent",
        None,
        "",
        "2026-12-07T05:58:29",  # no zone: which instant is unknown
        "2026-12-07",
        "yesterday",
        "2026-13-07T05:58:29Z",
        1796623109,
        1796623109.0,
        True,
        ["2026-12-07T05:58:29Z"],
        {"time": START},
    ],
)
def test_an_absent_unzoned_unparsable_or_non_string_start_is_zero(ledger: PodLedger, start: Any) -> None:
    record = ledger.slim(pod(start=start), seen_at=0.0)
    assert record is not None  # the pod is still kept: only its start is unknown
    assert record.started == 0.0


@pytest.mark.parametrize("status", [[], "Running", 3])
def test_a_status_that_is_not_an_object_reads_as_not_started(ledger: PodLedger, status: Any) -> None:
    record = ledger.slim(pod(status=status), seen_at=0.0)
    assert record is not None
    assert record.started == 0.0
    assert record.phase == ""


def test_a_start_of_exactly_64_characters_is_read_one_more_is_not(ledger: PodLedger) -> None:
    at = "2026-12-07T05:58:29." + "5" * 43 + "Z"
    past = "2026-12-07T05:58:29." + "5" * 44 + "Z"
    assert (len(at), len(past)) == (MAX_TIME_CHARS, MAX_TIME_CHARS + 1)
    kept, refused = ledger.slim(pod(start=at), 0.0), ledger.slim(pod(start=past), 0.0)
    assert kept is not None and kept.started == pytest.approx(START_S + 0.555555, abs=1e-6)
    assert refused is not None and refused.started == 0.0


def test_upsert_records_the_start_and_a_new_start_is_a_change(ledger: PodLedger) -> None:
    heard: list[str] = []
    ledger.on_change(heard.append)
    ledger.upsert(POD_KIND, pod(phase="Pending"))
    record = ledger.get("uid-p")
    assert record is not None and record.started == 0.0
    assert heard == ["n1"]

    ledger.upsert(POD_KIND, pod(start=START))  # the kubelet started it
    record = ledger.get("uid-p")
    assert record is not None and record.started == START_S
    assert heard == ["n1", "n1"]

    ledger.upsert(POD_KIND, pod(start="2026-12-07T07:58:29+02:00"))  # the same instant: no change
    assert heard == ["n1", "n1"]


def test_replace_all_records_each_pods_start(ledger: PodLedger) -> None:
    ledger.replace_all(POD_KIND, [pod("a", start=START), pod("b"), pod("c", start="2026-12-07T05:58:30Z")])
    starts = {p.key: p.started for p in ledger.pods_on("n1")}
    assert starts == {"ml/a": START_S, "ml/b": 0.0, "ml/c": START_S + 1}


# -- untrusted.timestamp ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-12-07T05:58:29Z", datetime(2026, 12, 7, 5, 58, 29, tzinfo=UTC)),
        ("2026-12-07T05:58:29+00:00", datetime(2026, 12, 7, 5, 58, 29, tzinfo=UTC)),
        ("2026-12-07T07:58:29+02:00", datetime(2026, 12, 7, 7, 58, 29, tzinfo=timezone(timedelta(hours=2)))),
        (
            "2026-12-07T05:58:29.123456789-05:30",
            datetime(2026, 12, 7, 5, 58, 29, 123456, tzinfo=timezone(-timedelta(hours=5, minutes=30))),
        ),
    ],
)
def test_timestamp_reads_zulu_and_offsets(value: str, expected: datetime) -> None:
    stamp = timestamp(value)
    assert stamp == expected
    assert stamp is not None and stamp.utcoffset() == expected.utcoffset()


@pytest.mark.parametrize("value", ["2026-12-07T05:58:29", "2026-12-07T05:58:29.5", "2026-12-07"])
def test_timestamp_refuses_naive_times(value: str) -> None:
    assert datetime.fromisoformat(value).tzinfo is None  # parsable, only its zone is missing
    assert timestamp(value) is None


@pytest.mark.parametrize("value", [None, 0, 1796623109, 1.5, True, b"2026-12-07T05:58:29Z", [], {}, "", "now", "Z"])
def test_timestamp_of_anything_else_is_none(value: Any) -> None:
    assert timestamp(value) is None


def test_timestamp_reads_exactly_64_characters_and_not_65() -> None:
    at = "2026-12-07T05:58:29." + "1" * 43 + "Z"
    past = at[:-1] + "1Z"
    assert (len(at), len(past)) == (MAX_TIME_CHARS, MAX_TIME_CHARS + 1)
    assert datetime.fromisoformat(past) is not None  # parsable: only the bound refuses it
    assert timestamp(at) == datetime(2026, 12, 7, 5, 58, 29, 111111, tzinfo=UTC)
    assert timestamp(past) is None


def test_timestamp_does_not_parse_a_megabyte_string() -> None:
    assert timestamp("2026-12-07T05:58:29Z" + " " * 1_000_000) is None
