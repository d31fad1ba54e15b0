"""The race inside a burst: a filter must not decide before the previous pod's binding is known.

kube-scheduler runs one scheduling cycle at a time (filter, prioritize, pick, "assume") and binds
in a separate goroutine, so the next pod's filter can reach the extender before the previous pod's
binding does, through the bind verb or the pod watch. Deciding then counts the same idle GPUs
twice. The gate closes that gap:

- `decided(uid, need, nodes)`: filter answered a GPU pod of `need` GPUs with `nodes`: its
  binding is *open* (it will be bound to one of them).
- `bound(uid)`: the ledger has the pod bound (bind verb, or the watch): closed.
- `settle(uid, need, idle_of, gang)`: before a filter for a pod of `need` GPUs decides, wait while
  another pod's binding is open *and could change a verdict*: one of its nodes would have fewer
  than `need` idle GPUs left were that pod, and every other open binding that may go there, bound
  there (`idle_of(node)`: the node's idle GPUs now,
  None when unknown: at risk; SCHEDULER_COUNTS for a node without agent data, below). Wait at
  most until that binding's deadline (`hold_s` after its filter; a pod whose cycle ended without
  a binding simply expires). Bindings that cannot change a verdict do not hold the filter: a
  burst onto roomy nodes runs at full speed. A filter for the same pod again (a retry) closes its own earlier entry.

A gang member never waits for another member of its own gang (kube-scheduler binds a gang only once
every member is placed: the wait would always run out; the gang's room is its hold, state/group_book.py).
A node without agent data never holds a filter: its verdict is its allocatable GPUs less its bound
pods (decide/README.md, "Whole GPUs"), the count kube-scheduler's own NodeResourcesFit makes first,
with the open binding already in it (kube-scheduler "assumes" a pod on its node before the next
cycle, and managedResources `ignoredByScheduler: false`, the shipped setting, keeps its GPU
accounting on): a node that pod filled never reaches the extender as a candidate. Waiting for it
only made every filter of an agent rollout wait for the previous pod's binding. A node with stale
data still counts as unknown: the GPUs it last saw lost are not in kube-scheduler's count.

Across replicas (peer_sender.py, `--peers`): each replica tells the others of every binding its
filters open, and each takes those as open here too (`opened_at_peers`), so that kube-scheduler's
calls moving to another replica do not count a GPU twice; each replica's pod watch closes them.

Only filter waits (prioritize follows its own filter, after the wait). A filter that decided
while another binding was open, which then did arrive, is a *race* (`races`): what the gate
exists to avoid, and what `hold_s = 0` (the gate off) measures.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpuextender.extender.scheduler.peer_wire import OpenBinding

# What idle_of() answers for a node without agent data: room for any pod, as far as this gate goes
# (module docstring).
SCHEDULER_COUNTS = sys.maxsize
# Peers' bindings (opened_at_peers) are bounded here, whatever a peer sends: at most MAX_PEER_OPEN open
# at once (a burst of pending pods across replicas, many times over; past it a peer's binding is not
# taken: the filter may count its GPU again, as before peers), naming at most MAX_PEER_NAMES nodes in
# all (past it one is taken as going anywhere: every filter waits for it, the safe side). At both
# bounds a pass of the gate takes 12-16 ms (bench/RESULTS.md, "A peer's worst message").
MAX_PEER_OPEN = 4096
MAX_PEER_NAMES = 50_000
TAKEN, WIDENED, OVERFLOW = "received", "widened", "overflow"  # what became of a peer's binding
LATE_S = 60.0  # how long an expired binding is remembered, to count it as a race should it arrive
MAX_LATE = 10_000


@dataclass(slots=True)
class _Open:
    deadline: float
    need: int  # GPUs (0 for a MIG-only pod: then every later filter waits for it)
    nodes: frozenset[str]  # where filter said it may go
    gang: str = ""  # its gang's group key: a gang member is bound only once its whole gang is placed
    overlapped: bool = False  # a filter it could have changed decided while this binding was open
    anywhere: bool = False  # a peer's, whose filter passed more nodes than it could name: may go anywhere
    peer: bool = False  # opened by another replica's filter: its expiry and races are that replica's to count


class BindingGate:
    def __init__(self, hold_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.hold_s = hold_s
        self._clock = clock
        self._open: dict[str, _Open] = {}
        # Bindings that expired unseen, for a while: one that arrives late still counts as a race.
        self._late: dict[str, float] = {}
        self._changed = asyncio.Event()
        self.races = 0  # filters that decided without a binding that then happened
        self.waited = 0  # filters that waited for another pod's binding
        self.expired = 0  # open bindings that never arrived within hold_s

    def decided(self, uid: str, need: int, nodes: frozenset[str], gang: str = "") -> None:
        if uid:
            self._open[uid] = _Open(self._clock() + self.hold_s, need, nodes, gang)

    def opened_at_peers(self, told: Iterable[OpenBinding]) -> Counter[str]:
        """Another replica's filter answered these pods (peer_wire.py): their bindings are open here
        too, each for its `hold_s` at most this gate's own hold (`nodes` None: anywhere), within the
        peers' bounds (MAX_PEER_OPEN, MAX_PEER_NAMES). Ignored with the gate off (nothing waits) or
        without a uid; what became of each counted: TAKEN, WIDENED (taken as anywhere), OVERFLOW."""
        results: Counter[str] = Counter()
        if self.hold_s <= 0:
            return results
        now = self._clock()
        live = self._open
        count = names = 0
        for e in live.values():  # (expired ones are closed by the next filter; they do not count)
            if e.peer and e.deadline >= now:
                count, names = count + 1, names + len(e.nodes)
        for b in told:
            if not b.uid:
                continue
            old = live.get(b.uid)
            again = old is not None and old.peer and old.deadline >= now  # told again: it replaces its entry
            if count - again >= MAX_PEER_OPEN:
                results[OVERFLOW] += 1
                continue
            if again and old is not None:
                count, names = count - 1, names - len(old.nodes)
            nodes, result = b.nodes, TAKEN
            if nodes is not None and names + len(nodes) > MAX_PEER_NAMES:
                nodes, result = None, WIDENED
            live[b.uid] = _Open(
                now + min(b.hold_s, self.hold_s),
                b.need,
                nodes or frozenset(),
                b.gang,
                anywhere=nodes is None,
                peer=True,
            )
            count, names = count + 1, names + (len(nodes) if nodes is not None else 0)
            results[result] += 1
        return results

    def bound(self, uid: str) -> None:
        entry = self._open.pop(uid, None)
        if entry is not None:
            if entry.overlapped:
                self.races += 1
            self._changed.set()
        elif self._late.pop(uid, None) is not None:
            self.races += 1

    def open_count(self) -> int:
        """Bindings open now: past its deadline an entry is not, though the next filter closes it
        (with no filter to come it would be counted open for ever). Reading changes nothing: a scrape
        must not decide what counts as a race."""
        now = self._clock()
        return sum(1 for e in self._open.values() if e.deadline >= now)

    def _expire(self, now: float) -> None:
        """Close the bindings whose deadline passed, remembered a while should they arrive late."""
        for key in [k for k, e in self._open.items() if e.deadline <= now]:
            if self._open.pop(key).peer:
                continue  # (counted by the replica whose filter opened it)
            self.expired += 1
            if len(self._late) >= MAX_LATE:
                self._late.clear()  # a flood of pods that never bind: forget, do not grow
            self._late[key] = now + LATE_S
        if self._late:
            for key in [k for k, until in self._late.items() if until <= now]:
                del self._late[key]

    def others_open(self, uid: str) -> bool:
        """Whether another pod's binding is open; this pod's own earlier entry is closed first (a
        retry: its earlier cycle ended without a binding), as `settle` would."""
        self._open.pop(uid, None)
        return bool(self._open)

    def _at_risk(self, need: int, idle_of: Callable[[str], int | None], gang: str = "") -> list[_Open]:
        """The open bindings that could change a verdict: all of them may land on one node (kube-
        scheduler picks its best-scored node, and the scores do not move until a binding is seen),
        so a node is at risk when its idle GPUs less every open binding that may go there leave
        fewer than `need`."""
        risky: list[_Open] = []
        counted: list[_Open] = []
        load: dict[str, int] = {}
        for entry in self._open.values():
            if gang and entry.gang == gang:
                continue  # its own gang's member: bound only after this one is placed; its room is the gang's hold
            if entry.need <= 0 or need <= 0 or entry.anywhere:
                risky.append(entry)  # MIG devices, DRA-only demand or no nodes named: always wait
                continue
            counted.append(entry)
            for node in entry.nodes:
                load[node] = load.get(node, 0) + entry.need
        idle_cache: dict[str, int | None] = {}
        for entry in counted:
            for node in entry.nodes:
                if node not in idle_cache:
                    idle_cache[node] = idle_of(node)
                idle = idle_cache[node]
                if idle is None or idle - load[node] < need:
                    risky.append(entry)
                    break
        return risky

    async def settle(
        self, uid: str, need: int = 1, idle_of: Callable[[str], int | None] = lambda _n: None, gang: str = ""
    ) -> float:
        """Wait until no other pod's binding that could change this pod's verdicts is open (or its
        deadline passed); return the seconds waited."""
        self._open.pop(uid, None)  # this pod's own earlier cycle ended without a binding
        started = self._clock()
        waited = False
        while True:
            now = self._clock()
            self._expire(now)
            risky = self._at_risk(need, idle_of, gang) if self._open else []
            if not risky:
                break
            if self.hold_s <= 0:  # the gate is off: decide now, and remember it raced
                for entry in risky:
                    entry.overlapped = True
                break
            if not waited:
                waited = True
                self.waited += 1
            self._changed.clear()
            timeout = min(e.deadline for e in risky) - now
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass
        return self._clock() - started
