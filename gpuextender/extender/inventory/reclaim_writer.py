"""Reclaim, opt-in (issue 51, item 6; deploy/README.md, "Reclaim"): the leader evicts pods whose
GPUs read idle for the idle window where GPU pods wait that they would serve
(decide/reclaim_plan.py says which), or, with --reclaim=dry-run, only says what it would evict.

- Through the Eviction API (policy/v1, with the pod's uid as a precondition), never a delete: a
  PodDisruptionBudget that forbids it answers 429, which is counted (refused_by_pdb), said in an
  Event and not tried again for that pod for `QUIET_S`; so is any other failure.
- One pass every `every_s` at most, run by the leader of the device-taint Lease
  (device_taint_writer.py) after its other writes; each eviction and each Event takes a token of
  the same write budget, and a pass evicts `max_evictions` pods at most. Nothing is read from the
  API unless a pod has been idle for the window: then the pending pods (one list, bounded) and
  the opted-in namespaces (one list by label).
- After an eviction (or a dry-run report) its node and the waiting pod it serves are left alone
  for `SETTLE_S`: the kubelet stops the pod, its GPUs come free and kube-scheduler places the
  waiting pod; no second holder is evicted for the same pod meanwhile.
- Every decision is an Event on the holder (GPUsReclaimed, GPUsReclaimDryRun, GPUsReclaimRefused)
  saying which GPUs read idle for how long and which waiting pod they serve, a log line and
  gpu_extender_reclaim_evictions_total{outcome}.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes_asyncio import client as k8s

from gpuextender.extender.decide.reclaim_plan import Eviction, Holder, NodeRoom, plan
from gpuextender.extender.inventory.idle_events import event_name
from gpuextender.extender.kube.api_call import TRANSPORT_ERRORS, ApiError, Forbidden, call
from gpuextender.extender.model.waiting_pod import WaitingPod, read_waiting
from gpuextender.extender.state.freshness import is_fresh
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.idle_holders import (
    DRY_RUN,
    EVICTED,
    FAILED,
    GONE,
    REFUSED_BY_PDB,
    IdleHolders,
    ReclaimStatus,
)
from gpuextender.extender.state.pod_ledger import BoundPod

log = logging.getLogger("gpu_extender.reclaim")

REASONS = {EVICTED: "GPUsReclaimed", DRY_RUN: "GPUsReclaimDryRun", REFUSED_BY_PDB: "GPUsReclaimRefused"}
PASS_EVERY_S = 5.0  # the idle window is 10 s or more (30 min by default)
MAX_EVICTIONS_PER_PASS = 5
SETTLE_S = 120.0
QUIET_S = 300.0
FORBIDDEN_RETRY_S = 60.0
MAX_WAITING = 500  # pending pods read per pass: a flood of them costs one bounded list
PENDING = "spec.nodeName=,status.phase=Pending"


class ReclaimWriter:
    def __init__(
        self,
        status: ReclaimStatus,
        *,
        dry_run: bool,
        label: tuple[str, str],
        min_runtime_s: float,
        window_s: float,
        stale_after_s: float,
        gpu_resources: Sequence[str],
        summaries: Callable[[], Mapping[str, NodeSummary]],
        pods_on: Callable[[str], Collection[BoundPod]],
        node_object: Callable[[str], Mapping[str, Any] | None],
        max_evictions: int = MAX_EVICTIONS_PER_PASS,
        every_s: float = PASS_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.status = status
        status.mode = "dry-run" if dry_run else "on"
        self._dry_run = dry_run
        self._label = label
        self._min_runtime_s = min_runtime_s
        self._window_s = window_s
        self._stale_after_s = stale_after_s
        self._resources = tuple(gpu_resources)
        self._summaries, self._pods_on, self._node_object = summaries, pods_on, node_object
        self._max_evictions = max_evictions
        self._every_s = every_s
        self._clock, self._wall = clock, wall
        self.holders = IdleHolders(window_s)
        self._next_at = 0.0
        self._settling: dict[str, float] = {}  # node -> until when it is left alone
        self._served: dict[str, float] = {}  # waiting pod uid -> until when
        self._quiet: dict[str, float] = {}  # holder uid -> until when it is not tried again
        self._forbidden_until = 0.0
        self._instance = f"{socket.gethostname()}-{os.getpid()}"

    async def reconcile(self, api_client: k8s.ApiClient, take: Callable[[], bool]) -> None:
        """One pass, when one is due; `take` is the leader's write budget."""
        now = self._clock()
        if now < self._next_at or now < self._forbidden_until:
            return
        self._next_at = now + self._every_s
        summaries = self._summaries()
        self.holders.update(summaries, self._stale_after_s, now)
        standing = self.holders.standing()
        self.status.idle_pods = len(standing)
        for book in (self._settling, self._served, self._quiet):
            for key in [k for k, until in book.items() if until <= now]:
                del book[key]
        holders = self._holders(standing)
        if not holders:
            return
        core = k8s.CoreV1Api(api_client)
        try:
            waiting = [w for w in await self._waiting(core) if w.uid not in self._served]
            if not waiting:
                return
            opted_in = await self._opted_in(core)
        except Forbidden as exc:
            self._refused(exc, now)
            return
        rooms = self._rooms(summaries, now)
        decided = plan(
            holders,
            waiting,
            rooms,
            opted_in=opted_in,
            min_runtime_s=self._min_runtime_s,
            wall_now=self._wall().timestamp(),
            max_evictions=self._max_evictions,
            settling=self._settling.keys(),
        )
        for skipped in decided.skipped:
            log.debug("reclaim: %s on %s not evicted: %s", skipped.pod, skipped.node, skipped.why)
        for eviction in decided.evictions:
            if not take():
                return  # the budget: the next pass plans again
            try:
                outcome = await self._evict(core, eviction)
            except Forbidden as exc:
                self._count(FAILED)
                self._refused(exc, now)
                return
            self._count(outcome)
            self._quiet[eviction.holder.uid] = now + QUIET_S
            if outcome in (EVICTED, DRY_RUN):
                self._settling[eviction.holder.node] = now + SETTLE_S
                self._served[eviction.serves.uid] = now + SETTLE_S
            if outcome in REASONS and take():
                try:
                    await self._event(core, eviction, outcome)
                except (ApiError, *TRANSPORT_ERRORS) as exc:  # advice: the eviction stands, the log says it
                    log.warning("reclaim: the Event on %s failed: %s", eviction.holder.key, exc)

    def _holders(self, standing: Mapping[tuple[str, str], int]) -> list[Holder]:
        out = []
        for (node, key), units in standing.items():
            for pod in self._pods_on(node):
                if pod.key == key and pod.uid not in self._quiet:
                    out.append(
                        Holder(pod.uid, key, node, units, pod.priority, pod.started, pod.phase == "Running", pod.group)
                    )
        return out

    def _rooms(self, summaries: Mapping[str, NodeSummary], now: float) -> dict[str, NodeRoom]:
        rooms = {}
        for node, summary in summaries.items():
            if summary.free_gpus is None or not is_fresh(summary.received_at, now, self._stale_after_s):
                continue  # allocation unknown, or stale: unknown is never room
            obj = self._node_object(node) or {}
            meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
            rooms[node] = NodeRoom(summary.idle_gpus, meta.get("labels") or {}, spec.get("taints") or ())
        return rooms

    async def _waiting(self, core: k8s.CoreV1Api) -> list[WaitingPod]:
        listed = await call(
            core.list_pod_for_all_namespaces(field_selector=PENDING, limit=MAX_WAITING, _preload_content=False),
            "pods",
        )
        return [w for pod in (listed or {}).get("items") or () if (w := read_waiting(pod, self._resources))]

    async def _opted_in(self, core: k8s.CoreV1Api) -> frozenset[str]:
        key, value = self._label
        listed = await call(core.list_namespace(label_selector=f"{key}={value}", _preload_content=False), "namespaces")
        return frozenset(n["metadata"]["name"] for n in (listed or {}).get("items") or ())

    async def _evict(self, core: k8s.CoreV1Api, eviction: Eviction) -> str:
        holder, waiting = eviction.holder, eviction.serves
        namespace, _, name = holder.key.partition("/")
        why = self._why(eviction)
        if self._dry_run:
            log.info("reclaim (dry run): would evict %s on %s: %s", holder.key, holder.node, why)
            return DRY_RUN
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": holder.uid}},
        }
        try:
            done = await call(
                cast(Any, core).create_namespaced_pod_eviction(name, namespace, body, _preload_content=False),
                "pods/eviction",
            )
        except Forbidden:
            raise
        except ApiError as exc:
            if exc.status == 429:
                log.info(
                    "reclaim: %s on %s not evicted: a PodDisruptionBudget forbids it (%s)", holder.key, holder.node, exc
                )
                return REFUSED_BY_PDB
            log.warning("reclaim: evicting %s on %s failed: %s", holder.key, holder.node, exc)
            return FAILED
        except TRANSPORT_ERRORS as exc:  # no answer (a reset connection is no OSError in aiohttp)
            log.warning("reclaim: evicting %s on %s failed: %s", holder.key, holder.node, exc)
            return FAILED
        if done == {}:
            return GONE
        log.info("reclaim: evicted %s on %s: %s (waiting: %s)", holder.key, holder.node, why, waiting.key)
        return EVICTED

    def _why(self, eviction: Eviction) -> str:
        holder, waiting = eviction.holder, eviction.serves
        return (
            f"its {holder.units} GPU(s) on {holder.node} read idle for over {_duration(self._window_s)} (the idle "
            f"rule); the waiting pod {waiting.key} (priority {waiting.priority}) needs {waiting.gpus} and the node "
            f"has {eviction.free} free; namespace opted in ({self._label[0]}={self._label[1]})"
        )

    async def _event(self, core: k8s.CoreV1Api, eviction: Eviction, outcome: str) -> None:
        holder = eviction.holder
        namespace, _, name = holder.key.partition("/")
        lead = {
            EVICTED: "evicted to reclaim GPUs",
            DRY_RUN: "would be evicted to reclaim GPUs (--reclaim=dry-run: nothing evicted)",
            REFUSED_BY_PDB: "not evicted: a PodDisruptionBudget forbids it (tried again later)",
        }[outcome]
        stamp = self._wall()
        at = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        body: dict[str, Any] = {
            "metadata": {"name": event_name(name, int(stamp.timestamp() * 1e6)), "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": name,
                "uid": holder.uid,
            },
            "reason": REASONS[outcome],
            "message": f"{lead}: {self._why(eviction)}",
            "type": "Normal" if outcome != REFUSED_BY_PDB else "Warning",
            "source": {"component": "gpu-extender"},
            "reportingComponent": "gpu-extender",
            "reportingInstance": self._instance,
            "firstTimestamp": at,
            "lastTimestamp": at,
            "count": 1,
        }
        await call(cast(Any, core).create_namespaced_event(namespace, body, _preload_content=False), "events")

    def _count(self, outcome: str) -> None:
        self.status.evictions[outcome] = self.status.evictions.get(outcome, 0) + 1

    def _refused(self, exc: Forbidden, now: float) -> None:
        log.warning(
            "reclaim: %s: apply deploy/components/reclaim (list namespaces, create pods/eviction); trying again in %gs",
            exc,
            FORBIDDEN_RETRY_S,
        )
        self._forbidden_until = now + FORBIDDEN_RETRY_S


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0s"
