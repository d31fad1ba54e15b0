"""A pod's key, `namespace/name`: how the bound-pod ledger, the bind verb and the agents'
PodResources holders name a pod, so that one pod is matched across them and counted once
(state/bound_pods.py)."""

from __future__ import annotations


def pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"
