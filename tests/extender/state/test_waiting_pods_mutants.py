"""Rules of the waiting pods (state/waiting_pods.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: a pod keeps its TOP_REASONS (3) most
common reasons, and a pod passed on assumed data only says so in its exact words."""

from __future__ import annotations

from dataclasses import dataclass

from gpuextender.extender.state.waiting_pods import TOP_REASONS, WaitingPods


@dataclass(frozen=True)
class R:
    code: str
    sentence: str


def record(pods: WaitingPods, failures: list[tuple[R, int]], *, assumed: bool = False) -> None:
    pods.record(
        uid="u",
        pod="ns/p",
        gpus=1,
        nodes=10,
        passed=int(assumed),
        fallback=False,
        assumed=assumed,
        failures=failures,
        now=1.0,
    )


def test_a_pod_keeps_its_three_most_common_reasons() -> None:
    pods = WaitingPods()
    record(pods, [(R(f"C{n}", f"s{n}"), n) for n in (4, 3, 2, 1)])
    (w,) = pods.current(1.0)
    assert TOP_REASONS == 3
    assert w.reasons == (("C4", "s4", 4), ("C3", "s3", 3), ("C2", "s2", 2))


def test_a_pod_passed_on_assumed_data_only_says_so() -> None:
    pods = WaitingPods()
    record(pods, [], assumed=True)
    (w,) = pods.current(1.0)
    assert w.verdict == "passed only on assumed data: no node with fresh GPU data fits"
