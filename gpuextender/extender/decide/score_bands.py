"""Two bands of prioritize's 0-10 scores: some fitting nodes ranked below every other fitting
node, each side keeping its order by the node's own score (decide/README.md, "Whole domains kept
whole": a single pod's nodes of whole domains; "Multi-pod groups": a member's nodes outside its
group's held room)."""

from __future__ import annotations

from collections.abc import Container

LOW_BAND = (1, 3)  # the nodes ranked below
HIGH_BAND = (4, 10)  # the others


def ranked_below(scores: list[tuple[str, int]], below: Container[str]) -> list[tuple[str, int]]:
    """`scores` (node, 0-10) with every fitting node (score > 0) of `below` ranked under every
    fitting node outside it; unchanged where the fitting nodes are all on one side."""
    low = high = False
    for name, score in scores:
        if score > 0:
            if name in below:
                low = True
            else:
                high = True
            if low and high:
                return [(name, _banded(score, name in below)) for name, score in scores]
    return scores


def _banded(score: int, low: bool) -> int:
    if score <= 0:
        return 0
    bottom, top = LOW_BAND if low else HIGH_BAND
    return bottom + round((top - bottom) * (score - 1) / 9)
