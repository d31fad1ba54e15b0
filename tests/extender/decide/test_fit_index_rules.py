"""Rules of the fit index's domain rooms (decide/fit_index.py) that a one-line change would break
unseen (issue 52 item 0): the rooms follow a node's labels as the inventory changes them."""

from __future__ import annotations

from gpuextender.extender.decide.fit_index import FitIndex
from gpuextender.extender.decide.group_domains import level_index
from tests.extender.decide.test_fit_index import NOW, STALE_AFTER, fitting


def test_a_node_relabelled_into_a_clique_is_counted_in_that_cliques_room() -> None:
    index = FitIndex({"a0": fitting("a0"), "x": fitting("x")})
    names = ["a0", "x"]
    before = level_index("clique", {"a0": {"clique": "a"}, "x": {}})
    rooms = index.domain_rooms(8, "clique", before.value_of, names, NOW, STALE_AFTER)
    assert rooms is not None and rooms.room == {"a": 1} and rooms.unlabelled == {"x": 8}
    # A new inventory version: x now carries clique a (a new index of the label, as each version builds).
    after = level_index("clique", {"a0": {"clique": "a"}, "x": {"clique": "a"}})
    rooms = index.domain_rooms(8, "clique", after.value_of, names, NOW, STALE_AFTER)
    assert rooms is not None
    assert (rooms.room, rooms.idle, rooms.nodes, rooms.unlabelled) == ({"a": 2}, {"a": 16}, {"a": 2}, {})
