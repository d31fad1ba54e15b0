"""Every Python package in the source tree is shipped (an editable install would hide a gap)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import version

from tests.harness import ROOT


def test_every_package_is_shipped_under_one_top_level_name() -> None:
    """Every folder with an __init__.py is found by pyproject's packages.find, all under `gpuextender`."""
    from setuptools import find_namespace_packages, find_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = set(find_packages(str(ROOT), include=find["include"]))
    on_disk = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "gpuextender").rglob("__init__.py")}
    assert on_disk == shipped
    # No folder of Python code under gpuextender/ without an __init__.py (it would not be shipped).
    assert set(find_namespace_packages(str(ROOT), include=find["include"], exclude=["*.__pycache__"])) == shipped
    assert {name.split(".")[0] for name in shipped} == {"gpuextender"}


def test_python_dash_m_runs_both_programs() -> None:
    for module, program in (("gpuextender.agent", "gpu-agent"), ("gpuextender.extender", "gpu-extender")):
        result = subprocess.run(
            [sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=60, cwd=ROOT
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"{program} {version('kube-gpu-extender')}"


def test_explain_has_a_version_too() -> None:
    """Every entry point answers --version (issue 26: `gpu-extender explain --version` was an error)."""
    result = subprocess.run(
        [sys.executable, "-m", "gpuextender.extender", "explain", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"gpu-extender explain {version('kube-gpu-extender')}"


def test_console_scripts_point_at_real_functions() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"gpu-agent", "gpu-extender"}
    for target in scripts.values():
        module, _, function = target.partition(":")
        assert callable(getattr(__import__(module, fromlist=[function]), function))


def test_the_license_is_an_spdx_expression() -> None:
    """PEP 639's form: setuptools warns that the TOML table (`{ text = ... }`) is deprecated, and the
    build backend it needs (>= 77) is the one pyproject asks for."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in pyproject["build-system"]["requires"]
    assert not any(c.startswith("License ::") for c in pyproject["project"].get("classifiers", []))


def test_the_license_file_is_apache_2_and_shipped() -> None:
    """pyproject says Apache-2.0 (issue 26: there was no LICENSE file); the wheel carries it."""
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert (project["license"], project["license-files"]) == ("Apache-2.0", ["LICENSE"])


def test_the_changelog_names_every_contract_version_the_docs_speak_of() -> None:
    """The proto and the docs say "added in 0.N"; CHANGELOG.md says what each 0.N added."""
    proto = (ROOT / "gpuextender" / "v1" / "gpu_state.proto").read_text()
    versions = set(re.findall(r"(?:Added in|older than) (0\.\d+)", proto))
    assert {"0.2", "0.3", "0.4"} <= versions
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert [v for v in sorted(versions) if f"**{v}:**" not in changelog] == []
