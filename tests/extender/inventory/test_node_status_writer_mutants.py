"""What the node-status writer (inventory/node_status_writer.py) sends to the API server, the real
kubernetes-asyncio client against a loopback server that records each request (fake clocks): the
condition patch (its body, content type and path), the taint's read-then-patch (the node's other
taints kept, the read resourceVersion sent), which nodes a pass looks at (the first pass and after
`resync` every node, else the changed and the unconfirmed ones), the resend wait, the write budget,
a 409 and a 404 on the taint, and the 403: one warning until a pass succeeds, no call before the
retry, the writer's mode. Each test fails on a one-line change to the writer (mutmut)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s

from gpuextender.extender.inventory.node_status_writer import FORBIDDEN_RETRY_S, RESEND_S, NodeStatusWriter
from gpuextender.extender.kube.api_call import MERGE, STRATEGIC
from gpuextender.extender.state.device_taints import TaintWriterStatus
from gpuextender.extender.state.node_gpu_status import CONDITION_TYPE, NodeGpuStatus
from gpuextender.extender.state.publication import Publication
from tests.extender.inventory.test_writer_rules import NOW, NOW_STAMP, Clock, RecordingApi, always

KEY = "gpu-extender.io/no-usable-gpu"
OTHER = {"key": "other", "effect": "NoExecute"}
NONE_USABLE = NodeGpuStatus("False", "NoUsableGPU", "0 of 1 GPUs usable; 1 unhealthy", no_usable_gpu=True)
SOME_USABLE = NodeGpuStatus("True", "GPUsUsable", "1 of 1 GPUs usable")


class NodeApi(RecordingApi):
    """A RecordingApi that also records each request's content type and answers a GET with `node`."""

    def __init__(self, node: dict[str, Any], status_of: Callable[[str, str], int] = lambda _m, _p: 200) -> None:
        super().__init__(status_of)
        self.node = node
        self.content_types: list[str] = []

    async def _answer(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = orjson.loads(raw) if raw else None
        self.requests.append((request.method, request.path, body))
        self.content_types.append(request.content_type)
        status = self._status_of(request.method, request.path)
        sent = self.node if request.method == "GET" else body
        return web.Response(status=status, body=orjson.dumps(sent or {}), content_type="application/json")

    def calls(self) -> list[tuple[str, str]]:
        return [(method, path) for method, path, _ in self.requests]


def seen(status: NodeGpuStatus | None = None, *, tainted: bool = False) -> dict[str, Any]:
    """A watched Node: with `status` as its condition, with our taint."""
    node: dict[str, Any] = {"metadata": {"name": "a", "resourceVersion": "7"}, "spec": {}, "status": {}}
    if status is not None:
        node["status"]["conditions"] = [
            {"type": CONDITION_TYPE, "status": status.status, "reason": status.reason, "message": status.message}
        ]
    if tainted:
        node["spec"]["taints"] = [{"key": KEY, "effect": "NoSchedule"}]
    return node


class Fleet:
    """A writer, the publication it reads and the Nodes its watch says (`watched`), on a fake clock."""

    def __init__(self, nodes: dict[str, NodeGpuStatus], *, taint: bool = False) -> None:
        self.clock = Clock()
        self.watched: dict[str, dict[str, Any]] = {name: seen() for name in nodes}
        self.writer = NodeStatusWriter(
            self.watched.get,
            TaintWriterStatus(),
            taint=taint,
            taint_key=KEY,
            taint_effect="NoSchedule",
            clock=self.clock,
            wall=lambda: NOW,
        )
        self.pub = Publication(3.0, 60.0)
        self.pub.nodes, self.pub.nodes_changed = dict(nodes), set(nodes)  # as the first update leaves them

    def run(self, api: NodeApi, *steps: float | Callable[[], None], take: Callable[[], bool] = always) -> None:
        """A pass at each time in `steps`; a callable step changes the fleet between passes."""

        async def go(client: k8s.ApiClient) -> None:
            for step in steps:
                if callable(step):
                    step()
                else:
                    self.clock.now = step
                    await self.writer.reconcile(client, self.pub, take)

        asyncio.run(api.serve(go))


def test_a_new_writer_stands_by_and_writes_after_a_pass() -> None:
    fleet = Fleet({"a": SOME_USABLE})
    assert fleet.writer.status.node_mode == "standby"
    fleet.run(NodeApi(seen()), 0.0)
    assert fleet.writer.status.node_mode == "writing"


def test_the_condition_patch_is_a_strategic_merge_of_our_condition_on_nodes_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fleet, api = Fleet({"a": NONE_USABLE}), NodeApi(seen())
    with caplog.at_level(logging.INFO, logger="gpu_extender.node_status"):
        fleet.run(api, 0.0)
    assert api.requests == [
        (
            "PATCH",
            "/api/v1/nodes/a/status",
            {
                "status": {
                    "conditions": [
                        {
                            "type": CONDITION_TYPE,
                            "status": "False",
                            "reason": "NoUsableGPU",
                            "message": NONE_USABLE.message,
                            "lastHeartbeatTime": NOW_STAMP,
                            "lastTransitionTime": NOW_STAMP,
                        }
                    ]
                }
            },
        )
    ]
    assert api.content_types == [STRATEGIC]
    assert fleet.writer.status.node_writes == {"condition": 1, "taint": 0, "untaint": 0, "event": 0}
    assert caplog.messages == [f"node a: condition GPUsUsable=False (NoUsableGPU): {NONE_USABLE.message}"]


def test_a_condition_without_a_transition_time_gets_one_when_only_its_message_changes() -> None:
    fleet = Fleet({"a": SOME_USABLE})
    fleet.watched["a"] = seen(NodeGpuStatus("True", "GPUsUsable", "1 of 2 GPUs usable"))
    api = NodeApi(seen())
    fleet.run(api, 0.0)
    [(_, _, body)] = api.requests
    assert body["status"]["conditions"][0]["lastTransitionTime"] == NOW_STAMP


@pytest.mark.parametrize(
    ("taint", "read", "written"),
    [
        (True, [OTHER], [OTHER, {"key": KEY, "effect": "NoSchedule"}]),
        (True, None, [{"key": KEY, "effect": "NoSchedule"}]),
        (False, [OTHER, {"key": KEY, "effect": "NoSchedule"}], [OTHER]),
    ],
    ids=["added-beside-another", "added-to-none", "removed-beside-another"],
)
def test_the_taint_is_read_then_merged_with_the_read_resource_version_and_other_taints_kept(
    taint: bool, read: list[dict[str, str]] | None, written: list[dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    fleet = Fleet({"a": NONE_USABLE}, taint=taint)
    fleet.watched["a"] = seen(NONE_USABLE, tainted=not taint)  # the condition already says it
    node: dict[str, Any] = {"metadata": {"name": "a", "resourceVersion": "7"}}
    if read is not None:
        node["spec"] = {"taints": read}
    api = NodeApi(node)
    with caplog.at_level(logging.INFO, logger="gpu_extender.node_status"):
        fleet.run(api, 0.0)
    assert api.requests == [
        ("GET", "/api/v1/nodes/a", None),
        ("PATCH", "/api/v1/nodes/a", {"metadata": {"resourceVersion": "7"}, "spec": {"taints": written}}),
    ]
    assert api.content_types[1] == MERGE
    done = "taint" if taint else "untaint"
    assert fleet.writer.status.node_writes == {"condition": 0, "taint": 0, "untaint": 0, "event": 0} | {done: 1}
    said = "added" if taint else "removed"
    assert caplog.messages == [f"node a: taint {KEY}:NoSchedule {said} ({NONE_USABLE.message})"]


def test_a_node_that_already_says_what_is_wanted_gets_no_write() -> None:
    fleet = Fleet({"a": NONE_USABLE}, taint=True)
    fleet.watched["a"] = seen(NONE_USABLE, tainted=True)
    api = NodeApi(seen())
    fleet.run(api, 0.0)
    assert api.requests == []


def test_a_taint_of_a_node_deleted_meanwhile_is_not_patched() -> None:
    fleet = Fleet({"a": NONE_USABLE}, taint=True)
    fleet.watched["a"] = seen(NONE_USABLE)
    api = NodeApi(seen(), lambda method, _path: 404 if method == "GET" else 200)
    fleet.run(api, 0.0)
    assert api.calls() == [("GET", "/api/v1/nodes/a")]
    assert fleet.writer.status.node_writes["taint"] == 0


def test_a_taint_patch_refused_by_a_conflict_is_tried_again_at_the_next_pass() -> None:
    fleet = Fleet({"a": NONE_USABLE}, taint=True)
    fleet.watched["a"] = seen(NONE_USABLE)
    api = NodeApi(seen(), lambda method, _path: 409 if method == "PATCH" else 200)
    fleet.run(api, 0.0, 1.0)
    assert api.calls() == [("GET", "/api/v1/nodes/a"), ("PATCH", "/api/v1/nodes/a")] * 2
    assert fleet.writer.status.node_writes["taint"] == 0


def test_a_confirmed_node_is_not_looked_at_again_until_it_changes() -> None:
    fleet = Fleet({"a": SOME_USABLE})
    api = NodeApi(seen())

    def confirmed() -> None:
        fleet.watched["a"] = seen(SOME_USABLE)

    def undone() -> None:
        fleet.watched["a"] = seen()

    def changed() -> None:
        fleet.pub.nodes_changed = {"a"}

    fleet.run(api, 0.0, confirmed, 1.0, undone, 2.0, 40.0, changed, 41.0)
    # Written at 0 s; confirmed at 1 s (dropped); an operator's undoing unseen at 2 and 40 s (past
    # RESEND_S); a change brings it back at 41 s.
    assert api.calls() == [("PATCH", "/api/v1/nodes/a/status")] * 2
    assert fleet.pub.nodes_changed == set()


def test_the_first_pass_runs_with_nothing_changed() -> None:
    fleet = Fleet({"a": SOME_USABLE})
    fleet.pub.nodes_changed = set()
    fleet.run(NodeApi(seen()), 0.0)
    assert fleet.writer.status.node_mode == "writing"  # standby until a pass runs


@pytest.mark.parametrize("resync", [False, True], ids=["first-pass", "after-resync"])
def test_the_first_pass_and_a_pass_after_resync_look_at_every_node(resync: bool) -> None:
    """Found by mutation testing: `pending |= publication.nodes.keys()` made a new set (a set's `|=`
    with a dict's keys rebinds the name), so these passes looked only at the changed nodes."""
    fleet = Fleet({"a": SOME_USABLE})
    fleet.pub.nodes_changed = set()
    api = NodeApi(seen())
    steps: list[float | Callable[[], None]] = [fleet.writer.resync, 0.0]
    if resync:
        fleet.writer._everything = False  # as after a first pass
        steps.insert(0, 0.0)
    fleet.run(api, *steps)
    assert api.calls() == [("PATCH", "/api/v1/nodes/a/status")]


def test_a_changed_node_is_written_at_the_next_pass_and_the_change_consumed() -> None:
    fleet = Fleet({"a": SOME_USABLE})
    fleet.watched["a"] = seen(SOME_USABLE)
    api = NodeApi(seen())

    def changed() -> None:
        fleet.pub.nodes["a"] = NONE_USABLE
        fleet.pub.nodes_changed = {"a"}

    fleet.run(api, 0.0, changed, 1.0, 2.0)
    assert api.calls() == [("PATCH", "/api/v1/nodes/a/status")]
    assert fleet.pub.nodes_changed == set()


def test_a_node_without_a_watched_node_is_skipped_and_dropped_and_the_pass_goes_on() -> None:
    fleet = Fleet({"a": SOME_USABLE, "b": SOME_USABLE})
    del fleet.watched["a"]
    api = NodeApi(seen())

    def watched_now() -> None:
        fleet.watched["a"] = seen()

    fleet.run(api, 0.0, watched_now, 1.0)
    assert api.calls() == [("PATCH", "/api/v1/nodes/b/status")]  # a: only once something changes


@pytest.mark.parametrize("taint", [False, True], ids=["condition", "taint"])
def test_an_unconfirmed_write_is_sent_again_only_past_resend(taint: bool) -> None:
    fleet = Fleet({"a": NONE_USABLE}, taint=taint)
    if taint:
        fleet.watched["a"] = seen(NONE_USABLE)  # the condition confirmed, the taint never
    api = NodeApi(seen())
    start = 100.0
    fleet.run(api, start, start + 10.0, start + RESEND_S, start + RESEND_S, start + RESEND_S + 0.5)
    per_write = 2 if taint else 1  # the taint: a read and a patch
    assert len(api.requests) == 2 * per_write


def test_a_pass_stops_when_no_token_is_left_and_the_next_one_goes_on() -> None:
    fleet = Fleet({"a": NONE_USABLE}, taint=True)
    api = NodeApi(seen())
    tokens = [True, False, False, True]  # popped from the end
    fleet.run(api, 0.0, 0.0, 1.0, take=lambda: tokens.pop())
    # The taint at the first pass (the condition refused); nothing at the second; the condition at
    # the third, the taint not sent again.
    assert api.calls() == [
        ("GET", "/api/v1/nodes/a"),
        ("PATCH", "/api/v1/nodes/a"),
        ("PATCH", "/api/v1/nodes/a/status"),
    ]
    assert tokens == []


FORBIDDEN_ADVICE = (
    "apply deploy/components/device-taints (the condition) and, with --node-taint on, "
    "deploy/components/node-taints (the taint); GPU placement goes on without them; trying again every 10s"
)


@pytest.mark.parametrize(
    "refused",
    [("PATCH", "/api/v1/nodes/a/status"), ("GET", "/api/v1/nodes/a"), ("PATCH", "/api/v1/nodes/a")],
    ids=["condition", "read", "taint"],
)
def test_a_403_is_said_once_until_a_pass_succeeds_and_nothing_is_tried_before_the_retry(
    refused: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    assert FORBIDDEN_RETRY_S == 10.0
    fleet = Fleet({"a": NONE_USABLE}, taint=True)
    if refused[1].endswith("/status"):
        fleet.watched["a"] = seen(tainted=True)
    else:
        fleet.watched["a"] = seen(NONE_USABLE)
    allowed = [False]
    api = NodeApi(seen(), lambda method, path: 200 if allowed[0] or (method, path) != refused else 403)
    modes: list[str] = []

    def mode() -> None:
        modes.append(fleet.writer.status.node_mode)

    def allow(yes: bool) -> Callable[[], None]:
        def step() -> None:
            allowed[0] = yes

        return step

    with caplog.at_level(logging.WARNING, logger="gpu_extender.node_status"):
        fleet.run(api, 0.0, mode, 9.5, mode, 31.0, mode, allow(True), 62.0, mode, allow(False), 93.0, mode)
    assert modes == ["forbidden", "forbidden", "forbidden", "writing", "forbidden"]
    tries = [t for t in api.calls() if t == refused]
    assert len(tries) == 4  # 0, 31, 62 (allowed) and 93 s: none at 9.5 s
    assert len(caplog.messages) == 2  # at 0 s, and again at 93 s after the pass at 62 s succeeded
    for message in caplog.messages:
        assert message.startswith("node status: HTTP 403 on nodes: ") and message.endswith(FORBIDDEN_ADVICE)


def test_the_writes_are_counted_one_by_one() -> None:
    fleet = Fleet({"a": NONE_USABLE, "b": NONE_USABLE}, taint=True)
    fleet.run(NodeApi(seen()), 0.0)
    assert fleet.writer.status.node_writes == {"condition": 2, "taint": 2, "untaint": 0, "event": 0}


def test_a_node_without_a_watched_node_does_not_end_the_pass() -> None:
    fleet = Fleet({"a": SOME_USABLE, "b": SOME_USABLE})
    del fleet.watched["a"]  # a sorts first
    api = NodeApi(seen())
    fleet.run(api, 0.0)
    assert api.calls() == [("PATCH", "/api/v1/nodes/b/status")]


def test_a_confirmed_node_is_dropped_so_an_undoing_is_not_seen_until_it_changes() -> None:
    fleet = Fleet({"a": SOME_USABLE})
    api = NodeApi(seen())

    def confirmed() -> None:
        fleet.watched["a"] = seen(SOME_USABLE)

    def undone() -> None:
        fleet.watched["a"] = seen()

    fleet.run(api, 0.0, confirmed, 1.0, undone, 1.0 + RESEND_S + 1.0)  # past the resend wait
    assert api.calls() == [("PATCH", "/api/v1/nodes/a/status")]  # at 0 s only


def test_an_unconfirmed_write_is_not_sent_again_at_exactly_resend() -> None:
    fleet = Fleet({"a": NONE_USABLE})
    api = NodeApi(seen())
    start = 100.0
    fleet.run(api, start, start + RESEND_S, start + RESEND_S)
    assert api.calls() == [("PATCH", "/api/v1/nodes/a/status")]
