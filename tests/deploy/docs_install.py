"""The install as the docs spell it, for tests that follow it: a copy of the repository (what an
admin has checked out: the tracked files and the ones git does not ignore, committed once, so the
scripts' git-derived defaults hold), image builders that record what they were asked and build
nothing (tests/test_image_run.py builds the Dockerfiles for real), and the fenced blocks of
README.md and deploy/README.md in the order written."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.harness import ROOT

DOCS = ("README.md", "deploy/README.md")
BUILDERS = ("docker", "podman", "buildah")
# A yaml block whose first line names the file the docs put it in: `# my-policy/kustomization.yaml: ...`
NAMED_FILE = re.compile(r"^# ([\w./-]+\.ya?ml)(?::|$)")


def copy_repository(dest: Path) -> Path:
    """The checkout as an admin has it, in `dest`: every file git tracks or would add, committed as
    one commit (a working tree with this session's changes uncommitted copies those too)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if not source.is_file():  # deleted in the working tree, not yet committed
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    git = ["git", "-c", "user.name=admin", "-c", "user.email=admin@example.com", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "checkout"]):
        subprocess.run([*git, *args], cwd=dest, check=True, capture_output=True)
    return dest


def fake_builders(bin_dir: Path, log: Path) -> dict[str, str]:
    """docker, podman and buildah that append their arguments to `log` and succeed; returns an
    environment with them first on PATH."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in BUILDERS:
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


@dataclass(frozen=True)
class Block:
    doc: str
    lang: str
    text: str
    start: int  # where it starts in the doc


def fenced_blocks(doc: str) -> list[Block]:
    """Every fenced block of `doc` (a path under the repository), in order; indented ones too."""
    text = (ROOT / doc).read_text()
    blocks = []
    for match in re.finditer(r"^( *)```(\w*)\n(.*?)^\1```", text, re.M | re.S):
        indent = len(match.group(1))
        body = "\n".join(line[indent:] for line in match.group(3).splitlines())
        blocks.append(Block(doc, match.group(2), body, match.start()))
    return blocks


def sh_blocks(doc: str, marker: str) -> list[list[str]]:
    """The commands of each sh block from `marker` (a heading, or a list item's first words) to
    the next `## ` heading, in order."""
    text = (ROOT / doc).read_text()
    start = text.index(marker)
    end = text.find("\n## ", start + len(marker))
    end = len(text) if end < 0 else end
    return [commands(b) for b in fenced_blocks(doc) if start <= b.start < end and b.lang == "sh"]


def commands(block: Block) -> list[str]:
    """The shell commands of a block: continuation lines joined, comments dropped, `&&` split."""
    joined = re.sub(r"\\\n\s*", " ", block.text)
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if not line or line.startswith("#"):
            continue
        out.extend(part.strip() for part in line.split("&&"))
    return out


def named_file(block: Block) -> str | None:
    """The path a yaml block says it is (`# NAME/FILE.yaml: ...` on its first line), else None."""
    first = block.text.split("\n", 1)[0]
    found = NAMED_FILE.match(first) if block.lang == "yaml" else None
    return found.group(1) if found else None


KUSTOMIZE_PATH = re.compile(r"^kubectl (?:apply|delete|diff|kustomize)\b.*?(?:-k |kustomize )(\S+)")


def kustomize_path(command: str) -> str | None:
    """The directory a `kubectl apply|delete|diff -k DIR` or `kubectl kustomize DIR` renders."""
    found = KUSTOMIZE_PATH.match(command)
    return found.group(1) if found else None
