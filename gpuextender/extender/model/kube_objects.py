"""The interface every inventory source writes to, and the kinds it carries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

KubeObject = dict[str, Any]  # a Kubernetes object as decoded JSON/YAML (apiVersion, kind, metadata, spec, ...)


@dataclass(frozen=True, slots=True)
class KindInfo:
    kind: str
    group: str  # "" for the core API
    version: str
    plural: str
    namespaced: bool
    # A `fieldSelector` sent with every LIST and WATCH of the kind ("" = all objects). Objects that
    # leave the selection while watched arrive as DELETED events, as the API server sends them.
    field_selector: str = ""


NODE = KindInfo("Node", "", "v1", "nodes", namespaced=False)
ACCELERATOR_CLASS = KindInfo("AcceleratorClass", "ome.io", "v1beta1", "acceleratorclasses", namespaced=False)
SERVING_RUNTIME = KindInfo("ServingRuntime", "ome.io", "v1beta1", "servingruntimes", namespaced=True)
CLUSTER_SERVING_RUNTIME = KindInfo(
    "ClusterServingRuntime", "ome.io", "v1beta1", "clusterservingruntimes", namespaced=False
)
INFERENCE_SERVICE = KindInfo("InferenceService", "ome.io", "v1beta1", "inferenceservices", namespaced=True)
BASE_MODEL = KindInfo("BaseModel", "ome.io", "v1beta1", "basemodels", namespaced=True)
CLUSTER_BASE_MODEL = KindInfo("ClusterBaseModel", "ome.io", "v1beta1", "clusterbasemodels", namespaced=False)

KINDS: tuple[KindInfo, ...] = (
    NODE,
    ACCELERATOR_CLASS,
    SERVING_RUNTIME,
    CLUSTER_SERVING_RUNTIME,
    INFERENCE_SERVICE,
    BASE_MODEL,
    CLUSTER_BASE_MODEL,
)
KIND_BY_NAME = {k.kind: k for k in KINDS}

# Not in KINDS: pods go to the bound-pod ledger (extender/pod_ledger.py), never to the
# InventoryStore, whose every change rebuilds the view. Only bound, unfinished pods are asked for.
POD = KindInfo(
    "Pod",
    "",
    "v1",
    "pods",
    namespaced=True,
    field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
)


def object_key(obj: KubeObject) -> str:
    """`namespace/name` for namespaced objects, `name` for cluster-scoped ones."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


class InventorySink(Protocol):
    """Where sources put what they read. Calls come from the event loop thread."""

    def replace_all(self, kind: str, objects: list[KubeObject]) -> None:
        """The complete current set of `kind` (after a list or relist); marks the kind synced.
        A kind whose CRD is not installed is synced with an empty list."""

    def upsert(self, kind: str, obj: KubeObject) -> None:
        """An object was added or modified."""

    def delete(self, kind: str, obj: KubeObject) -> None:
        """An object was deleted (only its metadata is guaranteed)."""
