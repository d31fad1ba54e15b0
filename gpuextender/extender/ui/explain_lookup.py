"""Where `gpu-extender explain` gets its question from: a file, or a running pod in a cluster.

A file holds either an ExtenderArgs body (as kube-scheduler posts it to /filter; sent as is) or a
Pod manifest, YAML or JSON (sent as `{"Pod": pod}`: the extender then explains every node it
knows). `--pod NAMESPACE/NAME` reads the pod from the API server and lists the cluster's Nodes,
keeping those kube-scheduler would pass to the extender by the cheap rules (see
`candidate_nodes`). Every failure is a `SourceError` whose message is one line for the user.

The Kubernetes client (kubernetes-asyncio, ~0.5 s to import) is imported only when the cluster is
asked, so explaining a file starts fast.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_A_POD_HINT = "give the pod template as a Pod, or use --pod for a running pod"
NODE_PAGE = 500  # Nodes per LIST page


class SourceError(Exception):
    """The question cannot be asked; the message is the one line the user sees."""


# -- a file ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileQuestion:
    body: bytes  # what to POST to /explain
    pod: dict[str, Any] | None  # the Pod of a manifest; None for an ExtenderArgs body


def question_from_file(raw: bytes, what: str, namespace: str = "default") -> FileQuestion:
    """`raw` (the file's bytes; `what` names it in messages) as an /explain body. A manifest without
    `metadata.namespace` gets `namespace`, as `kubectl apply` would put it there."""
    document, was_json = _one_document(raw, what)
    if isinstance(document, list):
        raise SourceError(f"{what} is a list of {len(document)} objects, not one Pod: {NOT_A_POD_HINT}")
    if not isinstance(document, dict):
        raise SourceError(
            f"{what} is not an object (a {type(document).__name__}): expected an ExtenderArgs body or a Pod manifest"
        )
    if any(isinstance(key, str) and key.lower() == "pod" for key in document):
        # ExtenderArgs (Go decodes its keys case-insensitively): the extender checks the rest.
        return FileQuestion(raw if was_json else json.dumps(document).encode(), None)
    kind = document.get("kind")
    if kind == "Pod":
        pod = dict(document)
        metadata = pod.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise SourceError(f"{what}: the Pod's metadata is not an object")
        metadata = dict(metadata or {})
        if not metadata.get("namespace"):
            metadata["namespace"] = namespace
        pod["metadata"] = metadata
        if not isinstance(pod.get("spec"), dict):
            raise SourceError(f"{what}: the Pod has no spec")
        return FileQuestion(json.dumps({"Pod": pod}).encode(), pod)
    if isinstance(kind, str) and kind.endswith("List"):
        items = document.get("items")
        count = f"{len(items)} objects" if isinstance(items, list) else "objects"
        raise SourceError(f"{what} is a {kind} of {count}, not one Pod: {NOT_A_POD_HINT}")
    if isinstance(kind, str) and kind:
        raise SourceError(f"{what} is a {kind}, not a Pod: {NOT_A_POD_HINT}")
    raise SourceError(f"{what} is neither an ExtenderArgs body (no Pod key) nor a Pod manifest (no kind: Pod)")


def _one_document(raw: bytes, what: str) -> tuple[Any, bool]:
    """The file's single document, and whether it was JSON (then its bytes are sent unchanged)."""
    try:
        return json.loads(raw), True
    except ValueError:  # not JSON (UnicodeDecodeError is a ValueError too): YAML
        pass
    except RecursionError:  # json's decoder recurses: 200 KB of '[' is no Pod
        raise SourceError(f"{what} is nested too deeply to be a Pod or an ExtenderArgs body") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        documents = [doc for doc in yaml.load_all(raw, Loader=loader) if doc is not None]
    except yaml.YAMLError as exc:
        raise SourceError(f"{what} is neither JSON nor YAML: {_yaml_problem(exc)}") from None
    if not documents:
        raise SourceError(f"{what} is empty")
    if len(documents) > 1:
        kinds = ", ".join(str(d.get("kind", "?")) if isinstance(d, dict) else type(d).__name__ for d in documents)
        raise SourceError(f"{what} holds {len(documents)} YAML documents ({kinds}), not one Pod: {NOT_A_POD_HINT}")
    return documents[0], False


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


# -- the nodes kube-scheduler would send ---------------------------------------------------------


@dataclass(slots=True)
class ClusterCandidates:
    names: list[str] = field(default_factory=list)
    total: int = 0  # Nodes in the cluster
    skipped: Counter[str] = field(default_factory=Counter)  # why -> how many

    def describe(self) -> dict[str, Any]:
        """The answer's `candidates` entry, as the extender writes it for a manifest."""
        source = "the cluster's nodes" if not self.skipped else "the cluster's nodes kube-scheduler would send"
        return {"source": source, "known": self.total, "explained": len(self.names), "skipped": dict(self.skipped)}


def tolerates_cordon(pod: Mapping[str, Any]) -> bool:
    """Whether the pod tolerates `node.kubernetes.io/unschedulable:NoSchedule` (DaemonSet pods do):
    kube-scheduler's NodeUnschedulable plugin then lets it onto cordoned nodes."""
    spec = pod.get("spec")
    tolerations = spec.get("tolerations") if isinstance(spec, dict) else None
    for t in tolerations if isinstance(tolerations, list) else ():
        if not isinstance(t, dict) or t.get("effect") not in (None, "", "NoSchedule"):
            continue
        key, operator = t.get("key") or "", t.get("operator") or "Equal"
        if (operator == "Exists" and key in ("", UNSCHEDULABLE_TAINT)) or (
            key == UNSCHEDULABLE_TAINT and operator == "Equal" and not t.get("value")
        ):
            return True
    return False


def candidate_nodes(
    pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], every: bool = False
) -> ClusterCandidates:
    """The node names kube-scheduler (nodeCacheCapable: true) would send the extender for `pod`,
    by the rules that need no other objects: a cordoned node (`spec.unschedulable`) only if the pod
    tolerates it, and only nodes carrying every label of the pod's `spec.nodeSelector`. Other
    in-tree filters (affinity, taints, free CPU/memory, ports) are not replayed: nodes they would
    remove are explained too. `every`: all nodes, no rule applied."""
    spec = pod.get("spec")
    selector = spec.get("nodeSelector") if isinstance(spec, dict) else None
    selector = selector if isinstance(selector, dict) else {}
    cordon_ok = every or tolerates_cordon(pod)
    out = ClusterCandidates(total=len(nodes))
    for node in nodes:
        metadata = node.get("metadata") or {}
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            continue
        node_spec = node.get("spec") or {}
        labels = metadata.get("labels") or {}
        if not cordon_ok and node_spec.get("unschedulable"):
            out.skipped["cordoned"] += 1
        elif not every and any(labels.get(k) != v for k, v in selector.items()):
            out.skipped["not matching the pod's nodeSelector"] += 1
        else:
            out.names.append(name)
    return out


# -- the cluster -----------------------------------------------------------------------------------


@dataclass(slots=True)
class ClusterAnswer:
    pod: dict[str, Any] | None
    nodes: list[dict[str, Any]]
    server: str


def split_pod_ref(text: str) -> tuple[str, str]:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise SourceError(f"--pod {text}: expected NAMESPACE/NAME")
    return namespace, name


async def read_cluster(
    pod_ref: tuple[str, str] | None,
    *,
    kubeconfig: str | None,
    context: str | None,
    timeout: float,
) -> ClusterAnswer:
    """The pod (when `pod_ref` is given) and every Node, as the API server's JSON."""
    import aiohttp

    from gpuextender.extender.kube import api_call
    from gpuextender.extender.kube.connection import KubeConfigError, api_client, load_kube_config

    try:
        configuration = await load_kube_config(kubeconfig, context=context)
    except KubeConfigError as exc:
        raise SourceError(str(exc)) from None
    server = str(configuration.host)
    limits = api_call.Timeout(total=timeout, connect=timeout, sock_connect=timeout)
    try:
        client = api_client(configuration)
    except (OSError, ValueError) as exc:  # the kubeconfig's CA or client certificate cannot be read
        raise SourceError(f"kubeconfig: {exc}") from None
    try:
        async with client:

            async def get(what: str, pending: Any) -> Any:
                status, body = await api_call.answer(pending)
                if status == 200:
                    try:
                        return json.loads(body)
                    except ValueError:
                        not_json = f"{what}: the API server {server} answered something that is not JSON"
                        raise SourceError(not_json) from None
                raise _http_error(status, body, what, server)

            pod = None
            if pod_ref is not None:
                namespace, name = pod_ref
                pod = await get(f"pod {namespace}/{name}", api_call.read_pod(client, namespace, name, limits))
                pod.setdefault("apiVersion", "v1")
                pod.setdefault("kind", "Pod")
            nodes: list[dict[str, Any]] = []
            token = None
            while True:
                page = await get("nodes", api_call.list_nodes(client, NODE_PAGE, token, limits))
                nodes.extend(page.get("items") or [])
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
            return ClusterAnswer(pod, nodes, server)
    except SourceError:
        raise
    except aiohttp.ClientConnectorCertificateError as exc:
        raise SourceError(
            f"cannot verify the Kubernetes API server {server}: {exc.certificate_error} "
            "(check the kubeconfig's certificate-authority)"
        ) from None
    except aiohttp.ClientConnectorError as exc:
        reason = exc.os_error.strerror or str(exc.os_error)
        raise SourceError(f"cannot reach the Kubernetes API server {server}: {reason}") from None
    except TimeoutError:
        raise SourceError(f"the Kubernetes API server {server} did not answer within {timeout:g} s") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise SourceError(f"Kubernetes API server {server}: {type(exc).__name__}: {exc}") from None
    except api_call.ApiError as exc:
        raise SourceError(f"Kubernetes API server {server}: {exc}") from None


def _http_error(status: int, body: bytes, what: str, server: str) -> SourceError:
    message = ""
    try:
        decoded = json.loads(body)
        if isinstance(decoded, dict):
            message = str(decoded.get("message") or "")
    except ValueError:
        message = body[:200].decode(errors="replace").strip()
    if status == 404:
        return SourceError(f"{what} not found" if what.startswith("pod ") else f"{what}: not found on {server}")
    if status == 401:
        return SourceError(
            f"the Kubernetes API server {server} refused the kubeconfig's credentials (401 Unauthorized)"
        )
    if status == 403:
        return SourceError(f"forbidden: {message or what} (explain --pod needs get on pods and list on nodes)")
    return SourceError(f"{what}: the API server {server} answered HTTP {status}{': ' + message if message else ''}")
