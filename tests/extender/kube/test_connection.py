"""The cluster connection (kube/connection.py): where load_kube_config looks, in order, and what it
says when nothing works."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes_asyncio.config import incluster_config

from gpuextender.extender.kube.connection import KubeConfigError, load_kube_config

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


# -- load_kube_config ------------------------------------------------------------------------

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://kube.example:6443", insecure-skip-tls-verify: true}
users:
- name: test
  user: {token: secret-token}
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
"""


def test_load_kube_config_from_an_explicit_path(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    configuration = run(load_kube_config(path, environ={}))
    assert configuration.host == "https://kube.example:6443"
    assert configuration.api_key["BearerToken"] == "Bearer secret-token"


def test_load_kube_config_from_the_kubeconfig_variable_and_home(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    from_env = run(load_kube_config(environ={"KUBECONFIG": f"{tmp_path / 'absent'}:{path}"}))
    assert from_env.host == "https://kube.example:6443"
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text(KUBECONFIG)
    from_home = run(load_kube_config(environ={"HOME": str(tmp_path)}))
    assert from_home.host == "https://kube.example:6443"


def test_load_kube_config_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match=r"no kubeconfig file at --kubeconfig .*absent"):
        run(load_kube_config(tmp_path / "absent", environ={}))
    with pytest.raises(KubeConfigError, match="pass --kubeconfig PATH or set KUBECONFIG"):
        run(load_kube_config(environ={"HOME": str(tmp_path)}))
    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n")
    with pytest.raises(KubeConfigError, match="broken"):
        run(load_kube_config(broken, environ={}))


POD_ENV = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_load_kube_config_in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    # In a pod without a service-account token: a clear error, not a silent fallback.
    with pytest.raises(KubeConfigError, match="in-cluster"):
        run(load_kube_config(environ=POD_ENV))
    token.write_text("pod-token")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    configuration = run(load_kube_config(environ=POD_ENV))
    assert configuration.host == "https://10.0.0.1:443"
    assert configuration.ssl_ca_cert == str(ca)
    # An explicit --kubeconfig wins even in a pod.
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    assert run(load_kube_config(path, environ=POD_ENV)).host == "https://kube.example:6443"
