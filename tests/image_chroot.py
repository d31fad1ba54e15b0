"""Runs inside `unshare --mount` (tests/image_build.run), as the very process the test started (no
fork in between: a test's SIGTERM reaches the program, and nothing outlives the test): prepares an
image's root as the kubelet and container runtime would for a pod with `readOnlyRootFilesystem:
true`, then becomes the pod's process. Reads its spec (a JSON file: root, uid, gid, binds, env,
argv) from argv[1].

Mounts made here live in this private namespace and vanish with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    root = Path(spec["root"])
    mount("--make-rprivate", "/")  # nothing below leaks to the host's mount table
    mount("--bind", str(root), str(root))  # a mount point of its own, so it can be made read-only
    for path, (host, mode) in spec["binds"].items():  # volumes: read-only, or writable (emptyDir)
        target = root / path.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        mount("--bind", host, str(target))
        if mode == "ro":
            mount("-o", "remount,bind,ro", str(target))
    (root / "proc").mkdir(exist_ok=True)
    mount("-t", "proc", "proc", str(root / "proc"))
    mount("--rbind", "/dev", str(root / "dev"))
    mount("-t", "tmpfs", "-o", "mode=1777,size=64m", "tmpfs", str(root / "tmp"))  # emptyDir at /tmp
    resolv = root / "etc/resolv.conf"
    if Path("/etc/resolv.conf").exists() and resolv.exists():
        mount("--bind", "/etc/resolv.conf", str(resolv))
    mount("-o", "remount,bind,ro", str(root))  # readOnlyRootFilesystem: true
    os.chroot(root)
    os.chdir("/")
    os.setgroups([])
    os.setgid(spec["gid"])
    os.setuid(spec["uid"])  # from root to a non-root uid: every capability is dropped
    env = spec["env"]
    argv = spec["argv"]
    program = shutil.which(argv[0], path=env.get("PATH", "/usr/bin:/bin")) or argv[0]
    os.execve(program, argv, env)


if __name__ == "__main__":
    main()
