from __future__ import annotations

import pytest

from tests.deploy import manifests as m


@pytest.fixture(scope="session")
def base_objects() -> list[m.KubeObject]:
    """The base (deploy/base/: what overlays/no-kubelet-access applies; deploy/ adds the
    kubelet-allocation component to it): rendered by kubectl when it is installed, otherwise the
    files the kustomizations list (test_render.py checks that both give the same objects)."""
    return m.kustomize(m.BASE) if m.KUBECTL else m.load_source(m.BASE)


@pytest.fixture(scope="session")
def default_objects() -> list[m.KubeObject]:
    """What `kubectl apply -k deploy/` applies (the base and components/kubelet-allocation); the
    base alone where kubectl is absent (no kustomize to apply the component's patches)."""
    return m.kustomize(m.DEPLOY) if m.KUBECTL else m.load_source(m.BASE)


@pytest.fixture(scope="session")
def scheduler_config(base_objects: list[m.KubeObject]) -> dict:
    import yaml

    maps = [o for o in m.find(base_objects, "ConfigMap") if o["metadata"]["name"].startswith("gpu-scheduler-config")]
    assert len(maps) == 1, "the gpu-scheduler-config ConfigMap is missing"
    return yaml.safe_load(maps[0]["data"]["config.yaml"])
