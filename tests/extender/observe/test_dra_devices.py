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
from tests.extender.dra_objects import allocated_claim, device_class, gpu_slice
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
