"""What each verb leaves behind besides its answer: metrics and one log line per decision.

A filter line names a few passed nodes (a gang member's one node: where its room is held) and a few
failed nodes with their numbers (all failed ones at DEBUG); its text is built only when it is logged."""

from __future__ import annotations

import logging
from collections import Counter
from itertools import islice

from gpuextender.extender.decide import reasons, whole_gpus
from gpuextender.extender.decide.decision import Decision
from gpuextender.extender.observe.metrics import ExtenderMetrics

log = logging.getLogger("gpu_extender.http")

# How many failed nodes an INFO decision line names; the rest are counted (DEBUG names all).
LOG_FAILED_NODES = 5


def record_plan(metrics: ExtenderMetrics, runtime_check: str, d: Decision) -> None:
    """The class plan's warnings and counters (logged once per plan in class_plan.py, counted per call)."""
    plan = d.plan
    if plan.incompatible:
        log.warning(
            "filter %s: %s",
            d.pod.ref,
            plan.incompatible,
            extra={"pod": d.pod.ref, "verb": "filter", "reason": plan.incompatible_reason.code},
        )
    if plan.runtime_warning or (plan.incompatible_reason is reasons.RUNTIME_INCOMPATIBLE and plan.incompatible):
        metrics.runtime_incompatible.labels(mode=runtime_check).inc()
    if plan.no_class:
        metrics.class_policy_no_class.labels(reason=plan.no_class).inc()
    if plan.runtime_warning:
        log.warning(
            "filter %s: runtime cannot serve the model (--runtime-check warn, not enforced): %s",
            d.pod.ref,
            plan.runtime_warning,
        )


def record_filter(m: ExtenderMetrics, d: Decision) -> Counter[reasons.Reason]:
    """Metrics and the decision log line of one filter; returns the failed nodes per reason."""
    outcome, needed, held_back = d.filtered, d.pod.gpus_needed, d.held_back_count
    m.filter_nodes.labels(result="passed").inc(len(outcome.passed) - held_back)
    m.filter_nodes.labels(result="failed").inc(len(outcome.failed))
    if held_back:
        m.filter_nodes.labels(result="held_back").inc(held_back)
    failures = Counter(outcome.failed.values())
    for reason, count in failures.items():
        m.filter_failures.labels(reason=reason.code).inc(count)
    if outcome.fallback:
        m.filter_fallbacks.inc()
    if outcome.preemptible:
        m.filter_preemptible.inc()
    if outcome.assumed:
        m.filter_assumed_passes.inc(len(outcome.assumed))
    mig = d.pod.mig_needed
    if needed == 0 and not mig:
        log.debug("filter %s: needs no GPU, all %d node(s) pass", d.pod.ref, len(outcome.passed))
        return failures
    if not log.isEnabledFor(logging.INFO):
        return failures
    limit = len(outcome.failed) if log.isEnabledFor(logging.DEBUG) else LOG_FAILED_NODES
    shown = [failure_text(reason.code, d.assess(name)) for name, reason in islice(outcome.failed.items(), limit)]
    more = f" and {len(outcome.failed) - len(shown)} more" if len(outcome.failed) > len(shown) else ""
    log.info(
        "filter %s needs %d GPU%s: %d passed%s%s%s, %d failed%s%s",
        d.pod.ref,
        needed,
        "".join(f", {n} MIG {p}" for p, n in mig),
        len(outcome.passed),
        f" ({_names(outcome.passed)})" if outcome.passed else "",
        f" ({len(outcome.passed) - held_back} best answered, --shortlist {d.shortlist})" if held_back else "",
        " (no node fit: passing the busy/stale ones, kube-scheduler decides)"
        if outcome.fallback
        else f" (no node fit: the pod may preempt lower-priority GPU pods on {outcome.preemptible} node(s))"
        if outcome.preemptible
        else f" (on assumed data: no node with fresh GPU data fits; {_names(outcome.assumed)})"
        if outcome.assumed
        else "",
        len(outcome.failed),
        (": " + "; ".join(shown)) if shown else "",
        more,
    )
    return failures


def log_prioritize(d: Decision) -> None:
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "prioritize %s (needs %d GPU): %s",
            d.pod.ref,
            d.pod.gpus_needed,
            ", ".join(f"{name}={score}" for name, score in d.scores),
        )


def failure_text(code: str, a: whole_gpus.NodeAssessment) -> str:
    """The reason the node failed (class or GPU rules), with its GPU numbers."""
    assumed = ", assumed" if a.assumed else ""  # the numbers are not measured: idle = needed
    return (
        f"{a.name}: {code} (idle {_n(a.idle_gpus)}, healthy {_n(a.healthy_gpus)}/{_n(a.gpu_count)}, "
        f"data {a.data.value}{assumed})"
    )


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:LOG_FAILED_NODES])
    more = len(names) - LOG_FAILED_NODES
    return shown + (f" and {more} more" if more > 0 else "")


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)
