"""One pod's placement over one call's candidates: the `Decision` that filter,
prioritize and explain render.

    wire (scheduler/wire.py) -> question (pod_request.PodRequest, snapshot.Candidates)
      -> what we know (snapshot.Snapshot) -> decision (this module, on
      class_plan.py and whole_gpus.py) -> answer (wire.filter_result /
      prioritize_result, explain.explain)

A Decision computes each of its parts at most once, when a rendering first asks
for it: filter pays only for the filter verdicts (and the scores, when it must
shortlist), explain reuses whatever filter and prioritize computed. Pure:
everything it reads is in its arguments.

The shortlist (decide/README.md, "Filter"; shortlist.py): when more than `shortlist` nodes pass a
GPU pod's filter, the answer names only the `shortlist` best of them; the others pass, unanswered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import cached_property
from itertools import filterfalse
from typing import cast

from gpuextender.extender.decide import (
    class_plan,
    compute_domains,
    group_domains,
    group_member,
    mig_devices,
    preemption,
    score_bands,
    shortlist,
    whole_gpus,
)
from gpuextender.extender.decide.class_policy import ClassRanking
from gpuextender.extender.decide.filter_outcome import FilterOutcome, after_mig
from gpuextender.extender.decide.snapshot import Candidates, Snapshot
from gpuextender.extender.model.pod_request import PodRequest


class Decision:
    def __init__(
        self,
        pod: PodRequest,
        plan: class_plan.ClassPlan,
        candidates: Candidates,
        known: Snapshot,
        shortlist: int = 0,
        group: group_member.GroupContext | None = None,
        kept_whole: frozenset[str] = frozenset(),
    ) -> None:
        """`shortlist`: filter answers at most this many of the nodes that pass (0: all). `group`:
        the pod is a member of a multi-pod group (group_member.py decides its domain).
        `kept_whole`: the nodes of the group level's whole domains (whole_domains.py), which a
        single pod ranks after every other node that fits (empty for a group's member)."""
        self.pod, self.plan, self.candidates, self.known = pod, plan, candidates, known
        self.shortlist = shortlist
        self.group = group
        self.kept_whole = kept_whole

    @cached_property
    def _mig(self) -> FilterOutcome:
        """The MIG step (mig_devices), before the whole-GPU rules: which nodes can give the pod its MIG devices."""
        known = self.known
        return mig_devices.filter_mig(
            self.pod.mig_needed, self.candidates.names, known.summary, known.now, known.policy
        )

    @cached_property
    def filtered(self) -> FilterOutcome:
        """Which candidates pass, and why each other one fails. When no node fit and the fallback
        would pass nodes where the pod may preempt lower-priority GPU pods, it is held back
        (preemption.py): the failures stay, and kube-scheduler's preemption decides."""
        if self.group is not None:
            return self.member.outcome
        known = self.known
        outcome = self._plain(self.candidates, known)
        if outcome.fallback:
            room = preemption.preemptible_nodes(self.pod, outcome.passed, known.bound_pods)
            if room:
                outcome = self._plain(
                    self.candidates, replace(known, policy=replace(known.policy, no_fit_policy="reject"))
                )
                outcome.preemptible = len(room)
        return outcome

    @cached_property
    def strict(self) -> FilterOutcome:
        """The pod's own verdicts over the candidates without the no-fit fallback (preemption asks
        which nodes the pod cannot use whatever is evicted: preempt_victims.py)."""
        known = self.known
        return self._plain(self.candidates, replace(known, policy=replace(known.policy, no_fit_policy="reject")))

    def _plain(self, candidates: Candidates, known: Snapshot) -> FilterOutcome:
        """The pod's own verdicts over `candidates` (ComputeDomains, classes, MIG devices, whole GPUs)."""
        if self.pod.compute_domains:
            vetoed = compute_domains.vetoed(self.pod.compute_domains, candidates.names, known.compute_domains_on)
            if vetoed:
                rest = Candidates([n for n in candidates.names if n not in vetoed], candidates.allocatable)
                outcome = self._judged(rest, known)
                outcome.failed.update(vetoed)
                return outcome
        return self._judged(candidates, known)

    def _judged(self, candidates: Candidates, known: Snapshot) -> FilterOutcome:
        if not self.pod.mig_needed:
            return class_plan.filter_with_classes(self.pod.gpus_needed, candidates, known, self.plan)
        if candidates is self.candidates and known is self.known:
            mig = self._mig  # (kept: scores reads it too)
        else:
            mig = mig_devices.filter_mig(self.pod.mig_needed, candidates.names, known.summary, known.now, known.policy)
        rest = Candidates(mig.passed, candidates.allocatable)
        return after_mig(mig, class_plan.filter_with_classes(self.pod.gpus_needed, rest, known, self.plan))

    @cached_property
    def member(self) -> group_member.MemberOutcome:
        """A group member's filter: its own verdicts without the no-fit fallback (a domain without
        room must never look feasible), then the group's domain."""
        group = self.group
        assert group is not None
        known, pod, names = self.known, self.pod, self.candidates.names
        strict = replace(known, policy=replace(known.policy, no_fit_policy="reject"))
        allocatable = self.candidates.allocatable
        index = known.fit_index
        tallied = fleet = None
        if (
            index is not None
            and not self.plan.applies
            and not pod.mig_needed
            and pod.gpus_needed > 0
            and not pod.compute_domains  # (the index's rooms know no ComputeDomain)
        ):
            # The member's own filter is the index's road: its rooms per domain are the index's too.
            k, now, stale_after = pod.gpus_needed, known.now, known.policy.stale_after_s

            def tallied(level: str) -> group_domains.Tallied | None:
                return index.domain_rooms(k, level, group.index(level).value_of, names, now, stale_after)

            def fleet_rooms(level: str) -> group_domains.Tallied | None:
                return index.domain_rooms(k, level, group.index(level).value_of, None, now, stale_after)

            def fleet_nodes(level: str, value: str, single: bool) -> list[str]:
                nodes = (value,) if single else group.index(level).nodes_of.get(value, frozenset())
                return list(index.domain_fits(k, nodes, now, stale_after) or ())

            fleet = group_member.FleetRooms(fleet_rooms, fleet_nodes)

        return group_member.filter_member(
            group, names, lambda some: self._plain(Candidates(some, allocatable), strict), known.summary, tallied, fleet
        )

    @cached_property
    def answered(self) -> FilterOutcome:
        """What filter answers: `filtered`, its passes cut to the shortlist (module docstring), the
        best first (kube-scheduler reads the names as a set)."""
        outcome, keep = self.filtered, self.shortlist
        if keep <= 0 or len(outcome.passed) <= keep or (self.pod.gpus_needed <= 0 and not self.pod.mig_needed):
            return outcome
        passed, kept_whole = outcome.passed, self.kept_whole
        whole = kept_whole.intersection(passed) if kept_whole else kept_whole
        if whole and len(whole) < len(passed):  # the other passes first, then the whole domains'
            first = list(filterfalse(whole.__contains__, passed))
            kept = self._best(first, keep)
            if len(kept) < keep:
                kept += self._best(list(filter(whole.__contains__, passed)), keep - len(kept))
        else:
            kept = self._best(passed, keep)
        assumed = set(outcome.assumed)  # (passes on assumed data: none while a fresh node fits)
        return FilterOutcome(
            kept, outcome.failed, outcome.fallback, [n for n in kept if n in assumed] if assumed else []
        )

    def _best(self, passed: list[str], keep: int) -> list[str]:
        if len(passed) <= keep:
            return passed
        return shortlist.best(self.pod, passed, keep, self.candidates, self.known, self.plan)

    @cached_property
    def held_back(self) -> frozenset[str]:
        """Nodes that pass but are not in filter's answer (not among the shortlist's best)."""
        answered = self.answered
        if answered is self.filtered:
            return frozenset()
        return frozenset(self.filtered.passed).difference(answered.passed)

    @property
    def held_back_count(self) -> int:
        """How many of filter's passes its answer leaves out (the metric's count, without a set)."""
        return len(self.filtered.passed) - len(self.answered.passed)

    @cached_property
    def _ranked(self) -> tuple[list[tuple[str, int]], ClassRanking | None]:
        pod = self.pod
        return class_plan.prioritize_with_classes(
            pod.gpus_needed, self.candidates, self.known, self.plan, pod.strategy, pod.seed
        )

    @property
    def scores(self) -> list[tuple[str, int]]:
        """(node, 0-10) for every candidate, in request order: classes first, then the node strategy.
        A node that cannot give the pod its MIG devices, or a group member's node outside its
        group's domain, scores 0; a single pod's nodes of whole domains rank after its others
        (whole_domains.py)."""
        scores = self._ranked[0]
        group = self.group
        if group is not None:
            failed = self.filtered.failed
            scores = [(name, 0 if name in failed else score) for name, score in scores]
            held = group.held
            # Where the group's room is held first: kube-scheduler binds a member (not a gang's:
            # answered one node) on any passing node of the domain, and the placement keeps the
            # domain's roomiest nodes for larger members (group_domains.place).
            return score_bands.ranked_below(scores, _NotIn(held)) if held else scores
        if self.pod.mig_needed:
            failed = self._mig.failed
            scores = [(name, 0 if name in failed else score) for name, score in scores]
        return score_bands.ranked_below(scores, self.kept_whole) if self.kept_whole else scores

    @property
    def class_ranking(self) -> ClassRanking | None:
        """The policy's ranking of the allowed classes (None: class-neutral or one explicit class)."""
        return self._ranked[1]

    @cached_property
    def node_scores(self) -> dict[str, int]:
        """The node strategy's own 0-10 score, before classes (explain shows both)."""
        known, c = self.known, self.candidates
        cost_of = class_plan.node_cost(known.classes_by_node, known.view.classes)
        return dict(
            whole_gpus.prioritize(
                self.pod.gpus_needed,
                c.names,
                c.allocatable,
                known.summary,
                known.now,
                known.policy,
                self.pod.strategy,
                self.pod.seed,
                cost_of,
            )
        )

    def assess(self, node: str) -> whole_gpus.NodeAssessment:
        """One node's GPU verdict with the numbers behind it (for logs and explain)."""
        known = self.known
        return whole_gpus.assess(
            node,
            self.candidates.allocatable.get(node),
            known.summary(node),
            self.pod.gpus_needed,
            known.now,
            known.policy,
        )


class _NotIn:
    """The nodes without a member held on them (`held`: node -> members)."""

    def __init__(self, held: Mapping[str, int]) -> None:
        self._held = held

    def __contains__(self, node: object) -> bool:
        return not self._held.get(cast(str, node), 0)
