"""Fixtures for the inventory tests: a recording sink and fast list+watch timings."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from gpuextender.extender.inventory.kube_watch import KubeSourceTimings
from gpuextender.extender.model.kube_objects import KubeObject, object_key


class RecordingSink:
    """An `InventorySink` that records every call and keeps the resulting state per kind."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []  # (method, kind, key or sorted keys)
        self.state: dict[str, dict[str, KubeObject]] = defaultdict(dict)

    def replace_all(self, kind: str, objects: list[KubeObject]) -> None:
        self.calls.append(("replace_all", kind, sorted(object_key(o) for o in objects)))
        self.state[kind] = {object_key(o): o for o in objects}

    def upsert(self, kind: str, obj: KubeObject) -> None:
        self.calls.append(("upsert", kind, object_key(obj)))
        self.state[kind][object_key(obj)] = obj

    def delete(self, kind: str, obj: KubeObject) -> None:
        self.calls.append(("delete", kind, object_key(obj)))
        self.state[kind].pop(object_key(obj), None)

    def calls_for(self, kind: str) -> list[tuple[str, Any]]:
        return [(method, arg) for method, k, arg in self.calls if k == kind]

    def keys(self, kind: str) -> set[str]:
        return set(self.state[kind])


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def timings() -> KubeSourceTimings:
    """Everything in tens of milliseconds so the whole file runs in a few seconds."""
    return KubeSourceTimings(
        watch_timeout_s=30,
        watch_read_grace_s=5,
        list_timeout_s=5,
        connect_timeout_s=1,
        backoff_initial_s=0.02,
        backoff_max_s=0.1,
        crd_recheck_s=0.1,
        min_watch_s=0.0,
        list_page_size=500,
    )


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # kubernetes-asyncio's aiohttp session has trust_env=True: a proxy in the environment
    # would otherwise capture requests to the in-test API server on 127.0.0.1.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
