"""Build the repository's images here, with Debian's packages and no Docker engine, and run them as
a pod would (tests/test_image_run.py).

- **Base.** The Dockerfiles take their base as `--build-arg BASE` (default: the public Python image,
  which this machine cannot pull). Here it is a Debian bookworm rootfs made with `debootstrap`
  (python3, python3-venv, python3-pip), with `python` on PATH as in the Python image, Debian's
  "externally managed" marker removed (this base exists to build on), and this machine's CA bundle
  (the package registries are reached through a proxy with its own CA). Made once per machine,
  cached under ~/.cache.
- **Build.** `podman build --isolation chroot` (no OCI runtime: the sandbox has no usable
  cgroups and refuses setrlimit, so crun cannot start a container), `--network host` for PyPI.
- **Run.** The same reasons keep `podman run` out; `run()` does what the kubelet and runtime
  would, and no more: a writable container layer (`buildah from` + `buildah mount`), then, in a
  private mount namespace (`unshare --mount`), the image's root remounted read-only, /proc, /dev,
  an emptyDir-like tmpfs at /tmp and the volumes bound at their mountPaths, `chroot`, the uid and
  gid of the manifest (65532, so no capabilities are left), the image's ENV and ENTRYPOINT.

Every step needs root and the tools (`podman`, `buildah`, `debootstrap`, `unshare`): where one is
missing `missing()` says which, and the tests skip with that one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kube-gpu-extender"
BASE_TAG = "localhost/kge-python-base:bookworm"
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
PACKAGES = ("python3", "python3-venv", "python3-pip", "ca-certificates")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
TOOLS = ("podman", "buildah", "debootstrap", "unshare")


def missing() -> str:
    """'' when images can be built and run here; else why not (one line)."""
    if os.geteuid() != 0:
        return "building and running images here needs root (chroot, mounts)"
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install podman buildah debootstrap)"
    return ""


def _run(argv: list[str], *, timeout: float, log: Path | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-20:]
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {proc.returncode}:\n" + "\n".join(tail))
    return proc.stdout


def base_image() -> str:
    """The local base, made (debootstrap + podman import) unless this machine has it already."""
    ca_digest = hashlib.sha256(HOST_CA.read_bytes()).hexdigest()[:12] if HOST_CA.exists() else "none"
    tag = f"{BASE_TAG}-{ca_digest}"
    if subprocess.run(["podman", "image", "exists", tag], capture_output=True).returncode == 0:
        return tag
    rootfs = CACHE / f"rootfs-{SUITE}"
    if not (rootfs / "usr/bin/python3").exists():
        shutil.rmtree(rootfs, ignore_errors=True)
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        _run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), MIRROR],
            timeout=900,
        )
    (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
    python = rootfs / "usr/local/bin/python"
    if not python.is_symlink():
        python.symlink_to("/usr/bin/python3")
    if HOST_CA.exists():
        shutil.copyfile(HOST_CA, rootfs / "etc/ssl/certs/ca-certificates.crt")
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / cache).glob("*"):
            if entry.is_file():
                entry.unlink()
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imported = subprocess.run(
        ["podman", "import", "--change", "ENV PATH=/usr/local/bin:/usr/bin:/bin", "-", tag],
        stdin=tar.stdout,
        capture_output=True,
        text=True,
        timeout=300,
    )
    tar.wait()
    if imported.returncode != 0:
        raise RuntimeError(f"podman import: {imported.stderr.strip()[-2000:]}")
    return tag


def build(dockerfile: str, tag: str, base: str, log: Path) -> None:
    _run(
        [
            "podman",
            "build",
            "--isolation",
            "chroot",
            "--network",
            "host",
            "--build-arg",
            f"BASE={base}",
            "-f",
            str(ROOT / dockerfile),
            "-t",
            tag,
            str(ROOT),
        ],
        timeout=900,
        log=log,
    )


@dataclass
class ImageConfig:
    entrypoint: list[str]
    env: dict[str, str]
    user: str
    labels: dict[str, str]
    architecture: str
    exposed: set[str] = field(default_factory=set)


def config(tag: str) -> ImageConfig:
    (info,) = json.loads(_run(["podman", "image", "inspect", tag], timeout=60))
    cfg = info["Config"]
    env = dict(item.split("=", 1) for item in cfg.get("Env") or [])
    return ImageConfig(
        entrypoint=list(cfg.get("Entrypoint") or []),
        env=env,
        user=str(cfg.get("User") or ""),
        labels=dict(cfg.get("Labels") or {}),
        architecture=str(info.get("Architecture", "")),
        exposed=set(cfg.get("ExposedPorts") or {}),
    )


@dataclass
class Container:
    """A writable container layer of an image, mounted (remove() when done)."""

    name: str
    rootfs: Path

    @classmethod
    def of(cls, tag: str) -> Container:
        name = _run(["buildah", "from", tag], timeout=120).strip().splitlines()[-1]
        rootfs = Path(_run(["buildah", "mount", name], timeout=60).strip())
        return cls(name, rootfs)

    def remove(self) -> None:
        subprocess.run(["buildah", "umount", self.name], capture_output=True, timeout=60)
        subprocess.run(["buildah", "rm", self.name], capture_output=True, timeout=60)


def run(
    container: Container,
    image: ImageConfig,
    args: list[str],
    *,
    uid: int,
    gid: int,
    binds: dict[str, Path] | None = None,
    writable: dict[str, Path] | None = None,
    entrypoint: list[str] | None = None,
    log: Path,
) -> subprocess.Popen[bytes]:
    """The image's ENTRYPOINT (or `entrypoint`) + `args`, as the kubelet would start it: read-only
    root filesystem, `uid`:`gid`, a tmpfs at /tmp, `binds` (container path -> host directory:
    Secrets, ConfigMaps, hostPath) read-only and `writable` ones (emptyDirs) at their paths."""
    spec = {
        "root": str(container.rootfs),
        "uid": uid,
        "gid": gid,
        "binds": {path: [str(host), "ro"] for path, host in (binds or {}).items()}
        | {path: [str(host), "rw"] for path, host in (writable or {}).items()},
        "env": image.env,
        "argv": (image.entrypoint if entrypoint is None else entrypoint) + args,
    }
    spec_path = log.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec))
    helper = Path(__file__).with_name("image_chroot.py")
    with open(log, "wb") as out:
        return subprocess.Popen(
            ["unshare", "--mount", "--", sys.executable, str(helper), str(spec_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
