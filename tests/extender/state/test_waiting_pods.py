"""Pods waiting for GPUs (state/waiting_pods.py): from a filter call that found no place until one
finds it a node, it is bound, or it is not asked about for TTL_S; at most MAX_PODS kept."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from gpuextender.extender.state.waiting_pods import MAX_PODS, TTL_S, WaitingPods


@dataclass(frozen=True)
class R:
    code: str
    sentence: str


IDLE = R("InsufficientIdleGPUs", "too few idle GPUs")
FEW = R("InsufficientGPUs", "node has too few GPUs")


def verdict(pods: WaitingPods, uid: str, now: float, *, passed: int = 0, **over: Any) -> None:
    args: dict[str, Any] = {
        "uid": uid,
        "pod": f"ns/{uid}",
        "gpus": 4,
        "nodes": 3,
        "passed": passed,
        "fallback": False,
        "assumed": False,
        "failures": Counter({IDLE: 2, FEW: 1}).most_common(),
        "now": now,
    }
    pods.record(**{**args, **over})


def test_a_pod_waits_from_its_first_unplaced_filter_until_one_places_it() -> None:
    pods = WaitingPods()
    verdict(pods, "p", 10.0)
    verdict(pods, "p", 40.0)
    (w,) = pods.current(41.0)
    assert (w.pod, w.since, w.last, w.calls, w.gpus, w.nodes, w.verdict) == (
        "ns/p",
        10.0,
        40.0,
        2,
        4,
        3,
        "no node fits",
    )
    assert w.reasons == (
        ("InsufficientIdleGPUs", "too few idle GPUs", 2),
        ("InsufficientGPUs", "node has too few GPUs", 1),
    )
    verdict(pods, "p", 50.0, passed=1, failures=[])
    assert pods.current(51.0) == []


def test_a_fallback_or_assumed_pass_still_counts_as_waiting_with_its_verdict() -> None:
    pods = WaitingPods()
    verdict(pods, "f", 1.0, passed=3, fallback=True)
    verdict(pods, "a", 2.0, passed=1, assumed=True)
    by_pod = {w.pod: w.verdict for w in pods.current(3.0)}
    assert by_pod["ns/f"].startswith("no node fits: kube-scheduler chooses among busy or stale ones")
    assert by_pod["ns/a"].startswith("passed only on assumed data")


def test_a_pod_not_asked_about_for_the_ttl_is_dropped_at_exactly_its_bound() -> None:
    pods = WaitingPods()
    verdict(pods, "p", 100.0)
    assert [w.pod for w in pods.current(100.0 + TTL_S)] == ["ns/p"]  # at the bound: kept
    assert pods.current(100.0 + TTL_S + 0.001) == []


def test_bound_pods_are_dropped() -> None:
    pods = WaitingPods()
    verdict(pods, "p", 1.0)
    verdict(pods, "q", 1.0)
    assert [w.pod for w in pods.current(2.0, bound=lambda uid: uid == "p")] == ["ns/q"]
    pods.forget(["q"])
    assert pods.current(2.0) == []


def test_at_most_max_pods_are_kept_the_longest_unasked_dropped_first() -> None:
    pods = WaitingPods()
    for i in range(MAX_PODS):
        verdict(pods, f"p{i}", i / 100)  # all within the TTL of the checks below
    assert len(pods.current(10.0)) == MAX_PODS  # exactly the bound
    verdict(pods, "p0", 10.0)  # asked again: now the most recent
    verdict(pods, "new", 11.0)  # one over: the longest unasked (p1) goes
    kept = {w.uid for w in pods.current(11.0)}
    assert len(kept) == MAX_PODS and "p1" not in kept and {"p0", "new"} <= kept
