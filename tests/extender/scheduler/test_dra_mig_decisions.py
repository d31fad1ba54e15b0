"""A pod whose ResourceClaim asks for MIG devices (issue 24: MIG device classes), through
SchedulerApi's real decision path: it needs that profile's MIG devices, a node offers the smaller
of its agent's free instances and its DRA devices no claim holds, bounds at exactly the count."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide import reasons
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import ViewBuilder
from gpuextender.extender.ui import explain_cli
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.decide.test_mig_devices import mig_gpu
from tests.extender.dra_objects import allocated_claim, device_class, gpu_slice, mig_claim, mig_class, mig_device
from tests.extender.dra_objects import resource_slice as slice_of

NOW = 1000.0
NAMES = ["mig-dra", "mig-busy", "whole-dra"]


def api_with(claim: dict[str, Any]) -> SchedulerApi:
    """mig-dra: three 1g.10gb devices, one held by a claim whose pod has not started (its agent reads
    all three free): 2 to offer. mig-busy: three, two held by claims whose pods run (the agent reads
    them held): 1. whole-dra: whole GPUs only."""
    store = InventoryStore()
    views = ViewBuilder(store, ("nvidia.com/gpu",))
    store.replace_all("Node", [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in NAMES])
    store.replace_all("DeviceClass", [device_class(), mig_class()])
    store.replace_all(
        "ResourceSlice",
        [slice_of(name, [mig_device(0, "1g.10gb", placement=i) for i in range(3)]) for name in ("mig-dra", "mig-busy")]
        + [gpu_slice("whole-dra", 8)],
    )
    device = "gpu-0-mig-1g10gb-19-{}".format
    claims = ClaimLedger()
    claims.replace_all(
        RESOURCE_CLAIM_KIND,
        [
            allocated_claim("waiting", "mig-dra", [device(0)]),
            allocated_claim("running", "mig-busy", [device(0), device(1)]),
            claim,
        ],
    )
    state = GpuState(IdleRule())
    for r in (
        report("mig-dra", [mig_gpu(0, *[("1g.10gb", False, 1)] * 3)]),
        report("mig-busy", [mig_gpu(0, ("1g.10gb", True, 1), ("1g.10gb", True, 1), ("1g.10gb", False, 1))]),
        report("whole-dra", [gpu(i) for i in range(8)]),
    ):
        r.allocation_source = pb.ALLOCATION_KUBELET
        state.ingest(r, NOW)
    settings = ApiSettings(DecisionPolicy(no_fit_policy="reject"), shortlist=0)
    return SchedulerApi(
        state,
        ExtenderMetrics(state),
        settings,
        inventory=lambda: views.current,
        clock=lambda: NOW,
        sources=ClusterSources(claims=claims),
    )


def args(claim: str = "mine") -> Any:
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "uid-p"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "mig", "resourceClaimName": claim}]},
    }
    return parse_extender_args(json.dumps({"Pod": pod, "NodeNames": NAMES}).encode())


@pytest.mark.parametrize(("count", "passed"), [(1, ["mig-dra", "mig-busy"]), (2, ["mig-dra"]), (3, [])])
def test_a_mig_claim_pod_goes_where_that_many_devices_of_its_profile_are_free(count: int, passed: list[str]) -> None:
    api = api_with(mig_claim("mine", count))
    answer = api.filter(args())
    assert answer["NodeNames"] == passed
    failed = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert failed["whole-dra"] == reasons.INSUFFICIENT_MIG_DEVICES.message
    for name in {"mig-dra", "mig-busy"} - set(passed):
        assert failed[name] == reasons.INSUFFICIENT_FREE_MIG_DEVICES.message
    why = api.explain(args())
    assert why["migDevicesNeeded"] == {"1g.10gb": count}
    rows = {r["node"]: r for r in why["nodes"]}
    assert rows["mig-dra"]["migDevicesFree"] == {"1g.10gb": 2} and rows["mig-busy"]["migDevicesFree"] == {"1g.10gb": 1}
    devices = {d["device"]: (d["profile"], d["claim"], d["allocatable"]) for d in rows["mig-dra"]["draMigDevices"]}
    assert devices == {
        "gpu-0-mig-1g10gb-19-0": ("1g.10gb", "default/waiting", False),
        "gpu-0-mig-1g10gb-19-1": ("1g.10gb", None, True),
        "gpu-0-mig-1g10gb-19-2": ("1g.10gb", None, True),
    }
    assert rows["whole-dra"]["draMigDevices"] is None and rows["mig-dra"]["draDevices"] is None
    assert "DRA MIG devices: 1g.10gb 2 of 3 free" in explain_cli.render(why)


def test_a_mig_claim_whose_profile_is_not_said_makes_no_node_fail() -> None:
    """kube-scheduler's allocator already checked the claim fits: the extender cannot tell which
    profile, so the pod is neutral (no GPU demand it can read)."""
    api = api_with(mig_claim("mine", 3, profile=""))
    assert api.filter(args())["NodeNames"] == NAMES
    assert api.explain(args())["migDevicesNeeded"] == {}


def test_explain_says_what_was_read_of_each_claim_and_what_was_not() -> None:
    """A selector the extender cannot evaluate makes no node fail; explain says what it read."""
    api = api_with(mig_claim("mine", 2))
    unread = mig_claim("any-profile", 3, profile="")
    gpus = allocated_claim("gpus", "whole-dra", [], namespace="ml")
    del gpus["status"]
    gpus["spec"]["devices"]["requests"][0]["exactly"].update(
        {"count": 2, "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'x'"}}]}
    )
    assert api.sources.claims is not None
    api.sources.claims.upsert(RESOURCE_CLAIM_KIND, unread)
    api.sources.claims.upsert(RESOURCE_CLAIM_KIND, gpus)
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "uid-p"},
        "spec": {
            "containers": [{"name": "c"}],
            "resourceClaims": [
                {"name": "a", "resourceClaimName": "mine"},
                {"name": "b", "resourceClaimName": "any-profile"},
                {"name": "c", "resourceClaimName": "gpus"},
                {"name": "d", "resourceClaimName": "not-yet"},
            ],
        },
    }
    why = api.explain(parse_extender_args(json.dumps({"Pod": pod, "NodeNames": NAMES}).encode()))
    assert (why["gpusNeeded"], why["migDevicesNeeded"]) == (2, {"1g.10gb": 2})
    claims = {c["claim"]: c for c in why["resolved"]["claims"]}
    assert [r["migDevices"] for r in claims["ml/mine"]["requests"]] == [{"1g.10gb": 2}]
    assert claims["ml/any-profile"]["requests"][0]["migDevices"] == {}
    assert "not counted" in claims["ml/any-profile"]["requests"][0]["read"]
    assert claims["ml/gpus"]["requests"][0]["gpus"] == 2
    assert "selectors are not evaluated" in claims["ml/gpus"]["requests"][0]["read"]
    assert (claims["ml/not-yet"]["state"], claims["ml/not-yet"]["requests"]) == ("not listed yet", [])
    text = explain_cli.render(why)
    assert "claim ml/mine (to allocate): mig: 2 MIG device(s) 1g.10gb" in text
    assert "claim ml/not-yet (not listed yet): demand unknown" in text
