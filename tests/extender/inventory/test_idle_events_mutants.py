"""What the AllocatedGPUsIdle Event writer (inventory/idle_events.py) sends to the API server, the
real kubernetes-asyncio client against a loopback server that records each request (fake clocks):
the Event of a Node and of a ResourceClaim (every field), the window in its message, once per window
and at once again after a busy spell, the write budget, and the 403 (one warning, no other Event of
that pass, nothing before the retry). Each test fails on a one-line change to the writer (mutmut)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable

import pytest
from kubernetes_asyncio import client as k8s

from gpuextender.extender.inventory.idle_events import MAX_NAME_CHARS, IdleEventWriter, event_name
from gpuextender.extender.state.device_taints import TaintWriterStatus
from tests.extender.inventory.test_writer_rules import (
    NOW,
    STAMP_HEX,
    Clock,
    RecordingApi,
    always,
    sent_event,
)

WINDOW = 1800.0
EVENTS = "/api/v1/namespaces/default/events"

Pass = tuple[float, dict[str, int], dict[str, int]]  # (when, idle GPUs by node, by claim)


class Writer:
    def __init__(self, window_s: float = WINDOW, *, node_uid: str = "node-uid", claim_uid: str = "claim-uid") -> None:
        self.clock = Clock()
        self.writer = IdleEventWriter(
            TaintWriterStatus(),
            window_s=window_s,
            node_uid=lambda _n: node_uid,
            claim_uid=lambda ref: claim_uid and f"{claim_uid}:{ref}",
            clock=self.clock,
            wall=lambda: NOW,
        )

    def run(self, api: RecordingApi, *passes: Pass, take: Callable[[], bool] = always) -> None:
        async def go(client: k8s.ApiClient) -> None:
            for self.clock.now, by_node, claims in passes:
                await self.writer.reconcile(client, by_node, claims, take)

        asyncio.run(api.serve(go))


def named(api: RecordingApi) -> list[str]:
    """The involved object of each Event sent, in order."""
    return [body["involvedObject"]["name"] for body in api.posts()]


def test_a_node_event_is_posted_in_the_default_namespace_with_every_field(caplog: pytest.LogCaptureFixture) -> None:
    w, api = Writer(), RecordingApi()
    with caplog.at_level(logging.INFO, logger="gpu_extender.idle_events"):
        w.run(api, (0.0, {"gpu-1": 2}, {}))
    message = (
        "2 GPU(s) held by pods read idle for over 30m (the idle rule); a reclaim or scale-down signal: "
        "nothing is evicted"
    )
    assert api.requests == [
        (
            "POST",
            EVENTS,
            sent_event(
                {"apiVersion": "v1", "kind": "Node", "name": "gpu-1", "uid": "node-uid"},
                "default",
                "AllocatedGPUsIdle",
                message,
            ),
        )
    ]
    assert w.writer.status.node_writes["event"] == 1
    assert caplog.messages == [f"Node gpu-1: {message}"]


def test_a_claim_event_is_posted_in_the_claims_namespace_on_the_claim(caplog: pytest.LogCaptureFixture) -> None:
    w, api = Writer(), RecordingApi()
    with caplog.at_level(logging.INFO, logger="gpu_extender.idle_events"):
        w.run(api, (0.0, {}, {"team-a/train": 4}))
    message = (
        "every GPU of this claim (4) read idle for over 30m (the idle rule); a reclaim signal: nothing is "
        "evicted or deallocated"
    )
    [(method, path, body)] = api.requests
    assert (method, path) == ("POST", "/api/v1/namespaces/team-a/events")
    assert body["metadata"] == {"name": f"train.{STAMP_HEX}", "namespace": "team-a"}
    assert body["involvedObject"] == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "namespace": "team-a",
        "name": "train",
        "uid": "claim-uid:team-a/train",
    }
    assert body["message"] == message
    assert w.writer.status.node_writes["event"] == 1
    assert caplog.messages == [f"ResourceClaim team-a/train: {message}"]


def test_an_unknown_uid_is_left_out_of_the_involved_object() -> None:
    w, api = Writer(node_uid="", claim_uid=""), RecordingApi()
    w.run(api, (0.0, {"gpu-1": 1}, {"ns/c": 1}))
    assert [body["involvedObject"] for body in api.posts()] == [
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "namespace": "ns", "name": "c"},
    ]


@pytest.mark.parametrize(
    ("window_s", "said"),
    [(3661.0, "1h1m1s"), (7200.0, "2h"), (59.9, "59s"), (0.5, "0s")],
)
def test_the_message_says_the_window_in_hours_minutes_and_seconds(window_s: float, said: str) -> None:
    w, api = Writer(window_s), RecordingApi()
    w.run(api, (0.0, {"gpu-1": 1}, {}))
    assert f" read idle for over {said} (the idle rule)" in api.posts()[0]["message"]


def test_an_event_is_said_again_once_the_window_has_passed_and_at_once_after_a_busy_spell() -> None:
    w, api = Writer(), RecordingApi()
    idle: dict[str, int] = {"gpu-1": 1}
    w.run(
        api,
        (0.0, idle, {}),
        (WINDOW - 0.5, idle, {}),  # within the window: nothing
        (WINDOW, idle, {}),  # the window passed: again
        (WINDOW + 1.0, {}, {}),  # busy
        (WINDOW + 2.0, idle, {}),  # idle again: news at once
    )
    assert named(api) == ["gpu-1"] * 3


def test_an_object_within_its_window_does_not_keep_the_others_from_their_event() -> None:
    w, api = Writer(), RecordingApi()
    w.run(api, (0.0, {"a": 1}, {}), (1.0, {"a": 1, "b": 1}, {}))
    assert named(api) == ["a", "b"]


def test_a_pass_stops_when_no_token_is_left_and_the_next_one_says_the_rest() -> None:
    w, api = Writer(), RecordingApi()
    tokens = [True, True, False, True]  # popped from the end
    w.run(api, (0.0, {"a": 1, "b": 1}, {}), (1.0, {"a": 1, "b": 1}, {}), take=lambda: tokens.pop())
    assert named(api) == ["a", "b"]
    assert tokens == [True]  # the second pass: b only (a within its window takes none)


def test_a_403_ends_the_pass_is_said_once_and_the_refused_event_is_sent_at_the_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = Writer()
    refusals = [403, 403]
    api = RecordingApi(lambda _method, _path: refusals.pop() if refusals else 201)
    idle = {"a": 1, "b": 1}
    with caplog.at_level(logging.WARNING, logger="gpu_extender.idle_events"):
        w.run(api, (0.0, idle, {}), (59.5, idle, {}), (60.0, idle, {}), (120.0, idle, {}))
    # 0 s: a refused, b not tried; 59.5 s: nothing; 60 s: a refused; 120 s: a and b.
    assert named(api) == ["a", "a", "a", "b"]
    assert w.writer.status.node_writes["event"] == 2
    [warning] = caplog.messages
    assert warning.startswith("idle events: HTTP 403 on events: ")
    assert warning.endswith(
        ": apply deploy/components/device-taints (create events), or --idle-events off; trying again every 60s"
    )


def test_a_name_too_long_is_replaced_by_the_first_40_hex_digits_of_its_sha256() -> None:
    longer = "n" * MAX_NAME_CHARS
    digest = hashlib.sha256(longer.encode()).hexdigest()[:40]
    assert event_name(longer, 255) == f"{digest}.ff"


def test_each_node_event_carries_that_nodes_own_uid() -> None:
    w, api = Writer(), RecordingApi()
    w.writer._node_uid = lambda name: f"uid-of-{name}"
    w.run(api, (0.0, {"a": 1, "b": 1}, {}))
    assert [body["involvedObject"]["uid"] for body in api.posts()] == ["uid-of-a", "uid-of-b"]


def test_the_window_is_counted_from_when_the_event_was_said() -> None:
    w, api = Writer(), RecordingApi()
    start = 1000.0  # a monotonic clock is far from 0
    idle: dict[str, int] = {"a": 1}
    w.run(api, (start, idle, {}), (start + 1.0, idle, {}), (start + WINDOW - 0.5, idle, {}), (start + WINDOW, idle, {}))
    assert named(api) == ["a", "a"]  # at the start, and once the window has passed


def test_a_refused_event_is_not_tried_again_before_the_retry() -> None:
    w, api = Writer(), RecordingApi(lambda _method, _path: 403)
    idle: dict[str, int] = {"a": 1}
    w.run(api, (0.0, idle, {}), (59.5, idle, {}), (60.0, idle, {}))
    assert named(api) == ["a", "a"]  # at 0 s and at the retry, 60 s
