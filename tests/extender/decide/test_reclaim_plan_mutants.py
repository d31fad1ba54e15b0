"""Rules of decide/reclaim_plan.py that a one-line change would break unseen (mutation testing): each
skipped holder names its own node; a waiting pod that needs nothing, a node without holders or with
too few, a pod no node can serve and a pod over the pass's limit each pass on to the next (never end
the pass); an evicted holder is not also skipped; the fewest holders on one node are the largest;
a start time of 1 s after the epoch is known."""

from __future__ import annotations

from gpuextender.extender.decide.reclaim_plan import NodeRoom, Skipped
from tests.extender.decide.test_reclaim_plan import MIN_RUNTIME, NOW, evicted, holder, run, waiting


def test_every_skipped_holder_names_its_pod_and_its_node() -> None:
    """One holder per reason of the pass, each on a node of its own."""
    holders = [
        holder("young", "n1", started=NOW - MIN_RUNTIME + 1),  # ineligible
        holder("high", "n2", priority=9),  # above the waiting pod
        holder("big-a", "n3", 1),  # the pod on n3 would need both: over the limit of 1
        holder("big-b", "n3", 1),
        holder("spare", "n4"),  # no waiting pod needs it
    ]
    rooms = {node: NodeRoom(0, {"pool": "a"}) for node in ("n1", "n2", "n3")} | {"n4": NodeRoom(0, {"pool": "b"})}
    p = run(holders, [waiting(gpus=2, node_selector=(("pool", "a"),))], rooms, max_evictions=1)
    assert evicted(p) == []
    assert p.skipped == (
        Skipped("team/big-a", "n3", "over this pass's limit of 1 evictions"),
        Skipped("team/big-b", "n3", "over this pass's limit of 1 evictions"),
        Skipped("team/high", "n2", "priority 9 above the waiting pod team/w's 0"),
        Skipped("team/spare", "n4", "no waiting pod needs its GPUs on its node"),
        Skipped("team/young", "n1", "running for 1799s, under the minimum runtime of 1800s"),
    )


def test_a_pod_that_fits_already_does_not_end_the_pass() -> None:
    """The first waiting pod has room without evicting anything (on n2); the next one is served."""
    rooms = {"n1": NodeRoom(0, {"pool": "a"}), "n2": NodeRoom(2, {"pool": "b"})}
    pods = [waiting("fits", gpus=2, priority=5), waiting("needs", gpus=2, node_selector=(("pool", "a"),))]
    p = run([holder("idle", "n1")], pods, rooms)
    assert evicted(p) == ["team/idle"] and p.evictions[0].serves.key == "team/needs"


def test_a_node_without_holders_or_with_too_few_does_not_end_the_search() -> None:
    """The pod may run on n1 (no holder), n2 (one GPU held: too few) and n3: n3's holder is evicted."""
    rooms = {"n1": NodeRoom(0), "n2": NodeRoom(0), "n3": NodeRoom(0)}
    p = run([holder("small", "n2", 1), holder("idle", "n3")], [waiting(gpus=2)], rooms)
    assert evicted(p) == ["team/idle"]


def test_a_pod_no_node_can_serve_does_not_end_the_pass() -> None:
    """The first waiting pod asks more than any node could give back; the next one is served."""
    pods = [waiting("huge", gpus=8, priority=5), waiting("small", gpus=2)]
    p = run([holder("idle")], pods)
    assert evicted(p) == ["team/idle"] and p.evictions[0].serves.key == "team/small"


def test_a_pod_over_the_limit_does_not_end_the_pass_and_its_holders_may_serve_the_next() -> None:
    """Limit 1: the first pod needs both 1-GPU holders (over it), the next needs one: that one is
    evicted, and only the other stays skipped, for the limit."""
    holders = [holder("a", units=1), holder("b", units=1)]
    pods = [waiting("two", gpus=2, priority=5), waiting("one", gpus=1)]
    p = run(holders, pods, max_evictions=1)
    assert evicted(p) == ["team/a"] and p.evictions[0].serves.key == "team/one"
    assert p.skipped == (Skipped("team/b", "n1", "over this pass's limit of 1 evictions"),)


def test_the_fewest_holders_on_one_node_are_the_largest() -> None:
    """Two 1-GPU holders and one 2-GPU holder on the node: a 2-GPU pod takes the 2-GPU holder
    alone, a 3-GPU pod that one and one more (never all three)."""
    holders = [holder("a", units=1), holder("b", units=1), holder("c", units=2)]
    assert evicted(run(holders, [waiting(gpus=2)])) == ["team/c"]
    assert sorted(evicted(run(holders, [waiting(gpus=3)]))) == ["team/a", "team/c"]


def test_a_start_one_second_after_the_epoch_is_known() -> None:
    """Only a start time of 0 or below is unknown."""
    assert evicted(run([holder("old", started=1.0)], [waiting()])) == ["team/old"]
