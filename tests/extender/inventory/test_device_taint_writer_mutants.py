"""What the DeviceTaintRule writer (inventory/device_taint_writer.py) sends to the API server, the
real kubernetes-asyncio client against a loopback server that records each request (fake clocks):
a pass's deletes, creates and replaces (every field, their order, the write budget, a 409), what a
rule that differs is, the rules a new leader adopts and lists, API discovery, the checks before the
election (a 403, the Lease's namespace), giving the Lease up, the modes it says and what every
replica tracks. Each test fails on a one-line change to the writer (mutmut). The writer on the real
API server: tests/kube/test_device_taints.py and tests/kube/test_publish.py."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.leaderelection import leaderelection

from gpuextender.extender.inventory import device_taint_writer
from gpuextender.extender.inventory.device_taint_writer import (
    AlsoWritten,
    DeviceTaintWriter,
    WriterPace,
    _rule_of,
    list_owned,
    served_version,
)
from gpuextender.extender.inventory.node_status_writer import NodeStatusWriter
from gpuextender.extender.kube.api_call import ApiError
from gpuextender.extender.state.device_taints import TaintRule, TaintWriterStatus
from gpuextender.extender.state.publication import Publication, PublishInputs
from tests.extender.inventory.loopback_api import with_api
from tests.extender.inventory.test_writer_rules import Clock, unhealthy_gpus
from tests.harness import free_port

RULES = "/apis/resource.k8s.io/v1/devicetaintrules"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/gx/leases"
LEASE = f"{LEASES}/gpu-extender-device-taints"
LOGGER = "gpu_extender.device_taints"
KEY = "gpu-extender.io/unhealthy"

Answer = tuple[int, Any]  # status, body (None: the request's body echoed)


class Api:
    """An API server that records each request (method, path, query, JSON body) and answers it
    with `answer(method, path)`: a status and a body (None: the request's body echoed)."""

    def __init__(self, answer: Callable[[str, str], Answer] = lambda _method, _path: (200, None)) -> None:
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.answer = answer
        self.lease: dict[str, Any] | None = None  # {}: the Lease is kept (none yet), as the election needs
        self.conflicts = False  # True: a PUT of the Lease at another resourceVersion is refused (409)

    def _lease(self, method: str, body: Any) -> web.Response:
        stale = (
            self.lease and body and body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]
        )
        if method == "PUT" and self.conflicts and stale:
            return web.Response(status=409, body=b'{"kind": "Status", "code": 409}', content_type="application/json")
        if method in ("POST", "PUT"):
            self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(len(self.requests))}}
        elif not self.lease:
            return web.Response(status=404, body=b'{"kind": "Status", "code": 404}', content_type="application/json")
        return web.Response(status=200, body=orjson.dumps(self.lease), content_type="application/json")

    async def _answer(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = orjson.loads(raw) if raw else None
        self.requests.append((request.method, request.path, dict(request.query), body))
        if self.lease is not None and request.path.startswith(LEASES) and "dryRun" not in request.query:
            return self._lease(request.method, body)
        status, out = self.answer(request.method, request.path)
        if status == 0:  # no answer: the connection reset
            assert request.transport is not None
            request.transport.abort()
        return web.Response(
            status=status,
            body=orjson.dumps(body if out is None else out) if (out is not None or body is not None) else b"",
            content_type="application/json",
        )

    def serve(self, test: Callable[[k8s.ApiClient, k8s.Configuration], Awaitable[None]]) -> None:
        with_api(self._answer, test)

    def calls(self) -> list[tuple[str, str]]:
        return [(method, path) for method, path, _query, _body in self.requests]


def writer(budget: float = 100.0, connection: k8s.Configuration | None = None) -> DeviceTaintWriter:
    return DeviceTaintWriter(
        connection or k8s.Configuration(host="http://127.0.0.1:1"),
        Publication(0.0, 60.0),
        lambda: unhealthy_gpus(2),
        namespace="gx",
        identity="replica-1",
        pace=WriterPace(writes_per_s=budget),
        clock=Clock(),
    )


def rule(name: str, value: str = "Unhealthy", **fields: str) -> TaintRule:
    given = {"driver": "gpu.nvidia.com", "pool": "n1", "device": name.rpartition(".")[2], "key": KEY}
    given.update(fields)
    return TaintRule(name, value=value, effect="NoSchedule", **given)


def item(r: TaintRule, resource_version: str = "1") -> dict[str, Any]:
    """A rule as the API server has it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": r.name,
            "resourceVersion": resource_version,
            "labels": {"app.kubernetes.io/managed-by": "gpu-extender"},
        },
        "spec": {
            "deviceSelector": {"driver": r.driver, "pool": r.pool, "device": r.device},
            "taint": {"key": r.key, "value": r.value, "effect": r.effect},
        },
    }


def body(r: TaintRule) -> dict[str, Any]:
    """A rule as the writer sends it."""
    sent = item(r)
    del sent["metadata"]["resourceVersion"]
    return sent


def reconcile(w: DeviceTaintWriter, api: Api) -> list[bool]:
    done: list[bool] = []

    async def go(client: k8s.ApiClient, _connection: k8s.Configuration) -> None:
        done.append(await w._reconcile(k8s.CustomObjectsApi(client), "v1"))

    api.serve(go)
    return done


# -- a pass: deletes, creates, replaces ----------------------------------------------------------


def test_a_pass_deletes_creates_and_replaces_health_rules_first(caplog: pytest.LogCaptureFixture) -> None:
    w = writer()
    same, changed = rule("gpu-extender.n1.g2"), rule("gpu-extender.n1.g3", "Degraded")
    new, new_busy = rule("gpu-extender.n1.g1"), rule("gpu-extender-busy.n1.g4", "Busy")
    gone, gone_busy = rule("gpu-extender.n1.g9"), rule("gpu-extender-busy.n1.g0")
    w.publication.rules = {r.name: r for r in (new_busy, same, changed, new)}
    w._owned = {
        gone_busy.name: item(gone_busy),
        gone.name: item(gone),
        same.name: item(same),
        changed.name: item(rule(changed.name), "7"),
    }
    api = Api(lambda method, _path: (200, {}) if method == "DELETE" else (200, None))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert reconcile(w, api) == [True]
    replaced = body(changed)
    replaced["metadata"]["resourceVersion"] = "7"
    assert api.requests == [
        ("DELETE", f"{RULES}/{gone.name}", {}, None),
        ("DELETE", f"{RULES}/{gone_busy.name}", {}, None),
        ("POST", RULES, {}, body(new)),
        ("PUT", f"{RULES}/{changed.name}", {}, replaced),
        ("POST", RULES, {}, body(new_busy)),
    ]
    assert w.status.writes == {"create": 2, "update": 1, "delete": 2}
    assert w.status.rules == 4
    assert w._owned == {
        same.name: item(same),
        changed.name: replaced,
        new.name: body(new),
        new_busy.name: body(new_busy),
    }
    assert caplog.messages == [
        "device taint rule gpu-extender.n1.g9 deleted: its GPU is healthy again",
        "device taint rule gpu-extender-busy.n1.g0 deleted: its GPU is idle or held by a pod again",
        f"device taint rule gpu-extender.n1.g1: gpu.nvidia.com/n1/g1 {KEY}=Unhealthy:NoSchedule",
        f"device taint rule gpu-extender.n1.g3 now {KEY}=Degraded:NoSchedule",
        f"device taint rule gpu-extender-busy.n1.g4: gpu.nvidia.com/n1/g4 {KEY}=Busy:NoSchedule",
    ]


@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_a_409_ends_the_pass_to_list_again(method: str) -> None:
    w = writer()
    r = rule("gpu-extender.n1.g1")
    w.publication.rules = {r.name: r, "gpu-extender.n1.g2": rule("gpu-extender.n1.g2")}
    if method == "PUT":
        w._owned = {r.name: item(rule(r.name, "Degraded"))}
    api = Api(lambda m, _path: (409, {}) if m == method else (200, None))
    assert reconcile(w, api) == [False]
    assert api.calls() == [(method, RULES if method == "POST" else f"{RULES}/{r.name}")]
    assert w.status.writes == {"create": 0, "update": 0, "delete": 0}


@pytest.mark.parametrize("deletes", [True, False])
def test_a_pass_out_of_tokens_stops_and_says_it_went_well(deletes: bool) -> None:
    w = writer(budget=1.0)
    a, b = rule("gpu-extender.n1.g1"), rule("gpu-extender.n1.g2")
    if deletes:
        w._owned = {a.name: item(a), b.name: item(b)}
    else:
        w.publication.rules = {a.name: a, b.name: b}
    api = Api(lambda _m, _p: (200, {"metadata": {}}))
    assert reconcile(w, api) == [True]
    assert len(api.requests) == 1
    assert w.status.rules == 0  # not counted: the pass did not end


@pytest.mark.parametrize("method", ["DELETE", "POST", "PUT"])
def test_a_write_that_fails_ends_the_pass_with_what_failed(method: str) -> None:
    w = writer()
    r = rule("gpu-extender.n1.g1")
    if method == "DELETE":
        w._owned = {r.name: item(r)}
    else:
        w.publication.rules = {r.name: r}
        w._owned = {r.name: item(rule(r.name, "Degraded"))} if method == "PUT" else {}
    api = Api(lambda _m, _p: (500, {"no": 1}))
    with pytest.raises(ApiError, match=r'^HTTP 500 on devicetaintrules: \{"no":1\}$'):
        reconcile(w, api)


def test_rules_the_server_answered_without_metadata_are_replaced_without_a_resource_version() -> None:
    w = writer()
    a, b = rule("gpu-extender.n1.g1"), rule("gpu-extender.n1.g2")
    w.publication.rules = {a.name: a, b.name: b}
    api = Api(lambda _m, _p: (200, {}))
    reconcile(w, api)
    w.publication.rules = {a.name: rule(a.name, "Degraded"), b.name: rule(b.name, "Degraded")}
    reconcile(w, api)
    assert [body["metadata"].get("resourceVersion", "-") for _m, _p, _q, body in api.requests[2:]] == [None, None]
    assert w.status.writes == {"create": 2, "update": 2, "delete": 0}


@pytest.mark.parametrize(
    "differs",
    [
        {"driver": "other"},
        {"pool": "n2"},
        {"device": "g7"},
        {"key": "other.io/key"},
        {"value": "Degraded"},
        {"effect": "NoExecute"},
        {"spec": None},
    ],
)
def test_a_rule_that_differs_in_any_field_is_replaced(differs: dict[str, Any]) -> None:
    w = writer()
    r = rule("gpu-extender.n1.g1")
    w.publication.rules = {r.name: r}
    have = item(r)
    for field, value in differs.items():
        if field == "spec":
            have["spec"] = value
        elif field in ("driver", "pool", "device"):
            have["spec"]["deviceSelector"][field] = value
        else:
            have["spec"]["taint"][field] = value
    w._owned = {r.name: have}
    api = Api()
    reconcile(w, api)
    assert api.calls() == [("PUT", f"{RULES}/{r.name}")]


def test_a_rule_the_same_is_left_alone() -> None:
    w = writer()
    r = rule("gpu-extender.n1.g1")
    w.publication.rules = {r.name: r}
    w._owned = {r.name: item(r)}
    api = Api()
    assert reconcile(w, api) == [True]
    assert api.requests == [] and w.status.rules == 1


# -- what a new leader adopts ------------------------------------------------------------------


def test_a_listed_rule_of_the_writers_shape_is_adopted_as_it_stands() -> None:
    r = rule("gpu-extender.n1.g1")
    assert _rule_of(r.name, item(r)) == r
    no_value = item(r)
    del no_value["spec"]["taint"]["value"]
    assert _rule_of(r.name, no_value) == rule(r.name, "")


@pytest.mark.parametrize(
    "broken",
    [
        ("spec", "driver"),
        ("spec", "pool"),
        ("spec", "device"),
        ("spec", "key"),
        ("spec", "effect"),
        ("empty", "driver"),
        ("empty", "effect"),
        ("number", "key"),
        ("no", "spec"),
        ("no", "deviceSelector"),
        ("no", "taint"),
        ("no", "item"),
    ],
)
def test_a_listed_rule_of_another_shape_is_not_adopted(broken: tuple[str, str]) -> None:
    how, what = broken
    got: Any = item(rule("gpu-extender.n1.g1"))
    spec = got["spec"]
    where = spec["deviceSelector"] if what in ("driver", "pool", "device") else spec["taint"]
    if how == "spec":
        del where[what]
    elif how == "empty":
        where[what] = ""
    elif how == "number":
        where[what] = 3
    elif what == "item":
        got = ["not", "a", "rule"]
    elif what == "spec":
        del got["spec"]
    else:
        del spec[what]
    assert _rule_of("gpu-extender.n1.g1", got) is None


def test_the_owned_rules_are_listed_by_the_writers_label() -> None:
    r = rule("gpu-extender.n1.g1")
    api = Api(lambda _m, _p: (200, {"items": [item(r), "not a rule"]}))
    owned: list[dict[str, Any]] = []

    async def go(client: k8s.ApiClient, _connection: k8s.Configuration) -> None:
        owned.append(await list_owned(k8s.CustomObjectsApi(client), "v1"))

    api.serve(go)
    assert owned == [{r.name: item(r)}]
    assert api.requests == [("GET", RULES, {"labelSelector": "app.kubernetes.io/managed-by=gpu-extender"}, None)]
    api.answer = lambda _m, _p: (404, {})
    owned.clear()
    api.serve(go)
    assert owned == [{}]


# -- API discovery -------------------------------------------------------------------------------


def discovery(served: Mapping[str, Answer]) -> Callable[[str, str], Answer]:
    return lambda _method, path: served.get(path.rpartition("/")[2], (404, {}))


@pytest.mark.parametrize(
    ("served", "version"),
    [
        ({"v1beta2": (200, {"resources": [{"name": "resourceslices"}, {"name": "devicetaintrules"}]})}, "v1beta2"),
        ({"v1": (200, {"resources": [{"name": "devicetaintrules"}]})}, "v1"),
        (
            {
                "v1": (200, {"resources": ["devicetaintrules"]}),
                "v1alpha3": (200, {"resources": [{"name": "devicetaintrules"}]}),
            },
            "v1alpha3",
        ),
        ({"v1": (200, {"resources": [{"name": "resourceslices"}]})}, None),
        ({"v1": (200, ["devicetaintrules"])}, None),
        ({"v1": (200, {"resources": None})}, None),
        ({"v1": (500, {"resources": [{"name": "devicetaintrules"}]})}, None),
        ({}, None),
    ],
)
def test_discovery_finds_the_newest_version_that_serves_device_taint_rules(
    served: Mapping[str, Answer], version: str | None
) -> None:
    api, found = Api(discovery(served)), []

    async def go(client: k8s.ApiClient, _connection: k8s.Configuration) -> None:
        found.append(await served_version(client))

    api.serve(go)
    assert found == [version]
    asked = ["v1", "v1beta2", "v1alpha3"]
    assert api.calls() == [
        ("GET", f"/apis/resource.k8s.io/{v}") for v in asked[: asked.index(version) + 1 if version else 3]
    ]


def test_discovery_reads_a_body_that_is_not_json_as_nothing_served() -> None:
    found: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=200, body=b"<html>" if request.path.endswith("/v1") else b"{}")

    async def test(client: k8s.ApiClient, _connection: k8s.Configuration) -> None:
        found.append(await served_version(client))

    with_api(answer, test)
    assert found == [None]


def test_an_api_that_cannot_be_reached_is_standby_and_one_without_rules_unsupported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = writer()
    w.status.mode = "writing"
    with caplog.at_level(logging.INFO, logger=LOGGER):

        async def unreachable() -> str | None:
            async with k8s.ApiClient(k8s.Configuration(host=f"http://127.0.0.1:{free_port()}")) as client:
                return await w._discover(client)

        assert asyncio.run(unreachable()) is None
        assert w.status.mode == "standby"
        [said] = caplog.messages
        assert said.startswith("device taints: API discovery failed (ClientConnectorError: ")
        assert said.endswith("); retrying")
        caplog.clear()
        found: list[str | None] = []

        async def go(client: k8s.ApiClient, _connection: k8s.Configuration) -> None:
            found.append(await w._discover(client))

        Api(discovery({})).serve(go)
    assert found == [None] and w.status.mode == "unsupported"
    assert caplog.messages == [
        "device taints: the API server serves no DeviceTaintRules (resource.k8s.io, DRADeviceTaintRules): GPU "
        "health stays in the extender's filter, and DRA's allocator may still hand out a GPU its agent reports "
        "unhealthy on a node the extender chose"
    ]
    found.clear()
    Api(discovery({"v1": (200, {"resources": [{"name": "devicetaintrules"}]})})).serve(go)
    assert found == ["v1"] and w.status.mode == "unsupported"  # said by the caller


# -- before the election: a 403, the Lease's namespace ----------------------------------------


@pytest.mark.parametrize(
    ("version", "answers", "said", "asked"),
    [
        ("v1", {}, "", 2),
        (None, {}, "", 1),
        ("v1", {RULES: 403}, "not allowed to list devicetaintrules", 1),
        ("v1", {LEASE: 403}, "not allowed to get Lease gx/gpu-extender-device-taints", 2),
        ("v1", {RULES: 500}, 'cannot list devicetaintrules: HTTP 500 on list devicetaintrules: {"no":1}', 1),
        (None, {LEASE: 404}, "", 1),
    ],
)
def test_a_replica_not_allowed_to_read_its_rules_or_lease_says_so(
    version: str | None, answers: Mapping[str, int], said: str, asked: int
) -> None:
    api, why = Api(lambda _m, path: (answers.get(path, 200), {"no": 1})), []

    async def go(client: k8s.ApiClient, _connection: k8s.Configuration) -> None:
        why.append(await writer()._refused(client, version))

    api.serve(go)
    assert why == [said]
    expected = [("GET", RULES, {"limit": "1"}, None), ("GET", LEASE, {}, None)]
    assert api.requests == (expected if version else expected[1:])[:asked]


@pytest.mark.parametrize(("status", "exists"), [(404, False), (201, True), (403, True)])
def test_the_lease_namespace_is_checked_by_a_dry_run_create(status: int, exists: bool) -> None:
    api, found = Api(lambda _m, _p: (status, {})), []

    async def go(client: k8s.ApiClient, _connection: k8s.Configuration) -> None:
        found.append(await writer()._lease_namespace_exists(client))

    api.serve(go)
    assert found == [exists]
    assert api.requests == [
        (
            "POST",
            LEASES,
            {"dryRun": "All"},
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "gpu-extender-device-taints"},
            },
        )
    ]


def test_a_lease_namespace_that_cannot_be_checked_is_left_to_the_election() -> None:
    async def go() -> bool:
        async with k8s.ApiClient(k8s.Configuration(host=f"http://127.0.0.1:{free_port()}")) as client:
            return await writer()._lease_namespace_exists(client)

    assert asyncio.run(go()) is True


# -- giving the Lease up -------------------------------------------------------------------------


def lease(holder: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-extender-device-taints", "namespace": "gx", "resourceVersion": "5"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": "2030-01-01T00:00:00.000000Z"},
    }


@pytest.mark.parametrize(("put", "gave_up"), [(200, True), (409, False)])
def test_a_lease_held_is_given_up_with_no_holder_and_a_second_to_live(
    put: int, gave_up: bool, caplog: pytest.LogCaptureFixture
) -> None:
    api = Api(lambda method, _p: (200, lease("replica-1")) if method == "GET" else (put, {}))

    async def go(_client: k8s.ApiClient, connection: k8s.Configuration) -> None:
        await writer(connection=connection).release_lease()

    with caplog.at_level(logging.INFO, logger=LOGGER):
        api.serve(go)
    given = lease("replica-1")
    given["spec"] = {"leaseDurationSeconds": 1, "renewTime": "2030-01-01T00:00:00.000000Z"}
    assert api.requests == [("GET", LEASE, {}, None), ("PUT", LEASE, {}, given)]
    assert caplog.messages == (["device taints: gave up the Lease gx/gpu-extender-device-taints"] if gave_up else [])


@pytest.mark.parametrize("held", [lease("replica-2"), {"metadata": {}}, {"spec": None}])
def test_a_lease_another_replica_holds_is_not_touched(held: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    api = Api(lambda _m, _p: (200, held))

    async def go(_client: k8s.ApiClient, connection: k8s.Configuration) -> None:
        await writer(connection=connection).release_lease()

    with caplog.at_level(logging.INFO, logger=LOGGER):
        api.serve(go)
    assert api.calls() == [("GET", LEASE)] and caplog.messages == []


@pytest.mark.parametrize("failing", ["GET", "PUT"])
def test_a_lease_that_cannot_be_given_up_expires_by_itself(failing: str, caplog: pytest.LogCaptureFixture) -> None:
    api = Api(lambda method, _p: (500, {"no": 1}) if method == failing else (200, lease("replica-1")))

    async def go(_client: k8s.ApiClient, connection: k8s.Configuration) -> None:
        await writer(connection=connection).release_lease()

    with caplog.at_level(logging.INFO, logger=LOGGER):
        api.serve(go)
    assert caplog.messages == [
        'device taints: could not give up the Lease gx/gpu-extender-device-taints (HTTP 500 on leases: {"no":1}): '
        "it expires by itself"
    ]


# -- modes and tracking --------------------------------------------------------------------------


def test_each_mode_change_is_said_once_warnings_for_unsupported_and_forbidden(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = writer()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for mode in ("standby", "standby", "writing", "forbidden", "unsupported"):
            w._set_mode(mode, f"now {mode}", "v1")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "device taints: now standby"),
        ("INFO", "device taints: now writing"),
        ("WARNING", "device taints: now forbidden"),
        ("WARNING", "device taints: now unsupported"),
    ]
    assert w.status.mode == "unsupported"
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        w._set_mode("standby", "discovery failed")  # no version: unsupported stays
        assert w.status.mode == "unsupported"
        w._set_mode("standby", "lost the Lease", "v1")
    assert w.status.mode == "standby" and caplog.messages == ["device taints: lost the Lease"]


def test_a_mode_without_rules_served_is_the_node_writers() -> None:
    w = writer()
    w.status.mode = "unsupported"
    w._set_mode("forbidden", "no", None)
    assert w.status.mode == "unsupported" and w.status.node_mode == "off"  # no node writer: nothing


def test_every_replica_tracks_what_stands() -> None:
    w = writer()
    w.track()
    assert w.status.standing == {KEY: 2}
    assert w.status.nodes_by_condition == {"True": 0, "False": 0, "Unknown": 0}
    assert w.status.deferred == 0


# -- leading: adopt, then a pass every interval --------------------------------------------------


LIVENESS_S = 30.0  # how long a condition may take to hold, even on a loaded machine: it fails the test
SETTLE_S = 0.1  # after what was awaited, a few more loop intervals in which nothing more may happen


async def until(what: str, condition: Callable[[], bool], timeout_s: float = LIVENESS_S) -> None:
    """Wait until `condition` holds (polled every 10 ms); fail the test naming `what` if it never does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            pytest.fail(f"never happened within {timeout_s:g}s: {what}")
        await asyncio.sleep(0.01)


def holder(api: Api) -> Any:
    """Who holds the Lease the Api keeps (None: nobody yet)."""
    return ((api.lease or {}).get("spec") or {}).get("holderIdentity")


def gets(api: Api, path: str) -> int:
    return len([call for call in api.calls() if call == ("GET", path)])


def leader(inputs: Callable[[], Any] | None = None) -> DeviceTaintWriter:
    w = writer()
    w._interval_s = 0.01
    if inputs is not None:
        w._inputs = inputs
    return w


def lead(
    w: DeviceTaintWriter,
    api: Api,
    version: str | None,
    what: str,
    condition: Callable[[], bool],
    settle_s: float = SETTLE_S,
) -> list[bool]:
    """`w` leads until `condition` holds (`what`), and `settle_s` more; whether it was leading then,
    and after."""
    seen: list[bool] = []

    async def go(client: k8s.ApiClient, _connection: k8s.Configuration) -> None:
        task = asyncio.create_task(w._lead(client, version))
        await until(what, condition)
        await asyncio.sleep(settle_s)
        seen.append(w._leading and w._leading_with is not None and w._leading_with[1] is client)
        task.cancel()
        await asyncio.wait({task})
        assert task.cancelled()  # it ran until stopped: it never ends by itself
        seen.append(w._leading or w._leading_with is not None)

    api.serve(go)
    return seen


def test_a_new_leader_adopts_the_rules_it_lists_and_writes_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    w = leader()
    w.track()
    first, second = sorted(w.publication.rules.values(), key=lambda r: r.name)
    api = Api(lambda method, _p: (200, {"items": [item(first)]}) if method == "GET" else (200, None))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert lead(w, api, "v1", "a pass that counts the rules", lambda: w.status.rules > 0) == [True, False]
    assert api.requests == [
        ("GET", RULES, {"labelSelector": "app.kubernetes.io/managed-by=gpu-extender"}, None),
        ("POST", RULES, {}, body(second)),
    ]
    assert w.status.mode == "writing" and w.status.rules == 2
    assert caplog.messages[0] == (
        "device taints: leader (Lease gx/gpu-extender-device-taints): writing resource.k8s.io/v1 devicetaintrules"
    )


def test_a_leader_without_rules_served_lists_none(caplog: pytest.LogCaptureFixture) -> None:
    w = leader()
    api = Api()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert lead(w, api, None, "a pass that tracks", lambda: bool(w.status.standing)) == [True, False]
    assert api.requests == [] and w.status.mode == "off"
    assert caplog.messages == ["device taints: leader (Lease gx/gpu-extender-device-taints): writing node status only"]


def test_a_leader_refused_says_forbidden_and_waits(caplog: pytest.LogCaptureFixture) -> None:
    w = leader()
    api = Api(lambda _m, _p: (403, {"no": 1}))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        lead(w, api, "v1", "the mode forbidden", lambda: w.status.mode == "forbidden")
    assert api.calls() == [("GET", RULES)]  # then waits RETRY_S
    assert w.status.mode == "forbidden"
    assert caplog.messages[-1] == (
        'device taints: HTTP 403 on devicetaintrules: {"no":1}: apply deploy/components/device-taints (its RBAC)'
    )


@pytest.mark.parametrize("failing", ["GET", "POST"])
def test_a_leader_whose_pass_fails_lists_again(failing: str, caplog: pytest.LogCaptureFixture) -> None:
    w = leader()
    status = 500 if failing == "GET" else 409
    api = Api(lambda method, _p: (status, {"no": 1}) if method == failing else (200, {"items": []}))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        lead(w, api, "v1", "a second list", lambda: gets(api, RULES) >= 2)
    lists = [call for call in api.calls() if call == ("GET", RULES)]
    assert len(lists) >= 2
    said = 'HTTP 500 on devicetaintrules: {"no":1}' if failing == "GET" else "a rule changed meanwhile (409)"
    assert caplog.messages[0] == f"device taints: {said}; listing again"
    assert w.status.mode == "writing"


def test_a_leader_whose_pass_breaks_logs_it_and_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> Any:
        raise RuntimeError("a bug")

    w = leader(broken)
    api = Api(lambda _m, _p: (200, {"items": []}))
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        lead(w, api, "v1", "two failed passes, two lists", lambda: len(caplog.messages) >= 2 and gets(api, RULES) >= 2)
    assert len(caplog.messages) >= 2
    assert set(caplog.messages) == {"device taints: a writing pass failed; listing again"}
    assert len([call for call in api.calls() if call == ("GET", RULES)]) >= 2  # and lists again


# -- a pass: the rules once per change, everything again now and then ----------------------------


def test_a_pass_writes_the_rules_when_they_changed_and_all_of_them_every_resync() -> None:
    w = writer()
    clock = w._clock
    assert isinstance(clock, Clock)
    api = Api()

    async def go(client: k8s.ApiClient, _connection: k8s.Configuration) -> None:
        rules = k8s.CustomObjectsApi(client)
        for clock.now in (0.0, 1.0, 59.0, 60.0):
            w._owned.clear()  # as if undone by someone else: only the resync sees it
            await w._pass(client, rules, "v1")

    api.serve(go)
    assert [method for method, _path in api.calls()] == ["POST", "POST", "POST", "POST"]
    assert w._resync_at == 120.0


# -- run: discovery, the checks, the election ----------------------------------------------------


def running(
    w: DeviceTaintWriter, api: Api, what: str, condition: Callable[[], bool], settle_s: float = SETTLE_S
) -> None:
    """`w.run()` against `api` until `condition` holds (`what`), and `settle_s` more."""

    async def go(_client: k8s.ApiClient, connection: k8s.Configuration) -> None:
        w._connection = connection
        task = asyncio.create_task(w.run())
        await until(what, condition)
        await asyncio.sleep(settle_s)
        task.cancel()
        await asyncio.wait({task})
        assert task.cancelled()  # it ran until stopped: it never ends by itself

    api.serve(go)


SERVED = {"v1": (200, {"resources": [{"name": "devicetaintrules"}]})}


def served(more: Mapping[str, Answer] | None = None) -> Callable[[str, str], Answer]:
    def answer(method: str, path: str) -> Answer:
        if path in (more or {}):
            return (more or {})[path]
        if path.startswith("/apis/resource.k8s.io/v") and path.count("/") == 3:
            return SERVED.get(path.rpartition("/")[2], (404, {}))
        return (200, {"items": []}) if method == "GET" else (201, None)

    return answer


def test_run_elects_a_leader_that_writes_the_rules(caplog: pytest.LogCaptureFixture) -> None:
    w = writer()
    api = Api(served())
    api.lease = {}
    with caplog.at_level(logging.INFO, logger=LOGGER):
        running(
            w,
            api,
            "two creates by the leader",
            lambda: w.status.mode == "writing" and len([c for c in api.calls() if c == ("POST", RULES)]) >= 2,
            settle_s=0.6,  # and one more pass (every 0.5 s), which writes nothing
        )
    assert w.status.mode == "writing"
    assert api.lease["spec"]["holderIdentity"] == "replica-1"
    assert api.lease["spec"]["leaseDurationSeconds"] == 15
    assert [call for call in api.calls() if call[0] == "POST" and call[1] == RULES] == [("POST", RULES)] * 2
    assert caplog.messages[:2] == [
        "device taints: waiting for the Lease gx/gpu-extender-device-taints",
        "device taints: leader (Lease gx/gpu-extender-device-taints): writing resource.k8s.io/v1 devicetaintrules",
    ]
    assert w.status.standing == {KEY: 2}


def test_run_refused_says_forbidden_and_takes_no_part(caplog: pytest.LogCaptureFixture) -> None:
    w = writer()
    api = Api(served({LEASE: (403, {})}))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        running(w, api, "a mode said", lambda: w.status.mode != "off")
    assert (w.status.mode, w.status.node_mode) == ("forbidden", "off")
    assert caplog.messages == [
        "device taints: not allowed to get Lease gx/gpu-extender-device-taints: apply "
        "deploy/components/device-taints (its RBAC)"
    ]
    assert not any(path == LEASES for _m, path in api.calls())


def test_run_without_the_lease_namespace_says_how_to_make_it(caplog: pytest.LogCaptureFixture) -> None:
    w = writer()
    api = Api(served({LEASES: (404, {})}))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        running(w, api, "a mode said", lambda: w.status.mode != "off")
    assert w.status.mode == "no-lease-namespace"
    assert caplog.messages == [
        "device taints: no rule is written: the namespace gx of the replicas' Lease does not exist; create it "
        "(kubectl create namespace gx) or set --leader-namespace (or POD_NAMESPACE) to the extender's own "
        "namespace; checking again every 10s"
    ]


def test_run_without_rules_served_and_nothing_else_to_write_only_looks_again_later() -> None:
    w = writer()
    api = Api(lambda _m, _p: (404, {}))
    running(w, api, "the three versions asked", lambda: len(api.requests) >= 3, settle_s=2 * SETTLE_S)
    assert w.status.mode == "unsupported"
    assert {path for _m, path in api.calls()} == {f"/apis/resource.k8s.io/{v}" for v in ("v1", "v1beta2", "v1alpha3")}
    assert len(api.requests) == 3  # once: then every rediscover_s


def test_run_tracks_what_stands_while_it_does_not_lead(caplog: pytest.LogCaptureFixture) -> None:
    w = writer()
    w._interval_s = 0.01
    running(w, Api(served({LEASE: (403, {})})), "a track", lambda: bool(w.status.standing))
    assert w.status.standing == {KEY: 2}

    def broken() -> Any:
        raise RuntimeError("a bug")

    w._inputs = broken
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        running(
            w,
            Api(served({LEASE: (403, {})})),
            "two failed tracks",
            lambda: len([r for r in caplog.records if r.levelno == logging.ERROR]) >= 2,
        )
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) >= 2
    assert set(errors) == {"device taints: updating what stands failed; trying again"}


def test_an_election_that_fails_says_why(caplog: pytest.LogCaptureFixture) -> None:
    w = writer()
    api = Api(served({LEASE: (404, {})}))  # no Status body: the election cannot read it
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        running(w, api, "the election's failure", lambda: bool(caplog.messages) and w.status.mode == "standby")
    assert caplog.messages == ["device taints: leader election failed (KeyError: 'code'); trying again"]
    assert w.status.mode == "standby"


def node_writer() -> NodeStatusWriter:
    return NodeStatusWriter(
        lambda _n: None, TaintWriterStatus(), taint=False, taint_key="k", taint_effect="NoSchedule", clock=Clock()
    )


def with_node_writer(nodes: Any) -> DeviceTaintWriter:
    """A writer (never started) beside the node writer `nodes`."""
    return DeviceTaintWriter(
        k8s.Configuration(host="http://127.0.0.1:1"),
        Publication(0.0, 60.0),
        lambda: unhealthy_gpus(1),
        namespace="gx",
        also=AlsoWritten(nodes=nodes),
    )


def test_with_a_node_writer_the_status_is_its_and_a_mode_without_rules_its_mode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nodes = node_writer()
    w = with_node_writer(nodes)
    assert w.status is nodes.status and w.nodes is nodes
    assert w.identity == f"{socket.gethostname()}-{os.getpid()}"
    with caplog.at_level(logging.INFO, logger=LOGGER):
        w._set_mode("forbidden", "not allowed", None)
        assert w.status.node_mode == "forbidden"
        w._set_mode("no-lease-namespace", "no namespace", None)
        assert w.status.node_mode == "forbidden"
        w._set_mode("standby", "waiting", None)
        assert w.status.node_mode == "standby"
        w._set_mode("no-lease-namespace", "no namespace", None)
        assert w.status.node_mode == "forbidden"
    assert caplog.messages == ["node status: not allowed", "node status: no namespace"]
    assert w.status.mode == "off"


def test_a_leader_that_loses_the_lease_stands_by(caplog: pytest.LogCaptureFixture) -> None:
    nodes = node_writer()
    w = with_node_writer(nodes)
    w.status.mode, w.status.node_mode = "writing", "writing"
    with caplog.at_level(logging.INFO, logger=LOGGER):
        asyncio.run(w._stopped())
    assert (w.status.mode, w.status.node_mode) == ("standby", "standby")
    assert caplog.messages == ["device taints: lost the Lease: another replica writes the rules"]
    alone = writer()
    alone.status.mode = "writing"
    asyncio.run(alone._stopped())
    assert (alone.status.mode, alone.status.node_mode) == ("standby", "off")
    alone.status.mode = "unsupported"  # it led for the node status only
    asyncio.run(alone._stopped())
    assert alone.status.mode == "unsupported"


class Also:
    """A writer of `also`'s (nodes, events, reclaim) that records how each pass calls it; `spends`
    tokens of the pass's budget each time."""

    def __init__(self, calls: list[Any], name: str, spends: int = 0) -> None:
        self.calls, self.name, self.spends = calls, name, spends
        self.status = TaintWriterStatus()
        self.clients: list[k8s.ApiClient] = []
        self.takes: list[Callable[[], bool]] = []

    def resync(self) -> None:
        self.calls.append((self.name, "resync"))

    async def reconcile(self, client: k8s.ApiClient, *args: Any) -> None:
        take = args[-1]
        self.calls.append((self.name, *args[:-1]))
        self.clients.append(client)
        self.takes.append(take)
        for _ in range(self.spends):
            take()


def with_also(calls: list[Any], budget: float = 100.0, spends: int = 0) -> DeviceTaintWriter:
    also = AlsoWritten(
        nodes=Also(calls, "nodes", spends),  # type: ignore[arg-type]
        events=Also(calls, "events"),  # type: ignore[arg-type]
        reclaim=Also(calls, "reclaim"),  # type: ignore[arg-type]
    )
    return DeviceTaintWriter(
        k8s.Configuration(host="http://127.0.0.1:1"),
        Publication(0.0, 60.0),
        lambda: unhealthy_gpus(2),
        namespace="gx",
        also=also,
        identity="replica-1",
        pace=WriterPace(writes_per_s=budget),
        clock=Clock(),
    )


def passes(w: DeviceTaintWriter, times: tuple[float, ...], version: str | None = None) -> None:
    clock = w._clock
    assert isinstance(clock, Clock)

    async def go(client: k8s.ApiClient, _connection: k8s.Configuration) -> None:
        for clock.now in times:
            await w._pass(client, k8s.CustomObjectsApi(client), version)

    Api().serve(go)


def test_a_pass_writes_nodes_once_warm_then_events_then_reclaims_and_resyncs_nodes_every_minute() -> None:
    calls: list[Any] = []
    w = with_also(calls)
    passes(w, (0.0, 59.0, 60.0))
    idle = (w.publication.idle_by_node, w.publication.idle_claims)
    assert calls == [
        ("nodes", "resync"),
        ("events", *idle),
        ("reclaim",),
        ("events", *idle),
        ("reclaim",),
        ("nodes", "resync"),
        ("nodes", w.publication),
        ("events", *idle),
        ("reclaim",),
    ]
    writers = (w.nodes, w.events, w.reclaim)
    assert all(isinstance(also, Also) and also.clients for also in writers)
    assert all(isinstance(client, k8s.ApiClient) for also in writers for client in cast(Also, also).clients)
    assert all(take == w._bucket.take for also in writers for take in cast(Also, also).takes)  # the pass's budget


def test_a_pass_whose_nodes_spend_the_budget_ends_before_events_and_reclaims() -> None:
    calls: list[Any] = []
    w = with_also(calls, budget=1.0, spends=2)
    passes(w, (0.0, 60.0))
    idle = (w.publication.idle_by_node, w.publication.idle_claims)
    assert calls == [
        ("nodes", "resync"),
        ("events", *idle),
        ("reclaim",),
        ("nodes", "resync"),
        ("nodes", w.publication),
    ]


def test_a_pass_whose_rules_spend_the_budget_writes_no_node() -> None:
    calls: list[Any] = []
    w = with_also(calls, budget=1.0)
    passes(w, (0.0,), "v1")  # two rules, one token
    assert calls == [("nodes", "resync")]
    assert w._rules_seen == -1  # the rules go on at the next pass


@pytest.mark.parametrize("nodes", [False, True])
def test_run_that_cannot_reach_the_api_only_tries_discovery_again(
    nodes: bool, caplog: pytest.LogCaptureFixture
) -> None:
    w = with_also([]) if nodes else writer()
    w._connection = k8s.Configuration(host=f"http://127.0.0.1:{free_port()}")

    async def go() -> None:
        task = asyncio.create_task(w.run())
        await until("a failed discovery said", lambda: w.status.mode == "standby" and bool(caplog.messages))
        await asyncio.sleep(SETTLE_S)
        task.cancel()
        await asyncio.wait({task})
        assert task.cancelled()  # it ran until stopped: it never ends by itself

    with caplog.at_level(logging.INFO, logger=LOGGER):
        asyncio.run(go())
    assert w.status.mode == "standby"
    [said] = caplog.messages
    assert said.startswith("device taints: API discovery failed (")


def test_run_without_rules_served_still_elects_a_leader_for_the_node_status(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[Any] = []
    w = with_also(calls)
    api = Api(lambda _m, path: (404, {}) if path.startswith("/apis/resource.k8s.io/") else (201, None))
    api.lease = {}
    with caplog.at_level(logging.INFO, logger=LOGGER):
        running(
            w,
            api,
            "the Lease won, a pass's events and a resync",
            lambda: holder(api) == "replica-1" and bool(cast(Also, w.events).clients) and ("nodes", "resync") in calls,
        )
    assert w.status.mode == "unsupported" and w.status.node_mode == "standby"
    assert api.lease["spec"]["holderIdentity"] == "replica-1"
    assert ("GET", RULES) not in api.calls()
    assert "device taints: leader (Lease gx/gpu-extender-device-taints): writing node status only" in caplog.messages
    assert ("nodes", "resync") in calls
    events = w.events
    assert isinstance(events, Also) and events.clients
    assert all(isinstance(client, k8s.ApiClient) for client in events.clients)  # the leader's own


def test_a_leader_whose_election_fails_stands_by_and_says_each_failure_once(caplog: pytest.LogCaptureFixture) -> None:
    w = writer()
    w._lease_s = (15, 10, 1)  # a retry every second (the least the election takes)
    api = Api(served({LEASE: (404, {})}))  # once the Lease is not kept: no Status body, the election fails
    api.lease = {}

    async def go(_client: k8s.ApiClient, connection: k8s.Configuration) -> None:
        w._connection = connection
        task = asyncio.create_task(w.run())
        await until("the Lease won", lambda: w.status.mode == "writing")
        before = gets(api, LEASE)
        api.lease = None
        # the renew fails, then (a retry later) the check and the election's next try, then the next check:
        # by then two failures have been said (or not)
        await until("four more reads of the Lease", lambda: gets(api, LEASE) >= before + 4)
        task.cancel()
        await asyncio.wait({task})
        assert task.cancelled()

    with caplog.at_level(logging.INFO, logger=LOGGER):
        api.serve(go)
    assert w.status.mode == "standby"
    tries = [call for call in api.calls() if call == ("GET", LEASE)]
    assert len(tries) >= 3
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == LOGGER]
    assert warned == ["device taints: leader election failed (KeyError: 'code'); trying again"]
    assert "device taints: leader election failed" in caplog.messages


def test_run_refused_with_a_node_writer_says_its_node_status_forbidden() -> None:
    w = with_also([])
    running(w, Api(served({LEASE: (403, {})})), "a mode said", lambda: w.status.mode != "off")
    assert (w.status.mode, w.status.node_mode) == ("forbidden", "forbidden")


def test_a_leader_refused_lists_again_after_the_retry(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(device_taint_writer, "RETRY_S", 0.05)  # 10 s in production
    w = leader()
    refusals = [403]
    api = Api(lambda method, _p: (refusals.pop(), {}) if refusals else (200, {"items": []}))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        lead(w, api, "v1", "a list, a list again and a create", lambda: len(api.requests) >= 3)
    assert api.calls()[:3] == [("GET", RULES), ("GET", RULES), ("POST", RULES)]
    assert w.status.mode == "writing"
    assert caplog.messages[1:3] == [
        "device taints: HTTP 403 on devicetaintrules: {}: apply deploy/components/device-taints (its RBAC)",
        "device taints: retrying after a 403",
    ]


def test_a_new_leader_keeps_a_listed_rule_no_longer_asked_for_until_its_hold_ends() -> None:
    w = leader()
    kept = rule("gpu-extender-busy.n9.g0", "Busy")  # a busy rule stands for its hold
    api = Api(lambda method, _p: (200, {"items": [item(kept)]}) if method == "GET" else (200, None))
    lead(w, api, "v1", "a pass that counts the rules", lambda: w.status.rules > 0)
    assert w.publication.rules[kept.name] == kept and w.publication.rules[kept.name].name == kept.name
    assert not any(method == "DELETE" for method, _path in api.calls())


def test_a_leader_that_lists_again_writes_what_went_missing_meanwhile() -> None:
    tracked = [0]

    def inputs() -> Any:
        tracked[0] += 1
        if tracked[0] == 2:
            raise RuntimeError("a bug, once")
        return unhealthy_gpus(2)

    w, names = leader(inputs), writer()
    names.track()
    first, second = sorted(names.publication.rules.values(), key=lambda r: r.name)
    lists = [{"items": []}, {"items": [item(first)]}]  # then `second` was deleted by someone else

    def answer(method: str, _path: str) -> Answer:
        if method == "GET":
            return (200, lists.pop(0) if lists else {"items": [item(first), item(second)]})
        return (200, None)

    api = Api(answer)

    def posted() -> list[str]:
        return [body["metadata"]["name"] for method, _p, _q, body in api.requests if method == "POST"]

    lead(w, api, "v1", "three creates", lambda: len(posted()) >= 3, settle_s=5 * SETTLE_S)
    assert posted() == [first.name, second.name, second.name]


def test_every_replica_counts_the_gpu_nodes_by_their_condition() -> None:
    one = unhealthy_gpus(2)
    summary = one.summary_of("gpu-1")
    assert summary is not None
    summaries = {"gpu-1": summary, "gpu-2": replace(summary, node="gpu-2"), "gpu-3": replace(summary, node="gpu-3")}
    inputs = PublishInputs(one.dra, {"gpu-1": 2, "gpu-2": 2, "gpu-3": 2}, summaries.get, None)
    w = writer()
    w._inputs = lambda: inputs
    w.track()
    # gpu-1 publishes DRA devices: no GPUsUsable condition; the other two have no usable GPU
    assert w.status.nodes_by_condition == {"True": 0, "False": 2, "Unknown": 0}


@pytest.mark.parametrize("refused", [RULES, LEASE])
def test_run_checks_both_its_rules_and_its_lease_before_the_election(refused: str) -> None:
    w, api = writer(), Api(served({refused: (403, {})}))
    running(w, api, "a mode said", lambda: w.status.mode != "off")
    assert w.status.mode == "forbidden"
    assert ("GET", RULES) in api.calls() and not any(path == LEASES for _m, path in api.calls())


def test_run_with_only_a_node_writer_and_no_rules_served_still_elects_a_leader() -> None:
    w = with_also([])
    w.events = w.reclaim = None
    api = Api(lambda _m, path: (404, {}) if path.startswith("/apis/resource.k8s.io/") else (201, None))
    api.lease = {}
    running(w, api, "the Lease won", lambda: holder(api) == "replica-1")
    assert api.lease["spec"]["holderIdentity"] == "replica-1"


def test_discovery_is_asked_again_soon_when_unreachable_and_rarely_when_nothing_is_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(device_taint_writer, "RETRY_S", 0.05)  # 10 s in production; rediscover_s stays 300 s
    unreachable = Api(lambda _m, _p: (0, None))
    running(writer(), unreachable, "three discoveries", lambda: len(unreachable.requests) >= 3)
    assert len(unreachable.requests) >= 3
    unsupported = Api(lambda _m, _p: (404, {}))
    running(
        writer(), unsupported, "the three versions asked", lambda: len(unsupported.requests) >= 3, settle_s=4 * SETTLE_S
    )
    assert len(unsupported.requests) == 3  # the three versions, once


def test_an_election_that_fails_without_rules_served_stands_the_node_writer_by() -> None:
    w = with_also([])
    w._lease_s = (15, 10, 1)
    api = Api(lambda _m, path: (404, {}) if path.startswith("/apis/resource.k8s.io/") or path == LEASE else (201, None))
    api.lease = {}
    seen: list[str] = []

    async def go(_client: k8s.ApiClient, connection: k8s.Configuration) -> None:
        w._connection = connection
        task = asyncio.create_task(w.run())
        await until("the Lease won", lambda: w._leading)
        w.status.node_mode = "writing"  # as the node writer says while it leads
        api.lease = None  # the renew, a second after the election, fails
        await until("the node mode no longer writing", lambda: w.status.node_mode != "writing")
        seen.append(w.status.node_mode)
        task.cancel()
        await asyncio.wait({task})

    api.serve(go)
    assert seen == ["standby"] and w.status.mode == "unsupported"


def test_run_refused_without_rules_served_says_only_the_node_status_forbidden() -> None:
    w = with_also([])
    api = Api(lambda _m, path: (404, {}) if path.startswith("/apis/resource.k8s.io/") else (403, {}))
    running(w, api, "a node mode said", lambda: w.status.node_mode != "off")
    assert (w.status.mode, w.status.node_mode) == ("unsupported", "forbidden")


@pytest.mark.parametrize("failing", [LEASE, LEASES], ids=["refused", "no-lease-namespace"])
def test_run_checks_again_after_the_retry(failing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_taint_writer, "RETRY_S", 0.05)  # 10 s in production
    api = Api(served({failing: (403 if failing == LEASE else 404, {})}))
    running(
        writer(), api, "three checks", lambda: len([call for call in api.calls() if call[1] == failing]) >= 3
    )  # it never gives up
    assert len([call for call in api.calls() if call[1] == failing]) >= 3


def test_run_without_rules_served_and_no_lease_namespace_says_only_the_node_status_forbidden() -> None:
    w = with_also([])
    api = Api(lambda _m, path: (404, {}) if path.startswith("/apis/resource.k8s.io/") or path == LEASES else (200, {}))
    running(w, api, "a node mode said", lambda: w.status.node_mode != "off")
    assert (w.status.mode, w.status.node_mode) == ("unsupported", "forbidden")


def test_a_replica_waiting_for_a_lease_another_holds_stands_by() -> None:
    w = writer()
    api = Api(served())
    api.lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "gpu-extender-device-taints", "namespace": "gx"},
        "spec": {
            "holderIdentity": "replica-2",
            "leaseDurationSeconds": 15,
            "acquireTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }
    running(
        w,
        api,
        "the mode standby after a look at the Lease",
        lambda: w.status.mode == "standby" and gets(api, LEASE) >= 2,
        settle_s=2 * SETTLE_S,
    )
    assert w.status.mode == "standby" and api.lease["spec"]["holderIdentity"] == "replica-2"


def test_an_election_error_is_told_in_its_first_200_characters(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The election is the library's: whatever it raises is told, its text cut at 200 characters (one
    log line per distinct failure, every retry)."""

    async def failing(_self: Any) -> None:
        raise RuntimeError("x" * 199 + "yz" + "w" * 99)

    monkeypatch.setattr(leaderelection.LeaderElection, "run", failing)
    w = writer()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        running(w, Api(served()), "the election's failure", lambda: bool(caplog.messages))
    assert caplog.messages == [f"device taints: leader election failed (RuntimeError: {'x' * 199}y); trying again"]
    assert w.status.mode == "standby"


def test_a_leader_whose_lease_another_replica_takes_stands_by_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """The Lease renewed by another replica meanwhile: this one's renewals fail for the renew deadline,
    then the election stops leading (`onstopped_leading`): standby, and it says why."""
    w = writer()
    w._lease_s = (3, 2, 1)  # (duration > deadline > 1.2 x retry: the election's own rules)
    api = Api(served())
    api.lease, api.conflicts = {}, True  # (a renewal read before the other replica's is refused, as by the API)

    async def go(_client: k8s.ApiClient, connection: k8s.Configuration) -> None:
        w._connection = connection
        task = asyncio.create_task(w.run())
        await until("the Lease won", lambda: w.status.mode == "writing")
        assert api.lease
        taken = {
            "metadata": {**api.lease["metadata"], "resourceVersion": "taken"},
            "spec": {**api.lease["spec"], "holderIdentity": "replica-2", "renewTime": "2026-12-08T00:00:00.000000Z"},
        }
        api.lease = {**api.lease, **taken}
        await until("the Lease given up", lambda: w.status.mode == "standby")
        task.cancel()
        await asyncio.wait({task})

    with caplog.at_level(logging.INFO, logger=LOGGER):
        api.serve(go)
    assert "device taints: lost the Lease: another replica writes the rules" in caplog.messages
    assert not [m for m in caplog.messages if "leader election failed" in m]
