"""Docs are code (issue 38, item 2): every `--flag` that README.md, docs/ and deploy/README.md spell
is a flag of one of our programs, parsed by its real parser in the form written (`--x=value`
included), or a flag of the named outside tool it is given to."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from gpuextender.agent.settings import build_parser as agent_parser
from gpuextender.extender.flags import build_parser as extender_parser
from gpuextender.extender.relay.relay_flags import build_parser as relay_parser
from gpuextender.extender.ui.explain_cli import build_parser as explain_parser
from tests.harness import ROOT
from tests.kube_tools import HELM, NO_HELM

PAGES = [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Flags the docs give to other programs, each with the program it belongs to.
OUTSIDE = {
    "--all": "kubectl delete",
    "--build-arg": "docker/podman build",
    "--builder": "deploy/build-images.sh",
    "--ca-days": "deploy/tls/make-certs.sh",
    "--cert-manager": "deploy/preflight.sh",
    "--check": "ruff format",
    "--client": "kubectl version",
    "--days": "deploy/tls/make-certs.sh",
    "--disable-openapi-validation": "helm install, helm upgrade",
    "--docker-password": "kubectl create secret docker-registry",
    "--docker-server": "kubectl create secret docker-registry",
    "--docker-username": "kubectl create secret docker-registry",
    "--driver": "docker buildx create",
    "--dry-run": "deploy/build-images.sh",
    "--expect-gpu": "bench/gpu_check.py",
    "--feature-gates": "kube-apiserver, kube-scheduler",
    "--field-selector": "kubectl get",
    "--fix": "ruff check",
    "--from-file": "kubectl create configmap",
    "--gpu-clique-label-enabled": "NVIDIA's DRA driver (compute-domain kubelet plugin)",
    "--ignore-not-found": "kubectl delete",
    "--new-ca": "deploy/tls/make-certs.sh",
    "--no-build": "deploy/build-images.sh",
    "--no-compile": "pip install",
    "--no-deps": "pip install",
    "--no-index": "pip install",
    "--no-push": "deploy/build-images.sh",
    "--out": "bench/gpu_check.py",
    "--platform": "docker buildx build, deploy/build-images.sh",
    "--previous": "kubectl logs",
    "--print-tag": "deploy/build-images.sh",
    "--prune": "kubectl apply",
    "--prune-allowlist": "kubectl apply",
    "--pull-secret": "deploy/build-images.sh",
    "--push": "docker buildx build",
    "--query-gpu": "nvidia-smi",
    "--reuse-values": "helm upgrade",
    "--runtime-config": "kube-apiserver",
    "--server-side": "kubectl apply",
    "--servers": "bench/bench_fleet_scale.py",
    "--set": "helm install, helm upgrade",
    "--set-file": "helm install, helm upgrade",
    "--slurpfile": "jq",
    "--spare": "bench/soak.py",
    "--tag": "deploy/build-images.sh",
    "--target": "pip install",
    "--use": "docker buildx create",
    "--validate": "kubectl apply",
    "--wait": "helm uninstall",
}
PARSERS = {
    "gpu-agent": agent_parser(),
    "gpu-extender": extender_parser(),
    "gpu-extender explain": explain_parser(),
    "gpu-extender relay": relay_parser(),
}
SPELLED = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]+)(=[^\s`,)'\"]*)?")


def spelled() -> list[tuple[str, str, str]]:
    """(page, flag, '=value' or '') for every flag the pages spell, once each."""
    found = {
        (str(p.relative_to(ROOT)), m.group(1), m.group(2) or "") for p in PAGES for m in SPELLED.finditer(p.read_text())
    }
    return sorted(found)


def owners(flag: str) -> list[str]:
    return [name for name, p in PARSERS.items() if any(flag in a.option_strings for a in p._actions)]


def test_the_pages_spell_flags() -> None:
    assert len(spelled()) > 50  # the extraction finds them (a broken pattern would pass everything)


@pytest.mark.parametrize(("page", "flag", "value"), spelled())
def test_every_flag_spelled_is_a_real_one_in_the_form_written(page: str, flag: str, value: str) -> None:
    if flag in OUTSIDE:
        assert not owners(flag), f"{flag} is ours too: drop it from OUTSIDE"
        return
    found = owners(flag)
    assert found, f"{page}: {flag} is no flag of {', '.join(PARSERS)} (nor listed in OUTSIDE)"
    if not value or re.fullmatch(r"=[A-Z_.]+", value) or "<" in value or "…" in value:
        return  # a placeholder (`--x=SECONDS`) is not a value
    for name in found:
        parser = PARSERS[name]
        try:
            parsed, _ = parser.parse_known_args([flag + value])
        except SystemExit:
            pytest.fail(f"{page}: `{flag}{value}` is refused by {name}")
        assert isinstance(parsed, argparse.Namespace)


@pytest.mark.parametrize("script", ["deploy/build-images.sh", "deploy/tls/make-certs.sh", "deploy/preflight.sh"])
def test_our_scripts_flags_the_docs_spell_are_in_their_help(script: str) -> None:
    """A flag listed above as one of our scripts' is one its --help names (and it runs)."""
    result = subprocess.run([str(ROOT / script), "--help"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    theirs = [flag for flag, owner in OUTSIDE.items() if script in owner]
    assert theirs and [flag for flag in theirs if flag not in result.stdout] == []


def spelled_test_commands() -> list[tuple[str, list[str]]]:
    """Every `./dev.sh test ARGS` the pages spell, with its page: (page, ARGS)."""
    found = []
    for page in PAGES:
        for line in page.read_text().splitlines():
            command = re.search(r"\./dev\.sh test\b([^`#\n]*)", line)
            if command:
                found.append((page.relative_to(ROOT).as_posix(), command.group(1).split()))
    return found


def test_every_test_command_the_pages_spell_selects_tests() -> None:
    """`./dev.sh test ARGS` is pytest with ARGS: each spelled selects at least one test as written
    (collection only, in one process)."""
    commands = spelled_test_commands()
    assert any(args == [] for _, args in commands), "the README's whole-suite command is missing"
    for page, args in {(page, tuple(args)) for page, args in commands if args}:
        argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args]
        run = subprocess.run([*argv, "-n", "0"] if "-n" not in args else argv, capture_output=True, text=True, cwd=ROOT)
        assert run.returncode == 0, f"{page}: ./dev.sh test {' '.join(args)}: {run.stdout[-800:]}{run.stderr[-800:]}"


def test_the_helm_flags_the_docs_spell_are_helms() -> None:
    """A flag listed above as helm's is one its own help names (install, upgrade, uninstall)."""
    if HELM is None:
        pytest.skip(NO_HELM)
    helps = "".join(
        subprocess.run([HELM, verb, "--help"], capture_output=True, text=True, timeout=30).stdout
        for verb in ("install", "upgrade", "uninstall")
    )
    theirs = [flag for flag, owner in OUTSIDE.items() if owner.startswith("helm")]
    assert len(theirs) >= 4 and [flag for flag in theirs if f"{flag} " not in helps] == []
