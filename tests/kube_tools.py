"""Where the tests find kubectl and helm: in $KUBE_TOOLS first (the pinned kubectl v1.35 with
kustomize v5.7 and helm v4 that `.ci/run` fetches with .ci/kube_tools.py and exports), else on the
machine's PATH; None when neither has it (the tests that need it skip with the reason below).

Tests that run a documented command word for word (`kubectl get ...` in a shell) pass tool_env() as
its environment, so the plain name finds the same kubectl."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

ENV = "KUBE_TOOLS"


def locate(name: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """$KUBE_TOOLS/NAME when KUBE_TOOLS is set and holds an executable NAME, else NAME on PATH."""
    tools = environ.get(ENV)
    if tools:
        path = Path(tools) / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return shutil.which(name, path=environ.get("PATH"))


def tool_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A copy of environ with $KUBE_TOOLS ahead on PATH (when set), for commands that say plain
    `kubectl` or `helm`."""
    env = dict(environ)
    tools = env.get(ENV)
    if tools:
        env["PATH"] = os.pathsep.join(p for p in (tools, env.get("PATH")) if p)
    return env


KUBECTL = locate("kubectl")
HELM = locate("helm")
NO_KUBECTL = f"kubectl is not installed and ${ENV} holds none (.ci/run fetches kubectl v1.35 there)"
NO_HELM = f"helm is not installed and ${ENV} holds none (.ci/run fetches helm v4 there)"
