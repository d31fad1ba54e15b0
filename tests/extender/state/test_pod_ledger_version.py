"""PodLedger.version (issue 51, item 7): a node's version changes with every change of the pods bound
there, and only then; 0 while it holds none (what the preempt verb keeps per node is valid while it
is the same: scheduler/preempt_facts.py)."""

from __future__ import annotations

from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from tests.extender.scheduler.test_preempt_verb import LOW, pod


def ledger() -> PodLedger:
    led = PodLedger(("nvidia.com/gpu",), lambda: 0.0)
    led.replace_all(POD_KIND, [pod("a", 1, LOW, node="n"), pod("b", 1, LOW, node="m")])
    return led


def test_a_nodes_version_changes_with_its_pods_and_only_then() -> None:
    led = ledger()
    n, m = led.version("n"), led.version("m")
    assert n and m and n != m and led.version("empty") == 0
    assert led.versions()("n", 0) == n and led.versions()("empty", 0) == 0
    led.upsert(POD_KIND, pod("a", 1, LOW, node="n"))  # the same pod again: no change
    assert led.version("n") == n
    led.upsert(POD_KIND, pod("c", 1, LOW, node="n"))
    assert led.version("n") not in (0, n) and led.version("m") == m
    n = led.version("n")
    led.upsert(POD_KIND, pod("c", 2, LOW, node="n"))  # a pod changes
    assert led.version("n") not in (0, n)


def test_a_pod_moving_changes_both_nodes_and_the_last_pod_leaving_is_zero() -> None:
    led = ledger()
    n, m = led.version("n"), led.version("m")
    led.upsert(POD_KIND, pod("b", 1, LOW, node="n"))  # (a new binding of the same uid)
    assert led.version("m") == 0 and led.version("n") not in (0, n)
    led.delete(POD_KIND, pod("a", 1, LOW, node="n"))
    led.forget("uid-b")
    assert led.version("n") == 0 and m


def test_a_relist_changes_the_version_of_every_node_it_touches() -> None:
    led = ledger()
    n, m = led.version("n"), led.version("m")
    led.replace_all(POD_KIND, [pod("a", 1, LOW, node="n")])
    assert led.version("m") == 0 and led.version("n") not in (0, n, m)
    assert led.assume(led.slim(pod("z", 1, LOW, node="m"), 0.0) or pytest_fail())
    assert led.version("m") > led.version("n")


def pytest_fail() -> None:
    raise AssertionError("not a ledger pod")
