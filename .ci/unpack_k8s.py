"""Decompress the control-plane binaries (`<src>/*.xz`) into a cache folder outside the repo and
print that folder: `.ci/run` exports it as KUBEBUILDER_ASSETS for tests/kube.

Each binary is checked against `<src>/SHA256SUMS` after decompression, written under a temporary
name and renamed into place, so an interrupted run never leaves a half-written binary that a later
run would trust. A folder already holding the right binaries is reused as is.

Usage: python3 .ci/unpack_k8s.py SRC_DIR CACHE_ROOT
"""

from __future__ import annotations

import hashlib
import lzma
import os
import sys
from pathlib import Path


def sums(src: Path) -> dict[str, str]:
    pairs = (line.split() for line in (src / "SHA256SUMS").read_text().splitlines() if line.strip())
    return {name.lstrip("*"): digest for digest, name in pairs}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpack(src: Path, cache_root: Path) -> Path:
    expected = sums(src)
    # One folder per set of binaries: new binaries never mix with old ones.
    tag = hashlib.sha256("".join(sorted(expected.values())).encode()).hexdigest()[:12]
    dest = cache_root / f"k8s-{tag}"
    dest.mkdir(parents=True, exist_ok=True)
    for name, digest in sorted(expected.items()):
        target = dest / name
        if target.exists() and os.access(target, os.X_OK) and sha256(target) == digest:
            continue
        tmp = dest / f".{name}.partial"
        with lzma.open(src / f"{name}.xz") as packed, open(tmp, "wb") as out:
            for block in iter(lambda: packed.read(1 << 20), b""):
                out.write(block)
        got = sha256(tmp)
        if got != digest:
            tmp.unlink()
            raise SystemExit(f"unpack_k8s: {name}: sha256 {got} does not match SHA256SUMS ({digest})")
        tmp.chmod(0o755)
        tmp.replace(target)
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print(unpack(Path(sys.argv[1]), Path(sys.argv[2])))
