"""The fit index's rooms over the whole fleet, not a call's candidates (issue 53 item 1: a group's
domain among every domain the extender knows): `domain_rooms(names=None)` leaves out only the
stale and unfit nodes; `domain_fits` gives one domain's fresh fits with their idle GPUs."""

from __future__ import annotations

from gpuextender.extender.decide.fit_index import FitIndex
from gpuextender.extender.decide.group_domains import level_index
from gpuextender.extender.state.gpu_summary import NodeSummary
from tests.extender.decide.test_fit_index import NOW, STALE_AFTER, fitting

OLD = NOW - STALE_AFTER - 1
AT_BOUND = NOW - STALE_AFTER  # fresh: is_fresh's bound is inclusive


def fleet() -> dict[str, NodeSummary]:
    return {
        "a0": fitting("a0", idle=8),
        "a1": fitting("a1", idle=6),
        "a2": fitting("a2", idle=4, received_at=OLD),  # stale
        "a3": fitting("a3", idle=1),  # does not fit 2
        "a4": fitting("a4", idle=2, received_at=AT_BOUND),
        "x": fitting("x", idle=5),
        "y": fitting("y", idle=4, received_at=OLD),  # unlabelled, stale
    }


LABELS = level_index("clique", {n: {"clique": "a"} for n in ("a0", "a1", "a2", "a3", "a4")})


def test_fleet_rooms_count_every_fresh_fit_offered_or_not() -> None:
    index = FitIndex(fleet())
    rooms = index.domain_rooms(2, "clique", LABELS.value_of, None, NOW, STALE_AFTER)
    assert rooms is not None
    assert (rooms.room, rooms.idle, rooms.nodes, rooms.unlabelled) == ({"a": 8}, {"a": 16}, {"a": 3}, {"x": 5})
    # The same as a call that offers every node.
    every = index.domain_rooms(2, "clique", LABELS.value_of, list(fleet()), NOW, STALE_AFTER)
    assert every is not None
    assert (every.room, every.idle, every.nodes, every.unlabelled) == (
        rooms.room,
        rooms.idle,
        rooms.nodes,
        rooms.unlabelled,
    )


def test_fleet_rooms_with_nothing_stale_take_nothing_off() -> None:
    summaries = {"a0": fitting("a0", idle=8), "a1": fitting("a1", idle=3)}
    rooms = FitIndex(summaries).domain_rooms(2, "clique", LABELS.value_of, None, NOW, STALE_AFTER)
    assert rooms is not None and (rooms.room, rooms.idle, rooms.nodes) == ({"a": 5}, {"a": 11}, {"a": 2})


def test_domain_fits_are_one_domains_fresh_fits_with_their_idle_gpus() -> None:
    index = FitIndex(fleet())
    fits = index.domain_fits(2, LABELS.nodes_of["a"], NOW, STALE_AFTER)
    assert fits == {"a0": 8, "a1": 6, "a4": 2}
    assert index.domain_fits(2, ["x", "nowhere"], NOW, STALE_AFTER) == {"x": 5}
    assert index.domain_fits(8, ["a0", "a1"], NOW, STALE_AFTER) == {"a0": 8}


def test_sizes_the_index_does_not_keep_answer_none() -> None:
    index = FitIndex(fleet())
    assert index.domain_fits(0, ["a0"], NOW, STALE_AFTER) is None
    assert index.domain_rooms(0, "clique", LABELS.value_of, None, NOW, STALE_AFTER) is None


def test_rooms_sum_each_fits_idle_gpus_squared_offered_or_fleet_wide() -> None:
    """(group_domains.preference orders equally stranding domains by it: the least concentrated.)"""
    index = FitIndex(fleet())
    rooms = index.domain_rooms(2, "clique", LABELS.value_of, None, NOW, STALE_AFTER)
    assert rooms is not None and rooms.square == {"a": 8 * 8 + 6 * 6 + 2 * 2}
    offered = index.domain_rooms(2, "clique", LABELS.value_of, ["a0", "a4"], NOW, STALE_AFTER)
    assert offered is not None and offered.square == {"a": 8 * 8 + 2 * 2}
