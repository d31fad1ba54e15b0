"""The suite in parallel (pytest-xdist, `-n auto` in pyproject.toml's addopts): most tests wait on
real processes, sockets and timers, so one process leaves the machine's cores mostly idle.

Each test file runs whole on one worker (its module fixtures, such as a built wheel, are made
once), and every real-control-plane test that uses the session's etcd + kube-apiserver
(tests/kube/conftest.py's `control_plane`) on the same one: a second one per worker would double
that cost. The files with a control plane of their own (OWN_PLANE) run as any other file.
`./dev.sh test -n 0` runs everything in this one process."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
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
# Files of long tests that mostly wait on real processes (the soak's short form: 5 minutes): started
# first, beside the shared plane's unit, to run under the rest rather than after it.
LONG = frozenset({"tests/bench/test_soak.py"})


def work_unit(nodeid: str) -> str:
    """The tests a worker takes together: SHARED_PLANE for the tests in tests/kube on the session's
    control plane, else the test's file."""
    path = nodeid.split("::", 1)[0]
    return SHARED_PLANE if path.startswith(KUBE_PREFIX) and path not in OWN_PLANE else path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order the workers take the units in (`unit_order`). A test on the session's plane outside
    its unit stops the run (OWN_PLANE is out of date)."""
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()) and work_unit(item.nodeid) != SHARED_PLANE:
            raise pytest.UsageError(f"{item.nodeid} uses the session's control plane: take its file out of OWN_PLANE")
    items.sort(key=unit_order([item.nodeid for item in items]))


def unit_order(nodeids: list[str]) -> Callable[[pytest.Item], tuple[bool, bool, bool, int]]:
    """A sort key: the shared plane's unit (the longest) first, then the LONG files, then the other
    real-control-plane files, then the rest, most tests first (xdist's own reorder, which the
    scheduler below turns off as it would put the LONG files last); a stable sort, each unit whole
    and in its own order."""
    sizes = Counter(map(work_unit, nodeids))

    def key(item: pytest.Item) -> tuple[bool, bool, bool, int]:
        unit = work_unit(item.nodeid)
        return unit != SHARED_PLANE, unit not in LONG, KUBE not in Path(str(item.path)).parents, -sizes[unit]

    return key


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's file scheduling with work_unit's units (its own `loadgroup` marks do not take with
    pytest 9.2: xdist 3.8 renames `item._nodeid`, which pytest no longer reads)."""
    from xdist.scheduler import LoadScopeScheduling

    class FileOrKube(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # (the units in unit_order's order)
    return FileOrKube(config, log)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one and a half times the CPUs this process may use (at least 2): the tests mostly
    wait, but the real control plane and browsers do not (with twice, a 2-core machine ran at a load
    average of 5)."""
    cpus = len(os.sched_getaffinity(0))
    return max(2, cpus + cpus // 2)
