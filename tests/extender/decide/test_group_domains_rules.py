"""Rules of the domain choice (decide/group_domains.py) that a one-line change would break unseen
(issue 52 item 0): among the domains that hold the group, the least stranding wins before the
fewest nodes."""

from __future__ import annotations

from gpuextender.extender.decide.group_domains import choose, level_index

LABELS = {"a0": {"clique": "a"}, "b0": {"clique": "b"}, "b1": {"clique": "b"}}


def test_least_stranding_comes_before_fewest_nodes() -> None:
    """2 members of 4 GPUs: clique a (one node, 12 idle) holds them and strands 4 GPUs; clique b
    (two nodes, 4 idle each) holds them and strands none: b, though it has more nodes."""
    idle = {"a0": 12, "b0": 4, "b1": 4}
    index = {"clique": level_index("clique", LABELS)}
    choice = choose(2, 4, idle, ["clique"], index.__getitem__, list(idle))
    assert choice.chosen is not None and choice.chosen.domain.value == "b"
    assert choice.placement == {"b0": 1, "b1": 1}
    assert [(r.domain.value, r.idle, r.nodes) for r in choice.rooms] == [("b", 8, 2), ("a", 12, 1)]
