"""Names that match the tree (issue 37 item 5): every module and file that code comments,
docstrings and docs name exists, so a reader who follows one lands somewhere.

Checked in the comments and docstrings of every tracked .py file (generated ones aside) and in every
.md, .yaml, .toml and .sh file:
- `gpuextender.x.y` (and `gpuextender.x.y.Name`): a module or package, at most one attribute after it,
  which the module (or the package's __init__.py, or its .proto files) defines at its top level;
- `agent.x`, `extender.x.y` (the project's modules named from their program down): the same under
  gpuextender/;
- `module_name.Name` where module_name has an underscore (`ingest_limits.ReportPacer`): a module of
  that name exists somewhere;
- `dir/file.py` or `file.py`: a tracked Python file ends so."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from functools import cache
from pathlib import Path

from tests.harness import ROOT

DOTTED = re.compile(r"(?<![\w.])gpuextender(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
PROGRAM_DOTTED = re.compile(r"(?<![\w./-])((?:agent|extender)(?:\.[a-z_][a-z0-9_]*)+)")
MODULE_ATTR = re.compile(r"(?<![\w./-])([a-z][a-z0-9]*_[a-z0-9_]+)\.[A-Z][A-Za-z0-9_]*")
PY_FILE = re.compile(r"(?<![\w/.$-])((?:[A-Za-z_][\w-]*/)*[a-z_][a-z0-9_]*\.py)\b")
# Names that are not the project's files: written at test time, or suffixes of generated files.
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
NOT_OURS = {"sitecustomize.py", "_pb2.py", "_pb2_grpc.py", "setup.py", "conftest.py"}


def tracked(*patterns: str) -> list[str]:
    return subprocess.run(
        ["git", "ls-files", *patterns], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.split()


def prose(name: str) -> str:
    """What a person wrote in the file for readers: a .py file's comments and docstrings (its code
    names modules by their import aliases), any other file whole."""
    text = (ROOT / name).read_text(errors="replace")
    if not name.endswith(".py"):
        return text
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    comments = [t.string for t in tokens if t.type == tokenize.COMMENT]
    documented = [n for n in ast.walk(ast.parse(text)) if isinstance(n, DOCUMENTED)]
    docstrings = [doc for n in documented if (doc := ast.get_docstring(n, clean=False))]
    return "\n".join(comments + docstrings)


def resolves(parts: list[str]) -> bool:
    """A module or package of ROOT (parts from the top package down), plus at most one attribute
    that the module (or the package's __init__.py) defines or imports at its top level."""
    for k in range(len(parts), 0, -1):
        path = ROOT.joinpath(*parts[:k])
        source = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
        if source.exists():
            rest = parts[k:]
            return not rest or (len(rest) == 1 and rest[0] in top_level_names(source))
    return False


PROTO_NAME = re.compile(r"^\s*(?:message|service|enum)\s+(\w+)", re.MULTILINE)


@cache
def top_level_names(source: Path) -> frozenset[str]:
    """The names a module binds at its top level: classes, functions, assignments, imports; for a
    package, also the messages, services and enums its .proto files declare (`gpuextender.v1.NodeReport`
    is the contract's own name for the message)."""
    names: set[str] = set()
    if source.name == "__init__.py":
        for proto in source.parent.glob("*.proto"):
            names.update(PROTO_NAME.findall(proto.read_text()))
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def stale_names() -> list[tuple[str, str]]:
    python = tracked("*.py")
    suffixes = {"/".join(p.split("/")[i:]) for p in python for i in range(len(p.split("/")))}
    modules = {Path(p).stem for p in python}
    found: set[tuple[str, str]] = set()
    for name in tracked("*.py", "*.md", "*.yaml", "*.toml", "*.sh"):
        if "_pb2" in name or name == "tests/test_names_match_tree.py":  # generated; its own examples
            continue
        text = prose(name)
        for m in DOTTED.finditer(text):
            if not resolves(m.group(0).split(".")):
                found.add((name, m.group(0)))
        for m in PROGRAM_DOTTED.finditer(text):
            if not resolves(["gpuextender", *m.group(1).split(".")]):
                found.add((name, m.group(1)))
        for m in MODULE_ATTR.finditer(text):
            if m.group(1) not in modules:
                found.add((name, m.group(0)))
        for m in PY_FILE.finditer(text):
            path = m.group(1)
            if path not in suffixes and Path(path).name not in NOT_OURS:
                found.add((name, path))
    return sorted(found)


def test_every_module_and_file_named_exists() -> None:
    assert stale_names() == []


def test_the_check_finds_a_stale_name(tmp_path: Path) -> None:
    """The patterns see what they are for (a broken one would pass everything)."""
    assert not resolves(["gpuextender", "extender", "ome", "node_class"])  # the old layout
    assert resolves(["gpuextender", "extender", "model", "ome", "node_class", "ClassMatcher"])
    assert not resolves(["gpuextender", "extender", "model", "ome", "node_class", "ClassMatcher", "x"])
    text = "see `ingest_limits.ReportPacer`, agent.latest and extender/pod_ledger.py"
    assert [m.group(0) for m in MODULE_ATTR.finditer(text)] == ["ingest_limits.ReportPacer"]
    assert [m.group(1) for m in PROGRAM_DOTTED.finditer(text)] == ["agent.latest"]
    assert [m.group(1) for m in PY_FILE.finditer(text)] == ["extender/pod_ledger.py"]
    # The attribute after a module or package is checked too (issue 52 item 6).
    assert not resolves(["gpuextender", "agent", "latest"])  # a package, and no such module or name
    assert resolves(["gpuextender", "agent", "report", "latest"])
    assert resolves(["gpuextender", "extender", "ingest", "report_checks", "MAX_HOLDERS_PER_GPU"])
    assert not resolves(["gpuextender", "extender", "ingest", "report_checks", "MAX_HOLDERS"])
    assert resolves(["gpuextender", "v1", "NodeReport"])  # the contract's message
    assert not resolves(["gpuextender", "v1", "NodeReports"])


SECTION = re.compile(r"((?:[\w.-]+/)*[\w.-]+\.(?:md|py)), \"([^\"]+)\"")


def markdown_headings(path: Path) -> set[str]:
    """Its headings, and the bold run-in heads that open a paragraph (`**Claim pods (DRA, ...).**`)."""
    lines = path.read_text().splitlines()
    heads = {line.lstrip("#").strip() for line in lines if line.startswith("#")}
    return heads | {line[2:].split("**")[0] for line in lines if line.startswith("**")}


def stale_sections() -> list[tuple[str, str]]:
    """`<file>.md, "<Section>"` pointers whose file has no heading that holds the section's name, and
    `<module>.py, "<Section>"` ones whose module's comments and docstrings never say it."""
    found: set[tuple[str, str]] = set()
    markdown = tracked("*.md", "*.py")
    for name in tracked("*.py", "*.md", "*.yaml", "*.toml", "*.sh"):
        if "_pb2" in name or name == "tests/test_names_match_tree.py":
            continue
        for m in SECTION.finditer(prose(name)):
            section = re.sub(r"\s*\n\s*(?:#\s*)?", " ", m.group(2))  # a name wrapped over comment lines
            target = [p for p in markdown if p == m.group(1) or p.endswith("/" + m.group(1))]
            if len(target) != 1:
                found.add((name, f'{m.group(1)}, "{section}"'))
            elif target[0].endswith(".py") and section not in prose(target[0]):
                found.add((name, f'{m.group(1)}, "{section}"'))
            elif target[0].endswith(".md") and not any(section in h for h in markdown_headings(ROOT / target[0])):
                found.add((name, f'{m.group(1)}, "{section}"'))
    return sorted(found)


def test_every_section_named_exists() -> None:
    """A pointer to a section of a document lands on a heading there (issue 52 item 6)."""
    assert stale_sections() == []
    assert SECTION.findall('decide/README.md, "Preemption"') == [("decide/README.md", "Preemption")]
    assert SECTION.findall('(whole_gpus.py, "Bound pods")') == [("whole_gpus.py", "Bound pods")]
    assert "Bound pods" not in prose("gpuextender/extender/decide/whole_gpus.py")  # what that pointer missed
