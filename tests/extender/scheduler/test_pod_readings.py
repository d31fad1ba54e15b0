"""scheduler/decision_inputs.PodReadings: a pod is read once per distinct JSON (filter, then prioritize,
then a retry of the same Pod), bounded in entries and in the size of a key; a pod read_pod refuses
is refused every time."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.scheduler import decision_inputs
from gpuextender.extender.scheduler.decision_inputs import POD_CACHE_MAX_BYTES, PodReadings
from gpuextender.extender.settings import ApiSettings, DecisionPolicy


def pod(name: str = "p", gpus: str = "2", note: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "annotations": {"note": note}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pods read_pod really read, by name."""
    seen: list[str] = []
    real = decision_inputs.read_pod

    def counting(p: dict[str, Any], *args: Any) -> Any:
        seen.append(p["metadata"]["name"])
        return real(p, *args)

    monkeypatch.setattr(decision_inputs, "read_pod", counting)
    return seen


def test_the_same_pod_is_read_once_and_a_changed_one_again(reads: list[str]) -> None:
    readings = PodReadings(ApiSettings(DecisionPolicy()))
    first = readings.read(pod())
    assert readings.read(pod()) is first  # the same JSON: the same reading
    assert first.gpus_needed == 2 and first.ref == "ns/p"
    assert readings.read(pod(gpus="4")).gpus_needed == 4  # another request: read again
    assert reads == ["p", "p"]


def test_entries_are_bounded(reads: list[str]) -> None:
    readings = PodReadings(ApiSettings(DecisionPolicy()), size=2)
    readings.read(pod("a"))
    readings.read(pod("b"))
    readings.read(pod("a"))  # two kept: still there
    assert reads == ["a", "b"]
    readings.read(pod("c"))  # a third: the cache starts over
    readings.read(pod("a"))
    assert reads == ["a", "b", "c", "a"]


def _pod_of_size(size: int) -> dict[str, Any]:
    base = len(orjson.dumps(pod("big")))
    padded = pod("big", note="x" * (size - base))
    assert len(orjson.dumps(padded)) == size
    return padded


def test_a_pod_past_the_key_bound_is_read_every_time(reads: list[str]) -> None:
    readings = PodReadings(ApiSettings(DecisionPolicy()))
    at_bound, past = _pod_of_size(POD_CACHE_MAX_BYTES), _pod_of_size(POD_CACHE_MAX_BYTES + 1)
    readings.read(at_bound)
    readings.read(at_bound)
    assert reads == ["big"]
    readings.read(past)
    readings.read(past)
    assert reads == ["big", "big", "big"]


def test_a_refused_pod_is_refused_every_time(reads: list[str]) -> None:
    readings = PodReadings(ApiSettings(DecisionPolicy()))
    for _ in range(2):
        with pytest.raises(InvalidInput):
            readings.read(pod(gpus="lots"))
    assert reads == ["p", "p"]


def test_a_pod_too_deep_to_encode_is_read_every_time(reads: list[str]) -> None:
    """orjson reads JSON 1,024 levels deep but writes only 254: such a pod has no key, only a reading."""
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    nested = pod("deep")
    nested["metadata"]["labels"] = {"x": deep}
    readings = PodReadings(ApiSettings(DecisionPolicy()))
    assert readings.read(nested).gpus_needed == readings.read(nested).gpus_needed == 2
    assert reads == ["deep", "deep"]
