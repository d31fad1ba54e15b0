"""--cleanup-on-exit in the extender's shutdown (app.py, clean_up_on_exit): only with the
flag, only the leader, within CLEANUP_ON_EXIT_TIMEOUT_S, and what it removed (or did not) logged.
The real shutdown on the real API server: tests/kube/test_cleanup.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gpuextender.extender import app
from gpuextender.extender.flags import build_config
from gpuextender.extender.state.cleanup_plan import CleanupReport

Work = Callable[[Any, str | None], Awaitable[None]]


class _Writer:
    def __init__(self, leads: bool, hangs: bool = False) -> None:
        self.leads, self.hangs, self.finished = leads, hangs, 0

    async def finish(self, work: Work) -> bool:
        self.finished += 1
        if self.hangs:
            await asyncio.sleep(3600)
        return self.leads


def clean_up_on_exit(writer: _Writer | None, *flags: str) -> bool:
    config = build_config(["--kubernetes", *flags], env={})
    return asyncio.run(app.clean_up_on_exit(writer, config))  # type: ignore[arg-type]


def test_without_the_flag_or_a_writer_nothing_is_asked() -> None:
    writer = _Writer(leads=True)
    assert clean_up_on_exit(writer) is False and writer.finished == 0
    assert clean_up_on_exit(None, "--cleanup-on-exit") is False


def test_a_replica_that_does_not_lead_says_so_and_keeps_the_lease_alone(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gpu_extender"):
        assert clean_up_on_exit(_Writer(leads=False), "--cleanup-on-exit") is False
    assert caplog.messages == [
        "cleanup on exit: this replica does not hold the Lease gpu-extender/gpu-extender-device-taints: the "
        "leader removes the writes"
    ]


def test_a_cleanup_out_of_time_says_what_it_had_done_and_the_lease_is_still_given_up(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app, "CLEANUP_ON_EXIT_TIMEOUT_S", 0.05)
    with caplog.at_level(logging.INFO, logger="gpu_extender"):
        assert clean_up_on_exit(_Writer(leads=True, hangs=True), "--cleanup-on-exit") is True
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 4
    assert caplog.messages[0] == (
        "cleanup on exit: stopped: out of time after 0.05s: `gpu-extender cleanup` removes the rest"
    )
    assert caplog.messages[1].startswith("cleanup on exit: deleted 0 DeviceTaintRules")


def test_the_leaders_cleanup_is_logged_line_by_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def removed(api_client: Any, version: str | None, report: CleanupReport) -> None:
        assert (api_client, version, report.taint_key) == ("client", "v1beta2", "example.com/gpus-gone")
        report.version = version  # as remove_writes records the version it was given
        report.rules.listed = report.conditions.listed = report.taints.listed = True
        report.rules.found = report.rules.removed = 2

    class Leading(_Writer):
        async def finish(self, work: Work) -> bool:
            await work("client", "v1beta2")
            return True

    monkeypatch.setattr("gpuextender.extender.inventory.cleanup.remove_writes", removed)
    with caplog.at_level(logging.INFO, logger="gpu_extender"):
        assert clean_up_on_exit(Leading(True), "--cleanup-on-exit", "--node-taint-key", "example.com/gpus-gone")
    assert [r.levelno for r in caplog.records] == [logging.INFO] * 3
    assert caplog.messages == [
        "cleanup on exit: deleted 2 DeviceTaintRules (app.kubernetes.io/managed-by=gpu-extender, "
        "resource.k8s.io/v1beta2)",
        "cleanup on exit: removed the GPUsUsable condition from 0 Nodes",
        "cleanup on exit: removed taint example.com/gpus-gone from 0 Nodes",
    ]
