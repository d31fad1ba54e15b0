"""usable_cpus: the affinity, capped by a cgroup v2 or v1 CPU quota (rounded up)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuextender.common.cpus import cgroup_quota, usable_cpus

AFFINITY = len(os.sched_getaffinity(0))


def v2(tmp_path: Path, text: str) -> Path:
    (tmp_path / "cpu.max").write_text(text)
    return tmp_path


def v1(tmp_path: Path, quota: str, period: str) -> Path:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(quota)
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(period)
    return tmp_path


@pytest.mark.parametrize(
    ("text", "quota"),
    [("max 100000\n", None), ("200000 100000\n", 2.0), ("150000 100000", 1.5), ("0 100000", None), ("x 1", None)],
)
def test_v2_quota(tmp_path: Path, text: str, quota: float | None) -> None:
    assert cgroup_quota(v2(tmp_path, text)) == quota


@pytest.mark.parametrize(("quota_us", "period_us", "quota"), [("-1", "100000", None), ("50000", "100000", 0.5)])
def test_v1_quota(tmp_path: Path, quota_us: str, period_us: str, quota: float | None) -> None:
    assert cgroup_quota(v1(tmp_path, quota_us, period_us)) == quota


def test_no_cgroup_files_means_no_quota(tmp_path: Path) -> None:
    assert cgroup_quota(tmp_path) is None
    assert usable_cpus(tmp_path) == AFFINITY


def test_a_quota_below_the_affinity_caps_it_rounded_up(tmp_path: Path) -> None:
    assert usable_cpus(v2(tmp_path, "50000 100000")) == 1  # half a CPU still runs one process
    if AFFINITY >= 2:
        (tmp_path / "cpu.max").write_text("100001 100000")
        assert usable_cpus(tmp_path) == 2  # a hair over one CPU


def test_a_quota_above_the_affinity_does_not_raise_it(tmp_path: Path) -> None:
    assert usable_cpus(v2(tmp_path, f"{(AFFINITY + 4) * 100000} 100000")) == AFFINITY
