"""The order the suite's workers take their units in (tests/conftest.py): the shared control plane's
unit first, then the long files that mostly wait (the soak), then the other real-control-plane files,
then the rest, most tests first; each unit whole."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.conftest import HERE, LONG, unit_order, work_unit

ROOT = HERE.parent


def items(*nodeids: str) -> list[Any]:
    return [SimpleNamespace(nodeid=n, path=ROOT / n.split("::")[0]) for n in nodeids]


def test_units_are_taken_shared_plane_then_long_then_own_planes_then_most_tests_first() -> None:
    collected = items(
        "tests/agent/test_a.py::t1",
        "tests/bench/test_soak.py::t",
        "tests/extender/test_big.py::t1",
        "tests/extender/test_big.py::t2",
        "tests/extender/test_big.py::t3",
        "tests/kube/test_groups.py::t",
        "tests/kube/test_burst.py::t",
        "tests/agent/test_a.py::t2",
        "tests/kube/test_dra.py::t",
    )
    collected.sort(key=unit_order([i.nodeid for i in collected]))
    units = [work_unit(i.nodeid) for i in collected]
    assert [i.nodeid for i in collected] == [
        "tests/kube/test_burst.py::t",
        "tests/kube/test_dra.py::t",
        "tests/bench/test_soak.py::t",
        "tests/kube/test_groups.py::t",
        "tests/extender/test_big.py::t1",
        "tests/extender/test_big.py::t2",
        "tests/extender/test_big.py::t3",
        "tests/agent/test_a.py::t1",
        "tests/agent/test_a.py::t2",
    ]
    assert units[:2] == ["kube", "kube"]


def test_the_long_files_exist() -> None:
    assert all((ROOT / path).is_file() for path in LONG)
    assert all(Path(path).parts[0] == "tests" for path in LONG)
