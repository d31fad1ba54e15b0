"""Rules of decide/score_bands.py that a one-line change would break unseen (mutation testing): a
node of score 1 is a fitting node, so it puts its side in the bands."""

from __future__ import annotations

from gpuextender.extender.decide.score_bands import ranked_below


def test_a_fitting_node_of_score_one_is_ranked_above_the_nodes_below() -> None:
    assert ranked_below([("whole", 10), ("open", 1)], frozenset({"whole"})) == [("whole", 3), ("open", 4)]
