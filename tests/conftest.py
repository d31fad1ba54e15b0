"""The suite in parallel (pytest-xdist, `-n auto` in pyproject.toml's addopts): most tests wait on
real processes, sockets and timers, so one process leaves the machine's cores mostly idle.

Each test file runs whole on one worker (its module fixtures, such as a built wheel, are made
once), and every real-control-plane test that uses the session's etcd + kube-apiserver
(tests/kube/conftest.py's `control_plane`) on the same one: a second one per worker would double
that cost. The files with a control plane of their own (OWN_PLANE) run as any other file.
`./dev.sh test -n 0` runs everything in this one process."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
KUBE = HERE / "kube"
KUBE_PREFIX = "tests/kube/"  # how xdist's node ids of those tests start (relative to the rootdir)
# tests/kube files whose tests start a control plane of their own (a module fixture), none on the
# session's: checked at collection (pytest_collection_modifyitems).
OWN_PLANE = frozenset({"tests/kube/test_groups.py", "tests/kube/test_install.py"})
SHARED_PLANE = "kube"


def work_unit(nodeid: str) -> str:
    """The tests a worker takes together: SHARED_PLANE for the tests in tests/kube on the session's
    control plane, else the test's file."""
    path = nodeid.split("::", 1)[0]
    return SHARED_PLANE if path.startswith(KUBE_PREFIX) and path not in OWN_PLANE else path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real-control-plane tests first, the shared plane's unit (the longest) ahead: they start
    while the other workers share out the rest (a stable sort: each file's own order stays). A
    test on the session's plane outside that unit stops the run (OWN_PLANE is out of date)."""
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()) and work_unit(item.nodeid) != SHARED_PLANE:
            raise pytest.UsageError(f"{item.nodeid} uses the session's control plane: take its file out of OWN_PLANE")
    items.sort(key=lambda item: (KUBE not in Path(str(item.path)).parents, work_unit(item.nodeid) != SHARED_PLANE))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's file scheduling with work_unit's units (its own `loadgroup` marks do not take with
    pytest 9.2: xdist 3.8 renames `item._nodeid`, which pytest no longer reads)."""
    from xdist.scheduler import LoadScopeScheduling

    class FileOrKube(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return FileOrKube(config, log)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one and a half times the CPUs this process may use (at least 2): the tests mostly
    wait, but the real control plane and browsers do not (with twice, a 2-core machine ran at a load
    average of 5)."""
    cpus = len(os.sched_getaffinity(0))
    return max(2, cpus + cpus // 2)
