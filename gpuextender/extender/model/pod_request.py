"""The question a scheduler call asks, read once from the Pod at the wire edge.

Everything the decision needs from the pod (whole GPUs needed, MIG devices needed per
profile for the configured `nvidia.com/mig-<profile>` resources, its OME identity, the
node strategy and random seed, a display name) is read here, with the input
checks, into one immutable `PodRequest`; nothing after this reads the raw pod.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuextender.extender.model.dra import ClaimRead
from gpuextender.extender.model.ome.pod_intent import PodIdentity, pod_identity
from gpuextender.extender.model.pod_gpus import MigNeed, gpus_requested, mig_profile, pod_ref, whole_gpu_resources
from gpuextender.extender.model.pod_group import NO_GROUP, GroupReading, read_group
from gpuextender.extender.model.pod_priority import may_preempt, priority
from gpuextender.extender.model.untrusted import object_at, pod_uid, shown

log = logging.getLogger("gpu_extender.http")

STRATEGY_ANNOTATION = "gpu-extender.io/node-strategy"
NODE_STRATEGIES = ("spread", "binpack", "cost", "random")


@dataclass(frozen=True, slots=True)
class PodRequest:
    ref: str  # namespace/name, bounded: for logs and /explain
    gpus_needed: int  # whole GPUs (or time-slicing replicas); 0 with no MIG need: not a GPU pod, neutral
    identity: PodIdentity  # OME's labels and annotations
    strategy: str  # one of decision.NODE_STRATEGIES
    seed: str  # the random strategy's seed: --random-seed and the pod UID
    mig_needed: MigNeed = ()  # (profile, count) per configured nvidia.com/mig-<profile> resource asked for
    claims_read: tuple[ClaimRead, ...] = ()  # its ResourceClaims as read (added by scheduler/decision_inputs.py)
    group: GroupReading = NO_GROUP  # its multi-pod group (model/pod_group.py), or why it names an unusable one
    priority: int = 0  # spec.priority (model/pod_priority.py)
    preempts: bool = True  # it may preempt lower-priority pods (preemptionPolicy is not Never)
    uid: str = ""  # metadata.uid, read once (model/untrusted.pod_uid): bindings, groups, preemptions
    # The ComputeDomains its claims name (model/dra.COMPUTE_DOMAIN_DRIVER; added by decision_inputs.py).
    compute_domains: frozenset[str] = frozenset()


def read_pod(pod: dict[str, Any], gpu_resources: Sequence[str], default_strategy: str, random_seed: str) -> PodRequest:
    """Raises InvalidInput for a pod the extender refuses (bad quantities, too many containers)."""
    ref = pod_ref(pod)
    meta = object_at(pod, "metadata")
    strategy = object_at(meta, "annotations").get(STRATEGY_ANNOTATION, default_strategy)
    if strategy not in NODE_STRATEGIES:
        # A typo in an annotation must not block scheduling: say so, use the default.
        log.warning(
            "pod %s: %s=%s is not one of %s; using %s",
            ref,
            STRATEGY_ANNOTATION,
            shown(strategy),
            ", ".join(NODE_STRATEGIES),
            default_strategy,
        )
        strategy = default_strategy
    uid = pod_uid(pod)
    whole = whole_gpu_resources(gpu_resources)
    mig = tuple(
        sorted(
            (profile, n)
            for r in gpu_resources
            if (profile := mig_profile(r)) is not None
            if (n := gpus_requested(pod, [r])) > 0
        )
    )
    return PodRequest(
        ref=ref,
        gpus_needed=gpus_requested(pod, whole) if whole else 0,
        mig_needed=mig,
        identity=pod_identity(pod),
        strategy=strategy,
        seed=f"{random_seed}/{uid}",
        group=read_group(pod),
        priority=priority(object_at(pod, "spec")),
        preempts=may_preempt(object_at(pod, "spec")),
        uid=uid,
    )
