"""The bound-pod ledger: the GPU pods kube-scheduler has placed, kept slim, indexed by node.

kube-scheduler "assumes" a pod on its node the moment it decides; the agents learn of it only
when the kubelet admits it (seconds later, minutes for a large image). Until then every decision
would count the same idle GPUs again. The ledger holds what the decision must subtract
(decide/README.md, "Bound pods"): per bound, unfinished, undeleted pod that requests GPUs, its
uid, namespace/name, node, GPUs per configured resource (parsed like the request path, with
its bounds), phase, the OME InferenceService it serves, its priority (who may preempt it),
start time (which of a priority's victims are cheapest) and labels (the PodDisruptionBudgets
covering it).

It is an `InventorySink` for the kind Pod, fed by the same list+watch as Nodes (with a field
selector, so finished pods never reach it) or by the file inventory; it is not part of the
InventoryStore, whose every change rebuilds the view: pod churn must not. A pod leaves the
ledger at once when it is deleted, marked for deletion (`metadata.deletionTimestamp`) or
finished (Succeeded/Failed): its GPUs are released by the next decision.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from gpuextender.extender.model.dra import pod_claims, served_by_dra
from gpuextender.extender.model.kube_objects import POD, KubeObject
from gpuextender.extender.model.ome.pod_intent import INFERENCE_SERVICE_LABEL
from gpuextender.extender.model.pod_gpus import MigNeed, gpus_requested, mig_profile, whole_gpu_resources
from gpuextender.extender.model.pod_group import read_group
from gpuextender.extender.model.pod_key import pod_key
from gpuextender.extender.model.pod_priority import priority
from gpuextender.extender.model.untrusted import InvalidInput, object_at, timestamp

log = logging.getLogger("gpu_extender.pods")

POD_KIND = "Pod"
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
# What the watch asks for: bound pods that have not finished (a pod leaving the selection, by
# finishing, arrives as DELETED).
FIELD_SELECTOR = POD.field_selector


@dataclass(frozen=True, slots=True)
class BoundPod:
    uid: str
    key: str  # namespace/name, as the agent's PodResources holders name it
    node: str
    gpus: int  # whole GPUs or time-slicing/MPS replicas, over the configured non-MIG resources
    mig: MigNeed  # (profile, count) per configured nvidia.com/mig-<profile> resource
    phase: str  # Pending, Running, Unknown, "" (not reported yet)
    seen_at: float  # monotonic time the ledger first saw it bound: the age of a pending binding
    inference_service: str = ""  # the ome.io/inferenceservice label
    # The ResourceClaims it uses (namespace/name): DRA pods are kept for them, so their binding is
    # known (binding_gate); the devices themselves are the claim ledger's.
    claims: tuple[str, ...] = ()
    group: str = ""  # its multi-pod group's key (model/pod_group.py), "" for a single pod
    priority: int = 0  # spec.priority (model/pod_priority.py): who may preempt it
    # status.startTime as Unix seconds (0.0: not started or unreadable): among victims of one
    # priority, the shortest-running go first (decide/preempt_victims.py).
    started: float = 0.0
    # Its labels, sorted (which PodDisruptionBudgets cover it: state/disruption_budgets.py).
    labels: tuple[tuple[str, str], ...] = ()


_NONE: Mapping[str, BoundPod] = MappingProxyType({})  # on_node's answer for a node without pods


def _key(meta: KubeObject) -> str:
    return pod_key(meta.get("namespace") or "default", meta.get("name", ""))


class PodLedger:
    """`InventorySink` for kind Pod. `on_change(node)` listeners hear of every node whose pods
    changed; `pods_on(node)` is what the decisions read."""

    def __init__(self, gpu_resources: Sequence[str], clock: Callable[[], float] = time.monotonic) -> None:
        self._whole = whole_gpu_resources(gpu_resources)
        self._mig = [(r, p) for r in gpu_resources if (p := mig_profile(r)) is not None]
        self._clock = clock
        self._by_uid: dict[str, BoundPod] = {}
        self._by_node: dict[str, dict[str, BoundPod]] = {}
        self._by_group: dict[str, dict[str, BoundPod]] = {}  # multi-pod group key -> its bound members
        # node -> when its pods last changed, on one counter for every node (`version`).
        self._changed_at: dict[str, int] = {}
        self._stamps = itertools.count(1)
        self._listeners: list[Callable[[str], None]] = []
        self._bound_listeners: list[Callable[[str], None]] = []
        self.synced = False
        self.invalid = 0  # pods skipped for a GPU request the request path would refuse

    def on_change(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def on_bound(self, listener: Callable[[str], None]) -> None:
        """`listener(uid)` for every pod that enters the ledger (the binding_gate's "bound")."""
        self._bound_listeners.append(listener)

    def assume(self, pod: BoundPod) -> bool:
        """The bind verb: the extender is binding `pod` now; count it before the watch says so
        (the watch's record for the same uid replaces this one). False: already known bound there
        (a retried bind), nothing recorded."""
        before = self._by_uid.get(pod.uid)
        if before is not None:
            if before.node == pod.node:
                return False
            self._drop(before)
        self._add(pod)
        self._notify({pod.node} | ({before.node} if before is not None else set()))
        self._notify_bound(pod.uid)
        return True

    def forget(self, uid: str) -> None:
        """The binding the extender assumed failed: the pod is not on that node."""
        before = self._by_uid.get(uid)
        if before is not None:
            self._drop(before)
            self._notify({before.node})

    def __len__(self) -> int:
        return len(self._by_uid)

    def pods_on(self, node: str) -> Collection[BoundPod]:
        pods = self._by_node.get(node)
        return pods.values() if pods else ()

    def on_node(self, node: str) -> Mapping[str, BoundPod]:
        """The pods bound to `node` by UID (read-only, valid until the ledger next changes): the preempt
        verb looks its victims up here, a small dict, rather than in every pod's."""
        return self._by_node.get(node) or _NONE

    def version(self, node: str) -> int:
        """Changes whenever the pods bound to `node` change; 0 while it holds none (so a value seen
        again means the same pods: what is derived from them can be kept, scheduler/preempt_facts.py)."""
        return self._changed_at.get(node, 0)

    def versions(self) -> Callable[[str, int], int]:
        """`version` without a Python frame per call, as `versions()(node, 0)` (the preempt verb reads
        one per candidate)."""
        return self._changed_at.get

    def nodes(self) -> Iterable[str]:
        return self._by_node.keys()

    def get(self, uid: str) -> BoundPod | None:
        return self._by_uid.get(uid)

    def lookup(self) -> Callable[[str], BoundPod | None]:
        """`get` without a Python frame per call (the preempt verb looks up thousands of victims); valid
        until the ledger next changes: for one synchronous step."""
        return self._by_uid.get

    def members(self, group: str) -> Iterable[BoundPod]:
        """The bound members of multi-pod group `group` (model/pod_group.GroupRef.key)."""
        pods = self._by_group.get(group)
        return pods.values() if pods else ()

    def slim(self, obj: KubeObject, seen_at: float) -> BoundPod | None:
        """The record, or None for a pod that holds nothing here (unbound, finished, being
        deleted, no GPU request, or a request the extender refuses: counted in `invalid`)."""
        meta = object_at(obj, "metadata")
        spec = object_at(obj, "spec")
        node = spec.get("nodeName")
        uid = meta.get("uid")
        status = object_at(obj, "status")
        phase = status.get("phase") or ""
        if not node or not isinstance(node, str) or not isinstance(uid, str) or not uid:
            return None
        if phase in FINISHED_PHASES or meta.get("deletionTimestamp"):
            return None
        try:
            # A request DRA served (KEP-5004) is its claim's devices, which the claim ledger counts.
            gpus = gpus_requested(obj, self._whole) if self._whole and not served_by_dra(obj) else 0
            mig = tuple(sorted((p, n) for r, p in self._mig if (n := gpus_requested(obj, [r])) > 0))
        except InvalidInput as exc:
            self.invalid += 1
            log.warning(
                "pod %s on %s: GPU request not counted: %s",
                _key(meta),
                node,
                exc.message,
                extra={"pod": _key(meta), "node": node, "reason": exc.code},
            )
            return None
        # Kept with its claims even when it counts no GPU here: its binding closes the gate.
        claims = pod_claims(obj, extended=True)
        if gpus <= 0 and not mig and not claims:
            return None
        labels = object_at(meta, "labels")
        isvc = labels.get(INFERENCE_SERVICE_LABEL)
        group = read_group(obj).ref
        return BoundPod(
            uid,
            _key(meta),
            node,
            gpus,
            mig,
            str(phase),
            seen_at,
            isvc if isinstance(isvc, str) else "",
            claims,
            group.key if group is not None else "",
            priority(spec),
            started.timestamp() if (started := timestamp(status.get("startTime"))) is not None else 0.0,
            tuple(sorted((k, v) for k, v in labels.items() if isinstance(k, str) and isinstance(v, str))),
        )

    # -- InventorySink ---------------------------------------------------------

    def replace_all(self, kind: str, objects: list[KubeObject]) -> None:
        now = self._clock()
        old = self._by_uid
        fresh: dict[str, BoundPod] = {}
        for obj in objects:
            uid = object_at(obj, "metadata").get("uid")
            before = old.get(uid) if isinstance(uid, str) else None
            pod = self.slim(obj, before.seen_at if before is not None and before.node == _node(obj) else now)
            if pod is not None:
                fresh[pod.uid] = pod
        changed = {p.node for p in old.values() if fresh.get(p.uid) != p} | {
            p.node for p in fresh.values() if old.get(p.uid) != p
        }
        self._by_uid = {}
        for node in self._by_node:  # (nodes left without pods: `_add` stamps the others)
            self._changed_at.pop(node, None)
        self._by_node = {}
        self._by_group = {}
        for pod in fresh.values():
            self._add(pod)
        self.synced = True
        self._notify(changed)
        for uid in fresh.keys() - old.keys():
            self._notify_bound(uid)

    def upsert(self, kind: str, obj: KubeObject) -> None:
        uid = object_at(obj, "metadata").get("uid")
        if not isinstance(uid, str):
            return
        before = self._by_uid.get(uid)
        pod = self.slim(obj, before.seen_at if before is not None and before.node == _node(obj) else self._clock())
        if pod == before:
            return
        changed = set()
        if before is not None:
            self._drop(before)
            changed.add(before.node)
        if pod is not None:
            self._add(pod)
            changed.add(pod.node)
        self._notify(changed)
        if pod is not None and before is None:
            self._notify_bound(uid)

    def delete(self, kind: str, obj: KubeObject) -> None:
        uid = object_at(obj, "metadata").get("uid")
        before = self._by_uid.get(uid) if isinstance(uid, str) else None
        if before is not None:
            self._drop(before)
            self._notify({before.node})

    def _add(self, pod: BoundPod) -> None:
        self._by_uid[pod.uid] = pod
        self._by_node.setdefault(pod.node, {})[pod.uid] = pod
        self._changed_at[pod.node] = next(self._stamps)
        if pod.group:
            self._by_group.setdefault(pod.group, {})[pod.uid] = pod

    def _drop(self, pod: BoundPod) -> None:
        del self._by_uid[pod.uid]
        on_node = self._by_node[pod.node]
        del on_node[pod.uid]
        if on_node:
            self._changed_at[pod.node] = next(self._stamps)
        else:
            del self._by_node[pod.node]
            del self._changed_at[pod.node]
        if pod.group:
            members = self._by_group[pod.group]
            del members[pod.uid]
            if not members:
                del self._by_group[pod.group]

    def _notify(self, nodes: Iterable[str]) -> None:
        for node in nodes:
            for listener in self._listeners:
                listener(node)

    def _notify_bound(self, uid: str) -> None:
        for listener in self._bound_listeners:
            listener(uid)


def _node(obj: KubeObject) -> object:
    return object_at(obj, "spec").get("nodeName")
