"""Multi-pod groups whose members ask for GPUs through ResourceClaims (issue 34, item 6): counted as
in the single-pod path, one claim per member from a template; NVIDIA's ComputeDomain channel claims
ask for no GPU."""

from __future__ import annotations

import json
from typing import Any

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import ViewBuilder
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from tests.extender.builders import gpu, report
from tests.extender.dra_objects import device_class, gpu_slice

NOW = 1000.0
CLIQUE = "nvidia.com/gpu.clique"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"


def dra_node(name: str, clique: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {CLIQUE: clique}},
        "status": {"allocatable": {"cpu": "64"}},  # no nvidia.com/gpu: GPUs through DRA
    }


def claim(name: str, device_class: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class, "count": count}}]}
        },
    }


def member(index: int) -> Any:
    """Member `index` of a 2-member LWS group: its GPUs in a claim made from the group's template,
    and a channel claim of the group's ComputeDomain (shared)."""
    pod = {
        "metadata": {
            "name": f"g-{index}",
            "namespace": "ml",
            "uid": f"uid-g-{index}",
            "labels": {"leaderworkerset.sigs.k8s.io/group-key": "g"},
            "annotations": {"leaderworkerset.sigs.k8s.io/size": "2"},
        },
        "spec": {
            "resourceClaims": [
                {"name": "gpus", "resourceClaimTemplateName": "eight"},
                {"name": "imex", "resourceClaimName": "channel"},
            ],
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpus"}, {"name": "imex"}]}}],
        },
        "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": f"g-{index}-gpus"}]},
    }
    nodes = ["a0", "a1", "b0", "b1", "b2", "b3"]
    return parse_extender_args(json.dumps({"Pod": pod, "NodeNames": nodes}).encode())


def test_claim_members_of_a_group_go_to_one_domain_and_channel_claims_ask_for_no_gpu() -> None:
    store = InventoryStore()
    views = ViewBuilder(store, ("nvidia.com/gpu",))
    store.replace_all(
        "Node",
        [dra_node(n, n[0]) for n in ("a0", "a1", "b0", "b1", "b2", "b3")],
    )
    store.replace_all(
        "DeviceClass",
        [device_class(), device_class(CHANNEL_CLASS, None, "device.driver == 'compute-domain.nvidia.com'")],
    )
    store.replace_all("ResourceSlice", [gpu_slice(n, 8) for n in ("a0", "a1", "b0", "b1", "b2", "b3")])
    claims = ClaimLedger()
    claims.replace_all(
        RESOURCE_CLAIM_KIND,
        [
            claim("g-0-gpus", "gpu.nvidia.com", 8),
            claim("g-1-gpus", "gpu.nvidia.com", 8),
            claim("channel", CHANNEL_CLASS, 1),
        ],
    )
    state = GpuState(IdleRule())
    for n in ("a0", "a1", "b0", "b1", "b2"):
        state.ingest(report(n, [gpu(i, 0, 1) for i in range(8)]), NOW)
    state.ingest(report("b3", [gpu(i, 95, 90) for i in range(8)]), NOW)  # busy outside Kubernetes
    ledger = PodLedger(("nvidia.com/gpu",))
    ledger.replace_all(POD_KIND, [])
    api = SchedulerApi(
        state,
        ExtenderMetrics(state),
        ApiSettings(DecisionPolicy()),
        inventory=lambda: views.current,
        clock=lambda: NOW,
        sources=ClusterSources(ledger=ledger, claims=claims),
    )

    explained = api.explain(member(0))
    assert explained["gpusNeeded"] == 8  # the GPU claim's 8; the channel claim none
    assert explained["group"]["gpusPerMember"] == 8 and explained["group"]["size"] == 2
    first = api.filter(member(0))
    # Both cliques hold 2 x 8 (b on b0-b2; b3 is busy): a is the tighter (no idle GPU left over; b: 8).
    assert sorted(first["NodeNames"]) == ["a0", "a1"]
    assert sorted(api.filter(member(1))["NodeNames"]) == ["a0", "a1"]
