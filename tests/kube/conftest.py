"""Fixtures of the real-control-plane tests: one etcd + kube-apiserver per test session (started on
first use), the CRDs the extender watches, and a fresh namespace (a `Scene`) per test.

Skipped, with one line, when KUBEBUILDER_ASSETS is unset (docs/testing.md)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from tests.control_plane import ControlPlane, Kube, assets, skip_reason, wait_for
from tests.harness import ROOT
from tests.kube.scene import Scene, scene

CRDS = [
    ROOT / "deploy/components/acceleratorclass-crd/acceleratorclasses.ome.io.yaml",
    Path(__file__).parent / "ome-crds.yaml",
]
_numbers = itertools.count(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without the binaries, the whole folder is one skipped test (one line in the report), the
    rest deselected."""
    reason = skip_reason()
    here = Path(__file__).parent
    ours = [item for item in items if here in Path(str(item.path)).parents]
    if reason is None or not ours:
        return
    ours[0].add_marker(pytest.mark.skip(reason=f"real control plane ({len(ours)} test(s) in tests/kube): {reason}"))
    config.hook.pytest_deselected(items=ours[1:])
    items[:] = [item for item in items if item not in ours[1:]]


@pytest.fixture(scope="session")
def k8s_assets() -> Path:
    """The folder of binaries (the tests are skipped above when it is not set)."""
    folder = assets()
    assert folder is not None
    return folder


@pytest.fixture(scope="session")
def control_plane(k8s_assets: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Kube]]:
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), k8s_assets)
    try:
        kube = plane.start()
        kube.create_namespace("gpu-extender")  # the shipped gpu-scheduler's Lease lives there
        install_crds(kube)
        yield plane, kube
    finally:
        plane.stop()


def install_crds(kube: Kube, extra: list[dict[str, Any]] | None = None) -> None:
    """The CRDs the extender watches (CRDS), and `extra`, applied and waited for until established."""
    docs = [doc for path in CRDS for doc in yaml.safe_load_all(path.read_text()) if doc] + (extra or [])
    kube.apply_yaml(docs)
    for doc in docs:
        name: str = doc["metadata"]["name"]
        wait_for(f"CRD {name} established", partial(_established, kube, name), 30)


def _established(kube: Kube, name: str) -> bool:
    crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    # A CRD just created can read back `"conditions": null` before the apiserver's controller fills it in.
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="session")
def extender_ca() -> trustme.CA:
    return trustme.CA(organization_name="gpu-extender test")


@pytest.fixture
def world(
    control_plane: tuple[ControlPlane, Kube], extender_ca: trustme.CA, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Scene]:
    """The test's own namespace, nodes and processes on the shared control plane."""
    yield from scene_in_namespace(control_plane, extender_ca, request, tmp_path, f"t{next(_numbers):02d}", 24)


def scene_in_namespace(
    control_plane: tuple[ControlPlane, Kube],
    ca: trustme.CA,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    prefix: str,
    slug_chars: int,
) -> Iterator[Scene]:
    """A Scene in a new namespace named `prefix`-<the test's name, cut>, for a fixture to yield."""
    plane, kube = control_plane
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_"))[:slug_chars].strip("-")
    ns = f"{prefix}-{slug}"
    kube.create_namespace(ns)
    with scene(plane, kube, ns, tmp_path, ca) as s:
        yield s
