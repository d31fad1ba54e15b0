"""DRA GPUs per node and state at scrape time (observe/dra_devices.py), parsed back from the real
exposition; and a DRA node whose agent never reported is a silent GPU node like any other."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.dra import parse_device_class, parse_resource_slice
from gpuextender.extender.observe.dra_devices import DraDevicesCollector
from gpuextender.extender.observe.silent_nodes import silent_gpu_nodes
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger
from gpuextender.extender.state.dra_inventory import build_dra
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.dra_objects import allocated_claim, device_class, gpu_slice, mig_class, mig_device, resource_slice
from tests.harness import metric, parse_metrics


def view_with(*slices: dict) -> InventoryView:
    dra = build_dra(
        [parse_resource_slice(s) for s in slices], [parse_device_class(device_class())], ("nvidia.com/gpu",)
    )
    return InventoryView(allocatable_gpus={"dp": 8, "dra": 0, "cpu": 0}, dra=dra)


def test_dra_gpus_per_node_and_state() -> None:
    view = view_with(gpu_slice("dra", 8, tainted=(6, 7)))
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("c", "dra", ["gpu-0", "gpu-1", "gpu-7"])])
    registry = CollectorRegistry()
    registry.register(DraDevicesCollector(lambda: view, claims))
    samples = parse_metrics(generate_latest(registry).decode())

    def state(s: str) -> float | None:
        return metric(samples, "gpu_extender_node_dra_gpus", node="dra", state=s)

    # gpu-7 is claimed and tainted: claimed. gpu-6 tainted only.
    assert (state("free"), state("claimed"), state("tainted")) == (4, 3, 1)
    assert metric(samples, "gpu_extender_node_dra_gpus", node="dp", state="free") is None
    assert metric(samples, "gpu_extender_resource_claims", allocated="true") == 1
    assert metric(samples, "gpu_extender_resource_claims", allocated="false") == 0


def test_claims_allocated_and_pending_are_counted() -> None:
    claims = ClaimLedger()
    pending = allocated_claim("p", "dra", [])
    del pending["status"]
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("a", "dra", ["gpu-0"]), pending])
    claims.upsert(RESOURCE_CLAIM_KIND, allocated_claim("b", "dra", ["gpu-1"]))
    registry = CollectorRegistry()
    registry.register(DraDevicesCollector(lambda: view_with(gpu_slice("dra", 8)), claims))
    samples = parse_metrics(generate_latest(registry).decode())
    assert metric(samples, "gpu_extender_resource_claims", allocated="true") == 2
    assert metric(samples, "gpu_extender_resource_claims", allocated="false") == 1
    claims.delete(RESOURCE_CLAIM_KIND, allocated_claim("a", "dra", []))
    samples = parse_metrics(generate_latest(registry).decode())
    assert metric(samples, "gpu_extender_resource_claims", allocated="true") == 1


def test_a_dra_node_without_agent_data_is_silent() -> None:
    view = view_with(gpu_slice("dra", 8))
    state = GpuState(IdleRule())
    assert silent_gpu_nodes(view, state) == ["dp", "dra"]  # "cpu" (no GPUs either way) is never silent


def _agent(utils: list[int], *, holders: dict[int, str] | None = None):  # type: ignore[no-untyped-def]
    """The DRA node's agent report: GPU i has utilization utils[i], uuid GPU-agent-i, kubelet allocation."""
    gpus = [gpu(i, u, 80 if u else 1) for i, u in enumerate(utils)]
    for g in gpus:
        g.uuid = f"GPU-agent-{g.index}"
        if holders and g.index in holders:
            g.holders.add(namespace="default", pod=holders[g.index], container="c")
    r = report("dra", gpus)
    r.allocation_source = pb.ALLOCATION_KUBELET
    return r


def test_dra_gpus_idle_per_state_only_with_fresh_agent_data() -> None:
    view = view_with(gpu_slice("dra", 8, tainted=(6, 7), uuid_of=lambda m: f"GPU-agent-{m}"))
    claims = ClaimLedger()
    # gpu-0 and gpu-1 claimed: gpu-0's pod runs (busy), gpu-1's has not started (idle: allocated but idle).
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("c", "dra", ["gpu-0", "gpu-1"])])
    state = GpuState(IdleRule())
    # gpu-2 busy outside Kubernetes; gpu-6 (tainted) idle, gpu-7 (tainted) busy.
    state.ingest(_agent([90, 0, 90, 0, 0, 0, 0, 90], holders={0: "p", 1: "p"}), 100.0)
    now = [100.0]
    registry = CollectorRegistry()
    registry.register(DraDevicesCollector(lambda: view, claims, state.reported, lambda: now[0], stale_after_s=30))

    def idle(s: str) -> float | None:
        return metric(
            parse_metrics(generate_latest(registry).decode()), "gpu_extender_node_dra_gpus_idle", node="dra", state=s
        )

    assert (idle("free"), idle("claimed"), idle("tainted")) == (3, 1, 1)
    now[0] = 130.0  # exactly --stale-after old: still fresh
    assert idle("claimed") == 1
    now[0] = 130.001  # past it: unknown, so no idle series at all (never zero, never idle)
    assert (idle("free"), idle("claimed"), idle("tainted")) == (None, None, None)
    samples = parse_metrics(generate_latest(registry).decode())
    assert metric(samples, "gpu_extender_node_dra_gpus", node="dra", state="free") == 4  # the counts stay


def test_no_idle_series_for_a_dra_node_that_never_reported() -> None:
    view = view_with(gpu_slice("dra", 8))
    registry = CollectorRegistry()
    registry.register(DraDevicesCollector(lambda: view, ClaimLedger(), GpuState(IdleRule()).reported))
    samples = parse_metrics(generate_latest(registry).decode())
    assert metric(samples, "gpu_extender_node_dra_gpus", node="dra", state="free") == 8
    assert metric(samples, "gpu_extender_node_dra_gpus_idle", node="dra", state="free") is None


def test_dra_mig_devices_per_node_profile_and_state() -> None:
    devices = [mig_device(0, "1g.10gb", placement=i) for i in range(3)] + [mig_device(1, "3g.40gb")]
    devices[2]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    dra = build_dra(
        [parse_resource_slice(resource_slice("mig", devices))],
        [parse_device_class(device_class()), parse_device_class(mig_class())],
        ("nvidia.com/gpu",),
    )
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("c", "mig", ["gpu-0-mig-1g10gb-19-0"])])
    registry = CollectorRegistry()
    registry.register(DraDevicesCollector(lambda: InventoryView(dra=dra), claims))
    samples = parse_metrics(generate_latest(registry).decode())

    def count(profile: str, state: str) -> float | None:
        return metric(samples, "gpu_extender_node_dra_mig_devices", node="mig", profile=profile, state=state)

    assert [count("1g.10gb", s) for s in ("free", "claimed", "tainted")] == [1, 1, 1]
    assert [count("3g.40gb", s) for s in ("free", "claimed", "tainted")] == [1, 0, 0]
    assert metric(samples, "gpu_extender_node_dra_gpus", node="mig", state="free") is None  # no whole GPUs
