"""Rules of the facts reader (state/facts_reader.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: a node's facts are re-read only when
its GPUs' UUIDs change, or on every report while a GPU lacks its name, memory total or compute
capability (0 bytes is a known total); forgetting a node (known or not) re-reads it and frees what
was held for it; and the pool of equal tuples gives back the first of equals and is cleared at
exactly POOL_SIZE distinct values."""

from __future__ import annotations

from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.state.facts_reader import POOL_SIZE, FactsReader, pooled
from gpuextender.v1 import gpu_state_pb2 as pb


def sample(index: int, name: str = "H100", *, memory: int | None = 80, cc: bool = True) -> pb.GpuSample:
    g = pb.GpuSample(index=index, uuid=f"GPU-{index}", name=name)
    if memory is not None:
        g.memory_total_bytes = memory
    if cc:
        g.compute_capability.major = 9
    return g


def report(*gpus: pb.GpuSample, node: str = "n") -> pb.NodeReport:
    return pb.NodeReport(node_name=node, gpus=gpus)


def test_complete_facts_are_kept_while_the_uuids_stay_the_same() -> None:
    reader = FactsReader()
    first = reader.read(report(sample(0, "H100")))
    assert first == (GpuFacts("H100", 80, "9.0"),)
    assert reader.read(report(sample(0, "A100"))) is first


def test_other_uuids_are_read_again() -> None:
    reader = FactsReader()
    reader.read(report(sample(0, "H100")))
    assert reader.read(report(sample(1, "A100"))) == (GpuFacts("A100", 80, "9.0"),)


def test_each_node_keeps_its_own_facts() -> None:
    reader = FactsReader()
    reader.read(report(sample(0, "H100"), node="a"))
    assert reader.read(report(sample(0, "A100"), node="b")) == (GpuFacts("A100", 80, "9.0"),)


def test_a_zero_memory_total_is_known() -> None:
    reader = FactsReader()
    reader.read(report(sample(0, "H100", memory=0)))
    assert reader.read(report(sample(0, "A100", memory=0)))[0].name == "H100"


def test_facts_are_read_again_while_any_gpu_lacks_a_name_memory_or_compute_capability() -> None:
    for lacking in [sample(1, ""), sample(1, memory=None), sample(1, cc=False)]:
        reader = FactsReader()
        reader.read(report(sample(0), lacking))
        assert reader.read(report(sample(0), sample(1, "A100")))[1] == GpuFacts("A100", 80, "9.0")
        assert reader.read(report(sample(0), sample(1, "B200")))[1].name == "A100"  # complete: kept


def test_a_forgotten_node_is_read_again() -> None:
    reader = FactsReader()
    reader.forget("never-seen")
    reader.read(report(sample(0, "H100")))
    reader.forget("n")
    assert reader.read(report(sample(0, "A100")))[0].name == "A100"


def test_a_forgotten_incomplete_node_is_read_until_complete() -> None:
    reader = FactsReader()
    reader.read(report(sample(0, "")))
    reader.forget("n")
    reader.read(report(sample(0, "")))
    assert reader.read(report(sample(0, "A100")))[0].name == "A100"


def test_the_pool_gives_back_the_first_of_equal_values() -> None:
    pool: dict[str, str] = {}
    first = "".join(["gpu", "-a"])
    again = "".join(["gpu", "-a"])
    assert first is not again
    assert pooled(pool, first) is first
    assert pooled(pool, again) is first


def test_the_pool_is_cleared_at_exactly_pool_size_distinct_values() -> None:
    below = {i: i for i in range(POOL_SIZE - 1)}
    pooled(below, -1)
    assert len(below) == POOL_SIZE
    full = {i: i for i in range(POOL_SIZE)}
    pooled(full, 0)  # an equal value: nothing cleared
    assert len(full) == POOL_SIZE
    assert pooled(full, -1) == -1 and full == {-1: -1}
    assert POOL_SIZE == 4096


def test_a_forgotten_node_leaves_nothing_held() -> None:
    reader = FactsReader()
    reader.read(report(sample(0, "")))
    reader.forget("n")
    assert (reader._fingerprints, reader._current, reader._incomplete) == ({}, {}, set())
