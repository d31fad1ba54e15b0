"""The scheduler API's listen backlog: ours, or the kernel's cap when lower."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuextender.extender.scheduler.http_api import LISTEN_BACKLOG, listen_backlog


@pytest.mark.parametrize(
    ("somaxconn", "expected"),
    [
        ("128", 128),
        (str(LISTEN_BACKLOG - 1), LISTEN_BACKLOG - 1),
        (str(LISTEN_BACKLOG), LISTEN_BACKLOG),
        (str(LISTEN_BACKLOG + 1), LISTEN_BACKLOG),
        ("65535\n", LISTEN_BACKLOG),
        ("garbage", LISTEN_BACKLOG),
    ],
)
def test_listen_backlog_is_ours_or_the_kernel_cap(tmp_path: Path, somaxconn: str, expected: int) -> None:
    path = tmp_path / "somaxconn"
    path.write_text(somaxconn)
    assert listen_backlog(str(path)) == expected


def test_a_low_kernel_cap_is_said_in_the_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "somaxconn"
    path.write_text("128")
    listen_backlog(str(path))
    assert "net.core.somaxconn is 128" in caplog.text
    caplog.clear()
    path.write_text(str(LISTEN_BACKLOG))
    listen_backlog(str(path))
    assert caplog.text == ""


def test_without_proc_the_backlog_is_ours(tmp_path: Path) -> None:
    assert listen_backlog(str(tmp_path / "absent")) == LISTEN_BACKLOG == 4096
