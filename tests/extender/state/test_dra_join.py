"""The agent's GPUs joined to a DRA node's devices (state/dra_inventory.capped, issue 24 deliverables
4-6): a pod can be given a GPU that is both a free device (no claim holds it, no taint blocks it)
and available per the agent (healthy, idle, held by no container). Joined by the slice's `uuid`
attribute, or by the DRA name the agent reports where the driver publishes no uuid; without any
join, the smaller of the two counts."""

from __future__ import annotations

import itertools

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.dra import parse_device_class, parse_resource_slice
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger
from gpuextender.extender.state.dra_inventory import DraFree, DraInventory, build_dra, capped, dra_node
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.extender.state.gpu_topology import APART, NVLINK, TIER_NONE
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.dra_objects import allocated_claim, device_class, gpu_slice

NODE = "dra-1"
BUSY, IDLE = 95, 0


def agent_report(utils: list[int], *, named: bool = False, topology: pb.Topology | None = None) -> pb.NodeReport:
    gpus = [gpu(i, u, 80 if u == BUSY else 1) for i, u in enumerate(utils)]
    for g in gpus:
        g.uuid = f"GPU-agent-{g.index}"
        if named:
            g.dra_device = f"gpu-{g.index}"
    r = report(NODE, gpus)
    r.allocation_source = pb.ALLOCATION_KUBELET
    if topology is not None:
        r.topology.CopyFrom(topology)
    return r


def joined_inventory() -> DraInventory:
    """NODE's slice of 8 GPUs whose uuids are the agent's (agent_report)."""
    return build_dra(
        [parse_resource_slice(gpu_slice(NODE, 8, uuid_of=lambda minor: f"GPU-agent-{minor}"))],
        [parse_device_class(device_class())],
        ("nvidia.com/gpu",),
    )


def offered(
    r: pb.NodeReport,
    claimed: list[str],
    *,
    tainted: tuple[int, ...] = (),
    effect: str = "NoSchedule",
    uuids: bool = True,
    devices: int = 8,
) -> NodeSummary:
    """The agent's summary of `r`, joined to a slice of `devices` GPUs (gpu-0..) whose uuids are
    the agent's (or none), with `claimed` allocated to a claim."""
    uuid_of = (lambda minor: f"GPU-agent-{minor}") if uuids else (lambda minor: "")
    inventory = build_dra(
        [parse_resource_slice(gpu_slice(NODE, devices, tainted=tainted, effect=effect, uuid_of=uuid_of))],
        [parse_device_class(device_class())],
        ("nvidia.com/gpu",),
    )
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("c", NODE, claimed)] if claimed else [])
    node = dra_node(inventory.devices(NODE), claims.allocated_on(NODE))
    return capped(summarize(r, IdleRule(), 0.0), node)


def test_only_gpus_free_in_dra_and_available_per_the_agent_are_offered() -> None:
    # gpu-0, gpu-1 busy outside Kubernetes (DRA cannot see it); gpu-2, gpu-3 claimed, their pod not
    # started (the agent reads them idle); gpu-7 tainted NoSchedule: 3 left (4, 5, 6).
    r = agent_report([BUSY, BUSY] + [IDLE] * 6)
    s = offered(r, ["gpu-2", "gpu-3"], tainted=(7,))
    assert (s.idle_gpus, s.free_gpus) == (3, 5)  # free: healthy, unheld and free in DRA (2 busy ones)
    # The smaller of the two counts would have said min(6 available, 5 free devices) = 5.
    assert summarize(r, IdleRule(), 0.0).idle_gpus == 6
    # One more claimed device among the idle ones: one fewer; a claimed busy one changes nothing.
    assert offered(r, ["gpu-2", "gpu-3", "gpu-4"], tainted=(7,)).idle_gpus == 2
    assert offered(r, ["gpu-0", "gpu-2", "gpu-3"], tainted=(7,)).idle_gpus == 3
    # A taint with effect None leaves the device to the allocator: offered.
    assert offered(r, ["gpu-2", "gpu-3"], tainted=(7,), effect="None").idle_gpus == 4
    assert offered(r, [], tainted=()).idle_gpus == 6


def test_joined_by_dra_name_where_the_driver_publishes_no_uuid() -> None:
    r = agent_report([BUSY] + [IDLE] * 7, named=True)
    assert offered(r, ["gpu-1"], uuids=False).idle_gpus == 6
    # An agent before 0.4 (no names) on such a driver: nothing joins; the smaller count, an upper bound.
    old = agent_report([BUSY] + [IDLE] * 7)
    assert offered(old, ["gpu-1"], uuids=False).idle_gpus == 7


def test_gpus_and_devices_that_do_not_join_are_not_offered() -> None:
    # The agent sees 8 GPUs, the slice publishes 6 of them: GPUs 6 and 7 are no DRA device.
    assert offered(agent_report([IDLE] * 8), [], devices=6).idle_gpus == 6
    # The slice publishes 8, the agent reads 6 (two fell off the bus): unknown is never idle.
    assert offered(agent_report([IDLE] * 6), [], devices=8).idle_gpus == 6


def test_degraded_and_unhealthy_gpus_per_the_agent() -> None:
    r = agent_report([IDLE] * 4)
    r.gpus[0].healthy = False
    r.gpus[0].health = pb.HEALTH_UNHEALTHY
    r.gpus[1].health = pb.HEALTH_DEGRADED
    s = offered(r, ["gpu-2"], devices=4)
    assert (s.idle_gpus, s.degraded_idle_gpus, s.healthy_gpus) == (2, 1, 3)
    assert s.quality == (0, 0, 2 * APART + 1)  # 2 GPUs there: the degraded one too (topology unknown)


def test_a_gpu_a_container_holds_is_not_offered_even_when_dra_says_free() -> None:
    r = agent_report([IDLE] * 4)
    r.gpus[3].holders.add(namespace="ml", pod="p", container="c", resource_name="gpu.nvidia.com", device_id="gpu-3")
    s = offered(r, [], devices=4)
    assert (s.idle_gpus, s.free_gpus, s.allocated_idle_gpus) == (3, 3, 1)


def test_nvlink_sets_are_ranked_on_the_joined_gpus_only() -> None:
    # Two NVLink islands {0..3} and {4..7}; claims hold 0, 1 and 4, 5: 2-GPU sets within an island
    # remain (2-3, 6-7), no 3-GPU one does.
    half = 4
    topology = pb.Topology(
        links=[
            pb.GpuLink(a=a, b=b, nvlinks=12 if (a < half) == (b < half) else 0, pcie=pb.PCIE_SYSTEM)
            for a, b in itertools.combinations(range(8), 2)
        ]
    )
    r = agent_report([IDLE] * 8, topology=topology)
    s = offered(r, ["gpu-0", "gpu-1", "gpu-4", "gpu-5"])
    assert s.idle_gpus == 4
    assert s.set_tiers[:5] == (NVLINK, NVLINK, NVLINK, APART, APART) and s.set_tiers[5] == TIER_NONE
    assert s.quality == (0, 0, 0, 2 * APART, 2 * APART)


def test_bound_pods_not_attributed_yet_are_still_taken_off() -> None:
    from dataclasses import replace

    base = summarize(agent_report([IDLE] * 4), IdleRule(), 0.0)
    inventory = build_dra(
        [parse_resource_slice(gpu_slice(NODE, 4, uuid_of=lambda m: f"GPU-agent-{m}"))],
        [parse_device_class(device_class())],
        ("nvidia.com/gpu",),
    )
    node = dra_node(inventory.devices(NODE), frozenset())
    assert capped(replace(base, idle_gpus=3, bound_pod_units=1), node).idle_gpus == 3
    assert capped(replace(base, idle_gpus=0, bound_pod_units=5), node).idle_gpus == 0


def test_through_the_decision_cache() -> None:
    """DraFree joins once per report and (inventory, claims) version, as decisions ask for it."""
    inventory = joined_inventory()
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("a", NODE, ["gpu-6", "gpu-7"])])
    state = GpuState(IdleRule())
    state.ingest(agent_report([BUSY, BUSY] + [IDLE] * 6), 0.0)
    cache = DraFree()
    state.on_offered_change(cache.summary_changed)
    free, summary = cache.refresh(inventory, claims, state.offered_summaries)
    assert free(NODE) == 6 and summary(NODE).idle_gpus == 4  # type: ignore[union-attr]


def test_a_device_a_none_effect_taint_marks_is_offered_as_degraded() -> None:
    """A taint with effect None (a driver's note: NVIDIA's gpu.nvidia.com/xid for an application
    XID) leaves the device to the allocator; the extender ranks it as degraded (issue 25)."""
    r = agent_report([IDLE] * 4)
    s = offered(r, [], tainted=(1,), effect="None", devices=4)
    assert (s.idle_gpus, s.degraded_idle_gpus) == (4, 1)
    assert s.quality == (0, 0, 2 * APART, 2 * APART, 2 * APART + 1)  # 4 GPUs there: the marked one too
    assert offered(r, [], devices=4).degraded_idle_gpus == 0


def test_a_cap_that_changes_nothing_is_the_agents_own_summary() -> None:
    # The claimed GPUs' pods run: the agent reads gpu-2 and gpu-3 held, so the join takes nothing more off.
    r = agent_report([IDLE] * 8)
    for i in (2, 3):
        r.gpus[i].holders.add(namespace="default", pod="p", container="c")
    r.gpus[7].holders.add(namespace="default", pod="q", container="c")
    own = summarize(r, IdleRule(), 0.0)
    inventory = joined_inventory()
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("c", NODE, ["gpu-2", "gpu-3"])])
    assert capped(own, dra_node(inventory.devices(NODE), claims.allocated_on(NODE))) is own
    # gpu-7's holder is no claim (a device-plugin pod on a DRA node): free in DRA, held per the
    # agent, still nothing to take off. A claim on an idle GPU does change it: a new summary.
    claims.upsert(RESOURCE_CLAIM_KIND, allocated_claim("d", NODE, ["gpu-5"]))
    changed = capped(own, dra_node(inventory.devices(NODE), claims.allocated_on(NODE)))
    assert changed is not own and (changed.idle_gpus, own.idle_gpus) == (4, 5)
