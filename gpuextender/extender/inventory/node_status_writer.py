"""Writes each device-plugin GPU node's `GPUsUsable` condition and, when asked for, its no-usable-GPU
taint (state/node_gpu_status.py, issue 35). Run by the leader of the device-taint Lease
(device_taint_writer.py), one pass per tick.

- What a node has is read from the inventory's watched Node (state/inventory_store keeps our
  condition and the taints): no write when it already says what is wanted. A write just sent is
  not sent again for RESEND_S while the watch catches up.
- The condition: a strategic-merge patch of nodes/status keyed by the condition's type, so no other
  condition is touched; its lastTransitionTime moves only when its status does.
- The taint: read, then the node's taints with ours added or removed (no other key touched),
  written with the read resourceVersion (a concurrent writer's change is a 409: tried next pass).
- Every write takes a token (`take`): a pass stops when none is left and goes on at the next.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes_asyncio import client as k8s

from gpuextender.extender.kube.api_call import MERGE, STRATEGIC, Forbidden, call
from gpuextender.extender.state.device_taints import TaintWriterStatus
from gpuextender.extender.state.node_gpu_status import CONDITION_TYPE, NodeGpuStatus, condition_of, has_taint
from gpuextender.extender.state.publication import Publication

log = logging.getLogger("gpu_extender.node_status")

RESEND_S = 30.0
FORBIDDEN_RETRY_S = 10.0


class NodeStatusWriter:
    def __init__(
        self,
        node_of: Callable[[str], dict[str, Any] | None],
        status: TaintWriterStatus,
        *,
        taint: bool,
        taint_key: str,
        taint_effect: str,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._node_of = node_of
        self._taint, self._key, self._effect = taint, taint_key, taint_effect
        self._clock, self._wall = clock, wall
        self._sent: dict[tuple[str, str], tuple[Any, float]] = {}  # (node, what) -> (value, when)
        self.status = status
        status.node_mode = "standby"
        self._forbidden_until = 0.0
        self._said_forbidden = False
        self._pending: set[str] = set()  # nodes whose Node does not say what is wanted yet, as far as known
        self._everything = True  # the first pass looks at every node

    def wanted_taint(self, status: NodeGpuStatus) -> bool:
        return self._taint and status.no_usable_gpu

    def resync(self) -> None:
        """Look at every node at the next pass (what another writer or an operator undid)."""
        self._everything = True

    async def reconcile(self, api_client: k8s.ApiClient, publication: Publication, take: Callable[[], bool]) -> None:
        """The nodes whose condition changed, those a pass left (the budget, a resend wait), or
        every node after `resync`: a pass costs the changes, not the fleet."""
        now = self._clock()
        pending = self._pending
        pending |= publication.nodes_changed
        publication.nodes_changed = set()
        if self._everything:
            pending.update(publication.nodes)  # (in place: `|=` with a dict's keys made a new set)
            self._everything = False
        if now < self._forbidden_until or not pending:
            return
        try:
            await self._pass(k8s.CoreV1Api(api_client), publication.nodes, take, now)
        except Forbidden as exc:
            if not self._said_forbidden:  # once: the operator reads it, the mode metric keeps it
                log.warning(
                    "node status: %s: apply deploy/components/device-taints (the condition) and, with "
                    "--node-taint on, deploy/components/node-taints (the taint); GPU placement goes on "
                    "without them; trying again every %gs",
                    exc,
                    FORBIDDEN_RETRY_S,
                )
                self._said_forbidden = True
            self.status.node_mode = "forbidden"
            self._forbidden_until = now + FORBIDDEN_RETRY_S
            return
        self._said_forbidden = False
        self.status.node_mode = "writing"
        for key in [k for k, (_, when) in self._sent.items() if now - when > RESEND_S]:
            del self._sent[key]

    async def _pass(
        self, core: k8s.CoreV1Api, nodes: dict[str, NodeGpuStatus], take: Callable[[], bool], now: float
    ) -> None:
        pending = self._pending
        for name in sorted(pending):  # a copy: `nodes` and `pending` change while a write waits
            status = nodes.get(name)
            have = self._node_of(name)
            if status is None or have is None:
                pending.discard(name)  # no condition wanted (any more), or no Node: nothing to patch
                continue
            waiting = False
            taint = self.wanted_taint(status)
            if taint != has_taint(have, self._key):
                if self._due(name, "taint", taint, now):
                    if not take():
                        return
                    self._sent[(name, "taint")] = (taint, now)
                    await self._set_taint(core, name, taint, status)
                waiting = True  # confirmed when the watch brings the Node back
            cond = condition_of(have)
            wanted = (status.status, status.reason, status.message)
            seen = (cond.get("status"), cond.get("reason"), cond.get("message")) if cond else None
            if wanted != seen:
                if self._due(name, "condition", wanted, now):
                    if not take():
                        return
                    self._sent[(name, "condition")] = (wanted, now)
                    await self._set_condition(core, name, status, cond)
                waiting = True
            if not waiting:
                pending.discard(name)

    def _due(self, node: str, what: str, value: Any, now: float) -> bool:
        """Not sent already (the same value, within RESEND_S: the watch has not brought it back yet)."""
        sent = self._sent.get((node, what))
        return sent is None or sent[0] != value or now - sent[1] > RESEND_S

    async def _set_condition(
        self, core: k8s.CoreV1Api, name: str, status: NodeGpuStatus, cond: dict[str, Any] | None
    ) -> None:
        stamp = self._wall().strftime("%Y-%m-%dT%H:%M:%SZ")
        moved = cond is None or cond.get("status") != status.status
        body = {
            "status": {
                "conditions": [
                    {
                        "type": CONDITION_TYPE,
                        "status": status.status,
                        "reason": status.reason,
                        "message": status.message,
                        "lastHeartbeatTime": stamp,
                        "lastTransitionTime": stamp if moved or cond is None else cond.get("lastTransitionTime", stamp),
                    }
                ]
            }
        }
        await call(
            cast(Any, core).patch_node_status(name, body, _content_type=STRATEGIC, _preload_content=False), "nodes"
        )
        self.status.node_writes["condition"] += 1
        log.info(
            "node %s: condition %s=%s (%s): %s", name, CONDITION_TYPE, status.status, status.reason, status.message
        )

    async def _set_taint(self, core: k8s.CoreV1Api, name: str, taint: bool, status: NodeGpuStatus) -> None:
        node = await call(core.read_node(name, _preload_content=False), "nodes")
        if not node:
            return  # deleted meanwhile
        taints = [t for t in (node.get("spec") or {}).get("taints") or () if t.get("key") != self._key]
        if taint:
            taints.append({"key": self._key, "effect": self._effect})
        body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}, "spec": {"taints": taints}}
        done = await call(
            cast(Any, core).patch_node(name, body, _content_type=MERGE, _preload_content=False),
            "nodes",
            conflict_ok=True,
        )
        if done is None:
            self._sent.pop((name, "taint"), None)  # changed meanwhile: next pass reads it again
            return
        self.status.node_writes["taint" if taint else "untaint"] += 1
        log.info(
            "node %s: taint %s:%s %s (%s)",
            name,
            self._key,
            self._effect,
            "added" if taint else "removed",
            status.message,
        )
