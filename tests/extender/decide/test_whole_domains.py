"""decide/whole_domains.py: which domains of a group level are whole (every labelled node's GPUs
all free and idle, as every pod reads them), kept as summaries change; and a single pod's scores
with the whole domains' nodes ranked after every other fitting node (issue 53 item 1)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuextender.extender.decide.group_domains import level_index
from gpuextender.extender.decide.score_bands import ranked_below
from gpuextender.extender.decide.whole_domains import MAX_LEVELS, WholeDomains, node_whole
from gpuextender.extender.state.gpu_summary import NodeSummary
from tests.extender.decide.test_fit_index import fitting

NODES = {"a0": "a", "a1": "a", "b0": "b", "b1": "b", "c0": "c"}
LABELS = level_index("clique", {n: {"clique": c} for n, c in NODES.items()})


def idle(name: str, gpus: int = 8, free: int = 8) -> NodeSummary:
    return replace(fitting(name, idle=free), gpu_count=gpus, healthy_gpus=gpus)


def test_a_node_is_whole_only_with_every_gpu_free_and_idle_and_no_error() -> None:
    assert node_whole(idle("n"))
    assert not node_whole(idle("n", free=7))
    assert not node_whole(None)  # unknown is never idle
    assert not node_whole(replace(idle("n"), node_error="NVML: driver not loaded"))
    assert not node_whole(idle("n", gpus=0, free=0))


def test_a_domain_is_whole_while_each_of_its_nodes_is_and_follows_changes() -> None:
    summaries = {n: idle(n) for n in NODES} | {"b1": idle("b1", free=6)}
    del summaries["c0"]  # no data: not whole
    domains = WholeDomains(summaries)
    assert domains.whole("clique", LABELS.value_of) == {"a"}
    assert domains.whole_nodes("clique", LABELS.value_of, LABELS.nodes_of) == {"a0", "a1"}
    summaries["a0"] = idle("a0", free=7)  # a pod lands
    summaries["b1"] = idle("b1")  # b's last pod leaves
    summaries["c0"] = idle("c0")  # c's agent reports
    for node in ("a0", "b1", "c0"):
        domains.changed(node)
    assert domains.whole("clique", LABELS.value_of) == {"b", "c"}
    assert domains.whole_nodes("clique", LABELS.value_of, LABELS.nodes_of) == {"b0", "b1", "c0"}
    del summaries["b0"]  # goes
    domains.changed("b0")
    domains.changed("unlabelled")  # (no domain: nothing moves)
    assert domains.whole("clique", LABELS.value_of) == {"c"}


def test_a_new_inventory_version_counts_again() -> None:
    summaries = {n: idle(n) for n in NODES}
    domains = WholeDomains(summaries)
    assert domains.whole("clique", LABELS.value_of) == {"a", "b", "c"}
    moved = level_index("clique", {n: {"clique": "a" if n == "c0" else c} for n, c in NODES.items()})
    summaries["c0"] = idle("c0", free=1)
    assert domains.whole("clique", moved.value_of) == {"b"}  # (no mark needed: counted afresh)


@pytest.mark.parametrize("levels", [MAX_LEVELS, MAX_LEVELS + 1])
def test_levels_kept_are_bounded_and_every_kept_one_follows_the_marks(levels: int) -> None:
    summaries = {n: idle(n) for n in NODES}
    domains = WholeDomains(summaries)
    names = [f"label-{i}" for i in range(levels)]
    indexes = {name: level_index(name, {n: {name: c} for n, c in NODES.items()}) for name in names}
    for name in names:
        assert domains.whole(name, indexes[name].value_of) == {"a", "b", "c"}
    assert len(domains._levels) == min(levels, MAX_LEVELS)
    summaries["b0"] = idle("b0", free=0)
    domains.changed("b0")
    for name in names:
        assert domains.whole(name, indexes[name].value_of) == {"a", "c"}, name


def test_changes_before_the_first_question_are_not_kept() -> None:
    domains = WholeDomains({n: idle(n) for n in NODES})
    domains.changed("a0")
    assert domains._marked == set()


def test_scores_rank_whole_domains_last_each_side_in_its_own_order() -> None:
    scores = [("open-low", 1), ("open-high", 10), ("whole-high", 10), ("whole-low", 1), ("failed", 0), ("mid", 5)]
    whole = frozenset({"whole-high", "whole-low", "failed"})
    assert ranked_below(scores, whole) == [
        ("open-low", 4),
        ("open-high", 10),
        ("whole-high", 3),
        ("whole-low", 1),
        ("failed", 0),
        ("mid", 7),
    ]


def test_scores_with_fitting_nodes_on_one_side_only_are_unchanged() -> None:
    assert ranked_below([("a", 10), ("b", 0)], frozenset({"a"})) == [("a", 10), ("b", 0)]
    assert ranked_below([("a", 10), ("b", 0)], frozenset({"b"})) == [("a", 10), ("b", 0)]
    assert ranked_below([("a", 10), ("b", 3)], frozenset()) == [("a", 10), ("b", 3)]


def test_a_node_that_changes_without_changing_side_moves_no_count() -> None:
    """b1 broken (6 of 8 idle), then 5 of 8 (a heartbeat of a busy node), then whole: b is whole
    again (a count moved at each change would leave it broken)."""
    summaries = {n: idle(n) for n in NODES} | {"b1": idle("b1", free=6)}
    domains = WholeDomains(summaries)
    assert domains.whole("clique", LABELS.value_of) == {"a", "c"}
    summaries["b1"] = idle("b1", free=5)
    domains.changed("b1")
    assert domains.whole("clique", LABELS.value_of) == {"a", "c"}
    summaries["b1"] = idle("b1")
    domains.changed("b1")
    assert domains.whole("clique", LABELS.value_of) == {"a", "b", "c"}
