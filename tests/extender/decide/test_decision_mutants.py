"""Rules of decide/decision.py that a one-line change would break unseen (mutation testing): a
Decision made without a shortlist answers every passing node; after a ComputeDomain veto the nodes
left keep their allocatable GPUs and a MIG pod's MIG step runs over them only; a MIG pod's strict
verdicts have no fallback; a pod of MIG devices and whole GPUs judges unreported nodes on their
allocatable; assess names the node it judged."""

from __future__ import annotations

from dataclasses import replace

from gpuextender.extender.decide.compute_domains import OTHER_COMPUTE_DOMAIN
from gpuextender.extender.decide.decision import Decision
from gpuextender.extender.decide.reasons import INSUFFICIENT_FREE_MIG_DEVICES
from gpuextender.extender.decide.snapshot import Candidates, Snapshot
from gpuextender.extender.model.pod_request import PodRequest
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.inventory_view import InventoryView
from tests.extender.decide.test_mig_devices import NOW as MIG_NOW
from tests.extender.decide.test_mig_devices import mig_gpu, table
from tests.extender.decide.test_mig_devices import node as mig_node
from tests.extender.decide.test_shortlist import IDENTITY, NEUTRAL, fresh, snapshot


def test_without_a_shortlist_every_passing_node_is_answered() -> None:
    summaries = {f"n{i}": fresh(f"n{i}", idle_gpus=1 + i) for i in range(3)}
    names = list(summaries)
    decision = Decision(
        PodRequest("ns/p", 1, IDENTITY, "spread", "seed"), NEUTRAL, Candidates(names, {}), snapshot(summaries)
    )
    assert decision.answered.passed == names
    assert decision.held_back == frozenset() and decision.held_back_count == 0


def test_after_a_computedomain_veto_the_rest_keep_their_allocatable() -> None:
    """A pod of ComputeDomain A: the node holding B fails; a node the agent has not reported yet is
    judged on its allocatable GPUs, as without the veto (8 allocatable: passes on assumed data; 1: fails)."""
    known = replace(snapshot({}), compute_domains_on=lambda node: frozenset({"B"}) if node == "b" else frozenset())
    pod = replace(PodRequest("ns/p", 2, IDENTITY, "spread", "seed"), compute_domains=frozenset({"A"}))
    names = ["b", "big", "small"]
    outcome = Decision(pod, NEUTRAL, Candidates(names, {"big": 8, "small": 1}), known).filtered
    assert outcome.passed == ["big"] and outcome.assumed == ["big"]
    assert outcome.failed["b"] is OTHER_COMPUTE_DOMAIN and "small" in outcome.failed


ONE_1G = (("1g.10gb", 1),)


def mig_known(*summaries: NodeSummary, domains: dict[str, str] | None = None) -> Snapshot:
    held = domains or {}
    return Snapshot(
        table(*summaries),
        InventoryView(),
        {},
        MIG_NOW,
        DecisionPolicy(),
        compute_domains_on=lambda node: frozenset({held[node]}) if node in held else frozenset(),
    )


def test_a_mig_pod_of_a_computedomain_never_passes_a_node_of_another() -> None:
    """Both nodes have a free 1g instance; the one holding ComputeDomain B fails for the pod of A
    (its MIG step runs over the nodes left, not every candidate)."""
    nodes = [mig_node(name, [mig_gpu(0, ("1g.10gb", False, 1))]) for name in ("b", "free")]
    pod = replace(PodRequest("ns/p", 0, IDENTITY, "spread", "seed", ONE_1G), compute_domains=frozenset({"A"}))
    outcome = Decision(pod, NEUTRAL, Candidates(["b", "free"], {}), mig_known(*nodes, domains={"b": "B"})).filtered
    assert outcome.passed == ["free"] and outcome.failed == {"b": OTHER_COMPUTE_DOMAIN}


def test_a_mig_pods_strict_verdicts_have_no_fallback() -> None:
    """The only node's 1g instance is held: filter passes it by the no-fit fallback, the strict
    verdicts (what preemption asks) do not."""
    busy = mig_node("busy", [mig_gpu(0, ("1g.10gb", True, 1))])
    decision = Decision(
        PodRequest("ns/p", 0, IDENTITY, "spread", "seed", ONE_1G), NEUTRAL, Candidates(["busy"], {}), mig_known(busy)
    )
    assert decision.filtered.passed == ["busy"] and decision.filtered.fallback
    assert decision.strict.passed == [] and decision.strict.failed == {"busy": INSUFFICIENT_FREE_MIG_DEVICES}


def test_a_pod_of_mig_devices_and_whole_gpus_judges_unreported_nodes_on_their_allocatable() -> None:
    """No node has agent data: the MIG step's fallback passes them, and the whole-GPU step judges
    each on its allocatable GPUs (1 fits 1 GPU on assumed data; 0 does not)."""
    pod = PodRequest("ns/p", 1, IDENTITY, "spread", "seed", ONE_1G)
    outcome = Decision(pod, NEUTRAL, Candidates(["one", "none"], {"one": 1, "none": 0}), mig_known()).filtered
    assert outcome.passed == ["one"] and outcome.assumed == ["one"] and "none" in outcome.failed


def test_a_nodes_assessment_is_of_that_node() -> None:
    """assess names the node it judged (the filter log's line per failed node starts with it)."""
    summaries = {"n": fresh("n", idle_gpus=3)}
    decision = Decision(
        PodRequest("ns/p", 4, IDENTITY, "spread", "seed"), NEUTRAL, Candidates(["n"], {}), snapshot(summaries)
    )
    a = decision.assess("n")
    assert (a.name, a.idle_gpus, a.gpu_count) == ("n", 3, 8) and a.reason is not None
