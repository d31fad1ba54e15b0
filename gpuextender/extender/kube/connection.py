"""The cluster connection: the client configuration every Kubernetes client of the extender uses
(the inventory's watches and writers, the TokenReview client, the binder, explain's and cleanup's
reads), and the client made from it."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.config import incluster_config, kube_config
from kubernetes_asyncio.config.config_exception import ConfigException

Configuration = k8s.Configuration
ApiClient = k8s.ApiClient


def api_client(configuration: Configuration) -> ApiClient:
    """A client over `configuration` (OSError or ValueError where its CA or client certificate
    cannot be read)."""
    return k8s.ApiClient(configuration)


Connection = Configuration | Callable[[], ApiClient]  # the cluster's configuration, or a test's clients


def client_factory(connection: Connection) -> Callable[[], ApiClient]:
    """What makes each new client of the parts that talk to the API server (the watches, the
    TokenReviewer, the binder): one over `connection`, or `connection` itself where it is a factory."""
    if isinstance(connection, Configuration):
        return lambda: api_client(connection)
    if callable(connection):
        return connection
    raise TypeError("connection must be a kubernetes_asyncio Configuration or an ApiClient factory")


class KubeConfigError(RuntimeError):
    """No usable Kubernetes client configuration (not in a pod, no kubeconfig, or a broken one)."""


async def load_kube_config(
    kubeconfig_path: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> k8s.Configuration:
    """A client `Configuration` for the cluster this process should talk to.

    Order: an explicit `kubeconfig_path` (the `--kubeconfig` flag: whoever passes
    one means it, even inside a pod); else the in-cluster service account when
    running in a pod (`KUBERNETES_SERVICE_HOST` set); else `$KUBECONFIG` (a
    `:`-separated list, merged like kubectl does); else `~/.kube/config`.
    Async because a kubeconfig may name an exec credential plugin, which
    kubernetes-asyncio runs as a subprocess. Raises `KubeConfigError` with what
    was tried when nothing works.
    """
    env = os.environ if environ is None else environ
    if kubeconfig_path is None and env.get(incluster_config.SERVICE_HOST_ENV_NAME):
        configuration = k8s.Configuration()
        try:
            incluster_config.InClusterConfigLoader(
                token_filename=incluster_config.SERVICE_TOKEN_FILENAME,
                cert_filename=incluster_config.SERVICE_CERT_FILENAME,
                environ=dict(env),
            ).load_and_set(configuration)
        except (ConfigException, OSError) as exc:
            raise KubeConfigError(
                f"running in a pod ({incluster_config.SERVICE_HOST_ENV_NAME} is set) but the in-cluster "
                f"service-account config does not work: {exc}"
            ) from exc
        return configuration

    if kubeconfig_path is not None:
        source = f"--kubeconfig {os.fspath(kubeconfig_path)}"
        candidates = [os.fspath(kubeconfig_path)]
    elif env.get("KUBECONFIG"):
        source = f"$KUBECONFIG={env['KUBECONFIG']}"
        candidates = [p for p in env["KUBECONFIG"].split(kube_config.ENV_KUBECONFIG_PATH_SEPARATOR) if p]
    else:
        home = env.get("HOME")
        default = Path(home) / ".kube" / "config" if home else Path.home() / ".kube" / "config"
        source = f"the default {default}"
        candidates = [str(default)]
    existing = [p for p in (os.path.expanduser(c) for c in candidates) if os.path.isfile(p)]
    if not existing:
        raise KubeConfigError(
            f"no Kubernetes configuration: not running in a pod ({incluster_config.SERVICE_HOST_ENV_NAME} "
            f"unset) and no kubeconfig file at {source}; pass --kubeconfig PATH or set KUBECONFIG"
        )
    configuration = k8s.Configuration()
    try:
        await kube_config.load_kube_config(
            config_file=kube_config.ENV_KUBECONFIG_PATH_SEPARATOR.join(existing),
            context=context,
            client_configuration=configuration,
            persist_config=False,  # never rewrite the user's kubeconfig
        )
    except Exception as exc:  # ConfigException, YAML errors, missing keys, a failing exec plugin, ...
        raise KubeConfigError(f"kubeconfig {', '.join(existing)}: {type(exc).__name__}: {exc}") from exc
    if not configuration.host:
        raise KubeConfigError(f"kubeconfig {', '.join(existing)}: the current context names no server")
    return configuration
