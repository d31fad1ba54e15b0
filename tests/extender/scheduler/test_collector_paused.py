"""collector_paused: no cyclic collection inside one synchronous step of a call, and the
collector's state as it was afterwards."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from gpuextender.extender.scheduler.http_api import collector_paused


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection that starts while the test runs."""
    started: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(note)
    try:
        yield started
    finally:
        gc.callbacks.remove(note)
        gc.enable()


def test_a_body_sized_allocation_inside_triggers_no_collection(collections: list[int]) -> None:
    threshold = gc.get_threshold()[0]
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
        body = [[] for _ in range(10 * threshold)]  # ten young collections' worth, kept alive
        assert collections == []
        del body
    assert gc.isenabled()
    [[] for _ in range(2 * threshold)]  # the collector runs again once re-enabled
    assert collections


def test_the_collector_is_enabled_again_after_an_error(collections: list[int]) -> None:
    gc.enable()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("refused body")
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled(collections: list[int]) -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
