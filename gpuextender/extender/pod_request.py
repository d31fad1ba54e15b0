"""The question a scheduler call asks, read once from the Pod at the wire edge.

Everything the decision needs from the pod (GPUs needed, its OME identity, the
node strategy and random seed, a display name) is read here, with the input
checks, into one immutable `PodRequest`; nothing after this reads the raw pod.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuextender.extender.bad_request import shown
from gpuextender.extender.decision import NODE_STRATEGIES
from gpuextender.extender.json_fields import object_at
from gpuextender.extender.ome.pod_intent import PodIdentity, pod_identity
from gpuextender.extender.pod_gpus import gpus_requested, pod_ref

log = logging.getLogger("gpu_extender.http")

STRATEGY_ANNOTATION = "gpu-extender.io/node-strategy"


@dataclass(frozen=True, slots=True)
class PodRequest:
    ref: str  # namespace/name, bounded: for logs and /explain
    gpus_needed: int  # 0: not a GPU pod, the extender is neutral
    identity: PodIdentity  # OME's labels and annotations
    strategy: str  # one of decision.NODE_STRATEGIES
    seed: str  # the random strategy's seed: --random-seed and the pod UID


def read_pod(pod: dict[str, Any], gpu_resources: Sequence[str], default_strategy: str, random_seed: str) -> PodRequest:
    """Raises BadRequest for a pod the extender refuses (bad quantities, too many containers)."""
    ref = pod_ref(pod)
    meta = object_at(pod, "metadata")
    strategy = object_at(meta, "annotations").get(STRATEGY_ANNOTATION, default_strategy)
    if strategy not in NODE_STRATEGIES:
        # A typo in an annotation must not block scheduling: say so, use the default.
        log.warning("pod %s: %s=%s is not one of %s; using %s", ref, STRATEGY_ANNOTATION, shown(strategy),
                    ", ".join(NODE_STRATEGIES), default_strategy)  # fmt: skip
        strategy = default_strategy
    uid = meta.get("uid")
    return PodRequest(
        ref=ref,
        gpus_needed=gpus_requested(pod, gpu_resources),
        identity=pod_identity(pod),
        strategy=strategy,
        seed=f"{random_seed}/{uid if isinstance(uid, str) else ''}",
    )
