"""KubeInventorySource against the in-test API server, through the real kubernetes-asyncio client."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest

from gpuextender.extender.inventory.kube_watch import RESTART_CAUSES, KubeInventorySource, KubeSourceTimings
from gpuextender.extender.model.kube_objects import JOBSET_JOB, KINDS, POD, KindInfo
from tests.extender.inventory.conftest import RecordingSink
from tests.kube_apiserver import KubeApiServer

T = TypeVar("T")
LOGGER = "gpu_extender.inventory.kube"
CRD_KINDS = [k.kind for k in KINDS if k.group]  # OME's CRDs and DRA's built-in API alike
OME_KINDS = [k.kind for k in KINDS if k.group == "ome.io"]


# Bounds on liveness, never on speed: generous, so a machine busy with the rest of the suite (in
# parallel) does not fail a test whose work did happen, only later.
LIVENESS_S = 20.0


def run(coro: Awaitable[T], timeout: float = 3 * LIVENESS_S) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float = LIVENESS_S) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def running(
    sink: RecordingSink,
    timings: KubeSourceTimings,
    server: KubeApiServer | None = None,
    kinds: tuple[KindInfo, ...] = KINDS,
    **options: Any,
) -> AsyncIterator[tuple[KubeApiServer, KubeInventorySource]]:
    """Start `server` (or a fresh one), a source of `kinds` against it (with `options`), and wait
    until the source is ready."""
    server = server or KubeApiServer()
    async with server:
        source = KubeInventorySource(sink, server.configuration(), kinds=kinds, timings=timings, **options)
        assert not source.ready
        task = asyncio.create_task(source.run())
        try:
            await asyncio.wait_for(source.wait_ready(), LIVENESS_S)
            await wait_until(lambda: server.open_watches() == server_watch_target(server, kinds), "every watch open")
            yield server, source
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def server_watch_target(server: KubeApiServer, kinds: tuple[KindInfo, ...] = KINDS) -> int:
    return sum(1 for k in kinds if k.kind in server.installed and k.kind not in server.forbidden)


def node(name: str, gpus: int = 8, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"gpu.vendor": "nvidia", **labels}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96"},
            "capacity": {"nvidia.com/gpu": str(gpus)},
        },
    }


def accel(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"discovery": {"nodeSelector": {"gpu.model": name}}}}


def isvc(name: str, namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"model": {"name": "llama-3-8b"}}}


def seeded() -> KubeApiServer:
    server = KubeApiServer()
    server.add("Node", node("gpu-node-1"))
    server.add("Node", node("gpu-node-2", gpus=4))
    server.add("AcceleratorClass", accel("h100"))
    server.add("InferenceService", isvc("chat", "team-a"))
    server.add("InferenceService", isvc("chat", "team-b"))
    model = {"metadata": {"name": "llama-3-8b"}, "spec": {"modelFormat": {"name": "safetensors"}}}
    server.add("ClusterBaseModel", model)
    return server


def test_first_list_fills_every_kind_raw_and_flips_ready(sink: RecordingSink, timings: KubeSourceTimings) -> None:
    async def scenario() -> None:
        async with running(sink, timings, seeded()) as (server, source):
            assert source.ready
            # Exactly one replace_all per kind, and nothing else yet.
            assert sorted(kind for method, kind, _ in sink.calls if method == "replace_all") == sorted(
                k.kind for k in KINDS
            )
            assert len(sink.calls) == len(KINDS)
            assert sink.keys("Node") == {"gpu-node-1", "gpu-node-2"}
            assert sink.keys("InferenceService") == {"team-a/chat", "team-b/chat"}
            assert sink.keys("ServingRuntime") == set()

            # Raw JSON dicts exactly as served, apiVersion/kind filled in for the Node list items.
            got = sink.state["Node"]["gpu-node-2"]
            assert type(got) is dict
            assert got == server.objects["Node"]["gpu-node-2"]
            assert got["apiVersion"] == "v1" and got["kind"] == "Node"
            assert got["status"]["allocatable"]["nvidia.com/gpu"] == "4"
            assert sink.state["AcceleratorClass"]["h100"]["apiVersion"] == "ome.io/v1beta1"

            # Each kind is listed once and watched from the list's resourceVersion, with bookmarks.
            for info in KINDS:
                assert server.list_count(info.kind) == 1
                (watch,) = server.watches_of(info.kind)
                assert watch.resource_version == str(server.rv)
                assert watch.allow_bookmarks is True
                assert watch.timeout_seconds == timings.watch_timeout_s
                assert watch.field_selector is None  # only a kind with one (Pod) sends a fieldSelector
                assert source.status()[info.kind].synced
            assert all(r.field_selector is None for r in server.list_requests)
            assert server.list_count("Pod") == 0  # the inventory's kinds are not the ledger's

    run(scenario())


def test_added_modified_deleted_arrive_in_order(sink: RecordingSink, timings: KubeSourceTimings) -> None:
    async def scenario() -> None:
        async with running(sink, timings, seeded()) as (server, source):
            server.add("Node", node("gpu-node-3"))
            server.modify("Node", node("gpu-node-3", pool="training"))
            server.delete("Node", "gpu-node-1")
            server.add("InferenceService", isvc("embed", "team-a"))
            server.delete("InferenceService", "chat", "team-b")
            await wait_until(lambda: len(sink.calls_for("Node")) == 4, "node events")
            await wait_until(lambda: len(sink.calls_for("InferenceService")) == 3, "isvc events")
            assert sink.calls_for("Node")[1:] == [
                ("upsert", "gpu-node-3"),
                ("upsert", "gpu-node-3"),
                ("delete", "gpu-node-1"),
            ]
            assert sink.calls_for("InferenceService")[1:] == [("upsert", "team-a/embed"), ("delete", "team-b/chat")]
            assert sink.state["Node"]["gpu-node-3"]["metadata"]["labels"]["pool"] == "training"
            assert sink.state["Node"]["gpu-node-3"]["kind"] == "Node"
            assert sink.keys("Node") == {"gpu-node-2", "gpu-node-3"}
            assert source.resource_version("Node") == str(server.rv - 2)  # the Node delete
            assert source.resource_version("InferenceService") == str(server.rv)

    run(scenario())


def test_bookmark_advances_version_without_sink_calls_and_reconnect_resumes_from_it(
    sink: RecordingSink, timings: KubeSourceTimings
) -> None:
    async def scenario() -> None:
        async with running(sink, timings, seeded()) as (server, source):
            calls = len(sink.calls)
            bookmark_rv = server.bookmark("Node")
            await wait_until(lambda: source.resource_version("Node") == bookmark_rv, "bookmark applied")
            assert len(sink.calls) == calls

            server.close_watches()
            await wait_until(lambda: len(server.watches_of("Node")) == 2, "node re-watch")
            assert server.watches_of("Node")[-1].resource_version == bookmark_rv
            assert server.list_count("Node") == 1

    run(scenario())


@pytest.mark.parametrize("gone_as", ["http", "event"])
def test_410_on_rewatch_relists_and_replaces_all(sink: RecordingSink, timings: KubeSourceTimings, gone_as: str) -> None:
    async def scenario() -> None:
        server = seeded()
        server.gone_as = gone_as  # type: ignore[assignment]
        async with running(sink, timings, server) as (server, source):
            # Changes the watch never saw (compacted away), then the streams end.
            server.add("Node", node("gpu-node-9"), silent=True)
            server.delete("Node", "gpu-node-1", silent=True)
            server.expire_history()
            server.close_watches()
            for info in KINDS:
                await wait_until(lambda k=info.kind: server.list_count(k) == 2, f"{info.kind} relist")
            await wait_until(lambda: server.open_watches() == len(KINDS), "watches reopened")
            assert sink.calls_for("Node")[-1] == ("replace_all", ["gpu-node-2", "gpu-node-9"])
            assert sink.keys("Node") == {"gpu-node-2", "gpu-node-9"}
            assert source.status()["Node"].relists == 1
            # And the new watch runs from the relist's version.
            assert server.watches_of("Node")[-1].resource_version == str(server.rv)
            server.add("Node", node("gpu-node-10"))
            await wait_until(lambda: "gpu-node-10" in sink.keys("Node"), "event after relist")

    run(scenario())


def test_410_error_event_on_an_open_stream_relists(sink: RecordingSink, timings: KubeSourceTimings) -> None:
    async def scenario() -> None:
        async with running(sink, timings, seeded()) as (server, _source):
            server.add("AcceleratorClass", accel("a100"), silent=True)
            server.send_error_event("AcceleratorClass", code=410)
            await wait_until(lambda: server.list_count("AcceleratorClass") == 2, "relist")
            await wait_until(lambda: server.open_watches("AcceleratorClass") == 1, "watch reopened")
            assert sink.calls_for("AcceleratorClass")[-1] == ("replace_all", ["a100", "h100"])
            assert server.list_count("Node") == 1  # other kinds are not disturbed

    run(scenario())


def test_error_event_other_than_410_rewatches_without_relist(sink: RecordingSink, timings: KubeSourceTimings) -> None:
    async def scenario() -> None:
        async with running(sink, timings, seeded()) as (server, _source):
            server.send_error_event("Node", code=500, reason="InternalError")
            await wait_until(lambda: len(server.watches_of("Node")) == 2, "re-watch")
            assert server.watches_of("Node")[-1].resource_version == server.watches_of("Node")[0].resource_version
            assert server.list_count("Node") == 1

    run(scenario())


@pytest.mark.parametrize("abrupt", [False, True], ids=["graceful", "abrupt"])
def test_closed_streams_rewatch_from_last_version_without_relist(
    sink: RecordingSink, timings: KubeSourceTimings, abrupt: bool
) -> None:
    async def scenario() -> None:
        async with running(sink, timings, seeded()) as (server, source):
            server.add("Node", node("gpu-node-3"))
            await wait_until(lambda: "gpu-node-3" in sink.keys("Node"), "event")
            last = source.resource_version("Node")
            server.close_watches(abrupt=abrupt)
            for info in KINDS:
                await wait_until(lambda k=info.kind: len(server.watches_of(k)) == 2, f"{info.kind} re-watch")
            assert server.watches_of("Node")[-1].resource_version == last
            assert all(server.list_count(k.kind) == 1 for k in KINDS)
            # Events made while reconnecting are replayed from the history, not lost.
            server.add("Node", node("gpu-node-4"))
            await wait_until(lambda: "gpu-node-4" in sink.keys("Node"), "event after re-watch")

    run(scenario())


def test_server_side_watch_timeout_rewatches(sink: RecordingSink, timings: KubeSourceTimings) -> None:
    timings = dataclasses.replace(timings, watch_timeout_s=1)

    async def scenario() -> None:
        async with running(sink, timings, seeded()) as (server, source):
            await wait_until(lambda: len(server.watches_of("Node")) == 2, "re-watch after timeoutSeconds")
            assert server.list_count("Node") == 1
            assert source.status()["Node"].consecutive_failures == 0

    run(scenario())


def test_api_server_down_then_up_reconnects_with_backoff_and_one_warning(
    sink: RecordingSink, timings: KubeSourceTimings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    async def scenario() -> None:
        async with running(sink, timings, seeded()) as (server, source):
            caplog.clear()
            await server.go_down()
            # Changes while the extender cannot see them: recovered from the watch history.
            server.add("Node", node("gpu-node-5"))
            server.delete("Node", "gpu-node-2")
            await wait_until(lambda: source.status()["Node"].consecutive_failures >= 3, "several retries")
            await server.come_up()
            await wait_until(lambda: sink.keys("Node") == {"gpu-node-1", "gpu-node-5"}, "state after reconnect")
            await wait_until(lambda: server.open_watches() == len(KINDS), "every watch reopened")
            await wait_until(lambda: any("answers again" in r.getMessage() for r in caplog.records), "recovery logged")
            assert all(server.list_count(k.kind) == 1 for k in KINDS)  # resumed, no relist needed
            assert all(s.consecutive_failures == 0 for s in source.status().values())

        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == LOGGER]
        retries = [r for r in caplog.records if "still failing" in r.getMessage()]
        recoveries = [r for r in caplog.records if "answers again" in r.getMessage()]
        # Seven kinds, several retries each; one warning per problem (the cut, then the refusal),
        # one line when it is over.
        assert len(retries) >= 10
        assert len(warnings) == 2, warnings
        assert any("dropped" in w for w in warnings) and any("unreachable" in w for w in warnings)
        assert len(recoveries) == 1 and "unreachable" in recoveries[0].getMessage()

    run(scenario())


def test_5xx_backs_off_then_recovers(
    sink: RecordingSink, timings: KubeSourceTimings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def scenario() -> None:
        async with running(sink, timings, seeded()) as (server, source):
            caplog.clear()
            server.fail_with(503)
            await wait_until(lambda: source.status()["Node"].consecutive_failures >= 3, "retries")
            server.add("Node", node("gpu-node-6"))
            server.fail_with(None)
            await wait_until(lambda: "gpu-node-6" in sink.keys("Node"), "state after recovery")
        messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len([m for m in messages if "HTTP 503" in m]) == 1, messages

    run(scenario())


def test_missing_crd_is_an_empty_synced_kind_until_installed(
    sink: RecordingSink, timings: KubeSourceTimings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def scenario() -> None:
        server = KubeApiServer(installed=["Node"])
        server.add("Node", node("gpu-node-1"))
        async with running(sink, timings, server) as (server, source):
            assert source.ready
            for kind in CRD_KINDS:
                assert sink.calls_for(kind) == [("replace_all", [])]
                assert source.status()[kind].state in ("crd-absent", "listing")
            # Re-checked on a short interval, without repeating replace_all or the warning.
            await wait_until(lambda: server.list_count("AcceleratorClass") >= 3, "re-checks")
            assert sink.calls_for("AcceleratorClass") == [("replace_all", [])]

            server.install("AcceleratorClass", [accel("h100"), accel("a100")])
            await wait_until(lambda: sink.keys("AcceleratorClass") == {"a100", "h100"}, "CRD objects appear")
            await wait_until(lambda: server.open_watches("AcceleratorClass") == 1, "CRD watched")
            server.add("AcceleratorClass", accel("l40s"))
            await wait_until(lambda: "l40s" in sink.keys("AcceleratorClass"), "CRD events")

            # Uninstalled again: the watch ends, the relist finds 404, the kind is empty again.
            server.uninstall("AcceleratorClass")
            await wait_until(lambda: sink.keys("AcceleratorClass") == set(), "CRD removed")
            assert sink.calls_for("AcceleratorClass")[-1] == ("replace_all", [])

        absent = [r for r in caplog.records if "CRD not installed" in r.getMessage()]
        assert len(absent) == len(OME_KINDS) + 1  # once per kind, once more after the uninstall
        assert any("AcceleratorClass: served now" in r.getMessage() for r in caplog.records)
        # DRA's built-in API, not served: each kind once, saying what the extender does without it.
        dra = [r.getMessage() for r in caplog.records if "DRA GPUs not counted" in r.getMessage()]
        assert sorted(m.split(":")[1].strip() for m in dra) == ["DeviceClass", "ResourceSlice"]

    run(scenario())


def test_an_optional_api_we_may_not_read_is_absent_not_a_start_that_never_ends(
    sink: RecordingSink, timings: KubeSourceTimings, caplog: pytest.LogCaptureFixture
) -> None:
    """403 on DRA's kinds (a ClusterRole not updated): empty and synced, so the extender gets ready;
    403 on a kind the extender needs (Node) stays a failure, retried."""
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def scenario() -> None:
        server = KubeApiServer()
        server.forbidden = {"DeviceClass", "ResourceSlice"}
        server.add("Node", node("gpu-node-1"))
        async with running(sink, timings, server) as (server, source):
            assert source.ready
            assert sink.calls_for("ResourceSlice") == [("replace_all", [])]
            assert source.status()["ResourceSlice"].state in ("crd-absent", "listing")
        messages = [r.getMessage() for r in caplog.records if "ResourceSlice" in r.getMessage()]
        assert any("DRA GPUs not counted" in m and "403" in m and "ClusterRole" in m for m in messages), messages

        server = KubeApiServer()
        server.forbidden = {"Node"}
        async with server:
            source = KubeInventorySource(sink, server.configuration(), timings=timings)
            task = asyncio.create_task(source.run())
            await wait_until(lambda: source.status()["Node"].consecutive_failures >= 2, "Node refused, retried")
            assert not source.ready
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    run(scenario())


def test_malformed_events_are_skipped_and_the_watch_goes_on(
    sink: RecordingSink, timings: KubeSourceTimings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def scenario() -> None:
        async with running(sink, timings, seeded()) as (server, _source):
            calls = len(sink.calls)
            for bad in [
                b"this is not json",
                ["a", "list"],
                {"type": "ADDED", "object": "a string"},
                {"type": "ADDED", "object": {"metadata": {"labels": {}}}},
                {"type": "MODIFIED", "object": {"kind": "Node"}},
                {"type": "SURPRISE", "object": node("x")},
                {"type": "BOOKMARK", "object": {"metadata": {}}},
                {"object": node("y")},
            ]:
                server.send_raw("Node", bad)
            server.add("Node", node("gpu-node-7"))
            await wait_until(lambda: "gpu-node-7" in sink.keys("Node"), "good event after bad ones")
            assert sink.calls[calls:] == [("upsert", "Node", "gpu-node-7")]
            assert len(server.watches_of("Node")) == 1  # the same stream carried on
            assert server.list_count("Node") == 1
        skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
        assert len(skipped) == 8

    run(scenario())


def test_paged_list_is_one_replace_all(sink: RecordingSink, timings: KubeSourceTimings) -> None:
    timings = dataclasses.replace(timings, list_page_size=2)

    async def scenario() -> None:
        server = KubeApiServer()
        for i in range(5):
            server.add("Node", node(f"gpu-node-{i}"))
        async with running(sink, timings, server) as (server, _source):
            assert sink.calls_for("Node") == [("replace_all", [f"gpu-node-{i}" for i in range(5)])]
            pages = [r for r in server.list_requests if r.kind == "Node"]
            assert [r.limit for r in pages] == [2, 2, 2]
            assert [r.continue_token is not None for r in pages] == [False, True, True]

    run(scenario())


def test_expired_continue_token_restarts_the_list(sink: RecordingSink, timings: KubeSourceTimings) -> None:
    timings = dataclasses.replace(timings, list_page_size=2)

    async def scenario() -> None:
        server = KubeApiServer()
        for i in range(5):
            server.add("Node", node(f"gpu-node-{i}"))
        server.expire_continue_tokens = 1
        async with running(sink, timings, server) as (server, _source):
            assert server.list_count("Node") == 2
            assert sink.calls_for("Node") == [("replace_all", [f"gpu-node-{i}" for i in range(5)])]

    run(scenario())


def test_a_failing_sink_does_not_stop_the_watch(sink: RecordingSink, timings: KubeSourceTimings) -> None:
    original = sink.upsert

    def flaky_upsert(kind: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "poison":
            raise RuntimeError("sink bug")
        original(kind, obj)

    sink.upsert = flaky_upsert  # type: ignore[method-assign]

    async def scenario() -> None:
        async with running(sink, timings, seeded()) as (server, _source):
            server.add("Node", node("poison"))
            server.add("Node", node("gpu-node-8"))
            await wait_until(lambda: "gpu-node-8" in sink.keys("Node"), "event after a sink failure")
            assert len(server.watches_of("Node")) == 1

    run(scenario())


def test_source_accepts_an_api_client_factory(sink: RecordingSink, timings: KubeSourceTimings) -> None:
    from kubernetes_asyncio import client as k8s

    async def scenario() -> None:
        async with seeded() as server:
            made: list[k8s.ApiClient] = []

            def factory() -> k8s.ApiClient:
                made.append(k8s.ApiClient(server.configuration()))
                return made[-1]

            source = KubeInventorySource(sink, factory, kinds=KINDS[:2], timings=timings)
            task = asyncio.create_task(source.run())
            await asyncio.wait_for(source.wait_ready(), LIVENESS_S)
            assert len(made) == 2 and sink.keys("Node") == {"gpu-node-1", "gpu-node-2"}
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert all(c.rest_client.pool_manager.closed for c in made)

    run(scenario())


# -- the bound-pod watch: field selector, list filter; restart causes ----------------------------


def pod(name: str, node: str | None = "gpu-node-1", phase: str = "Pending", gpus: str | None = "1") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "resources": {"requests": {"nvidia.com/gpu": gpus} if gpus is not None else {"cpu": "1"}}}
        ]
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": phase},
    }


def test_pod_watch_sends_the_field_selector_on_the_list_and_every_watch(
    sink: RecordingSink, timings: KubeSourceTimings
) -> None:
    async def scenario() -> None:
        server = KubeApiServer()
        server.add("Pod", pod("bound"))
        server.add("Pod", pod("unbound", node=None))
        server.add("Pod", pod("done", phase="Succeeded"))
        server.add("Pod", pod("failed", phase="Failed"))
        async with running(sink, timings, server, kinds=(POD,)) as (server, source):
            assert sink.calls_for("Pod") == [("replace_all", ["ml/bound"])]
            assert [(r.kind, r.field_selector) for r in server.list_requests] == [("Pod", POD.field_selector)]
            server.add("Pod", pod("unbound"))  # bound now: it enters the selection, as ADDED
            server.add("Pod", pod("bound", phase="Succeeded"))  # finished: it leaves it, as DELETED
            server.add("Pod", pod("done", phase="Succeeded", node="gpu-node-2"))  # never selected: never sent
            await wait_until(lambda: len(sink.calls) == 3, "two events")
            assert sink.calls_for("Pod")[1:] == [("upsert", "ml/unbound"), ("delete", "ml/bound")]
            assert sink.state["Pod"]["ml/unbound"]["kind"] == "Pod"
            # A loaded machine may have restarted the watch already (a read past its grace): count
            # from now. The watch after the close resumes where the source is, selector and all.
            # A restart already in flight (sent before the events arrived) may land after the count.
            watched = len(server.watches_of("Pod"))
            server.close_watches()
            resumed = source.resource_version("Pod")
            await wait_until(
                lambda: any(w.resource_version == resumed for w in server.watches_of("Pod")[watched:]),
                "a re-watch from where the source is",
            )
            watches = server.watches_of("Pod")
            assert [w.field_selector for w in watches] == [POD.field_selector] * len(watches)
            assert server.list_count("Pod") == 1 and server.list_count("Node") == 0

    run(scenario())


def test_list_filter_drops_items_as_each_page_arrives_and_never_filters_events(
    sink: RecordingSink, timings: KubeSourceTimings
) -> None:
    timings = dataclasses.replace(timings, list_page_size=2)
    offered: list[tuple[str, str, int]] = []  # (kind, name, LIST pages requested when offered)
    server = KubeApiServer()

    def gpu_only(kind: str, obj: dict[str, Any]) -> bool:
        offered.append((kind, obj["metadata"]["name"], len(server.list_requests)))
        return "nvidia.com/gpu" in obj["spec"]["containers"][0]["resources"]["requests"]

    async def scenario() -> None:
        for i, gpus in enumerate(["1", None, None, "2", None]):
            server.add("Pod", pod(f"p{i}", gpus=gpus))
        async with running(sink, timings, server, kinds=(POD,), list_filter=gpu_only) as (api, _source):
            assert sink.calls_for("Pod") == [("replace_all", ["ml/p0", "ml/p3"])]
            # Each item is judged before the next page is asked for: p0, p1 on page 1, ... p4 on page 3.
            assert offered == [("Pod", "p0", 1), ("Pod", "p1", 1), ("Pod", "p2", 2), ("Pod", "p3", 2), ("Pod", "p4", 3)]
            api.add("Pod", pod("cpu", gpus=None))  # a watch event reaches the sink whatever the filter says
            api.delete("Pod", "p1", "ml")
            await wait_until(lambda: len(sink.calls) == 3, "events")
            assert sink.calls_for("Pod")[1:] == [("upsert", "ml/cpu"), ("delete", "ml/p1")]
            assert len(offered) == 5

    run(scenario())


RestartCall = tuple[str, str]


@pytest.mark.parametrize("cause", RESTART_CAUSES)
def test_each_restart_is_reported_with_its_cause(sink: RecordingSink, timings: KubeSourceTimings, cause: str) -> None:
    heard: list[RestartCall] = []

    async def scenario() -> None:
        kind = "AcceleratorClass" if cause == "crd_removed" else "Node"
        async with running(sink, timings, seeded(), on_restart=lambda k, c: heard.append((k, c))) as (server, _source):
            assert heard == []
            if cause == "server_closed":
                server.close_watches()
                expected = {(k.kind, "server_closed") for k in KINDS}
            elif cause == "relist_410":
                server.expire_history()
                server.close_watches()
                expected = {(k.kind, c) for k in KINDS for c in ("server_closed", "relist_410")}
            elif cause == "error":
                server.send_error_event(kind, code=500, reason="InternalError")
                expected = {(kind, "error")}
            else:
                assert cause == "crd_removed", f"no scenario for the cause {cause}"
                server.uninstall(kind)  # the watch ends, the re-watch gets 404, the relist finds none
                expected = {(kind, "server_closed"), (kind, "crd_removed")}
            await wait_until(lambda: set(heard) == expected, f"restarts {expected}")
            await wait_until(lambda: server.open_watches() == server_watch_target(server), "watches reopened")
            assert set(heard) == expected and len(heard) == len(expected)
            if cause == "relist_410":
                assert all(server.list_count(k.kind) == 2 for k in KINDS)

    run(scenario())


def test_a_failing_restart_hook_does_not_stop_the_watch(sink: RecordingSink, timings: KubeSourceTimings) -> None:
    def broken(kind: str, cause: str) -> None:
        raise RuntimeError("metrics bug")

    async def scenario() -> None:
        async with running(sink, timings, seeded(), on_restart=broken) as (server, source):
            server.close_watches()
            await wait_until(lambda: len(server.watches_of("Node")) == 2, "re-watch")
            server.add("Node", node("gpu-node-11"))
            await wait_until(lambda: "gpu-node-11" in sink.keys("Node"), "events after the hook failed")
            assert source.status()["Node"].consecutive_failures == 0

    run(scenario())


def test_unsupported_kinds_fail_at_construction(sink: RecordingSink) -> None:
    bogus = KindInfo("Gadget", "", "v1", "gadgets", namespaced=False)
    with pytest.raises(ValueError, match="Gadget"):
        KubeInventorySource(sink, lambda: None, kinds=[bogus])  # type: ignore[arg-type,return-value]


def test_jobset_jobs_are_listed_and_watched_with_their_label_selector(
    sink: RecordingSink, timings: KubeSourceTimings
) -> None:
    """Issue 34: only JobSet's Jobs are asked for (a labelSelector), on the LIST and every WATCH."""

    async def scenario() -> None:
        server = KubeApiServer((JOBSET_JOB,))
        job = {"metadata": {"name": "js-workers-0", "namespace": "ml"}, "spec": {"parallelism": 4}}
        server.add("Job", job)
        async with running(sink, timings, server, kinds=(JOBSET_JOB,)):
            assert sink.calls_for("Job") == [("replace_all", ["ml/js-workers-0"])]
            assert [(r.kind, r.label_selector, r.field_selector) for r in server.list_requests] == [
                ("Job", "jobset.sigs.k8s.io/jobset-name", None)
            ]
            await wait_until(lambda: len(server.watches_of("Job")) == 1, "the watch")
            assert [w.label_selector for w in server.watches_of("Job")] == ["jobset.sigs.k8s.io/jobset-name"]

    run(scenario())
