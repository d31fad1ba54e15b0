"""What a filter step answers, and the one finishing step every filter step ends with (whole GPUs
in whole_gpus.py, MIG devices in mig_devices.py): the rules are decide/README.md, "Filter"."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuextender.extender.decide import reasons
from gpuextender.extender.decide.reasons import Reason


@dataclass(slots=True, weakref_slot=True)  # weakly referenced: fit_index.FitIndex._vouch
class FilterOutcome:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, Reason] = field(default_factory=dict)  # assess() gives the numbers behind one
    fallback: bool = False  # no node fit and pass-all let the soft failures through
    assumed: list[str] = field(default_factory=list)  # passed on assumed data (no node with fresh data fit)
    # No node fit and the fallback was held back: on this many of its nodes lower-priority GPU pods
    # may be preempted (preemption.py), so the failures stay for kube-scheduler's preemption.
    preemptible: int = 0


def finish(outcome: FilterOutcome, no_fit_policy: str) -> FilterOutcome:
    """`outcome.passed` holds the nodes that fit on fresh data, `outcome.assumed` those that fit on
    assumed data only. Assumed data never competes with fresh data: they pass only when no fresh
    node fits, else they fail NoFreshGPUData. Then, if nothing passes, `pass-all` lets the soft
    failures through (kube-scheduler decides among them); nodes with broken GPUs stay rejected."""
    passed, failed, assumed = outcome.passed, outcome.failed, outcome.assumed
    if assumed:
        if passed:
            failed.update(dict.fromkeys(assumed, reasons.NO_FRESH_GPU_DATA))
            assumed.clear()
        else:
            passed.extend(assumed)
    if not passed and failed and no_fit_policy == "pass-all":
        soft = [name for name, reason in failed.items() if not reason.unresolvable]
        if soft:
            outcome.fallback = True
            outcome.passed = soft
            outcome.failed = {n: r for n, r in failed.items() if r.unresolvable}
    return outcome


def after_mig(mig: FilterOutcome, rest: FilterOutcome) -> FilterOutcome:
    """The whole-GPU outcome `rest` over the nodes MIG passed, with MIG's failures and flags added:
    a node assumed by MIG and passing the rest stays marked assumed."""
    rest.failed.update(mig.failed)
    rest.fallback = rest.fallback or mig.fallback
    passed, already = set(rest.passed), set(rest.assumed)
    rest.assumed.extend(n for n in mig.assumed if n in passed and n not in already)
    return rest
