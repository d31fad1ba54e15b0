from __future__ import annotations

import pytest

from tests.deploy import manifests as m


@pytest.fixture(scope="session")
def base_objects() -> list[m.KubeObject]:
    """The base as it is applied: rendered by kubectl when it is installed, otherwise the files
    the kustomizations list (test_render.py checks that both give the same objects)."""
    return m.kustomize(m.DEPLOY) if m.KUBECTL else m.load_source(m.BASE)


@pytest.fixture(scope="session")
def scheduler_config(base_objects: list[m.KubeObject]) -> dict:
    import yaml

    maps = [o for o in m.find(base_objects, "ConfigMap") if o["metadata"]["name"].startswith("gpu-scheduler-config")]
    assert len(maps) == 1, "the gpu-scheduler-config ConfigMap is missing"
    return yaml.safe_load(maps[0]["data"]["config.yaml"])
