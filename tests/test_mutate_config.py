"""`./dev.sh mutate` (docs/testing.md, "Mutation testing") as CI can check it without running
mutmut (hours, and not installed by CI): the command docs/testing.md spells is a case of dev.sh, the
module its glob names exists, and every path `[tool.mutmut]` names is in the tree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.harness import ROOT


def mutmut_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    return settings


def test_the_mutate_command_the_docs_spell_is_dev_shs_and_names_a_module() -> None:
    assert re.search(r"^  mutate\) ", (ROOT / "dev.sh").read_text(), re.MULTILINE)
    spelled = re.findall(
        r"^\./dev\.sh mutate(?: \"([^\"]+)\")?", (ROOT / "docs" / "testing.md").read_text(), re.MULTILINE
    )
    assert "" in spelled and len(spelled) >= 2  # the whole run, and one narrowed by a glob
    for glob in filter(None, spelled):
        module = glob.removesuffix("*")
        assert (ROOT / Path(*module.split("."))).with_suffix(".py").is_file(), glob


def test_every_path_the_mutmut_settings_name_exists() -> None:
    s = mutmut_settings()
    assert s["source_paths"] == ["gpuextender"]
    for pattern in s["only_mutate"]:
        assert list(ROOT.glob(pattern)), f"only_mutate {pattern!r} matches no file"
    for path in [*s["pytest_add_cli_args_test_selection"], *s["also_copy"]]:
        assert (ROOT / path).exists(), path
    ignored = [a.removeprefix("--ignore=") for a in s["pytest_add_cli_args"] if a.startswith("--ignore=")]
    assert ignored and all((ROOT / path).is_file() for path in ignored), ignored
    assert s["pytest_add_cli_args"][:2] == ["-n", "0"]  # one process: mutmut runs the tests itself


def test_the_mutate_extra_pins_mutmut() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["mutate"] == ["mutmut==3.8.1"]
