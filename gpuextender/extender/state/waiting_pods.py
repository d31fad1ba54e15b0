"""Pods waiting for GPUs, and why: the question operators ask first ("why is my pod pending?"),
answered on the fleet page from the extender's own latest filter verdict for each pod.

A GPU pod is waiting from a filter call that found it no node with fresh data (none passed, or
only through the no-fit fallback or on assumed data) until a call finds it one, it is bound (the
binding ledger knows), or kube-scheduler stops asking for `TTL_S` (it retries an unschedulable pod
at least every 5 minutes, so a pod not asked about for 10 is gone or placed elsewhere). At most
`MAX_PODS` are kept, the longest-unasked dropped first: a flood of pending pods costs bounded memory.
Pure bookkeeping on a clock the caller passes; one dict update per GPU filter call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

MAX_PODS = 500
TTL_S = 600.0
TOP_REASONS = 3


class Verdict(Protocol):
    """What a node's failure says (decide/reasons.Reason)."""

    @property
    def code(self) -> str: ...

    @property
    def sentence(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Waiting:
    pod: str  # namespace/name
    uid: str
    gpus: int  # whole GPUs asked for (0 for a MIG-only pod)
    since: float  # the clock's time of the first call that found no place
    last: float  # of the latest such call
    calls: int
    nodes: int  # nodes in the latest call
    verdict: str  # "no node fits", "no node fits: kube-scheduler picks among busy ones", ...
    reasons: tuple[tuple[str, str, int], ...]  # (code, sentence, nodes), most nodes first


class WaitingPods:
    def __init__(self, max_pods: int = MAX_PODS, ttl_s: float = TTL_S) -> None:
        self._max = max_pods
        self._ttl = ttl_s
        self._pods: dict[str, Waiting] = {}  # uid -> entry, least recently asked first

    def record(
        self,
        *,
        uid: str,
        pod: str,
        gpus: int,
        nodes: int,
        passed: int,
        fallback: bool,
        assumed: bool,
        failures: Iterable[tuple[Verdict, int]],
        now: float,
    ) -> None:
        """One filter verdict for a pod that asks for GPUs (`failures`: failed nodes per reason, most
        first, as the filter's metrics counted them)."""
        if passed and not fallback and not assumed:
            self._pods.pop(uid, None)  # it has a place
            return
        reasons = tuple((r.code, r.sentence, n) for r, n in islice(failures, TOP_REASONS))
        verdict = (
            "no node fits: kube-scheduler chooses among busy or stale ones (--no-fit-policy pass-all)"
            if fallback
            else "passed only on assumed data: no node with fresh GPU data fits"
            if assumed
            else "no node fits"
        )
        before = self._pods.pop(uid, None)
        self._pods[uid] = Waiting(
            pod=pod,
            uid=uid,
            gpus=gpus,
            since=before.since if before is not None else now,
            last=now,
            calls=(before.calls if before is not None else 0) + 1,
            nodes=nodes,
            verdict=verdict,
            reasons=reasons,
        )
        while len(self._pods) > self._max:
            del self._pods[next(iter(self._pods))]

    def forget(self, uids: Iterable[str]) -> None:
        for uid in uids:
            self._pods.pop(uid, None)

    def current(self, now: float, bound: Callable[[str], bool] = lambda _uid: False) -> list[Waiting]:
        """The pods still waiting, longest first: expired and bound ones are dropped."""
        for uid in [u for u, w in self._pods.items() if now - w.last > self._ttl or bound(u)]:
            del self._pods[uid]
        return sorted(self._pods.values(), key=lambda w: (w.since, w.pod))
