"""MIG devices: a pod's `nvidia.com/mig-<profile>` requests matched to each node's MIG instances.

The rules: decide/README.md ("Filter", MIG devices). Pure, like whole_gpus.py, and run before it.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.filter_outcome import FilterOutcome, finish
from gpuextender.extender.decide.reasons import Reason
from gpuextender.extender.decide.whole_gpus import SummaryLookup
from gpuextender.extender.model.pod_gpus import MigNeed
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.freshness import is_fresh
from gpuextender.extender.state.gpu_summary import NodeSummary


def mig_reason(summary: NodeSummary, need: MigNeed) -> Reason | None:
    """The verdict on fresh data: None when every requested profile has enough free instances."""
    if summary.node_error:
        return reasons.NVML_UNAVAILABLE
    instances, free = dict(summary.mig_instances), dict(summary.mig_free)
    if any(instances.get(profile, 0) < count for profile, count in need):
        return reasons.INSUFFICIENT_MIG_DEVICES
    if any(free.get(profile, 0) < count for profile, count in need):
        return reasons.INSUFFICIENT_FREE_MIG_DEVICES
    return None


def filter_mig(
    need: MigNeed, names: Sequence[str], lookup: SummaryLookup, now: float, policy: DecisionPolicy
) -> FilterOutcome:
    outcome = FilterOutcome()
    if not need:
        outcome.passed = list(names)
        return outcome
    for name in names:
        summary = lookup(name)
        if summary is not None and is_fresh(summary.received_at, now, policy.stale_after_s):
            reason = mig_reason(summary, need)
            if reason is None:
                outcome.passed.append(name)
            else:
                outcome.failed[name] = reason
        elif summary is not None and policy.stale_policy == "fail-closed":
            outcome.failed[name] = reasons.STALE_GPU_DATA
        else:
            outcome.assumed.append(name)
    return finish(outcome, policy.no_fit_policy)
