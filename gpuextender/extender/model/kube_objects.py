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
    label_selector: str = ""  # a `labelSelector` sent likewise ("" = all objects)
    # What it means when the API server does not serve the kind (404 on its LIST; for an optional
    # built-in API, 403 too): the kind is empty, and this says what the extender does without it.
    absent: str = "CRD not installed"
    optional_api: bool = False  # a built-in API a cluster may not serve, or not let us read (DRA)


NODE = KindInfo("Node", "", "v1", "nodes", namespaced=False)
ACCELERATOR_CLASS = KindInfo("AcceleratorClass", "ome.io", "v1beta1", "acceleratorclasses", namespaced=False)
SERVING_RUNTIME = KindInfo("ServingRuntime", "ome.io", "v1beta1", "servingruntimes", namespaced=True)
CLUSTER_SERVING_RUNTIME = KindInfo(
    "ClusterServingRuntime", "ome.io", "v1beta1", "clusterservingruntimes", namespaced=False
)
INFERENCE_SERVICE = KindInfo("InferenceService", "ome.io", "v1beta1", "inferenceservices", namespaced=True)
BASE_MODEL = KindInfo("BaseModel", "ome.io", "v1beta1", "basemodels", namespaced=True)
CLUSTER_BASE_MODEL = KindInfo("ClusterBaseModel", "ome.io", "v1beta1", "clusterbasemodels", namespaced=False)

# DRA (resource.k8s.io/v1, GA in 1.34): GPUs published per node in ResourceSlices, mapped to a GPU
# resource by a DeviceClass's extendedResourceName (state/dra_inventory.py).
_DRA_ABSENT = "resource.k8s.io/v1 not served or not readable: DRA GPUs not counted (device-plugin GPUs only)"
DEVICE_CLASS = KindInfo(
    "DeviceClass", "resource.k8s.io", "v1", "deviceclasses", namespaced=False, absent=_DRA_ABSENT, optional_api=True
)
RESOURCE_SLICE = KindInfo(
    "ResourceSlice", "resource.k8s.io", "v1", "resourceslices", namespaced=False, absent=_DRA_ABSENT, optional_api=True
)

KINDS: tuple[KindInfo, ...] = (
    NODE,
    ACCELERATOR_CLASS,
    SERVING_RUNTIME,
    CLUSTER_SERVING_RUNTIME,
    INFERENCE_SERVICE,
    BASE_MODEL,
    CLUSTER_BASE_MODEL,
    DEVICE_CLASS,
    RESOURCE_SLICE,
)
KIND_BY_NAME = {k.kind: k for k in KINDS}

# Not in KINDS: pods go to the bound-pod ledger (extender/state/pod_ledger.py), never to the
# InventoryStore, whose every change rebuilds the view. Only bound, unfinished pods are asked for.
POD = KindInfo(
    "Pod",
    "",
    "v1",
    "pods",
    namespaced=True,
    field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
)

# Nor unbound pods: only a group's members are kept of them, counted (state/pending_members.py).
PENDING_POD = KindInfo("Pod", "", "v1", "pods", namespaced=True, field_selector="spec.nodeName=,status.phase=Pending")

# Not in KINDS either: claims go to the claim ledger (state/claim_ledger.py); they churn with pods.
RESOURCE_CLAIM = KindInfo(
    "ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", namespaced=True, absent=_DRA_ABSENT, optional_api=True
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


# Not in KINDS either: PodDisruptionBudgets go to state/disruption_budgets.py, read-only, for the preempt
# verb's count of the budgets its added victims break. Not readable: it adds no victim.
POD_DISRUPTION_BUDGET = KindInfo(
    "PodDisruptionBudget",
    "policy",
    "v1",
    "poddisruptionbudgets",
    namespaced=True,
    absent="not readable: the preempt verb adds no victim to kube-scheduler's",
    optional_api=True,
)

# Not in KINDS either: PodGroups go to state/pod_groups.py, one sink per source (model/pod_group.py).
# Read-only; a cluster that serves none of them has no groups of that source.
_GROUPS_ABSENT = "not served: pods naming such a PodGroup are decided as single pods"
WORKLOAD_POD_GROUP = KindInfo(
    "PodGroup", "scheduling.k8s.io", "v1alpha2", "podgroups", namespaced=True, absent=_GROUPS_ABSENT, optional_api=True
)
COSCHEDULING_POD_GROUP = KindInfo(
    "PodGroup", "scheduling.x-k8s.io", "v1alpha1", "podgroups", namespaced=True, absent=_GROUPS_ABSENT
)
VOLCANO_POD_GROUP = KindInfo(
    "PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups", namespaced=True, absent=_GROUPS_ABSENT
)
# JobSet's Jobs only (a label every Job a JobSet makes carries): a JobSet job's size is its parallelism.
JOBSET_JOB = KindInfo(
    "Job",
    "batch",
    "v1",
    "jobs",
    namespaced=True,
    label_selector="jobset.sigs.k8s.io/jobset-name",
    absent=_GROUPS_ABSENT,
)
