"""Filter's, the shortlist's and prioritize's road for a class-neutral pod of whole GPUs at thousands
of candidates (decide/README.md, "The index"): every node's fresh verdict for a pod of k GPUs, and
the nodes that fit ranked per strategy, kept current per node change instead of judged and sorted
again on every call. tests/extender/decide/test_fit_index.py holds `filter` equal to
`whole_gpus.filter_nodes`, `best` to `shortlist.best_by_score` and `scores` to
`whole_gpus.prioritize` on generated fleets and changes; where they cannot give the definition's
answer (a stale, unknown or unfit node among those to rank), `best` and `scores` say None.

Per pod size k (1 <= k < QUALITY_SIZES), from every node's summary whatever its age: the nodes that
fit on fresh data (`whole_gpus.fresh_reason` is None) with their quality class q, idle GPUs,
utilization and GPU count; every other node's reason; and, per strategy and q, the fits in the
order of the strategy's v (spread: most idle, then least utilized; binpack: the reverse). That
order holds for every capacity C a call computes: the utilization fraction of v stays below 1.
Age is judged per call on the call's `now`: the nodes stale then are judged one by one
(`whole_gpus.judge_nodes`), as are candidates without a summary.

A node change (`changed`, a GpuState listener) only marks the node; the marks are applied to each
size kept (O(log n) each) when the state settles (`catch_up`: after each slice of reports relayed by
the ingest workers, off the scheduler's calls) or else by the next call, or, when more than a
quarter of the nodes changed, the sizes are dropped to be built again when next asked (a build is
one pass over the nodes and a sort). At
most MAX_SIZES sizes are kept. Another size takes the place of the least recently asked only when
that one has not been asked for in IDLE_ASKS asks; until then its calls are judged per node, as
without the index: a workload of more sizes than that, taken in turn, would otherwise build a size
on every call (~2x the per-node cost).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, compress, filterfalse, islice, repeat
from operator import is_, itemgetter
from typing import Literal, cast
from weakref import ref

from gpuextender.extender.decide import whole_gpus
from gpuextender.extender.decide.filter_outcome import FilterOutcome, finish
from gpuextender.extender.decide.reasons import Reason
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_summary import QUALITY_SIZES, NodeSummary, quality_for

MAX_SIZES = 8  # pod sizes kept; ~1 MB each at 5,000 nodes with both strategies ranked
IDLE_ASKS = 1_000  # asks of the index without one for a kept size before another may take its place
STRATEGIES = ("spread", "binpack")  # the strategies whose v orders nodes the same way for every C

# A node that fits: (quality class q, idle GPUs, utilization % (0 when unknown, as rank_nodes
# counts it), GPU count).
Fit = tuple[int, int, float, int]
# A ranked node: the strategy's sort key (ascending = v descending), then its name.
Entry = tuple[int, float, str]
_NAME = itemgetter(2)
_Q, _COUNT = itemgetter(0), itemgetter(3)


def _entry(strategy: str, name: str, fit: Fit) -> Entry:
    _, idle, utilization, _ = fit
    return (-idle, utilization, name) if strategy == "spread" else (idle, -utilization, name)


def _value(strategy: str, entry: Entry, capacity: int) -> float:
    """The strategy's v of a ranked node (whole_gpus: the one home of the formulas)."""
    if strategy == "spread":
        return whole_gpus.spread_value(-entry[0], entry[1])
    return whole_gpus.binpack_value(entry[0], -entry[1], capacity)


def _drop(counter: Counter[int], key: int) -> None:
    if counter[key] <= 1:
        del counter[key]
    else:
        counter[key] -= 1


class _Size:
    """One pod size k: every node's fresh verdict, the fits' q and GPU counts tallied, and the
    fits ranked per strategy and q (a strategy's ranking is built when first asked)."""

    def __init__(self, k: int, summaries: Mapping[str, NodeSummary]) -> None:
        self.k = k
        self.fits: dict[str, Fit] = {}
        # Every node's verdict: its Reason, or False for a fit (false, as a Reason is true: one
        # lookup per candidate, then the call splits them in C).
        self.verdict: dict[str, Reason | Literal[False]] = {}
        self.counts: Counter[int] = Counter()  # GPU counts of the fits
        self.classes: Counter[int] = Counter()  # q of the fits
        self.ranked: dict[str, dict[int, list[Entry]]] = {}
        self.tallies: dict[str, _Tally] = {}  # per group domain label (domain_rooms)
        for name, summary in summaries.items():
            # Keys of its own, allocated together: a call's 5,000 lookups compare each candidate
            # with its key, and keys next to each other in memory make that ~15 % faster.
            self._add(name.encode().decode(), summary)

    def _judge(self, summary: NodeSummary) -> Reason | Fit:
        k = self.k
        reason = whole_gpus.fresh_reason(summary, k)
        if reason is not None:
            return reason
        idle, qs = summary.idle_gpus, summary.quality  # as rank_nodes reads q
        q = qs[k] if k < len(qs) else quality_for(k, idle, summary.degraded_idle_gpus, summary.set_tiers)
        return (q, idle, summary.mean_utilization or 0.0, summary.gpu_count)

    def _add(self, name: str, summary: NodeSummary, judged: Reason | Fit | None = None) -> None:
        fit = self._judge(summary) if judged is None else judged
        if isinstance(fit, Reason):
            self.verdict[name] = fit
            return
        self.verdict[name] = False
        q = fit[0]
        self.fits[name] = fit
        self.counts[fit[3]] += 1
        self.classes[q] += 1
        for strategy, by_q in self.ranked.items():
            insort(by_q.setdefault(q, []), _entry(strategy, name, fit))
        for tally in self.tallies.values():
            tally.count(name, fit[1], 1)

    def update(self, name: str, summary: NodeSummary | None) -> None:
        judged = None if summary is None else self._judge(summary)
        held = self.verdict.get(name)
        if judged is not None and (judged is held or (held is False and judged == self.fits.get(name))):
            return  # the same reason, or a fit with the same numbers (a heartbeat): nothing moves
        if self.verdict.pop(name, None) is False and (fit := self.fits.pop(name, None)) is not None:
            q = fit[0]
            _drop(self.counts, fit[3])
            _drop(self.classes, q)
            for strategy, by_q in self.ranked.items():
                entries = by_q[q]
                del entries[bisect_left(entries, _entry(strategy, name, fit))]
                if not entries:
                    del by_q[q]
            for tally in self.tallies.values():
                tally.count(name, fit[1], -1)
        if summary is not None:
            self._add(name, summary, judged)

    def ranking(self, strategy: str) -> dict[int, list[Entry]]:
        by_q = self.ranked.get(strategy)
        if by_q is None:
            by_q = {}
            for name, fit in self.fits.items():
                by_q.setdefault(fit[0], []).append(_entry(strategy, name, fit))
            for entries in by_q.values():
                entries.sort()
            self.ranked[strategy] = by_q
        return by_q


class _Tally:
    """A size's fits per domain of one node label (multi-pod groups: group_domains.py): per value,
    the members of k GPUs they hold (idle // k summed), their idle GPUs and how many they are. Kept
    with the fits, so a group's first member counts every domain's room without a pass over the
    nodes."""

    def __init__(self, k: int, value_of: Mapping[str, str], fits: Mapping[str, Fit]) -> None:
        self.k = k
        self.value_of = value_of  # the LevelIndex's: a new inventory version builds a new tally
        self.room: Counter[str] = Counter()
        self.idle: Counter[str] = Counter()
        self.nodes: Counter[str] = Counter()
        self.square: Counter[str] = Counter()  # idle GPUs squared, summed (group_domains.preference)
        self.unlabelled: dict[str, int] = {}  # fits without the label (each a domain of one): their idle GPUs
        for name, fit in fits.items():
            self.count(name, fit[1], 1)

    def count(self, name: str, idle: int, sign: int) -> None:
        value = self.value_of.get(name)
        if value is None:
            if sign > 0:
                self.unlabelled[name] = idle
            else:
                self.unlabelled.pop(name, None)
            return
        self.room[value] += sign * (idle // self.k)
        self.idle[value] += sign * idle
        self.nodes[value] += sign
        self.square[value] += sign * idle * idle


MAX_TALLIES = 4  # domain labels tallied per size (a group's own key, the configured levels)


class DomainRooms:
    """Per domain of a label, over a call's candidates that fit a k-GPU pod on fresh data: room
    (members of k GPUs), idle GPUs and nodes per labelled value, and the unlabelled fits' idle GPUs."""

    def __init__(
        self,
        room: dict[str, int],
        idle: dict[str, int],
        nodes: dict[str, int],
        square: dict[str, int],
        unlabelled: dict[str, int],
    ) -> None:
        self.room, self.idle, self.nodes, self.square, self.unlabelled = room, idle, nodes, square, unlabelled


class FitIndex:
    """The index over `summaries` (GpuState.offered_summaries: what `Snapshot.summary` looks up)."""

    def __init__(self, summaries: Mapping[str, NodeSummary]) -> None:
        self._summaries = summaries
        self._sizes: OrderedDict[int, _Size] = OrderedDict()
        self._marked: set[str] = set()
        # The nodes stale at `_stale_at` (None: to be found again), and the oldest report among
        # the others: until `now` passes it by stale_after, no other node is stale.
        self._stale: frozenset[str] | None = None
        self._stale_at = self._stale_after = 0.0
        self._oldest_fresh = math.inf
        # Counts every change of what a verdict reads (marks applied, sizes dropped, staleness
        # found again): the passes `filter` last answered (`_vouched`, with k, the count and its
        # `now`) are still exactly fresh fits at that `now`, so `best` need not check them again.
        self._generation = 0
        self._vouched: tuple[ref[FilterOutcome], int, int, float] | None = None
        self._asks = 0
        self._last_asked: dict[int, int] = {}  # per size kept, the ask that last wanted it

    def changed(self, node: str) -> None:
        """A GpuState listener: `node`'s summary changed or went."""
        if self._sizes:
            self._marked.add(node)
        if self._stale is not None:
            summary = self._summaries.get(node)
            if node in self._stale or (summary is not None and summary.received_at < self._oldest_fresh):
                self._stale = None

    def applies(self, k: int) -> bool:
        return 1 <= k < QUALITY_SIZES

    def stale(self, now: float, stale_after: float) -> frozenset[str]:
        """The nodes whose data is stale at `now` (freshness.is_fresh, inlined on this loop)."""
        if (
            self._stale is None
            or now < self._stale_at
            or stale_after != self._stale_after
            or now - self._oldest_fresh > stale_after
        ):
            self._generation += 1
            stale, oldest = [], math.inf
            for name, summary in self._summaries.items():
                received = summary.received_at
                if now - received <= stale_after:
                    if received < oldest:
                        oldest = received
                else:
                    stale.append(name)
            self._stale, self._stale_at, self._stale_after, self._oldest_fresh = (
                frozenset(stale),
                now,
                stale_after,
                oldest,
            )
        return self._stale

    def catch_up(self) -> None:
        """Apply the marks to each size kept now (a GpuState settle listener: after each slice of
        relayed reports), so that a call finds few left: a changed node costs ~24 us here at 20,000
        nodes, on the call's path when left to it. More than a quarter of the nodes changed: the
        sizes are dropped, to be built again when next asked."""
        marked = self._marked
        if not marked:
            return
        self._generation += 1
        if len(marked) * 4 > len(self._summaries):
            self._sizes.clear()
            self._last_asked.clear()
        else:
            get = self._summaries.get
            for kept in self._sizes.values():
                for node in marked:
                    kept.update(node, get(node))
        marked.clear()

    def _size(self, k: int) -> _Size | None:
        """Size k, current; None when every size kept is in use (module docstring)."""
        self.catch_up()
        self._asks += 1
        size = self._sizes.get(k)
        if size is None:
            if len(self._sizes) >= MAX_SIZES:
                oldest = next(iter(self._sizes))
                if self._asks - self._last_asked[oldest] <= IDLE_ASKS:
                    return None
                del self._sizes[oldest], self._last_asked[oldest]
            size = self._sizes[k] = _Size(k, self._summaries)
        else:
            self._sizes.move_to_end(k)
        self._last_asked[k] = self._asks
        return size

    def filter(
        self, k: int, names: Sequence[str], allocatable: Mapping[str, int], now: float, policy: DecisionPolicy
    ) -> FilterOutcome | None:
        """whole_gpus.filter_nodes(k, names, allocatable, summaries.get, now, policy); None where the
        index does not answer (a size out of range, or none kept for it now): take the definition."""
        size = self._size(k) if self.applies(k) else None
        if size is None:
            return None
        stale = self.stale(now, policy.stale_after_s)
        passed, failed, steps = _split(size.verdict, names)
        # At most this many candidates have no summary (a name given twice counts too): only when
        # that is most of them is the exact count needed.
        unknown = len(names) - len(passed) - len(failed)
        if unknown * 2 > len(names) and _count_unknown(steps) * 2 > len(names):
            # mostly nodes no agent reports (a rollout): one by one
            outcome = whole_gpus.judge_nodes(k, names, allocatable, self._summaries.get, now, policy)
            return self._vouch(finish(outcome, policy.no_fit_policy), k, now)
        outcome = FilterOutcome(passed, failed)  # failures in request order
        if unknown or stale:  # (or a name given twice)
            slow = set(chain.from_iterable(compress(part, map(is_, found, repeat(None))) for part, found in steps))
            if stale:
                slow.update(stale.intersection(names))
            if slow:
                _judge_slow(k, names, slow, allocatable, self._summaries.get, now, policy, outcome)
        return self._vouch(finish(outcome, policy.no_fit_policy), k, now)

    def domain_rooms(
        self,
        k: int,
        level: str,
        value_of: Mapping[str, str],
        names: Sequence[str] | None,
        now: float,
        stale_after: float,
    ) -> DomainRooms | None:
        """The fits of a k-GPU pod among `names` (None: the whole fleet's) on fresh data at `now`, per
        value of `level` (node -> value: `value_of`); None where the index does not answer (take the
        nodes one by one)."""
        size = self._size(k) if self.applies(k) else None
        if size is None:
            return None
        tally = size.tallies.get(level)
        if tally is None or tally.value_of is not value_of:
            if tally is None and len(size.tallies) >= MAX_TALLIES:
                size.tallies.clear()
            tally = size.tallies[level] = _Tally(k, value_of, size.fits)
        fits = size.fits
        stale = self.stale(now, stale_after)
        if names is None:
            out: set[str] = set(stale.intersection(fits))
            room, idle, nodes, square = dict(tally.room), dict(tally.idle), dict(tally.nodes), dict(tally.square)
            self._take_off(out, fits, value_of, k, (room, idle, nodes, square))
            unlabelled = {n: held for n, held in tally.unlabelled.items() if n not in stale}
            return DomainRooms(room, idle, nodes, square, unlabelled)
        candidates = set(names)
        out = fits.keys() - candidates  # fits not offered (kube-scheduler's own filters left them out)
        if stale:
            out |= stale.intersection(fits)
        room, idle, nodes, square = dict(tally.room), dict(tally.idle), dict(tally.nodes), dict(tally.square)
        self._take_off(out, fits, value_of, k, (room, idle, nodes, square))
        unlabelled = {n: held for n, held in tally.unlabelled.items() if n in candidates and n not in stale}
        return DomainRooms(room, idle, nodes, square, unlabelled)

    @staticmethod
    def _take_off(
        out: Iterable[str],
        fits: Mapping[str, Fit],
        value_of: Mapping[str, str],
        k: int,
        copy: tuple[dict[str, int], dict[str, int], dict[str, int], dict[str, int]],
    ) -> None:
        """The fits `out` taken off a tally's copy (room, idle, nodes, square), per domain."""
        room, idle, nodes, square = copy
        for name in out:
            value = value_of.get(name)
            if value is not None:
                held = fits[name][1]
                room[value] -= held // k
                idle[value] -= held
                nodes[value] -= 1
                square[value] -= held * held

    def domain_fits(self, k: int, nodes: Iterable[str], now: float, stale_after: float) -> dict[str, int] | None:
        """Of `nodes` (one domain's), the fresh fits of a k-GPU pod at `now` with their idle GPUs;
        None where the index does not answer."""
        size = self._size(k) if self.applies(k) else None
        if size is None:
            return None
        stale, fits = self.stale(now, stale_after), size.fits
        return {n: fit[1] for n in nodes if (fit := fits.get(n)) is not None and n not in stale}

    def _vouch(self, outcome: FilterOutcome, k: int, now: float) -> FilterOutcome:
        """Remember passes that are all fresh fits (no fallback, none on assumed data) for `best`."""
        if not outcome.fallback and not outcome.assumed:
            # Weakly: a strong reference kept the last call's passes alive into the next call,
            # which then paid for freeing them (20,000 names: ~0.5 ms).
            self._vouched = (ref(outcome), k, self._generation, now)
        return outcome

    def _vouched_for(self, passed: Sequence[str], k: int, now: float) -> bool:
        """`passed` are the passes `filter` last vouched for, for size k at `now`, with nothing changed since
        (at a later `now` a pass may have gone stale)."""
        if self._vouched is None:
            return False
        outcome, size, generation, at = self._vouched
        vouched = outcome()
        return vouched is not None and vouched.passed is passed and (size, generation, at) == (k, self._generation, now)

    def scores(
        self, k: int, names: Sequence[str], strategy: str, now: float, stale_after: float
    ) -> list[tuple[str, int]] | None:
        """whole_gpus.prioritize's (node, score) for `names`, in their order, when every one of
        them fits a k-GPU pod on fresh data at `now` and `strategy` is one of STRATEGIES; else None
        (take the definition)."""
        if strategy not in STRATEGIES or not self.applies(k):
            return None
        if not names:
            return []
        size = self._size(k)
        if size is None:
            return None
        of = list(map(size.fits.get, names))
        if None in of or not self.stale(now, stale_after).isdisjoint(names):
            return None
        fits = cast(list[Fit], of)
        capacity = max(k, max(map(_COUNT, fits), default=0))  # k >= 1: at least 1
        return list(zip(names, _scored(strategy, fits, capacity, sorted(set(map(_Q, fits)))), strict=True))

    def best(
        self, k: int, passed: Sequence[str], start: int, keep: int, strategy: str, now: float, stale_after: float
    ) -> list[str] | None:
        """shortlist.best_by_score's set, the best first: the `keep` best of `passed` by score, equal
        scores in `passed` rotated by `start`; None (take the definition) unless `passed` are distinct
        nodes that fit a k-GPU pod on fresh data at `now` and `strategy` is one of STRATEGIES."""
        if strategy not in STRATEGIES or not self.applies(k):
            return None
        if not passed or keep <= 0:
            return []
        size = self._size(k)
        if size is None:
            return None
        fits = size.fits
        members = set(passed)
        if len(members) != len(passed):
            return None
        if not self._vouched_for(passed, k, now) and (
            not members <= fits.keys() or not self.stale(now, stale_after).isdisjoint(members)
        ):
            return None
        every = len(members) == len(fits)  # every fit is a candidate (kube-scheduler's usual call)
        counts: Iterable[int]
        present: Iterable[int]
        if every:
            counts, present = size.counts.keys(), size.classes.keys()
        else:
            of = list(map(fits.__getitem__, passed))
            counts, present = set(map(_COUNT, of)), set(map(_Q, of))
        capacity = max(k, max(counts, default=0))  # k >= 1: at least 1
        scale = capacity + 1
        classes = sorted(present)
        m = len(classes)
        if m > whole_gpus.MAX_SCORE:  # the classes' scores would overlap (no quality scale has that many)
            return None
        if m == 1:

            def score(entry: Entry) -> int:
                return whole_gpus.one_class_score(_value(strategy, entry, capacity), scale)

        else:
            band = whole_gpus.best_class_band(m, scale)

            def score(entry: Entry) -> int:
                return whole_gpus.best_class_score(_value(strategy, entry, capacity), m, band)

        ranked = size.ranking(strategy)
        rotated = (passed, start)
        among = None if every else members
        chosen = _cut(ranked[classes[0]], among, keep, score, rotated, _entry_of(strategy, fits, classes[0]))
        for q in classes[1:]:  # a worse class (m > 1): all its nodes score m - rank, equal
            if len(chosen) >= keep:
                break
            chosen += _cut(ranked[q], among, keep - len(chosen), lambda entry: 0, rotated, _entry_of(strategy, fits, q))
        return chosen


def _scored(strategy: str, fits: Sequence[Fit], capacity: int, classes: Sequence[int]) -> list[int]:
    """rank_nodes' scores of nodes that all fit on fresh data (decide/README.md, "Prioritize"):
    `classes` the distinct q among them, best first."""
    scale = capacity + 1
    if strategy == "spread":
        values = [whole_gpus.spread_value(idle, utilization) for _, idle, utilization, _ in fits]
    else:
        values = [whole_gpus.binpack_value(idle, utilization, capacity) for _, idle, utilization, _ in fits]
    m = len(classes)
    if m == 1:
        return [whole_gpus.one_class_score(v, scale) for v in values]
    best, band = classes[0], whole_gpus.best_class_band(m, scale)
    below = {q: m - r for r, q in enumerate(classes) if r}
    return [
        whole_gpus.best_class_score(v, m, band) if fit[0] == best else below[fit[0]]
        for v, fit in zip(values, fits, strict=True)
    ]


# Candidates are split in steps of this many: a step's names are still in the CPU's cache when its
# passes and failures are gathered (each pass over 20,000 fresh names found them evicted by the last).
STEP = 2048
_Found = list[Reason | Literal[False] | None]


def _split(
    verdict: Mapping[str, Reason | Literal[False]], names: Sequence[str]
) -> tuple[list[str], dict[str, Reason], list[tuple[Sequence[str], _Found]]]:
    """The fits among `names` (request order, as often as named), the failures with their reasons
    (request order), and per step its names with their verdicts (None: no summary)."""
    passed: list[str] = []
    failed: dict[str, Reason] = {}
    steps: list[tuple[Sequence[str], _Found]] = []
    get = verdict.get
    for start in range(0, len(names), STEP):
        part = names[start : start + STEP]
        found = list(map(get, part))
        passed += compress(part, map(is_, found, repeat(False)))
        failed.update(cast("Iterable[tuple[str, Reason]]", compress(zip(part, found, strict=True), found)))
        steps.append((part, found))
    return passed, failed, steps


def _count_unknown(steps: Iterable[tuple[Sequence[str], _Found]]) -> int:
    return sum(found.count(None) for _, found in steps)


def _judge_slow(
    k: int,
    names: Sequence[str],
    slow: set[str],
    allocatable: Mapping[str, int],
    lookup: whole_gpus.SummaryLookup,
    now: float,
    policy: DecisionPolicy,
    outcome: FilterOutcome,
) -> None:
    """Candidates without a summary or stale at `now`, judged one by one, then put where
    filter_nodes has them: passes and failures in request order. The few (a dead agent's node)
    change their entries in place; a pass over every candidate only when one newly failed."""
    judged = whole_gpus.judge_nodes(k, list(filter(slow.__contains__, names)), allocatable, lookup, now, policy)
    failed, slow_failed = outcome.failed, judged.failed
    added = False
    for name in slow:
        reason = slow_failed.get(name)
        if reason is None:
            failed.pop(name, None)  # passes on assumed data now
        else:
            added = added or name not in failed
            failed[name] = reason  # in place where it failed before
    if added:  # appended at the end: back to request order
        outcome.failed = {n: failed[n] for n in names if n in failed}
    outcome.passed = list(filterfalse(slow.__contains__, outcome.passed)) + judged.passed
    outcome.assumed = judged.assumed


def _entry_of(strategy: str, fits: Mapping[str, Fit], q: int) -> Callable[[str], Entry | None]:
    """A name's entry in the ranking of class q (None: not in it)."""
    get = fits.get

    def entry_of(name: str) -> Entry | None:
        fit = get(name)
        return None if fit is None or fit[0] != q else _entry(strategy, name, fit)

    return entry_of


def _cut(
    entries: list[Entry],
    members: set[str] | None,
    keep: int,
    score: Callable[[Entry], int],
    rotated: tuple[Sequence[str], int],
    entry_of: Callable[[str], Entry | None],
) -> list[str]:
    """The `keep` best of the `members` (None: all) among `entries` (ranked: score non-increasing
    along them; `entry_of` finds a name's), the best first; of the equal scores at the cut, the
    first in rotated order (the rotated names are the members)."""
    if members is None:
        at: Sequence[int] = range(min(keep, len(entries)))
    else:
        at = []  # positions of the first `keep` members
        for i, name in enumerate(map(_NAME, entries)):
            if name in members:
                at.append(i)
                if len(at) == keep:
                    break
    if len(at) < keep:
        return [entries[i][2] for i in at]
    last = at[-1]
    threshold = score(entries[last])

    def minus_score(entry: Entry) -> int:
        return -score(entry)

    # The run of entries scoring `threshold`: all above it are in; the run is cut in rotated order.
    low = bisect_left(entries, -threshold, 0, last, key=minus_score)
    high = bisect_right(entries, -threshold, last, len(entries), key=minus_score)
    above = [entries[i][2] for i in at if i < low]
    return above + _tied(entries, low, high, members, keep - len(above), rotated, entry_of)


# Testing a rotated name against the run costs ~3x putting one of the run's names in a set
# (measured at 20,000 nodes): names are tested one by one up to a third of the run's length, so a
# run whose first ties come late costs at most ~2x the set.
SCAN_COST = 3


def _tied(
    entries: list[Entry],
    low: int,
    high: int,
    members: set[str] | None,
    left: int,
    rotated: tuple[Sequence[str], int],
    entry_of: Callable[[str], Entry | None],
) -> list[str]:
    """Of the run entries[low:high] (those among `members`), the `left` >= 1 to keep: all, in ranked
    order, when they are no more than `left`; else the first `left` in rotated order.

    A run is often thousands long (the score has 11 values; at 20,000 nodes, every idle node ties),
    and its first `left` in rotated order are then found a few hundred names in: the rotated names
    are tested one by one against the run's first and last entries, and only past a third of the
    run's length in names is the run made a set (~1 ms at 20,000 nodes)."""
    if members is None and high - low <= left:
        return list(map(_NAME, entries[low:high]))
    first, last = entries[low], entries[high - 1]  # a member's entry within them: in the run
    names, start = rotated
    order = chain(islice(names, start, None), islice(names, start))
    budget = (high - low) // SCAN_COST
    want = left if members is None else left + 1  # (with members: more than `left` tied, or all)
    found: list[str] = []
    for name in islice(order, budget):
        entry = entry_of(name)
        if entry is not None and first <= entry <= last:
            found.append(name)
            if len(found) == want:
                return found[:left]
    if budget >= len(names):  # every member seen: no more than `left` are tied
        return sorted(found, key=cast("Callable[[str], Entry]", entry_of))  # (each has an entry)
    run = list(map(_NAME, entries[low:high]))
    tied = set(run)  # (a run of thousands: set operations in C)
    if members is not None:
        tied &= members
    if len(tied) <= left:
        return run if len(tied) == len(run) else [name for name in run if name in tied]
    if len(found) < left:  # (with members, `left` may be found already)
        for name in order:  # on from the budget's end
            if name in tied:
                found.append(name)
                if len(found) == left:
                    break
    return found
