"""What a fresh interpreter loads when it imports some modules: the import-budget tests of both
programs (tests/agent/test_agent_imports.py, tests/extender/test_extender_imports.py)."""

from __future__ import annotations

import json
import subprocess
import sys


def modules_after_importing(*names: str) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        "for n in sys.argv[1:]: importlib.import_module(n)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


def loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    """The modules of `modules` that are one of `prefixes` or inside one."""
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))
