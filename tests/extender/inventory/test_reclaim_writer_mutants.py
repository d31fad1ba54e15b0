"""What the reclaim writer (inventory/reclaim_writer.py) sends to the API server, the real
kubernetes-asyncio client against a loopback server that lists pending pods and opted-in namespaces
and records each request (fake clocks): the two lists and their selectors, the Eviction (every field)
and its Event (every field, each outcome), dry run, a pass every `every_s`, the write budget, the
node and the waiting pod left alone while an eviction settles, a holder not tried again for a while
after a refusal, the 403 (one warning, nothing before the retry), and the rooms read from the Node
objects (labels, taints, unknown or stale GPU data). Each test fails on a one-line change to the
writer (mutmut). The writer on the real API server: tests/kube/test_reclaim.py."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s

from gpuextender.extender.inventory.reclaim_writer import (
    FORBIDDEN_RETRY_S,
    PASS_EVERY_S,
    QUIET_S,
    SETTLE_S,
    ReclaimWriter,
)
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.idle_holders import ReclaimStatus
from gpuextender.extender.state.pod_ledger import BoundPod
from tests.extender.inventory.loopback_api import with_api
from tests.extender.inventory.test_writer_rules import NOW, Clock, always, sent_event

WINDOW = 10.0
STALE = 30.0
LABEL = ("reclaim.example/opt-in", "yes")
STARTED = NOW.timestamp() - 7200.0
PODS = "/api/v1/pods"
NAMESPACES = "/api/v1/namespaces"
EVENTS = "/api/v1/namespaces/team/events"
LOGGER = "gpu_extender.reclaim"


def eviction_path(name: str) -> str:
    return f"/api/v1/namespaces/team/pods/{name}/eviction"


def waiting(
    name: str,
    gpus: int = 2,
    *,
    priority: int = 0,
    created: str = "2029-12-31T23:00:00Z",
    selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pending pod kube-scheduler marked Unschedulable, asking for `gpus` whole GPUs."""
    return {
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "creationTimestamp": created},
        "spec": {
            "priority": priority,
            "nodeSelector": dict(selector or {}),
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def bound(
    name: str,
    node: str = "n1",
    *,
    gpus: int = 2,
    phase: str = "Running",
    priority: int = 0,
    started: float = STARTED,
    group: str = "",
    namespace: str = "team",
) -> BoundPod:
    return BoundPod(
        uid=f"uid-{name}",
        key=f"{namespace}/{name}",
        node=node,
        gpus=gpus,
        mig=(),
        phase=phase,
        seen_at=0.0,
        group=group,
        priority=priority,
        started=started,
    )


class Node:
    """A node's GPU summary (its `idle` pods hold GPUs that read idle) and its Node object."""

    def __init__(
        self,
        idle: Mapping[str, int] | None = None,
        *,
        free: int | None = 0,
        room: int | None = None,
        labels: Mapping[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        stale: bool = False,
        obj: bool = True,
    ) -> None:
        self.idle = dict(idle or {})
        self.free, self.stale = free, stale
        self.room = free or 0 if room is None else room  # idle_gpus: free, idle and healthy
        self.obj: dict[str, Any] | None = (
            {"metadata": {"name": "n", "labels": dict(labels or {})}, "spec": {"taints": list(taints or [])}}
            if obj
            else None
        )

    def summary(self, name: str, now: float) -> NodeSummary:
        held = sum(self.idle.values())
        return NodeSummary(
            node=name,
            gpu_count=8,
            healthy_gpus=8,
            idle_gpus=self.room,
            mean_utilization=None,
            node_error="",
            sequence=1,
            sample_time=0.0,
            received_at=now - (STALE + 1.0 if self.stale else 0.0),
            free_gpus=self.free,
            allocated_idle_gpus=held,
            pod_units=tuple((pod, units, units) for pod, units in self.idle.items()),
        )


class Scene:
    """The writer, its inputs, and an API server that answers the lists and records every request
    (method, path, query, JSON body); `status_of(method, path)` picks each answer's status."""

    def __init__(
        self,
        nodes: Mapping[str, Node],
        pods: list[BoundPod],
        pending: list[dict[str, Any]],
        *,
        opted_in: tuple[str, ...] = ("team",),
        status_of: Callable[[str, str], int] = lambda _method, _path: 200,
        dry_run: bool = False,
        window_s: float = WINDOW,
        status: ReclaimStatus | None = None,
        **options: Any,
    ) -> None:
        self.nodes, self.pods, self.pending, self.opted_in = dict(nodes), pods, pending, opted_in
        self.clock = Clock()
        self.status = status or ReclaimStatus()
        self.writer = ReclaimWriter(
            self.status,
            dry_run=dry_run,
            label=LABEL,
            min_runtime_s=60.0,
            window_s=window_s,
            stale_after_s=STALE,
            gpu_resources=["nvidia.com/gpu"],
            summaries=lambda: {n: node.summary(n, self.clock.now) for n, node in self.nodes.items()},
            pods_on=lambda node: [p for p in self.pods if p.node == node],
            node_object=lambda node: self.nodes[node].obj if node in self.nodes else None,
            clock=self.clock,
            wall=lambda: NOW,
            **options,
        )
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self._status_of = status_of

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = orjson.loads(raw) if raw else None
        self.requests.append((request.method, request.path, dict(request.query), body))
        status = self._status_of(request.method, request.path)
        if status == 0:  # no answer: the connection reset
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        if request.path == PODS:
            body = {"items": self.pending}
        elif request.path == NAMESPACES:
            body = {"items": [{"metadata": {"name": n}} for n in self.opted_in]}
        return web.Response(status=status, body=orjson.dumps(body or {}), content_type="application/json")

    def run(self, *times: float, take: Callable[[], bool] = always) -> None:
        async def test(client: k8s.ApiClient, _connection: k8s.Configuration) -> None:
            for self.clock.now in times:
                await self.writer.reconcile(client, take)

        with_api(self._answer, test)

    def calls(self) -> list[tuple[str, str]]:
        return [(method, path) for method, path, _query, _body in self.requests]

    def evicted(self) -> list[str]:
        """The name of each pod an Eviction was posted for, in order."""
        return [path.split("/")[-2] for method, path, _q, _b in self.requests if path.endswith("/eviction")]

    def events(self) -> list[Any]:
        return [body for _method, path, _q, body in self.requests if path.endswith("/events")]


def one_holder(**options: Any) -> Scene:
    """n1: `a` holds its 2 GPUs, idle (`b`, listed first, holds one that is busy); `w` waits for 2
    GPUs; nothing free anywhere."""
    return Scene({"n1": Node({"team/a": 2})}, [bound("b", gpus=1), bound("a")], [waiting("w")], **options)


WHY = (
    "its 2 GPU(s) on n1 read idle for over 10s (the idle rule); the waiting pod team/w (priority 0) needs 2 "
    "and the node has 0 free; namespace opted in (reclaim.example/opt-in=yes)"
)


def event(reason: str, lead: str, kind: str = "Normal") -> dict[str, Any]:
    involved = {"apiVersion": "v1", "kind": "Pod", "namespace": "team", "name": "a", "uid": "uid-a"}
    return sent_event(involved, "team", reason, f"{lead}: {WHY}", kind)


def counts(scene: Scene) -> dict[str, int]:
    return {outcome: n for outcome, n in scene.status.evictions.items() if n}


# -- an eviction: the lists, the Eviction, the Event ---------------------------------------------


def test_an_idle_holder_is_evicted_for_the_pod_it_serves_with_every_field(caplog: pytest.LogCaptureFixture) -> None:
    scene = one_holder()
    assert scene.status.mode == "on"
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        scene.run(0.0, WINDOW)
    assert scene.requests == [
        ("GET", PODS, {"fieldSelector": "spec.nodeName=,status.phase=Pending", "limit": "500"}, None),
        ("GET", NAMESPACES, {"labelSelector": "reclaim.example/opt-in=yes"}, None),
        (
            "POST",
            eviction_path("a"),
            {},
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "a", "namespace": "team"},
                "deleteOptions": {"preconditions": {"uid": "uid-a"}},
            },
        ),
        ("POST", EVENTS, {}, event("GPUsReclaimed", "evicted to reclaim GPUs")),
    ]
    assert counts(scene) == {"evicted": 1}
    assert scene.status.idle_pods == 1
    assert caplog.messages == [f"reclaim: evicted team/a on n1: {WHY} (waiting: team/w)"]


def test_dry_run_evicts_nothing_and_says_what_it_would_evict(caplog: pytest.LogCaptureFixture) -> None:
    scene = one_holder(dry_run=True)
    assert scene.status.mode == "dry-run"
    with caplog.at_level(logging.INFO, logger=LOGGER):
        scene.run(0.0, WINDOW)
    lead = "would be evicted to reclaim GPUs (--reclaim=dry-run: nothing evicted)"
    assert scene.calls() == [("GET", PODS), ("GET", NAMESPACES), ("POST", EVENTS)]
    assert scene.events() == [event("GPUsReclaimDryRun", lead)]
    assert counts(scene) == {"dry_run": 1}
    assert caplog.messages == [f"reclaim (dry run): would evict team/a on n1: {WHY}"]


@pytest.mark.parametrize(
    ("window_s", "said"), [(3661.0, "1h1m1s"), (7200.0, "2h"), (59.9, "59s"), (0.5, "0s"), (60.0, "1m")]
)
def test_the_idle_window_is_said_in_hours_minutes_and_seconds(window_s: float, said: str) -> None:
    scene = one_holder(dry_run=True, window_s=window_s)
    scene.run(0.0, max(window_s, PASS_EVERY_S))
    [body] = scene.events()
    assert f"read idle for over {said} (the idle rule)" in body["message"]


def test_a_pdb_refusal_is_a_warning_event_and_the_holder_is_not_tried_again_until_quiet_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scene = one_holder(status_of=lambda _method, path: 429 if path.endswith("/eviction") else 200)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        scene.run(0.0, WINDOW, WINDOW + PASS_EVERY_S)
    lead = "not evicted: a PodDisruptionBudget forbids it (tried again later)"
    assert scene.calls() == [("GET", PODS), ("GET", NAMESPACES), ("POST", eviction_path("a")), ("POST", EVENTS)]
    assert scene.events() == [event("GPUsReclaimRefused", lead, "Warning")]
    assert counts(scene) == {"refused_by_pdb": 1}
    [said] = caplog.messages
    assert said.startswith(
        "reclaim: team/a on n1 not evicted: a PodDisruptionBudget forbids it (HTTP 429 on pods/eviction: "
    )
    scene.run(WINDOW + QUIET_S)  # quiet ends: tried again
    assert scene.evicted() == ["a", "a"]


def test_another_failure_is_counted_and_warned_without_an_event(caplog: pytest.LogCaptureFixture) -> None:
    scene = one_holder(status_of=lambda _method, path: 500 if path.endswith("/eviction") else 200)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        scene.run(0.0, WINDOW, WINDOW + PASS_EVERY_S)
    assert scene.calls() == [("GET", PODS), ("GET", NAMESPACES), ("POST", eviction_path("a"))]
    assert counts(scene) == {"failed": 1}
    [said] = caplog.messages
    assert said.startswith("reclaim: evicting team/a on n1 failed: HTTP 500 on pods/eviction: ")


def test_no_answer_to_the_eviction_is_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    scene = one_holder(status_of=lambda _method, path: 0 if path.endswith("/eviction") else 200)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        scene.run(0.0, WINDOW)
    assert scene.calls() == [("GET", PODS), ("GET", NAMESPACES), ("POST", eviction_path("a"))]
    assert counts(scene) == {"failed": 1}
    assert caplog.messages == ["reclaim: evicting team/a on n1 failed: Server disconnected"]


def test_a_pod_gone_already_is_counted_without_an_event_and_settles_nothing() -> None:
    scene = Scene({"n1": Node({"team/a": 2, "team/b": 2})}, [bound("a"), bound("b")], [waiting("w")])
    scene._status_of = lambda _method, path: 404 if path == eviction_path("a") else 200
    scene.run(0.0, WINDOW, WINDOW + PASS_EVERY_S)
    assert scene.evicted() == ["a", "b"]  # the node and the waiting pod are not left alone
    assert counts(scene) == {"gone": 1, "evicted": 1}
    assert len(scene.events()) == 1


@pytest.mark.parametrize(("answer", "error"), [(500, "HTTP 500 on events: "), (0, "")], ids=["500", "no-answer"])
def test_an_event_that_fails_leaves_the_eviction_standing(
    answer: int, error: str, caplog: pytest.LogCaptureFixture
) -> None:
    nodes = {"n1": Node({"team/a": 2}), "n2": Node({"team/c": 2})}
    scene = Scene(nodes, [bound("a"), bound("c", "n2")], [waiting("w"), waiting("w2")])
    scene._status_of = lambda _method, path: answer if path == EVENTS else 200
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        scene.run(0.0, WINDOW)
    assert scene.evicted() == ["a", "c"] and counts(scene) == {"evicted": 2}  # the pass goes on
    assert len(caplog.messages) == 2
    assert caplog.messages[0].startswith(f"reclaim: the Event on team/a failed: {error}")


def test_outcomes_are_counted_into_a_status_that_has_none_yet() -> None:
    scene = one_holder(status=ReclaimStatus(evictions={}))
    scene.run(0.0, WINDOW)
    assert scene.status.evictions == {"evicted": 1}


# -- a 403: one warning, nothing before the retry ------------------------------------------------


@pytest.mark.parametrize(
    ("refused", "what"), [(PODS, "pods"), (NAMESPACES, "namespaces"), (eviction_path("a"), "pods/eviction")]
)
def test_a_403_stops_the_pass_and_the_next_waits_for_the_retry(
    refused: str, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    refusals = [403]
    scene = one_holder(
        status_of=lambda _method, path: refusals.pop() if path == refused and refusals else 200,
    )
    retry = WINDOW + FORBIDDEN_RETRY_S
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        scene.run(0.0, WINDOW, WINDOW + PASS_EVERY_S, retry - 0.5)
        assert scene.requests[-1][:2] == ("POST" if what == "pods/eviction" else "GET", refused)  # nothing since
        scene.run(retry)
    assert scene.evicted() == (["a", "a"] if what == "pods/eviction" else ["a"])  # tried again at the retry
    assert counts(scene) == ({"evicted": 1, "failed": 1} if what == "pods/eviction" else {"evicted": 1})
    [said] = caplog.messages
    assert said.startswith(f"reclaim: HTTP 403 on {what}: ")
    assert said.endswith(
        ": apply deploy/components/reclaim (list namespaces, create pods/eviction); trying again in 60s"
    )


# -- the pace: a pass every every_s, the write budget, max_evictions -----------------------------


def test_a_pass_runs_every_every_s_and_reads_no_namespace_without_a_waiting_pod() -> None:
    scene = Scene({"n1": Node({"team/a": 2})}, [bound("a")], [])
    scene.run(0.0, WINDOW, WINDOW + PASS_EVERY_S - 0.1, WINDOW + PASS_EVERY_S)
    assert scene.calls() == [("GET", PODS)] * 2
    assert scene.status.idle_pods == 1


def test_nothing_is_read_before_a_pod_stands_idle_for_the_window() -> None:
    scene = one_holder()
    scene.run(0.0, WINDOW - 0.1)
    assert scene.requests == [] and scene.status.idle_pods == 0


@pytest.mark.parametrize(("tokens", "evicted", "events"), [(0, [], 0), (1, ["a"], 0), (2, ["a"], 1)])
def test_each_eviction_and_each_event_takes_a_token_of_the_write_budget(
    tokens: int, evicted: list[str], events: int
) -> None:
    scene = one_holder()
    left = [tokens]

    def take() -> bool:
        left[0] -= 1
        return left[0] >= 0

    scene.run(0.0, WINDOW, take=take)
    assert scene.evicted() == evicted and len(scene.events()) == events
    scene.run(WINDOW + PASS_EVERY_S)  # the next pass plans again
    assert scene.evicted() == ["a"]


def test_a_pass_evicts_max_evictions_pods_at_most() -> None:
    nodes = {"n1": Node({"team/a": 2}), "n2": Node({"team/c": 2})}
    scene = Scene(nodes, [bound("a"), bound("c", "n2")], [waiting("w1"), waiting("w2")], max_evictions=1)
    scene.run(0.0, WINDOW)
    assert scene.evicted() == ["a"]


# -- left alone while an eviction settles; quiet after a refusal ---------------------------------


def test_the_node_of_an_eviction_is_left_alone_while_it_settles() -> None:
    pending = [waiting("w1"), waiting("w2", created="2029-12-31T23:30:00Z")]
    scene = Scene({"n1": Node({"team/a": 2, "team/b": 2})}, [bound("a"), bound("b")], pending)
    scene.run(0.0, WINDOW, WINDOW + PASS_EVERY_S)
    assert scene.evicted() == ["a"]
    scene.run(WINDOW + SETTLE_S)  # both settled: w1, the longest waiting, is served again
    assert scene.evicted() == ["a", "b"]
    assert "the waiting pod team/w1 " in scene.events()[-1]["message"]


def test_the_waiting_pod_an_eviction_serves_is_left_alone_while_it_settles() -> None:
    nodes = {"n1": Node({"team/a": 2}), "n2": Node({"team/c": 2})}
    scene = Scene(nodes, [bound("a"), bound("c", "n2")], [waiting("w")])
    scene.run(0.0, WINDOW, WINDOW + PASS_EVERY_S)
    assert scene.evicted() == ["a"]


# -- the holders and the rooms -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("holder", "why"),
    [
        (bound("a", group="team/job"), "a member of the multi-pod group team/job"),
        (bound("a", priority=10), "priority 10 above the waiting pod team/w's 0"),
        (bound("a", phase="Pending"), "not Running"),
        (bound("a", started=0.0), "its start time is unknown"),
    ],
)
def test_a_holder_the_plan_skips_is_not_evicted_and_the_debug_log_says_why(
    holder: BoundPod, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    scene = Scene({"n1": Node({"team/a": 2})}, [holder], [waiting("w")])
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        scene.run(0.0, WINDOW)
    assert scene.evicted() == []
    assert caplog.messages == [f"reclaim: team/a on n1 not evicted: {why}"]


def test_a_node_selector_is_matched_against_the_node_objects_labels() -> None:
    nodes = {"n1": Node({"team/a": 2}, labels={"pool": "big"}), "n2": Node({"team/c": 2})}
    scene = Scene(nodes, [bound("c", "n2"), bound("a")], [waiting("w", selector={"pool": "big"})])
    scene.run(0.0, WINDOW)
    assert scene.evicted() == ["a"]


@pytest.mark.parametrize(
    "elsewhere",
    [
        Node(free=2, taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
        Node(free=2, stale=True),
        Node(free=None, room=2),
    ],
    ids=["untolerated-taint", "stale", "allocation-unknown"],
)
def test_room_the_waiting_pod_cannot_use_does_not_stop_the_eviction(elsewhere: Node) -> None:
    nodes = {"n0": elsewhere, "n1": Node({"team/a": 2}, obj=False)}
    scene = Scene(nodes, [bound("a")], [waiting("w")])
    scene.run(0.0, WINDOW)
    assert scene.evicted() == ["a"]


def test_room_the_waiting_pod_can_use_stops_the_eviction() -> None:
    scene = Scene({"n0": Node(free=2), "n1": Node({"team/a": 2})}, [bound("a")], [waiting("w")])
    scene.run(0.0, WINDOW)
    assert scene.calls() == [("GET", PODS), ("GET", NAMESPACES)]
