"""Rules of the live GPU state (state/gpu_state.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: a report received before the stored
one is refused and changes nothing (not even the facts a later report reads), equal facts are no
change, a heartbeat's readings apply to the agent's own summary, a changed allocatable re-infers
every node that needs it and only those, bound pods are counted for nodes already reported, and a
forgotten node leaves nothing behind."""

from __future__ import annotations

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.state.bound_pods import RUNNING
from gpuextender.extender.state.facts_reader import FactsReader
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import summarize
from gpuextender.extender.state.pod_ledger import BoundPod
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import GIB, gpu, report

RULE = IdleRule()


def plain(node: str = "n", seq: int = 1, *, known: bool = False) -> pb.NodeReport:
    """8 idle GPUs; allocation unknown (sharing read off allocatable) unless `known`."""
    r = report(node, [gpu(i, 0, 1) for i in range(8)], seq=seq, seconds=1000 + seq)
    if known:
        r.allocation_source = pb.ALLOCATION_KUBELET
    return r


def named(name: str, uuid: str, seq: int) -> pb.NodeReport:
    """One GPU whose facts are complete (so the facts reader keeps them while its UUID stays)."""
    g = pb.GpuSample(index=0, uuid=uuid, name=name, healthy=True, memory_total_bytes=80 * GIB)
    g.compute_capability.major, g.compute_capability.minor = 9, 0
    return report("n", [g], seq=seq, seconds=1000 + seq)


def pod(gpus: int, phase: str, node: str = "n") -> BoundPod:
    return BoundPod(uid=f"u-{phase}", key=f"ml/{phase}", node=node, gpus=gpus, mig=(), phase=phase, seen_at=0.0)


def test_a_report_received_before_the_stored_one_is_refused_and_stores_nothing() -> None:
    state = GpuState(RULE)
    assert state.ingest(plain(seq=2), 10.0) is True
    assert state.ingest(plain(seq=1), 5.0) is False
    older = summarize(plain(seq=1), RULE, 5.0)
    assert state.store(older, FactsReader().read(plain(seq=1))) is False
    reported = state.reported("n")
    assert reported is not None and reported.sequence == 2 and reported.received_at == 10.0


def test_a_refused_report_does_not_change_the_facts_a_later_report_reads() -> None:
    state = GpuState(RULE)
    assert state.ingest(named("NVIDIA A100-SXM4-80GB", "GPU-a", 2), 10.0)
    assert not state.ingest(named("old name", "GPU-b", 1), 5.0)  # never read: not even its facts
    assert state.ingest(named("NVIDIA H100 80GB HBM3", "GPU-b", 3), 20.0)
    facts = state.facts("n")
    assert facts is not None and [f.name for f in facts] == ["NVIDIA H100 80GB HBM3"]


def test_equal_facts_in_a_new_tuple_are_no_change() -> None:
    state = GpuState(RULE)
    heard: list[str] = []
    state.on_facts_change(heard.append)
    facts = FactsReader().read(plain())
    state.store(summarize(plain(seq=1), RULE, 1.0), facts)
    again = tuple(list(facts))
    assert again == facts and again is not facts
    state.store(summarize(plain(seq=2), RULE, 2.0), again)
    assert heard == ["n"]


def test_has_data_only_for_a_node_reported() -> None:
    state = GpuState(RULE)
    assert not state.has_data("n")
    state.ingest(plain(), 1.0)
    assert state.has_data("n") and not state.has_data("other")


def test_settle_calls_its_listeners() -> None:
    state = GpuState(RULE)
    calls: list[int] = []
    state.on_settle(lambda: calls.append(1))
    state.settle()
    assert calls == [1]


def test_readings_apply_to_the_agents_own_summary_not_the_inferred_one() -> None:
    allocatable = {"n": 32}
    state = GpuState(RULE)
    state.read_allocatable(allocatable.get)
    state.store(summarize(plain(), RULE, 5.0), FactsReader().read(plain()))
    assert state.store_readings("n", (1, 5.0), (("received_at", 6.0), ("sequence", 2)))
    allocatable["n"] = 16  # 2 replicas per GPU: re-inferred from the 8 GPUs the agent reported
    state.allocatable_changed()
    summary = state.summary("n")
    assert summary is not None and (summary.gpu_count, summary.inferred_replicas, summary.sequence) == (16, 2, 2)


def test_a_node_whose_agent_learns_its_allocation_is_not_inferred_again() -> None:
    allocatable = {"n": 32}
    state = GpuState(RULE)
    state.read_allocatable(allocatable.get)
    state.ingest(plain(seq=1), 1.0)
    assert state.reported("n").inferred_replicas == 4  # type: ignore[union-attr]
    state.ingest(plain(seq=2, known=True), 2.0)
    allocatable["n"] = 16
    state.allocatable_changed()
    reported = state.reported("n")
    assert reported is not None and (reported.sequence, reported.gpu_count, reported.inferred_replicas) == (2, 8, 0)


def test_allocatable_read_later_reinfers_the_nodes_already_reported() -> None:
    state = GpuState(RULE)
    state.ingest(plain(), 1.0)
    assert state.summary("n").gpu_count == 8  # type: ignore[union-attr]
    state.read_allocatable({"n": 32}.get)
    for summary in (state.summary("n"), state.reported("n")):
        assert summary is not None and summary.gpu_count == 32


def test_an_unchanged_allocatable_tells_no_listener() -> None:
    state = GpuState(RULE)
    state.read_allocatable({"n": 32}.get)
    state.ingest(plain(), 1.0)
    heard: list[str] = []
    state.on_offered_change(heard.append)
    state.allocatable_changed()
    assert heard == []


def test_an_unchanged_node_does_not_stop_the_nodes_after_it_from_being_reinferred() -> None:
    allocatable = {"a": 32, "b": 32}
    state = GpuState(RULE)
    state.read_allocatable(allocatable.get)
    state.ingest(plain("a"), 1.0)
    state.ingest(plain("b"), 1.0)
    allocatable["b"] = 16
    state.allocatable_changed()
    assert [state.summary(n).gpu_count for n in ("a", "b")] == [32, 16]  # type: ignore[union-attr]


def test_a_reinferred_node_counts_only_pods_its_agent_does_not_see_running() -> None:
    pods = {"n": [pod(4, RUNNING)]}
    allocatable = {"n": 8}
    state = GpuState(RULE)
    state.read_allocatable(allocatable.get)
    state.count_bound_pods(lambda node: pods.get(node, ()))
    state.ingest(plain(), 1.0)
    allocatable["n"] = 32
    state.allocatable_changed()
    summary = state.summary("n")
    assert summary is not None and (summary.idle_gpus, summary.bound_pod_units) == (32, 0)


def test_bound_pods_are_counted_for_nodes_reported_before_the_ledger_was_joined() -> None:
    state = GpuState(RULE)
    state.ingest(plain(known=True), 1.0)
    state.count_bound_pods(lambda node: [pod(2, "Pending")] if node == "n" else ())
    summary = state.summary("n")
    assert summary is not None and (summary.idle_gpus, summary.bound_pod_units) == (6, 2)


def test_a_node_reported_at_the_cutoff_is_kept() -> None:
    state = GpuState(RULE)
    state.ingest(plain(), 5.0)
    assert state.forget_older_than(5.0) == [] and state.has_data("n")


def test_a_forgotten_node_does_not_come_back_when_allocatable_changes() -> None:
    state = GpuState(RULE)
    state.read_allocatable({"n": 32}.get)
    state.ingest(plain(), 1.0)
    assert state.forget_older_than(2.0) == ["n"]
    state.allocatable_changed()
    assert not state.has_data("n") and state.summary("n") is None and state.node_names() == []


def test_a_node_whose_allocation_is_known_is_forgotten() -> None:
    state = GpuState(RULE)
    state.ingest(plain(known=True), 1.0)
    assert state.forget_older_than(2.0) == ["n"] and len(state) == 0


def test_a_forgotten_node_reporting_again_has_its_facts_read_again() -> None:
    state = GpuState(RULE)
    state.ingest(named("NVIDIA A100-SXM4-80GB", "GPU-a", 1), 1.0)
    state.forget_older_than(2.0)
    state.ingest(named("NVIDIA H100 80GB HBM3", "GPU-a", 2), 3.0)
    facts = state.facts("n")
    assert facts is not None and [f.name for f in facts] == ["NVIDIA H100 80GB HBM3"]
