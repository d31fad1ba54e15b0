"""`.ci/kube_tools.py` (helm v4 and kubectl v1.35 from npm's registry into a cache) and where the
tests find kubectl and helm (tests.kube_tools): a cached folder is reused without npm, a tarball
that is not the pinned one is refused, a half-done fetch leaves nothing a later run would trust.
Offline with fake executables, but for one real fetch where npm is installed."""

from __future__ import annotations

import importlib.util
import io
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.harness import ROOT
from tests.kube_tools import locate, tool_env

SCRIPT = ROOT / ".ci" / "kube_tools.py"
FAKE_HELM = "#!/bin/sh\necho v4.1.4+g05fa379\n"
FAKE_KUBECTL = "#!/bin/sh\necho 'Client Version: v1.35.2'\necho 'Kustomize Version: v5.7.1'\n"
AMD64 = sys.platform == "linux" and platform.machine().lower() in ("x86_64", "amd64")
needs_amd64 = pytest.mark.skipif(not AMD64, reason="the package ships linux/amd64 binaries only")


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kube_tools_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PINNED = _module()
FOLDER = f"kube-tools-{PINNED.VERSION}"
TREE = [FOLDER, f"{FOLDER}/bin", f"{FOLDER}/bin/helm", f"{FOLDER}/bin/kubectl"]


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _cached(cache: Path, helm: str = FAKE_HELM, kubectl: str = FAKE_KUBECTL) -> Path:
    bin_dir = cache / FOLDER / "bin"
    _executable(bin_dir / "helm", helm)
    _executable(bin_dir / "kubectl", kubectl)
    return bin_dir


def _tarball(path: Path, members: dict[str, str]) -> Path:
    """A package tarball whose lib/layer.zip holds `members` (path in the zip -> text)."""
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(layer.getvalue())
        tar.addfile(info, io.BytesIO(layer.getvalue()))
    return path


def _run(*args: str | Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=300, env=env
    )


def _left(cache: Path) -> list[str]:
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) if cache.exists() else []


def test_a_cached_folder_that_runs_is_reused_without_npm(tmp_path: Path) -> None:
    bin_dir = _cached(tmp_path / "cache")
    no_npm = str(tmp_path / "empty")  # a PATH without npm: the cached folder is all it may use
    first, second = _run(tmp_path / "cache", path=no_npm), _run(tmp_path / "cache", path=no_npm)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == second.stdout == f"{bin_dir}\n"


def test_without_npm_and_a_wrong_cache_it_says_so_in_one_line(tmp_path: Path) -> None:
    _cached(tmp_path / "cache", helm="#!/bin/sh\necho v3.17.0+g1234567\n")  # another helm: not trusted
    done = _run(tmp_path / "cache", path=str(tmp_path / "empty"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"kube_tools: npm is not installed: it fetches {PINNED.PACKAGE}@{PINNED.VERSION} from npm's registry"
    ]


@needs_amd64
def test_a_tarball_that_is_not_the_pinned_one_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    bad = _tarball(tmp_path / "bad.tgz", {"helm/helm": FAKE_HELM, "kubectl/kubectl": FAKE_KUBECTL})
    done = _run("--tarball", bad, tmp_path / "cache", path=os.environ.get("PATH", ""))
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("kube_tools: bad.tgz: integrity sha512-") and "does not match the pinned sha512-" in line
    assert _left(tmp_path / "cache") == []


@needs_amd64
def test_the_binaries_are_taken_out_of_the_layer_checked_and_renamed_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole path offline: the pin pointed at a fake tarball (the seam), whose layer holds the
    fake tools. A wrong folder already there is replaced; no temporary folder stays."""
    kube_tools = _module()
    tarball = _tarball(tmp_path / "pkg.tgz", {"helm/helm": FAKE_HELM, "kubectl/kubectl": FAKE_KUBECTL})
    monkeypatch.setattr(kube_tools, "INTEGRITY", kube_tools.integrity(tarball))
    cache = tmp_path / "cache"
    stale = _cached(cache, kubectl="#!/bin/sh\necho 'Client Version: v1.32.4'\n")
    bin_dir = kube_tools.fetch(cache, tarball)
    assert bin_dir == stale and (bin_dir / "kubectl").read_text() == FAKE_KUBECTL
    assert all(os.access(bin_dir / name, os.X_OK) for name in ("helm", "kubectl"))
    assert _left(cache) == TREE  # nothing half-done beside it
    assert kube_tools.fetch(cache, tmp_path / "absent.tgz") == bin_dir  # right: not fetched again


@needs_amd64
@pytest.mark.parametrize(
    ("members", "says"),
    [
        ({"helm/helm": FAKE_HELM}, "has no kubectl/kubectl"),
        ({"helm/helm": "#!/bin/sh\necho v4.0.0\n", "kubectl/kubectl": FAKE_KUBECTL}, "says 'v4.0.0', not the pinned"),
        ({"helm/helm": "#!/bin/sh\nexit 3\n", "kubectl/kubectl": FAKE_KUBECTL}, "says 'exit 3', not the pinned"),
    ],
)
def test_a_layer_without_the_pinned_tools_is_refused_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, members: dict[str, str], says: str
) -> None:
    kube_tools = _module()
    tarball = _tarball(tmp_path / "pkg.tgz", members)
    monkeypatch.setattr(kube_tools, "INTEGRITY", kube_tools.integrity(tarball))
    with pytest.raises(kube_tools.Failed, match=says):
        kube_tools.fetch(tmp_path / "cache", tarball)
    assert _left(tmp_path / "cache") == []


@pytest.mark.slow
@needs_amd64
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed: it fetches the package")
def test_the_pinned_package_fetches_the_pinned_helm_and_kubectl(tmp_path: Path) -> None:
    """The real one from npm's registry (about 37 MB, a few seconds): the pin still matches."""
    done = _run(tmp_path / "cache", path=os.environ.get("PATH", ""))
    assert done.returncode == 0, done.stderr
    bin_dir = Path(done.stdout.strip())
    assert bin_dir == tmp_path / "cache" / FOLDER / "bin"
    assert _left(tmp_path / "cache") == TREE
    shutil.rmtree(tmp_path / "cache")  # 116 MB that pytest would keep for its last three runs


def test_kube_tools_comes_first_then_path(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    on_path = tmp_path / "path"
    _executable(tools / "kubectl", FAKE_KUBECTL)
    (tools / "helm").parent.mkdir(exist_ok=True)
    (tools / "helm").write_text(FAKE_HELM)  # not executable: not taken
    _executable(on_path / "kubectl", FAKE_KUBECTL)
    _executable(on_path / "helm", FAKE_HELM)
    env = {"KUBE_TOOLS": str(tools), "PATH": str(on_path)}
    assert locate("kubectl", env) == str(tools / "kubectl")
    assert locate("helm", env) == str(on_path / "helm")
    assert locate("kubectl", {"KUBE_TOOLS": str(tmp_path / "absent"), "PATH": str(on_path)}) == str(on_path / "kubectl")
    assert locate("kubectl", {"PATH": str(on_path)}) == str(on_path / "kubectl")
    assert locate("kubectl", {"KUBE_TOOLS": "", "PATH": str(tmp_path / "empty")}) is None


def test_tool_env_puts_kube_tools_ahead_on_path(tmp_path: Path) -> None:
    assert tool_env({"KUBE_TOOLS": "/t", "PATH": "/usr/bin:/bin", "HOME": "/h"}) == {
        "KUBE_TOOLS": "/t",
        "PATH": "/t:/usr/bin:/bin",
        "HOME": "/h",
    }
    assert tool_env({"PATH": "/usr/bin"}) == {"PATH": "/usr/bin"}
    assert tool_env({"KUBE_TOOLS": "/t"})["PATH"] == "/t"
    # What a shell then runs as plain `kubectl`:
    _executable(tmp_path / "tools" / "kubectl", FAKE_KUBECTL)
    env = tool_env({"KUBE_TOOLS": str(tmp_path / "tools"), "PATH": os.environ.get("PATH", "")})
    done = subprocess.run(["/bin/sh", "-c", "kubectl"], capture_output=True, text=True, env=env, timeout=30)
    assert done.stdout.startswith("Client Version: v1.35.2")
