"""Rules of decide/whole_domains.py that a one-line change would break unseen (mutation testing):
a node of one GPU can be whole; a domain's count of broken nodes (two broken, one broken twice, a
heartbeat of a whole node); counts kept between questions (whole and whole_nodes share one per
label, a question reads only the nodes marked since the last), the least recently asked label
dropped past MAX_LEVELS."""

from __future__ import annotations

from typing import Any

from gpuextender.extender.decide.group_domains import level_index
from gpuextender.extender.decide.whole_domains import MAX_LEVELS, WholeDomains, node_whole
from gpuextender.extender.state.gpu_summary import NodeSummary
from tests.extender.decide.test_whole_domains import LABELS, NODES, idle


class Counted(dict[str, NodeSummary]):
    """Summaries that count the reads of `get`."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        self.reads += 1
        return super().get(key, default)


def test_a_node_of_one_gpu_free_and_idle_is_whole() -> None:
    assert node_whole(idle("n", gpus=1, free=1))


def domains_after(changes: list[tuple[str, int]], broken: dict[str, int]) -> frozenset[str]:
    """The whole values once each (node, free GPUs of 8) in `changes` is reported and marked in turn,
    starting from every node whole but `broken` (node -> free GPUs), counted before the first change."""
    summaries = {n: idle(n) for n in NODES} | {n: idle(n, free=f) for n, f in broken.items()}
    domains = WholeDomains(summaries)
    domains.whole("clique", LABELS.value_of)
    for node, free in changes:
        summaries[node] = idle(node, free=free)
        domains.changed(node)
        domains.whole("clique", LABELS.value_of)
    return domains.whole("clique", LABELS.value_of)


def test_a_domain_of_two_broken_nodes_stays_broken_until_both_are_whole() -> None:
    assert domains_after([("b0", 8)], {"b0": 6, "b1": 6}) == {"a", "c"}
    assert domains_after([("b0", 8), ("b1", 8)], {"b0": 6, "b1": 6}) == {"a", "b", "c"}


def test_a_node_broken_then_whole_again_leaves_its_domain_whole() -> None:
    assert domains_after([("a0", 7), ("a0", 8)], {}) == {"a", "b", "c"}


def test_a_heartbeat_of_a_whole_node_moves_no_count() -> None:
    assert domains_after([("b1", 8), ("b1", 8), ("b1", 6)], {"b1": 6}) == {"a", "c"}


def test_a_question_reads_only_the_nodes_marked_since_the_last() -> None:
    summaries = Counted({n: idle(n) for n in NODES})
    domains = WholeDomains(summaries)
    assert domains.whole("clique", LABELS.value_of) == {"a", "b", "c"}
    assert summaries.reads == len(NODES)  # counted once
    assert domains.whole_nodes("clique", LABELS.value_of, LABELS.nodes_of) == set(NODES)
    assert domains.whole("clique", LABELS.value_of) == {"a", "b", "c"}
    assert summaries.reads == len(NODES)  # the same count, kept
    summaries["b0"] = idle("b0", free=0)
    domains.changed("b0")
    assert domains.whole_nodes("clique", LABELS.value_of, LABELS.nodes_of) == {"a0", "a1", "c0"}
    assert summaries.reads == len(NODES) + 1  # b0 alone read again


def test_past_max_levels_the_least_recently_asked_label_is_dropped() -> None:
    summaries = Counted({n: idle(n) for n in NODES})
    domains = WholeDomains(summaries)
    names = [f"label-{i}" for i in range(MAX_LEVELS + 1)]
    indexes = {name: level_index(name, {n: {name: c} for n, c in NODES.items()}) for name in names}
    for name in names:  # label-0 dropped for the last
        domains.whole(name, indexes[name].value_of)
    reads = summaries.reads
    for name in names[1:]:  # each kept: nothing read
        assert domains.whole(name, indexes[name].value_of) == {"a", "b", "c"}
    assert summaries.reads == reads
    assert domains.whole(names[0], indexes[names[0]].value_of) == {"a", "b", "c"}
    assert summaries.reads == reads + len(NODES)  # counted again
