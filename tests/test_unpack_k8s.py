"""`.ci/unpack_k8s.py`: the control-plane binaries decompressed into a cache, checked against
SHA256SUMS, written atomically, reused when already right."""

from __future__ import annotations

import hashlib
import importlib.util
import lzma
import os
from pathlib import Path
from types import ModuleType

import pytest

from tests.harness import ROOT


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unpack_k8s", ROOT / ".ci" / "unpack_k8s.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shared(tmp_path: Path, binaries: dict[str, bytes], sums: dict[str, bytes] | None = None) -> Path:
    src = tmp_path / "k8s"
    src.mkdir()
    for name, data in binaries.items():
        (src / f"{name}.xz").write_bytes(lzma.compress(data))
    listed = sums or binaries
    (src / "SHA256SUMS").write_text("".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in listed.items()))
    return src


def test_unpacks_checks_and_reuses(tmp_path: Path) -> None:
    unpack = _module().unpack
    src = _shared(tmp_path, {"etcd": b"etcd-binary", "kube-apiserver": b"apiserver-binary"})
    dest = unpack(src, tmp_path / "cache")
    assert (dest / "etcd").read_bytes() == b"etcd-binary" and os.access(dest / "etcd", os.X_OK)
    assert (dest / "kube-apiserver").read_bytes() == b"apiserver-binary"
    assert sorted(p.name for p in dest.iterdir()) == ["etcd", "kube-apiserver"]  # no partial files left
    mtime = (dest / "etcd").stat().st_mtime_ns
    assert unpack(src, tmp_path / "cache") == dest and (dest / "etcd").stat().st_mtime_ns == mtime  # reused
    (dest / "etcd").write_bytes(b"truncat")  # a damaged cache is rewritten
    unpack(src, tmp_path / "cache")
    assert (dest / "etcd").read_bytes() == b"etcd-binary"


def test_a_binary_that_does_not_match_its_sum_is_refused_and_not_left_behind(tmp_path: Path) -> None:
    unpack = _module().unpack
    src = _shared(tmp_path, {"etcd": b"tampered"}, sums={"etcd": b"the real etcd"})
    with pytest.raises(SystemExit, match=r"etcd: sha256 .* does not match SHA256SUMS"):
        unpack(src, tmp_path / "cache")
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))
