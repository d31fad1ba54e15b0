"""How many CPUs this process may use: its affinity, capped by its cgroup's CPU quota.

In a container with a CPU limit the affinity still lists every core of the node, while the
quota (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`) says how much of
them it may run: a pod limited to 2 CPUs on a 96-core node has 2, not 96.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def usable_cpus(cgroup: Path = CGROUP) -> int:
    """At least 1; the affinity's count, or the quota rounded up where it is lower."""
    cpus = len(os.sched_getaffinity(0))
    quota = cgroup_quota(cgroup)
    return max(1, min(cpus, math.ceil(quota))) if quota is not None else max(1, cpus)


def cgroup_quota(cgroup: Path = CGROUP) -> float | None:
    """CPUs' worth of the cgroup's quota; None: no quota, or none readable."""
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
        if quota == "max":
            return None
        return _ratio(int(quota), int(period))
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((cgroup / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((cgroup / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return _ratio(quota_us, period_us) if quota_us > 0 else None


def _ratio(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None
