"""What the extender does around a binding: the gate before each filter (binding_gate.py), the
`bind` verb (the ledger first, then the Binding through the API server: pod_binder.py), and the
metrics of both.

The bind verb needs the pod's GPU request, which ExtenderBindingArgs does not carry: filter
remembers it per pod UID for the pods it answered (at most `MAX_REMEMBERED`, oldest dropped;
a pod filtered longer ago than that is bound without an early ledger record, and the watch
records it).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gpuextender.extender.model.pod_gpus import gpus_requested
from gpuextender.extender.model.pod_group import GANG_SOURCES, GroupRef, read_group
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.model.untrusted import InvalidInput, pod_uid
from gpuextender.extender.scheduler import peer_wire
from gpuextender.extender.scheduler.binding_gate import OVERFLOW, SCHEDULER_COUNTS, TAKEN, WIDENED, BindingGate
from gpuextender.extender.scheduler.wire import BindingArgs, binding_result
from gpuextender.extender.state.freshness import is_fresh
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.pod_ledger import BoundPod, PodLedger

if TYPE_CHECKING:  # the Kubernetes client is imported only with --kubernetes (app.py); aiohttp's client with --peers
    from gpuextender.extender.scheduler.peer_sender import PeerSender
    from gpuextender.extender.scheduler.pod_binder import PodBinder

log = logging.getLogger("gpu_extender.bind")

MAX_REMEMBERED = 4096  # pods filtered and not yet bound: far above one scheduler's in-flight binds


def gang_of(ref: GroupRef | None) -> str:
    """The key of a gang (model/pod_group.GANG_SOURCES) the pod belongs to; "" for any other pod."""
    return ref.key if ref is not None and ref.source in GANG_SOURCES else ""


class Bindings:
    def __init__(
        self,
        gate: BindingGate,
        clock: Callable[[], float] = time.monotonic,
        binder: PodBinder | None = None,  # with --kubernetes
        ledger: PodLedger | None = None,
        peers: PeerSender | None = None,  # with --peers
    ) -> None:
        self.gate = gate
        self.binder = binder
        self.ledger = ledger
        self.peers = peers
        self.peer_heard: Counter[str] = Counter()  # peers' open bindings (peer_wire.py), by what became of them
        self._clock = clock
        self._remembered: dict[str, PodRequest] = {}
        self.binds = {"bound": 0, "error": 0}

    def filtered(self, uid: str, pod: PodRequest, answered: Sequence[str]) -> None:
        """Filter answered `pod` with the nodes `answered`: its binding is now open."""
        if not uid or not answered or (pod.gpus_needed <= 0 and not pod.mig_needed):
            return
        remembered = self._remembered
        remembered.pop(uid, None)
        if len(remembered) >= MAX_REMEMBERED:
            del remembered[next(iter(remembered))]
        remembered[uid] = pod
        need, nodes, gang = 0 if pod.mig_needed else pod.gpus_needed, frozenset(answered), gang_of(pod.group.ref)
        self.gate.decided(uid, need, nodes, gang)
        if self.peers is not None:
            self.peers.push(uid, need, nodes, gang, self.gate.hold_s)

    def from_peer(self, body: bytes, instance_id: str) -> dict[str, str]:
        """A peer's message of its open bindings (peer_wire.py), taken as open here too; the answer
        names this replica (a replica that reached itself reads its own id, and takes nothing)."""
        sender, entries = peer_wire.parse(body, self.gate.hold_s)
        if sender != instance_id:
            ledger = self.ledger
            # One bound already (this replica's watch was first) has nothing to wait for.
            unbound = [e for e in entries if ledger is None or ledger.get(e.uid) is None]
            self.peer_heard.update(self.gate.opened_at_peers(unbound))
        return {"from": instance_id}

    @property
    def peer_counts(self) -> dict[str, int]:
        told = self.peers.counts if self.peers is not None else {"sent": 0, "failed": 0, "dropped": 0}
        return {**told, **{result: self.peer_heard[result] for result in (TAKEN, WIDENED, OVERFLOW)}}

    def peers_known(self) -> int:
        return self.peers.peers() if self.peers is not None else 0

    async def settle(
        self,
        pod: dict[str, Any],
        whole_resources: Sequence[str],
        summary: Callable[[str], NodeSummary | None],
        now: float,
        stale_after_s: float,
    ) -> None:
        """Before a filter decides: wait for earlier pods' bindings that could change its verdicts."""
        gate = self.gate
        if not gate.others_open(pod_uid(pod)):  # a burst's next pod, or a retry: nothing to wait for
            return
        try:
            need = gpus_requested(pod, whole_resources)
        except InvalidInput:
            return  # the decision refuses it with the reason

        def idle_of(node: str) -> int | None:
            s = summary(node)
            if s is None:
                return SCHEDULER_COUNTS  # binding_gate's docstring: kube-scheduler counted the open binding
            return s.idle_gpus if is_fresh(s.received_at, now, stale_after_s) else None

        await gate.settle(pod_uid(pod), need, idle_of, gang_of(read_group(pod).ref))

    async def bind(self, b: BindingArgs) -> dict[str, str]:
        """ExtenderBindingResult. The pod goes into the ledger before the API call, so a filter
        arriving meanwhile already counts it; out again if the Binding is refused."""
        if self.binder is None:
            self.binds["error"] += 1
            return binding_result(
                "this gpu-extender has no API server to bind with (it runs without --kubernetes); "
                "remove bindVerb from the scheduler's extender configuration"
            )
        pod = self._remembered.pop(b.uid, None)
        ledger = self.ledger
        assumed = (
            pod is not None
            and ledger is not None
            and ledger.assume(
                BoundPod(
                    b.uid,
                    b.key,
                    b.node,
                    pod.gpus_needed,
                    pod.mig_needed,
                    "Pending",
                    self._clock(),
                    pod.identity.inference_service,
                    group=pod.group.ref.key if pod.group.ref is not None else "",
                    priority=pod.priority,
                )
            )
        )
        error = await self.binder.bind(b)
        if error:
            self.binds["error"] += 1
            if assumed and ledger is not None:  # only what this call recorded: a retried bind's 409
                ledger.forget(b.uid)  # ("already bound") must not drop the watch's record
            log.warning("bind %s: %s", b.key, error, extra={"pod": b.key, "node": b.node, "verb": "bind"})
        else:
            self.binds["bound"] += 1
            self.gate.bound(b.uid)  # also when the ledger does not keep it (no GPU request remembered)
        return binding_result(error)
