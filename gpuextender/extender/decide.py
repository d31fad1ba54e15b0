"""One pod's placement over one call's candidates: the `Decision` that filter,
prioritize and explain render.

    wire (scheduler_wire) -> question (pod_request.PodRequest, snapshot.Candidates)
      -> what we know (snapshot.Snapshot) -> decision (this module, on
      placement.py and decision.py) -> answer (scheduler_wire.filter_result /
      prioritize_result, explain.explain)

A Decision computes each of its parts at most once, when a rendering first asks
for it: filter pays only for the filter verdicts, explain reuses whatever
filter and prioritize computed. Pure: everything it reads is in its arguments.
"""

from __future__ import annotations

from functools import cached_property

from gpuextender.extender import decision, mig_fit, placement
from gpuextender.extender.ome.class_policy import ClassRanking
from gpuextender.extender.pod_request import PodRequest
from gpuextender.extender.snapshot import Candidates, Snapshot


class Decision:
    def __init__(self, pod: PodRequest, plan: placement.ClassPlan, candidates: Candidates, known: Snapshot) -> None:
        self.pod, self.plan, self.candidates, self.known = pod, plan, candidates, known

    @cached_property
    def _mig(self) -> decision.FilterOutcome:
        """The MIG step (mig_fit), before the whole-GPU rules: which nodes can give the pod its MIG devices."""
        known = self.known
        return mig_fit.filter_mig(self.pod.mig_needed, self.candidates.names, known.summary, known.now, known.policy)

    @cached_property
    def filtered(self) -> decision.FilterOutcome:
        """Which candidates pass, and why each other one fails."""
        if not self.pod.mig_needed:
            return placement.filter_with_classes(self.pod.gpus_needed, self.candidates, self.known, self.plan)
        mig = self._mig
        rest = Candidates(mig.passed, self.candidates.allocatable)
        outcome = placement.filter_with_classes(self.pod.gpus_needed, rest, self.known, self.plan)
        outcome.failed.update(mig.failed)
        outcome.fallback = outcome.fallback or mig.fallback
        passed, already = set(outcome.passed), set(outcome.assumed)
        outcome.assumed.extend(n for n in mig.assumed if n in passed and n not in already)
        return outcome

    @cached_property
    def _ranked(self) -> tuple[list[tuple[str, int]], ClassRanking | None]:
        pod = self.pod
        return placement.prioritize_with_classes(pod.gpus_needed, self.candidates, self.known, self.plan,
                                                 pod.strategy, pod.seed)  # fmt: skip

    @property
    def scores(self) -> list[tuple[str, int]]:
        """(node, 0-10) for every candidate, in request order: classes first, then the node strategy.
        A node that cannot give the pod its MIG devices scores 0."""
        if not self.pod.mig_needed:
            return self._ranked[0]
        failed = self._mig.failed
        return [(name, 0 if name in failed else score) for name, score in self._ranked[0]]

    @property
    def class_ranking(self) -> ClassRanking | None:
        """The policy's ranking of the allowed classes (None: class-neutral or one explicit class)."""
        return self._ranked[1]

    @cached_property
    def node_scores(self) -> dict[str, int]:
        """The node strategy's own 0-10 score, before classes (explain shows both)."""
        known, c = self.known, self.candidates
        cost_of = placement.node_cost(known.classes_by_node, known.view.classes)
        return dict(decision.prioritize(self.pod.gpus_needed, c.names, c.allocatable, known.summary, known.now,
                                        known.policy, self.pod.strategy, self.pod.seed, cost_of))  # fmt: skip

    def assess(self, node: str) -> decision.NodeAssessment:
        """One node's GPU verdict with the numbers behind it (for logs and explain)."""
        known = self.known
        return decision.assess(node, self.candidates.allocatable.get(node), known.summary(node),
                               self.pod.gpus_needed, known.now, known.policy)  # fmt: skip
