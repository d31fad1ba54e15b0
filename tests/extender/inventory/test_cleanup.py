"""The cleanup's I/O (inventory/cleanup.py) against tests/kube_apiserver.py, an API server that serves
no DeviceTaintRules, Lease or PATCH (each a 404 or 405 here), and against scripted clients for the
answers only a real server gives (a failed JSON-patch test, a uid precondition). What it removes on
the real API server: tests/kube/test_cleanup.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from gpuextender.extender.inventory import cleanup
from gpuextender.extender.state.cleanup_plan import CleanupReport, NodePlan, Removal, exit_status, lines
from tests.kube_apiserver import KubeApiServer

KEY = "gpu-extender.io/no-usable-gpu"
OURS = {"key": KEY, "effect": "NoSchedule"}


def node(name: str, ours: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True"}] + ([{"type": "GPUsUsable", "status": "False"}] if ours else [])
    return {
        "metadata": {"name": name},
        "spec": {"taints": [OURS] if ours else []},
        "status": {"conditions": conditions},
    }


def run_against(server: KubeApiServer, report: CleanupReport, before: Any = None) -> None:
    async def go() -> None:
        async with server:
            if before is not None:
                await before(server)
            await asyncio.wait_for(cleanup.clean_up(server.configuration(), report, lease_namespace="gx"), 30)

    asyncio.run(go())


def test_without_device_taint_rules_served_none_are_deleted_and_nodes_are_read_page_by_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cleanup, "NODE_PAGE", 2)
    server = KubeApiServer()
    for i in range(5):
        server.add("Node", node(f"n{i}"))
    report = CleanupReport(KEY)
    run_against(server, report)
    assert report.version is None and report.lease == "gx/gpu-extender-device-taints" and not report.leader
    assert lines(report) == [
        "the API server serves no DeviceTaintRules (resource.k8s.io): none to delete",
        "removed the GPUsUsable condition from 0 Nodes",
        f"removed taint {KEY} from 0 Nodes",
    ]
    assert exit_status(report) == 0
    pages = [r for r in server.list_requests if r.kind == "Node"]
    assert [(r.limit, r.continue_token is None) for r in pages] == [(2, True), (2, False), (2, False)]


def test_a_dry_run_counts_and_patches_nothing() -> None:
    server = KubeApiServer()
    server.add("Node", node("a", ours=True))
    server.add("Node", node("b"))
    report = CleanupReport(KEY, dry_run=True)
    run_against(server, report)  # a PATCH would be a 405 here
    assert lines(report)[1:] == [
        "would remove the GPUsUsable condition from 1 Node",
        f"would remove taint {KEY} from 1 Node",
    ]
    assert exit_status(report) == 0


def test_a_refused_patch_is_counted_with_the_servers_answer_and_exit_1() -> None:
    server = KubeApiServer()
    server.add("Node", node("a", ours=True))
    report = CleanupReport(KEY)
    run_against(server, report)
    assert (report.conditions.found, report.conditions.removed, report.taints.found, report.taints.removed) == (
        1,
        0,
        1,
        0,
    )
    said = lines(report)
    assert said[1].startswith("removed the GPUsUsable condition from 0 Nodes; 1 not: HTTP 405 on nodes/status")
    assert said[2].startswith(f"removed taint {KEY} from 0 Nodes; 1 not: HTTP 405 on nodes")
    assert exit_status(report) == 1


def test_nodes_it_may_not_list_are_said_as_the_missing_verb() -> None:
    server = KubeApiServer()
    server.forbidden.add("Node")
    report = CleanupReport(KEY)
    run_against(server, report)
    assert lines(report)[1] == (
        "removed the GPUsUsable condition from 0 Nodes: could not list them: forbidden (RBAC: needs list on nodes)"
    )
    assert exit_status(report) == 1


def test_a_failing_api_server_is_said_per_kind_and_exit_1() -> None:
    server = KubeApiServer()

    async def failing(s: KubeApiServer) -> None:
        s.fail_with(503)

    report = CleanupReport(KEY)
    run_against(server, report, failing)
    assert report.lease_note.startswith("cannot read the Lease gx/gpu-extender-device-taints: HTTP 503 on leases")
    assert "could not list them: HTTP 503 on nodes" in lines(report)[-1]
    assert exit_status(report) == 1


def test_an_unreachable_api_server_stops_the_run_in_one_line_and_exit_1() -> None:
    server = KubeApiServer()

    async def down(s: KubeApiServer) -> None:
        await s.go_down()

    report = CleanupReport(KEY)
    run_against(server, report, down)
    assert report.stopped.startswith(f"cannot reach the Kubernetes API server {server.url}: ")
    assert lines(report)[0] == f"stopped: {report.stopped}" and exit_status(report) == 1


def test_a_kubeconfig_whose_files_cannot_be_read_is_a_cleanup_error() -> None:
    configuration = KubeApiServer().configuration()
    configuration.ssl_ca_cert = "/nonexistent/ca.crt"
    with pytest.raises(cleanup.CleanupError, match="kubeconfig: "):
        asyncio.run(cleanup.clean_up(configuration, CleanupReport(KEY), lease_namespace="gx"))


# -- answers only a real API server gives ------------------------------------------------------------


class _Answer:
    def __init__(self, status: int, body: Any = None) -> None:
        self.status, self._raw = status, orjson.dumps(body) if body is not None else b""

    async def read(self) -> bytes:
        return self._raw

    def release(self) -> None:
        pass


class _Scripted:
    """A client whose every call answers the next of `answers` (an _Answer, or an exception raised)."""

    def __init__(self, *answers: _Answer | BaseException) -> None:
        self.answers: Iterator[_Answer | BaseException] = iter(answers)
        self.calls: list[tuple[str, Any]] = []

    def _next(self, what: str, body: Any) -> Any:
        self.calls.append((what, body))
        answer = next(self.answers)

        async def respond() -> _Answer:
            if isinstance(answer, BaseException):
                raise answer
            return answer

        return respond()

    def patch_node_status(self, name: str, body: Any, **_: Any) -> Any:
        return self._next("condition", body)

    def patch_node(self, name: str, body: Any, **_: Any) -> Any:
        return self._next("taint", body)

    def read_node(self, name: str, **_: Any) -> Any:
        return self._next("read", None)

    def delete_cluster_custom_object(self, group: str, version: str, plural: str, name: str, **kw: Any) -> Any:
        return self._next("delete", kw["body"])


def clean_node(core: _Scripted, plan: NodePlan) -> tuple[Removal, Removal]:
    conditions, taints = Removal(1, 0, True), Removal(1, 0, True)
    asyncio.run(cleanup._clean_node(core, plan, KEY, conditions, taints))  # type: ignore[arg-type]
    return conditions, taints


TAINTED = NodePlan("a", False, ((0, OURS),))
BOTH = NodePlan("a", True, ((0, OURS),))


def test_a_taint_patch_whose_test_failed_reads_the_node_again_and_patches_what_it_finds() -> None:
    moved = {"metadata": {"name": "a"}, "spec": {"taints": [{"key": "other"}, OURS]}}
    core = _Scripted(_Answer(422), _Answer(200, moved), _Answer(200, moved))
    _, taints = clean_node(core, TAINTED)
    assert (taints.removed, taints.problems) == (1, [])
    assert [what for what, _ in core.calls] == ["taint", "read", "taint"]
    assert core.calls[2][1][0] == {"op": "test", "path": "/spec/taints/1", "value": OURS}


@pytest.mark.parametrize("status", [409, 422])
def test_a_taint_someone_else_removed_meanwhile_counts_as_removed(status: int) -> None:
    gone = {"metadata": {"name": "a"}, "spec": {"taints": [{"key": "other"}]}}
    core = _Scripted(_Answer(status), _Answer(200, gone))
    assert clean_node(core, TAINTED)[1].removed == 1
    core = _Scripted(_Answer(status), _Answer(404))  # the Node itself is gone
    assert clean_node(core, TAINTED)[1].removed == 1


def test_taints_that_keep_changing_are_given_up_after_the_tries() -> None:
    back = {"metadata": {"name": "a"}, "spec": {"taints": [OURS]}}
    core = _Scripted(*[a for _ in range(cleanup.TAINT_TRIES) for a in (_Answer(422), _Answer(200, back))])
    _, taints = clean_node(core, TAINTED)
    assert taints.removed == 0 and taints.problems == [
        f"node a: its taints kept changing ({cleanup.TAINT_TRIES} tries)"
    ]
    assert sum(1 for what, _ in core.calls if what == "taint") == cleanup.TAINT_TRIES


@pytest.mark.parametrize(
    ("answers", "problem"),
    [
        ((_Answer(403),), "forbidden (RBAC: needs patch on nodes)"),
        ((_Answer(500, {"message": "boom"}),), 'HTTP 500 on nodes: {"message":"boom"}'),
        ((OSError("connection reset"),), "connection reset"),
        ((_Answer(422), _Answer(403)), "forbidden (RBAC: needs get on nodes)"),
        ((_Answer(422), TimeoutError()), "TimeoutError"),
    ],
    ids=["patch-forbidden", "patch-refused", "patch-unreachable", "read-forbidden", "read-unreachable"],
)
def test_a_taint_that_cannot_be_removed_says_why(answers: tuple[Any, ...], problem: str) -> None:
    _, taints = clean_node(_Scripted(*answers), TAINTED)
    assert (taints.removed, taints.problems) == (0, [problem])


@pytest.mark.parametrize(
    ("answer", "removed", "problems"),
    [
        (_Answer(200, {}), 1, []),
        (_Answer(404), 1, []),  # the Node is gone: so is its condition
        (_Answer(403), 0, ["forbidden (RBAC: needs patch on nodes/status)"]),
        (_Answer(500), 0, ["HTTP 500 on nodes/status: "]),
        (OSError("refused"), 0, ["refused"]),
    ],
)
def test_the_condition_goes_by_one_patch_and_its_taint_after_it(answer: Any, removed: int, problems: list[str]) -> None:
    core = _Scripted(answer, _Answer(200, {}))
    conditions, taints = clean_node(core, BOTH)
    assert (conditions.removed, conditions.problems, taints.removed) == (removed, problems, 1)
    assert core.calls[0] == ("condition", {"status": {"conditions": [{"type": "GPUsUsable", "$patch": "delete"}]}})


def delete_rule(answer: Any, rule: dict[str, Any]) -> tuple[Removal, Any]:
    api = _Scripted(answer)
    rules = Removal(1, 0, True)
    asyncio.run(cleanup._delete_rule(api, "v1beta2", "gpu-extender.n.gpu-0", rule, rules))  # type: ignore[arg-type]
    return rules, api.calls[0][1]


@pytest.mark.parametrize(
    ("answer", "removed", "problems"),
    [
        (_Answer(200, {}), 1, []),
        (_Answer(404), 1, []),  # gone already
        (_Answer(409), 0, ["gpu-extender.n.gpu-0 was made again meanwhile (left alone)"]),
        (_Answer(403), 0, ["forbidden (RBAC: needs delete on devicetaintrules.resource.k8s.io)"]),
        (_Answer(500), 0, ["HTTP 500 on devicetaintrules.resource.k8s.io: "]),
        (OSError("refused"), 0, ["refused"]),
    ],
)
def test_a_rule_is_deleted_only_as_the_object_listed(answer: Any, removed: int, problems: list[str]) -> None:
    rules, options = delete_rule(answer, {"metadata": {"name": "gpu-extender.n.gpu-0", "uid": "u-1"}})
    assert (rules.removed, rules.problems) == (removed, problems)
    assert options.preconditions.uid == "u-1"
    _, options = delete_rule(_Answer(200, {}), {"metadata": {}})  # no uid listed: no precondition
    assert options.preconditions is None
