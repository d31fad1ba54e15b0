"""A GPU pod kube-scheduler could not place, as reclaim reads it (issue 51, item 6;
decide/reclaim_plan.py): Pending, unbound, its PodScheduled condition False for Unschedulable
(kube-scheduler tried, found no room and said so: a pod created a moment ago is not waiting yet),
not being deleted, asking for at least one whole GPU of the configured resources.

Where it may run is read conservatively, so that an eviction is never made for a pod that could not
use the node: its nodeSelector, its required node affinity (a term with `matchFields`, or an
operator beyond In, NotIn, Exists and DoesNotExist, matches no node), and the node's NoSchedule and
NoExecute taints against its tolerations. Nothing else is matched (ports, other resources, pod
affinity, the GPU class): deploy/README.md, "Reclaim". Lenient, as the API server validated it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuextender.extender.model.label_selector import LabelSelector, read_selector
from gpuextender.extender.model.pod_gpus import gpus_requested, whole_gpu_resources
from gpuextender.extender.model.pod_key import pod_key
from gpuextender.extender.model.pod_priority import priority
from gpuextender.extender.model.untrusted import InvalidInput, timestamp

UNSCHEDULABLE = "Unschedulable"
HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # PreferNoSchedule keeps no pod off


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # Exists or Equal
    value: str
    effect: str  # "" tolerates every effect

    def tolerates(self, taint: Mapping[str, Any]) -> bool:
        if self.effect and self.effect != taint.get("effect"):
            return False
        if not self.key:  # an empty key with Exists tolerates every taint
            return self.operator == "Exists"
        if self.key != taint.get("key"):
            return False
        return self.operator == "Exists" or self.value == (taint.get("value") or "")


@dataclass(frozen=True, slots=True)
class WaitingPod:
    uid: str
    key: str  # namespace/name
    gpus: int  # whole GPUs (or replicas of shared ones) of the configured resources
    priority: int
    created: float  # Unix seconds (0.0: unreadable): the longest waiting are served first
    node_selector: tuple[tuple[str, str], ...] = ()
    # Required node affinity: any term matches (each term's requirements all); None: no affinity.
    affinity: tuple[LabelSelector | None, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()

    def may_run_on(self, labels: Mapping[str, str], taints: Sequence[Mapping[str, Any]]) -> bool:
        if any(labels.get(k) != v for k, v in self.node_selector):
            return False
        if self.affinity is not None and not any(t is not None and t.matches(labels) for t in self.affinity):
            return False
        return all(
            taint.get("effect") not in HARD_EFFECTS or any(t.tolerates(taint) for t in self.tolerations)
            for taint in taints
            if isinstance(taint, Mapping)
        )


def read_waiting(pod: Mapping[str, Any], resources: Sequence[str]) -> WaitingPod | None:
    """The pod as reclaim serves it, or None: not waiting (bound, not marked Unschedulable, being
    deleted), no whole GPU asked for, or a spec that cannot be read."""
    meta, spec, status = pod.get("metadata"), pod.get("spec"), pod.get("status")
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        return None
    if spec.get("nodeName") or meta.get("deletionTimestamp") or status.get("phase") != "Pending":
        return None
    conditions = status.get("conditions")
    if not isinstance(conditions, list) or not any(
        isinstance(c, Mapping)
        and c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == UNSCHEDULABLE
        for c in conditions
    ):
        return None
    try:
        gpus = gpus_requested(pod, whole_gpu_resources(resources))
    except InvalidInput:
        return None
    uid, name = meta.get("uid"), meta.get("name")
    if gpus < 1 or not isinstance(uid, str) or not isinstance(name, str):
        return None
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping) or not all(isinstance(v, str) for v in selector.values()):
        return None
    created = timestamp(meta.get("creationTimestamp"))
    return WaitingPod(
        uid=uid,
        key=pod_key(str(meta.get("namespace") or "default"), name),
        gpus=gpus,
        priority=priority(spec),
        created=created.timestamp() if created is not None else 0.0,
        node_selector=tuple(sorted((str(k), v) for k, v in selector.items())),
        affinity=_affinity(spec.get("affinity")),
        tolerations=_tolerations(spec.get("tolerations")),
    )


def _affinity(raw: Any) -> tuple[LabelSelector | None, ...] | None:
    node = raw.get("nodeAffinity") if isinstance(raw, Mapping) else None
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node, Mapping) else None
    if not isinstance(required, Mapping):
        return None
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list):
        return ()  # required, unreadable: matches no node
    out: list[LabelSelector | None] = []
    for term in terms:
        if not isinstance(term, Mapping) or term.get("matchFields") or not term.get("matchExpressions"):
            out.append(None)  # fields are not matched here, and an empty term matches no node
            continue
        out.append(read_selector({"matchExpressions": term["matchExpressions"]}))
    return tuple(out)


def _tolerations(raw: Any) -> tuple[Toleration, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(
        Toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in raw
        if isinstance(t, Mapping)
    )
