"""decide/reclaim_plan.py: which idle holders reclaim evicts for which waiting pod, every threshold
at exactly its value and on both sides."""

from __future__ import annotations

from gpuextender.extender.decide.reclaim_plan import Holder, NodeRoom, ReclaimPlan, plan
from gpuextender.extender.model.waiting_pod import WaitingPod

NOW = 1_000_000.0
MIN_RUNTIME = 1800.0
NS = "team"


def holder(
    name: str,
    node: str = "n1",
    units: int = 2,
    *,
    priority: int = 0,
    started: float = NOW - 3600,
    running: bool = True,
    group: str = "",
) -> Holder:
    return Holder(f"uid-{name}", f"{NS}/{name}", node, units, priority, started, running, group)


def waiting(
    name: str = "w",
    gpus: int = 2,
    priority: int = 0,
    created: float = 0.0,
    node_selector: tuple[tuple[str, str], ...] = (),
) -> WaitingPod:
    return WaitingPod(f"uid-{name}", f"{NS}/{name}", gpus, priority, created, node_selector)


def run(
    holders: list[Holder],
    pods: list[WaitingPod],
    rooms: dict[str, NodeRoom] | None = None,
    *,
    opted_in: frozenset[str] = frozenset({NS}),
    max_evictions: int = 5,
    settling: frozenset[str] = frozenset(),
) -> ReclaimPlan:
    return plan(
        holders,
        pods,
        rooms if rooms is not None else {"n1": NodeRoom(0)},
        opted_in=opted_in,
        min_runtime_s=MIN_RUNTIME,
        wall_now=NOW,
        max_evictions=max_evictions,
        settling=settling,
    )


def evicted(p: ReclaimPlan) -> list[str]:
    return [e.holder.key for e in p.evictions]


def why(p: ReclaimPlan, key: str) -> str:
    return {s.pod: s.why for s in p.skipped}[key]


def test_an_idle_holder_is_evicted_for_a_waiting_pod_that_needs_its_gpus() -> None:
    p = run([holder("idle")], [waiting()])
    assert evicted(p) == ["team/idle"]
    assert p.evictions[0].serves.key == "team/w" and p.evictions[0].free == 0
    assert p.skipped == ()


def test_no_waiting_pod_no_eviction() -> None:
    p = run([holder("idle")], [])
    assert evicted(p) == [] and why(p, "team/idle") == "no waiting pod needs its GPUs on its node"


def test_the_namespace_must_be_opted_in() -> None:
    p = run([holder("idle")], [waiting()], opted_in=frozenset({"other"}))
    assert evicted(p) == [] and why(p, "team/idle") == "namespace team is not opted in"


def test_the_minimum_runtime_at_exactly_its_value_and_a_second_under() -> None:
    assert evicted(run([holder("idle", started=NOW - MIN_RUNTIME)], [waiting()])) == ["team/idle"]
    p = run([holder("idle", started=NOW - MIN_RUNTIME + 1)], [waiting()])
    assert evicted(p) == [] and "under the minimum runtime of 1800s" in why(p, "team/idle")
    p = run([holder("idle", started=0.0)], [waiting()])
    assert evicted(p) == [] and why(p, "team/idle") == "its start time is unknown"


def test_priority_equal_is_evicted_one_above_is_not() -> None:
    assert evicted(run([holder("idle", priority=100)], [waiting(priority=100)])) == ["team/idle"]
    p = run([holder("idle", priority=101)], [waiting(priority=100)])
    assert evicted(p) == [] and why(p, "team/idle") == "priority 101 above the waiting pod team/w's 100"


def test_free_gpus_plus_the_holders_exactly_enough_and_one_short() -> None:
    # 1 free + 2 held = 3: a 3-GPU pod is served, a 4-GPU pod is not.
    assert evicted(run([holder("idle")], [waiting(gpus=3)], {"n1": NodeRoom(1)})) == ["team/idle"]
    p = run([holder("idle")], [waiting(gpus=4)], {"n1": NodeRoom(1)})
    assert evicted(p) == [] and why(p, "team/idle") == "no waiting pod needs its GPUs on its node"


def test_a_pod_that_fits_already_needs_no_eviction() -> None:
    # Free exactly what it asks: nothing evicted; one short: the holder goes.
    assert evicted(run([holder("idle")], [waiting(gpus=2)], {"n1": NodeRoom(2)})) == []
    assert evicted(run([holder("idle")], [waiting(gpus=2)], {"n1": NodeRoom(1)})) == ["team/idle"]
    # Room on another node it may use: nothing evicted here either.
    rooms = {"n1": NodeRoom(0), "n2": NodeRoom(2)}
    assert evicted(run([holder("idle")], [waiting(gpus=2)], rooms)) == []


def test_the_pass_limit_at_exactly_its_value_and_one_over() -> None:
    holders = [holder(f"h{i}", node=f"n{i}") for i in range(3)]
    pods = [waiting(f"w{i}", created=float(i)) for i in range(3)]
    rooms = {f"n{i}": NodeRoom(0) for i in range(3)}
    assert len(run(holders, pods, rooms, max_evictions=3).evictions) == 3
    p = run(holders, pods, rooms, max_evictions=2)
    assert len(p.evictions) == 2
    assert [s.why for s in p.skipped] == ["over this pass's limit of 2 evictions"]


def test_the_fewest_holders_on_the_best_node() -> None:
    # n1: two 1-GPU holders; n2: one 2-GPU holder; a 2-GPU pod takes the one on n2.
    holders = [holder("a", "n1", 1), holder("b", "n1", 1), holder("c", "n2", 2)]
    p = run(holders, [waiting(gpus=2)], {"n1": NodeRoom(0), "n2": NodeRoom(0)})
    assert evicted(p) == ["team/c"]
    # A 1-GPU pod beside 0 free: one holder is enough, the rest stay.
    p = run([holder("a", "n1", 1), holder("b", "n1", 1)], [waiting(gpus=1)])
    assert evicted(p) == ["team/a"] and why(p, "team/b") == "no waiting pod needs its GPUs on its node"


def test_one_waiting_pod_per_node_per_pass_highest_priority_first() -> None:
    holders = [holder("a", units=1), holder("b", units=1)]
    pods = [waiting("low", gpus=1, priority=1, created=1.0), waiting("high", gpus=1, priority=5, created=2.0)]
    p = run(holders, pods)
    assert [e.serves.key for e in p.evictions] == ["team/high"] and len(p.evictions) == 1


def test_unknown_data_settling_nodes_groups_and_pods_not_running_are_never_evicted() -> None:
    p = run([holder("idle")], [waiting()], {})
    assert evicted(p) == [] and why(p, "team/idle") == "its node has no fresh GPU data (unknown is never idle)"
    p = run([holder("idle")], [waiting()], settling=frozenset({"n1"}))
    assert why(p, "team/idle") == "an earlier eviction on its node has not landed yet"
    p = run([holder("idle", group="lws/job")], [waiting()])
    assert why(p, "team/idle") == "a member of the multi-pod group lws/job"
    p = run([holder("idle", running=False)], [waiting()])
    assert why(p, "team/idle") == "not Running"


def test_a_waiting_pod_that_may_not_run_on_the_node_is_not_served() -> None:
    pod = waiting(node_selector=(("pool", "a"),))
    assert evicted(run([holder("idle")], [pod], {"n1": NodeRoom(0, {"pool": "b"})})) == []
    assert evicted(run([holder("idle")], [pod], {"n1": NodeRoom(0, {"pool": "a"})})) == ["team/idle"]
    tainted = {"n1": NodeRoom(0, {"pool": "a"}, ({"key": "gpu", "effect": "NoSchedule"},))}
    assert evicted(run([holder("idle")], [pod], tainted)) == []
