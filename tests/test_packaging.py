"""Every Python package in the source tree is shipped (an editable install would hide a gap)."""

from __future__ import annotations

import tomllib

from tests.harness import ROOT


def test_every_package_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    package_dir = config["package-dir"]
    on_disk = set()
    for top, directory in package_dir.items():
        for init in (ROOT / directory).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / directory)
            on_disk.add(".".join((top, *relative.parts)))
    assert on_disk == listed, f"missing: {sorted(on_disk - listed)}, stale: {sorted(listed - on_disk)}"


def test_console_scripts_point_at_real_functions() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"gpu-agent", "gpu-extender"}
    for target in scripts.values():
        module, _, function = target.partition(":")
        assert callable(getattr(__import__(module, fromlist=[function]), function))
