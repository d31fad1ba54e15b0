"""The device-taint writer's clean shutdown with --cleanup-on-exit (inventory/device_taint_writer.py:
`finish`, `release_lease`): only the leader runs the cleanup, after its writing has stopped, and a
replica told to finish writes nothing with a Lease it wins afterwards. The whole shutdown on the real
API server (the rules gone, the Lease given up): tests/kube/test_cleanup.py."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from gpuextender.extender.inventory.device_taint_writer import DeviceTaintWriter
from gpuextender.extender.state.publication import Publication, PublishInputs
from tests.harness import free_port
from tests.kube_apiserver import KubeApiServer


def writer(connection: k8s.Configuration | None = None) -> DeviceTaintWriter:
    def inputs() -> PublishInputs:
        raise AssertionError("a finishing writer does not track")

    return DeviceTaintWriter(
        connection or k8s.Configuration(host="http://127.0.0.1:1"),
        Publication(3.0, 60.0),
        inputs,
        namespace="gx",
        identity="replica-1",
    )


def test_a_replica_that_does_not_lead_runs_nothing_and_writes_nothing_with_a_lease_won_later() -> None:
    w, ran = writer(), []

    async def work(api_client: Any, version: str | None) -> None:
        ran.append((api_client, version))

    async def go() -> None:
        assert await w.finish(work) is False
        await w._lead(object(), None)  # type: ignore[arg-type]  # won meanwhile: returns at once

    asyncio.run(go())
    assert ran == [] and w.status.mode != "writing" and w._leading_with is None


def test_the_leader_stops_writing_before_the_cleanup_runs_with_its_client_and_version() -> None:
    w, seen = writer(), []
    client = object()

    async def go() -> None:
        leading = asyncio.create_task(asyncio.sleep(3600))  # the leader's writing loop
        w._leading_with = (leading, client, "v1beta2")  # type: ignore[assignment]

        async def work(api_client: Any, version: str | None) -> None:
            seen.append((api_client, version, leading.cancelled()))

        assert await w.finish(work) is True

    asyncio.run(go())
    assert seen == [(client, "v1beta2", True)]


def test_a_lease_not_held_is_not_touched_and_one_that_cannot_be_read_expires_by_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = KubeApiServer()  # serves no Lease: a 404, as for a Lease deleted meanwhile

    async def go() -> None:
        async with server:
            await writer(server.configuration()).release_lease()

    with caplog.at_level(logging.INFO, logger="gpu_extender.device_taints"):
        asyncio.run(go())
        assert caplog.messages == []
        asyncio.run(writer(k8s.Configuration(host=f"http://127.0.0.1:{free_port()}")).release_lease())
    assert len(caplog.messages) == 1
    assert caplog.messages[0].startswith("device taints: could not give up the Lease gx/gpu-extender-device-taints (")
    assert caplog.messages[0].endswith("): it expires by itself")
