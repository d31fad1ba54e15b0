"""Wiring at construction (issue 52): in the extender's wiring (app.py), its HTTP side
(scheduler/http_api.py) and the ingest workers (workers/), a part is given what it reads when it
is made, and nothing sets an attribute of another object afterwards: a part's attributes are
assigned by its own methods only (`self.name = ...`), never `other.name = ...`, `self.part.name =
...` or `setattr`. A new source is a constructor parameter, not an assignment the next reader
has to find."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTENDER = ROOT / "gpuextender" / "extender"
CHECKED = (
    EXTENDER / "app.py",
    EXTENDER / "scheduler" / "http_api.py",
    *sorted((EXTENDER / "workers").glob("*.py")),
)


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found: list[ast.expr] = []
        for target in node.targets:
            found.extend(_flatten(target))
        return found
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return _flatten(node.target)
    return []


def _flatten(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        return [t for e in target.elts for t in _flatten(e)]
    if isinstance(target, ast.Starred):
        return _flatten(target.value)
    return [target]


def set_from_outside(source: str) -> list[str]:
    """Each `line: target` that sets an attribute of an object other than `self`, or calls setattr."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            if isinstance(target, ast.Attribute) and not (
                isinstance(target.value, ast.Name) and target.value.id == "self"
            ):
                found.append(f"{target.lineno}: {ast.unparse(target)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_attribute_is_set_from_outside(path: Path) -> None:
    assert set_from_outside(path.read_text()) == []


def test_the_check_finds_each_form_of_setting_from_outside() -> None:
    source = """
class Part:
    def __init__(self, other):
        self.own = 1
        self.a, self.b = 2, 3
        self.count: int = 0
        self.count += 1
        other.ask = self.ask
        self.api.serving = True
        x, other.y = 1, 2
        other.n += 1
        setattr(other, "z", 3)
"""
    assert set_from_outside(source) == [
        "8: other.ask",
        "9: self.api.serving",
        "10: other.y",
        "11: other.n",
        "12: setattr(other, 'z', 3)",
    ]


def test_every_checked_file_exists() -> None:
    assert all(p.is_file() for p in CHECKED) and len(CHECKED) > 3
