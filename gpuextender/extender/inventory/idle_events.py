"""Announces the reclaim signal (state/idle_allocated.py, issue 35) where people and autoscaler
operators look: an Event, reason AllocatedGPUsIdle, on the Node (device-plugin GPUs held by pods)
or on the ResourceClaim (DRA GPUs), once when the GPUs have been idle for the window and again
once per window while they stay so. `kubectl describe node|resourceclaim` and
`kubectl get events --field-selector reason=AllocatedGPUsIdle -A` show them.

Why Events, not conditions: the signal is advice about a workload, not the node's state that other
controllers act on; an Event costs one write per window per object, changes no object another
controller watches, and expires on its own (the API server's event TTL, 1 h by default). Nothing is
evicted or deleted. Run by the leader (device_taint_writer.py); every write takes a token.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes_asyncio import client as k8s

from gpuextender.extender.kube.api_call import Forbidden, call
from gpuextender.extender.state.device_taints import TaintWriterStatus

log = logging.getLogger("gpu_extender.idle_events")

REASON = "AllocatedGPUsIdle"
MAX_NAME_CHARS = 253  # an object name (DNS subdomain)
FORBIDDEN_RETRY_S = 60.0
NODE_EVENT_NAMESPACE = "default"  # where the kubelet writes a Node's Events (kubectl describe node finds them)


class IdleEventWriter:
    def __init__(
        self,
        status: TaintWriterStatus,
        *,
        window_s: float,
        node_uid: Callable[[str], str],
        claim_uid: Callable[[str], str],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.status = status
        self._window_s = window_s
        self._node_uid, self._claim_uid = node_uid, claim_uid
        self._clock, self._wall = clock, wall
        self._said: dict[str, float] = {}  # "Node/<name>" or "ResourceClaim/<ns>/<name>" -> when
        self._instance = f"{socket.gethostname()}-{os.getpid()}"
        self._forbidden_until = 0.0
        self._said_forbidden = False

    async def reconcile(
        self,
        api_client: k8s.ApiClient,
        by_node: dict[str, int],
        claims: dict[str, int],
        take: Callable[[], bool],
    ) -> None:
        now = self._clock()
        if now < self._forbidden_until:
            return
        wanted = {f"Node/{node}": count for node, count in by_node.items()}
        wanted.update({f"ResourceClaim/{claim}": count for claim, count in claims.items()})
        for key in [k for k in self._said if k not in wanted]:
            del self._said[key]  # busy again (or gone): the next idle window is news again
        core = k8s.CoreV1Api(api_client)
        for key in sorted(wanted):
            said = self._said.get(key)
            if said is not None and now - said < self._window_s:
                continue
            if not take():
                return
            self._said[key] = now
            try:
                await self._event(core, key, wanted[key])
            except Forbidden as exc:
                if not self._said_forbidden:  # once; the metrics keep counting the signal
                    log.warning(
                        "idle events: %s: apply deploy/components/device-taints (create events), or "
                        "--idle-events off; trying again every %gs",
                        exc,
                        FORBIDDEN_RETRY_S,
                    )
                    self._said_forbidden = True
                self._forbidden_until = now + FORBIDDEN_RETRY_S
                del self._said[key]
                return

    async def _event(self, core: k8s.CoreV1Api, key: str, gpus: int) -> None:
        kind, _, ref = key.partition("/")
        window = _duration(self._window_s)
        if kind == "Node":
            namespace, name = NODE_EVENT_NAMESPACE, ref
            involved = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": self._node_uid(name)}
            message = (
                f"{gpus} GPU(s) held by pods read idle for over {window} (the idle rule); a reclaim or "
                "scale-down signal: nothing is evicted"
            )
        else:
            namespace, _, name = ref.partition("/")
            involved = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "namespace": namespace,
                "name": name,
                "uid": self._claim_uid(ref),
            }
            message = (
                f"every GPU of this claim ({gpus}) read idle for over {window} (the idle rule); a reclaim "
                "signal: nothing is evicted or deallocated"
            )
        stamp = self._wall()
        body: dict[str, Any] = {
            "metadata": {"name": event_name(name, int(stamp.timestamp() * 1e6)), "namespace": namespace},
            "involvedObject": {k: v for k, v in involved.items() if v},
            "reason": REASON,
            "message": message,
            "type": "Normal",
            "source": {"component": "gpu-extender"},
            "reportingComponent": "gpu-extender",
            "reportingInstance": self._instance,
            "firstTimestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lastTimestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "count": 1,
        }
        await call(cast(Any, core).create_namespaced_event(namespace, body, _preload_content=False), "events")
        self.status.node_writes["event"] += 1
        log.info("%s %s: %s", kind, ref, message)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0s"


def event_name(name: str, stamp_us: int) -> str:
    """<object name>.<hex microseconds>, as kubectl's own Events are named; an object name too long
    for that (a node or claim name near 253 characters) is replaced by a digest of it."""
    suffix = f".{stamp_us:x}"
    if len(name) + len(suffix) > MAX_NAME_CHARS:
        name = hashlib.sha256(name.encode()).hexdigest()[:40]
    return name + suffix
