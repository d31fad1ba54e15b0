"""Rules of the device taints (state/device_taints.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: a long rule name's digest length, the
join of GPUs to devices by DRA name where the driver publishes no uuid, a healthy device before a
bad one, what an adopted rule stands with, and TolerantView: which nodes read the shared cache and,
on a node with unhealthy GPUs, exactly which GPUs a pod's tolerations give it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.dra import Toleration, parse_device_class, parse_resource_slice
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger
from gpuextender.extender.state.device_taints import (
    BUSY_PREFIX,
    NAME_PREFIX,
    UNHEALTHY_KEY,
    Hysteresis,
    TolerantView,
    busy_taints,
    health_taints,
    rule_name,
    wanted_taints,
)
from gpuextender.extender.state.dra_inventory import DraFree, DraInventory, FreeCounter, build_dra
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.dra_objects import allocated_claim, device_class, gpu_slice
from tests.extender.state.test_device_taints import sick

RULE = IdleRule()


def inventory(*slices: dict) -> DraInventory:
    return build_dra(
        [parse_resource_slice(s) for s in slices], [parse_device_class(device_class())], ("nvidia.com/gpu",)
    )


def by_name(g: pb.GpuSample) -> pb.GpuSample:
    """The GPU as NVIDIA's DRA driver names it, with no uuid to join on."""
    g.dra_device = f"gpu-{g.index}"
    return g


def test_a_long_rule_name_ends_in_a_40_character_digest() -> None:
    node = "n" * 260
    digest = hashlib.sha256(f"{node}/gpu-3".encode()).hexdigest()[:40]
    assert rule_name(node, "gpu-3") == NAME_PREFIX + digest


def test_gpus_join_devices_without_uuid_by_dra_name_and_a_healthy_one_first_stops_nothing() -> None:
    dra = inventory(gpu_slice("n", 3, uuid_of=lambda _m: ""))
    gpus = [by_name(gpu(0, 0, 1)), by_name(sick(1, "GpuIsLost")), by_name(gpu(2, 95, 90))]
    summary = GpuState(RULE)
    summary.ingest(report("n", gpus), 0.0)
    assert list(wanted_taints(dra, summary.reported)) == [rule_name("n", "gpu-1")]
    assert list(health_taints("n", dra.gpu_devices["n"], summary.reported("n"))) == [rule_name("n", "gpu-1")]
    no_claims: Callable[[str], frozenset[tuple[str, str, str]]] = lambda _node: frozenset()  # noqa: E731
    assert list(busy_taints(dra, summary.reported, no_claims)) == [rule_name("n", "gpu-2", BUSY_PREFIX)]


def test_an_adopted_rule_stands_with_the_value_found() -> None:
    hold: Hysteresis[str] = Hysteresis(60.0, 60.0)
    hold.adopt({"r": "xid-79"})
    assert hold.standing == {"r": "xid-79"}
    assert hold.settle({}, 0.0) == {"r": "xid-79"}  # not asked for: it goes only after the hold


def view_of(
    gpus: list[pb.GpuSample], slices: list[dict], tolerations: tuple[Toleration, ...], *held: str
) -> tuple[TolerantView, tuple[FreeCounter, Callable[[str], NodeSummary | None]], GpuState]:
    """A TolerantView over `slices` with node "n" reporting `gpus` (and "dp", a device-plugin node,
    reporting 2 idle GPUs); `held`: devices of "n" an allocated claim holds."""
    dra = inventory(*slices)
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("c", "n", list(held))] if held else [])
    state = GpuState(RULE)
    cache = DraFree()
    state.on_offered_change(cache.summary_changed)
    if gpus:
        state.ingest(report("n", gpus), 0.0)
    state.ingest(report("dp", [gpu(0), gpu(1)]), 0.0)
    shared = cache.refresh(dra, claims, state.offered_summaries)
    return TolerantView(dra, claims.allocated_on, tolerations, shared, state.summary), shared, state


def test_nodes_without_taints_or_problems_read_the_shared_cache() -> None:
    slices = [gpu_slice("n", 2, uuid_of=lambda m: f"GPU-{m}"), gpu_slice("silent", 2)]
    view, (shared_free, shared_summary), state = view_of([gpu(0), gpu(1)], slices, (Toleration("", "Exists"),))
    for node in ("n", "silent", "dp"):  # a healthy DRA node, one without a report, a device-plugin one
        assert view.free(node) == shared_free(node)
        assert view.summary(node) is shared_summary(node)
    assert (view.free("n"), view.free("silent"), view.free("dp")) == (2, 2, None)
    assert view.summary("silent") is None and view.summary("dp") is state.summary("dp")


def test_a_tainted_node_without_a_report_has_the_tolerated_devices_and_no_summary() -> None:
    view, _, _ = view_of([], [gpu_slice("n", 2, tainted=(0,))], (Toleration("gpu.nvidia.com/xid", "Exists"),))
    assert (view.free("n"), view.summary("n")) == (2, None)


def test_a_claim_held_device_is_not_free_in_a_tolerant_view() -> None:
    slices = [gpu_slice("n", 2, tainted=(0,), uuid_of=lambda m: f"GPU-{m}")]
    view, _, _ = view_of([gpu(0), gpu(1)], slices, (Toleration("gpu.nvidia.com/xid", "Exists"),), "gpu-1")
    assert view.free("n") == 1


def test_exactly_the_unhealthy_gpus_whose_rule_is_tolerated_are_available() -> None:
    """GPUs: 0 busy, 1 and 3 unhealthy (xid-79), 2 degraded and busy, 4 idle; no device tainted. The
    pod tolerates unhealthy=xid-79:NoSchedule (and, oddly, unhealthy=thermal-slowdown, which only a
    degraded GPU reads: never available through it)."""
    degraded = gpu(2, 95, 90)
    degraded.health = pb.HEALTH_DEGRADED
    degraded.health_reasons.append("ThermalSlowdown")
    gpus = [gpu(0, 95, 90), sick(1, "XidCritical", xid=79), degraded, sick(3, "XidCritical", xid=79), gpu(4)]
    for g in gpus:
        g.uuid = f"GPU-{g.index}"
    tolerations = (
        Toleration(UNHEALTHY_KEY, "Equal", "xid-79", "NoSchedule"),
        Toleration(UNHEALTHY_KEY, "Equal", "thermal-slowdown", "NoSchedule"),
    )
    view, _, state = view_of(gpus, [gpu_slice("n", 5, uuid_of=lambda m: f"GPU-{m}")], tolerations)
    shared, mine = state.summary("n"), view.summary("n")
    assert shared is not None and mine is not None
    assert (shared.idle_gpus, mine.idle_gpus, mine.free_gpus, view.free("n")) == (1, 3, None, 5)
