"""Issue 52 item 0: the rules of a device-plugin node's GPUsUsable condition (state/node_gpu_status.py)
that a one-line change would break unseen. A GPU can be counted both unhealthy and busy at once (its
busy mark holds for busy_hold_s after it stopped being asked for), so the usable count is clamped
at zero: never "-1 of 4", never a node with no usable GPU said usable."""

from __future__ import annotations

from gpuextender.extender.state.dra_inventory import DraInventory
from gpuextender.extender.state.node_gpu_status import marks, node_status
from gpuextender.extender.state.publication import Publication, PublishInputs
from tests.extender.state.test_publication_rules import summary

NODE = "dp-1"
HEALTH_S, HOLD = 3.0, 60.0


def test_more_marks_than_gpus_say_none_usable_never_a_negative_count() -> None:
    got = node_status(summary(), 1, 4, HOLD)
    assert (got.status, got.reason, got.no_usable_gpu) == ("False", "NoUsableGPU", True)
    assert got.message.startswith("0 of 4 GPUs usable; 1 unhealthy; 4 busy")


def test_a_busy_gpu_turning_unhealthy_counts_twice_and_the_node_stays_unusable() -> None:
    """Every GPU busy past the hold, then GPU 0 unhealthy: its busy mark still stands for the hold
    (an unhealthy GPU is no busy mark any more), its unhealthy one stands after health_after_s."""
    pub = Publication(HEALTH_S, HOLD)
    now = {"s": summary(busy=(0, 1, 2, 3))}

    def update(t: float) -> None:
        pub.update(PublishInputs(DraInventory(), {NODE: 4}, {NODE: now["s"]}.get, None), t)

    update(0.0)
    update(HOLD)
    assert pub.nodes[NODE].status == "False"  # four busy marks stand
    now["s"] = summary(busy=(0, 1, 2, 3), sick=(0,))
    assert marks(NODE, now["s"]) == ([f"{NODE}/0"], [f"{NODE}/1", f"{NODE}/2", f"{NODE}/3"])
    update(HOLD + 1.0)
    update(HOLD + 1.0 + HEALTH_S)  # the unhealthy mark stands; GPU 0's busy one is still held
    got = pub.nodes[NODE]
    assert got.message.startswith("0 of 4 GPUs usable; 1 unhealthy; 4 busy")
    assert (got.status, got.no_usable_gpu) == ("False", True)
