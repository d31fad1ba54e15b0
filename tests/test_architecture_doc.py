"""docs/architecture.md's counts are the tree's (issue 52 item 6): the number of modules it says
import the Kubernetes client is the import-linter contract's allow-list, and every module of that
list exists and imports it."""

from __future__ import annotations

import re
import tomllib

from tests.harness import ROOT

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def allowed_kube_importers() -> list[str]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (kube,) = [c for c in contracts if c.get("protected_modules") == ["kubernetes_asyncio"]]
    return list(kube["allowed_importers"])


def test_the_kubernetes_client_importers_the_doc_counts_are_the_contracts() -> None:
    said = re.search(r"only the (\d+) modules the\s+`kubernetes_asyncio` contract allows", ARCHITECTURE.read_text())
    assert said is not None, "docs/architecture.md no longer says how many modules import the Kubernetes client"
    allowed = allowed_kube_importers()
    assert int(said.group(1)) == len(allowed)
    for module in allowed:
        source = ROOT.joinpath(*module.split(".")).with_suffix(".py")
        assert re.search(r"^\s*(from|import) kubernetes_asyncio", source.read_text(), re.MULTILINE), module


def test_the_layout_block_names_every_module_and_package_of_each_program() -> None:
    """Each program's top-level modules and packages appear in the layout block (a newcomer finds the
    relay and the workers there), and every one it names exists."""
    text = ARCHITECTURE.read_text()
    block = text[text.index("gpuextender/extender/            top to bottom") :]
    block = block[: block.index("```")]
    for program in ("extender", "agent"):
        root = ROOT / "gpuextender" / program
        section = block[block.index(f"gpuextender/{program}/") :]
        section = section[: section.index("\ngpuextender/", 1)] if "\ngpuextender/" in section[1:] else section
        words = (w.rstrip("/").removesuffix(".py") for line in section.splitlines()[1:] for w in line[:33].split())
        listed = set(words)
        present = {p.stem if p.suffix == ".py" else p.name for p in root.iterdir() if not p.name.startswith("__")}
        present -= {"__pycache__"}
        assert present - listed == set(), f"gpuextender/{program}/: not in the layout block"
        assert listed - present == set(), f"gpuextender/{program}/: named in the layout block, not in the tree"
