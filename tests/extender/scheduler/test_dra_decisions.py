"""Issue 24's failure 2, through SchedulerApi's real decision path: a node whose GPUs come through
DRA (no nvidia.com/gpu in its allocatable, a ResourceSlice of 8 GPUs) is never failed "too few GPUs"
for that. Without fresh agent data its capacity is its unallocated, untainted DRA devices, counted
"just enough" as for any node without data; and a pod whose nvidia.com/gpu DRA served counts once
(its claim's devices), not twice. Bounds at exactly the count, on both sides."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import parse_extender_args
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger, gpus_total
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_store import InventoryStore
from gpuextender.extender.state.inventory_view import ViewBuilder
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from gpuextender.extender.ui import explain_cli
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.dra_objects import allocated_claim, device_class, gpu_slice

NOW = 1000.0
STALE_AFTER = 10.0
GPU = ("nvidia.com/gpu",)


def node(name: str, gpus: int | None) -> dict[str, Any]:
    """A Node; `gpus` None: its allocatable lists no nvidia.com/gpu at all (GPUs through DRA)."""
    allocatable = {"cpu": "64"} if gpus is None else {"cpu": "64", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": allocatable}}


def fleet(
    *, agent_age_s: float | None, claimed: int = 2, joined: bool = False
) -> tuple[SchedulerApi, ClaimLedger, PodLedger]:
    """gpu-dra-1: 8 DRA GPUs, gpu-7 tainted NoSchedule, `claimed` held by a claim; gpu-dp-1: the
    device plugin's 8, all busy. `agent_age_s`: how old gpu-dra-1's agent data is (None: none).
    `joined`: the slice's uuid attributes are the agent's GPU UUIDs (else no GPU joins a device)."""
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    store.replace_all("Node", [node("gpu-dra-1", None), node("gpu-dp-1", 8)])
    store.replace_all("DeviceClass", [device_class()])
    uuid_of = (lambda minor: f"GPU-{minor}") if joined else None  # builders.gpu's UUIDs
    store.replace_all("ResourceSlice", [gpu_slice("gpu-dra-1", 8, tainted=(7,), uuid_of=uuid_of)])
    claims = ClaimLedger()
    claims.replace_all(
        RESOURCE_CLAIM_KIND, [allocated_claim("held", "gpu-dra-1", [f"gpu-{i}" for i in range(claimed)])]
    )
    state = GpuState(IdleRule())
    if agent_age_s is not None:
        state.ingest(report("gpu-dra-1", [gpu(i, 0, 1) for i in range(8)]), NOW - agent_age_s)
    state.ingest(report("gpu-dp-1", [gpu(i, 95, 90) for i in range(8)]), NOW)  # fresh, all busy
    settings = ApiSettings(DecisionPolicy(stale_after_s=STALE_AFTER, no_fit_policy="reject"), shortlist=0)
    ledger = PodLedger(GPU)
    ledger.replace_all(POD_KIND, [])
    api = SchedulerApi(
        state,
        ExtenderMetrics(state),
        settings,
        inventory=lambda: views.current,
        clock=lambda: NOW,
        sources=ClusterSources(ledger=ledger, claims=claims),
    )
    return api, claims, ledger


def args(gpus: int, names: tuple[str, ...] = ("gpu-dra-1", "gpu-dp-1")) -> Any:
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "uid-p"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }
    return parse_extender_args(json.dumps({"Pod": pod, "NodeNames": list(names)}).encode())


def row(api: SchedulerApi, gpus: int, name: str = "gpu-dra-1") -> dict[str, Any]:
    return {r["node"]: r for r in api.explain(args(gpus))["nodes"]}[name]


@pytest.mark.parametrize("agent_age_s", [None, STALE_AFTER + 0.001], ids=["no-agent-data", "stale-agent-data"])
@pytest.mark.parametrize(("needed", "passes"), [(5, True), (6, False)])
def test_without_fresh_data_a_dra_node_offers_its_unclaimed_untainted_devices(
    agent_age_s: float | None, needed: int, passes: bool
) -> None:
    """8 devices - 2 claimed - 1 tainted = 5: a 5-GPU pod fits (assumed), a 6-GPU pod does not."""
    api, _, _ = fleet(agent_age_s=agent_age_s)
    answer = api.filter(args(needed))
    if passes:
        assert answer["NodeNames"] == ["gpu-dra-1"], answer
    else:
        assert answer["NodeNames"] == []
        assert "too few GPUs" in {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}["gpu-dra-1"]
    assert row(api, needed)["gpus"] == 5


@pytest.mark.parametrize(("needed", "passes"), [(5, True), (6, False)])
def test_with_fresh_agent_data_the_claimed_and_tainted_devices_are_not_offered(needed: int, passes: bool) -> None:
    """Issue 24's failure 3: the agent reads all 8 GPUs idle and free (it does not attribute DRA
    holders: the claim's pod has not started), yet 2 are claimed and 1 tainted: 5 can be had."""
    api, _, _ = fleet(agent_age_s=0.0)
    answer = api.filter(args(needed))
    assert answer["NodeNames"] == (["gpu-dra-1"] if passes else [])
    r = row(api, needed)
    assert (r["data"], r["idleGpus"]) == ("fresh", 5)


def test_with_fresh_agent_data_busy_gpus_and_free_devices_the_smaller_decides() -> None:
    """Claimed GPUs in use (their pods run): the agent reads them busy, 6 idle; the 5 free devices
    (8 - 2 claimed - 1 tainted) decide."""
    api, _, _ = fleet(agent_age_s=None)
    api.state.ingest(report("gpu-dra-1", [gpu(i, 95 if i < 2 else 0, 90 if i < 2 else 1) for i in range(8)]), NOW)
    assert row(api, 1)["idleGpus"] == 5
    api2, _, _ = fleet(agent_age_s=None, claimed=0)
    api2.state.ingest(report("gpu-dra-1", [gpu(i, 95 if i < 6 else 0, 90 if i < 6 else 1) for i in range(8)]), NOW)
    assert row(api2, 1)["idleGpus"] == 2  # the agent's 2 idle, below the 7 free devices


def test_a_claim_that_lets_go_frees_its_devices_for_the_next_decision() -> None:
    api, claims, _ = fleet(agent_age_s=None, claimed=7)  # 8 - 7 - the tainted one: nothing left
    assert api.filter(args(1))["NodeNames"] == []
    claims.delete(RESOURCE_CLAIM_KIND, allocated_claim("held", "gpu-dra-1", []))
    assert api.filter(args(7))["NodeNames"] == ["gpu-dra-1"]  # the 7 untainted devices


def test_a_pod_dra_served_counts_once_through_its_claim() -> None:
    """kube-scheduler gave `p`'s nvidia.com/gpu: 2 the claimed devices gpu-0, gpu-1 (KEP-5004): the
    ledger does not take its 2 GPUs off the node again."""
    api, _, ledger = fleet(agent_age_s=None)
    bound = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "held-pod", "namespace": "default", "uid": "uid-held"},
        "spec": {
            "nodeName": "gpu-dra-1",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
        },
        "status": {"phase": "Running", "extendedResourceClaimStatus": {"resourceClaimName": "held"}},
    }
    ledger.upsert(POD_KIND, bound)
    assert api.filter(args(5))["NodeNames"] == ["gpu-dra-1"]
    del bound["status"]["extendedResourceClaimStatus"]  # a device-plugin pod of 2 GPUs instead: 5 - 2
    ledger.upsert(POD_KIND, bound)
    assert api.filter(args(4))["NodeNames"] == []
    assert api.filter(args(3))["NodeNames"] == ["gpu-dra-1"]


def claim(name: str, *requests: dict[str, Any], allocated_on: str = "") -> dict[str, Any]:
    obj = allocated_claim(name, allocated_on or "n", [], namespace="ml")
    obj["spec"]["devices"]["requests"] = list(requests)
    if not allocated_on:
        del obj["status"]
    return obj


def exactly(count: int | None = None, device_class: str = "gpu.nvidia.com", mode: str = "") -> dict[str, Any]:
    choice: dict[str, Any] = {"deviceClassName": device_class}
    if count is not None:
        choice["count"] = count
    if mode:
        choice["allocationMode"] = mode
    return {"name": "r", "exactly": choice}


def test_what_a_pods_claims_ask_for_in_whole_gpus() -> None:
    ledger = ClaimLedger()
    first = {"name": "f", "firstAvailable": [dict(exactly(4)["exactly"]), dict(exactly(2)["exactly"])]}
    other = {
        "name": "o",
        "firstAvailable": [dict(exactly(4)["exactly"]), dict(exactly(1, "nic.example.com")["exactly"])],
    }
    ledger.replace_all(
        RESOURCE_CLAIM_KIND,
        [
            claim("two", exactly(2)),
            claim("one", exactly()),  # count defaults to 1
            claim("all", exactly(mode="All")),
            claim("first", first),
            claim("maybe-nic", other),
            claim("nic", exactly(3, "nic.example.com")),
            claim("held", exactly(2), allocated_on="n1"),
        ],
    )
    gpu = {"gpu.nvidia.com"}

    def wanted(*keys: str) -> int:
        return gpus_total(ledger.read(keys, gpu, {}))

    assert wanted("ml/two") == 2
    assert wanted("ml/one", "ml/two") == 3
    assert wanted("ml/all") == 1  # at least one; the allocator knows the node's count
    assert wanted("ml/first") == 2  # the smallest choice
    assert wanted("ml/maybe-nic") == 0  # it may get the NIC instead
    assert wanted("ml/nic") == 0
    assert wanted("ml/held") == 0  # allocated already (a shared claim)
    assert wanted("ml/two", "ml/unknown") == 2  # the one not listed yet: its demand is not known
    assert [c.state for c in ledger.read(["ml/two", "ml/held", "ml/unknown"], gpu, {})] == [
        "to allocate",
        "allocated",
        "not listed yet",
    ]


def dra_api(state: GpuState, views: ViewBuilder, claims: ClaimLedger) -> SchedulerApi:
    """The scheduler API over the agents' `state`, the inventory's `views` and the DRA `claims`."""
    return SchedulerApi(
        state,
        ExtenderMetrics(state),
        ApiSettings(DecisionPolicy()),
        inventory=lambda: views.current,
        clock=lambda: NOW,
        sources=ClusterSources(claims=claims),
    )


def test_a_claim_pod_is_decided_on_live_gpu_state_like_any_gpu_pod() -> None:
    """Two DRA nodes with fresh agents: idle (8 idle) and busy (2 idle). A pod whose claim asks for
    3 GPUs passes only the idle one; prioritize ranks it first; a pod whose claim is unknown yet is
    neutral (every node passes)."""
    store = InventoryStore()
    views = ViewBuilder(store, GPU)
    store.replace_all("Node", [node("idle", None), node("busy", None)])
    store.replace_all("DeviceClass", [device_class()])
    store.replace_all("ResourceSlice", [gpu_slice("idle", 8), gpu_slice("busy", 8)])
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [claim("three", exactly(3))])
    state = GpuState(IdleRule())
    state.ingest(report("idle", [gpu(i, 0, 1) for i in range(8)]), NOW)
    state.ingest(report("busy", [gpu(i, 0 if i < 2 else 95, 1 if i < 2 else 90) for i in range(8)]), NOW)
    api = dra_api(state, views, claims)

    def claim_pod(claim_name: str) -> Any:
        pod = {
            "metadata": {"name": "c", "namespace": "ml", "uid": "uid-c"},
            "spec": {
                "resourceClaims": [{"name": "gpus", "resourceClaimName": claim_name}],
                "containers": [{"name": "c", "resources": {"claims": [{"name": "gpus"}]}}],
            },
        }
        return parse_extender_args(json.dumps({"Pod": pod, "NodeNames": ["busy", "idle"]}).encode())

    answer = api.filter(claim_pod("three"))
    assert answer["NodeNames"] == ["idle"]
    assert "too few idle GPUs" in answer["FailedNodes"]["busy"]
    scores = {s["Host"]: s["Score"] for s in api.prioritize(claim_pod("three"))}
    assert scores.get("idle", 0) > scores.get("busy", 0)
    assert api.filter(claim_pod("not-listed-yet"))["NodeNames"] == ["busy", "idle"]


def test_explain_lists_a_dra_nodes_devices_with_their_claims_and_taints() -> None:
    api, _, _ = fleet(agent_age_s=0.0)
    devices = {d["device"]: d for d in row(api, 1)["draDevices"]}
    assert len(devices) == 8
    assert (devices["gpu-0"]["claim"], devices["gpu-0"]["allocatable"]) == ("default/held", False)
    assert devices["gpu-7"]["taints"] == ["gpu.nvidia.com/xid=79:NoSchedule"] and not devices["gpu-7"]["allocatable"]
    assert (devices["gpu-2"]["claim"], devices["gpu-2"]["taints"], devices["gpu-2"]["allocatable"]) == (None, [], True)
    assert devices["gpu-2"]["uuid"].startswith("GPU-") and devices["gpu-2"]["pool"] == "gpu-dra-1"
    assert row(api, 1, "gpu-dp-1")["draDevices"] is None  # a device-plugin node
    line = explain_cli.render(api.explain(args(1)))
    assert (
        "DRA GPUs: 8, 5 free; held by claims: gpu-0 (default/held), gpu-1 (default/held); "
        "tainted: gpu-7 (gpu.nvidia.com/xid=79:NoSchedule)"
    ) in line


@pytest.mark.parametrize(("needed", "passes"), [(3, True), (4, False)])
def test_joined_to_the_agents_gpus_a_free_device_busy_outside_kubernetes_is_not_offered(
    needed: int, passes: bool
) -> None:
    """The slice's uuids are the agent's: gpu-2 and gpu-3 are free devices (DRA cannot see work
    outside Kubernetes) that the agent reads busy; gpu-0 and gpu-1 are claimed (the agent reads them
    idle: their pod has not started); gpu-7 is tainted. 3 GPUs can be had (4, 5, 6), GPU by GPU;
    the smaller of the two counts would have offered min(6, 5) = 5."""
    api, _, _ = fleet(agent_age_s=None, joined=True)
    api.state.ingest(report("gpu-dra-1", [gpu(i, 95 if i in (2, 3) else 0, 1) for i in range(8)]), NOW)
    answer = api.filter(args(needed))
    assert answer["NodeNames"] == (["gpu-dra-1"] if passes else [])
    r = row(api, needed)
    assert r["idleGpus"] == 3
    agent = {d["device"]: d["agent"] for d in r["draDevices"]}
    assert agent == {
        "gpu-0": "free, idle",  # the agent sees no container on it yet: the claim says held
        "gpu-1": "free, idle",
        "gpu-2": "free, busy",
        "gpu-3": "free, busy",
        "gpu-4": "free, idle",
        "gpu-5": "free, idle",
        "gpu-6": "free, idle",
        "gpu-7": "free, idle",
    }
    line = explain_cli.render(api.explain(args(needed)))
    assert "free but not usable: gpu-2 (free, busy), gpu-3 (free, busy)" in line


def claim_pod_args(claim: str) -> Any:
    pod = {
        "metadata": {"name": "c", "namespace": "default", "uid": "uid-c"},
        "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimName": claim}], "containers": [{"name": "c"}]},
    }
    return parse_extender_args(json.dumps({"Pod": pod, "NodeNames": ["gpu-dra-1"]}).encode())


def test_a_filter_waits_for_a_claim_the_watch_has_not_delivered_yet(caplog: pytest.LogCaptureFixture) -> None:
    """kube-scheduler filters a claim pod once its claim exists; the claim watch may be a moment
    behind. The filter waits for it (at most --binding-wait) instead of reading the pod as asking for
    no GPU; a claim that never comes is logged and the pod decided on what is known."""
    api, claims, _ = fleet(agent_age_s=None)
    api.settings = replace(api.settings, binding_wait_s=0.2)

    async def arrives_late() -> float:
        loop = asyncio.get_running_loop()
        late = allocated_claim("late", "gpu-dra-1", [])
        del late["status"]
        loop.call_later(0.03, claims.upsert, RESOURCE_CLAIM_KIND, late)
        started = loop.time()
        await api.settle(claim_pod_args("late"))
        return loop.time() - started

    waited = asyncio.run(arrives_late())
    assert claims.claim("default/late") is not None and waited < 0.2
    assert api.decisions.decide(claim_pod_args("late")).pod.gpus_needed == 1  # its one-GPU request, now known

    with caplog.at_level("WARNING"):
        asyncio.run(api.settle(claim_pod_args("never")))
    assert [r.getMessage() for r in caplog.records if "default/never" in r.getMessage()]
    # Without --kubernetes (no wait configured) or without GPU classes, nothing waits.
    api.settings = replace(api.settings, binding_wait_s=0.0)
    caplog.clear()
    asyncio.run(api.settle(claim_pod_args("never")))
    assert not caplog.records


def quarantine_gpu_6(api: SchedulerApi) -> None:
    """gpu-dra-1's agent reports gpu-6 quarantined (XID 79), every other GPU idle."""
    quarantined = gpu(6, 0, 1, healthy=False)
    quarantined.health = pb.HEALTH_UNHEALTHY
    quarantined.health_reasons.append("XidCritical")
    quarantined.xids.add(xid=79)
    api.state.ingest(report("gpu-dra-1", [*(gpu(i, 0, 1) for i in range(6)), quarantined, gpu(7, 0, 1)]), NOW)


def diagnostics_claim(name: str, tolerations: list[dict[str, str]]) -> dict[str, Any]:
    """An unallocated one-GPU claim whose request tolerates `tolerations`."""
    claim = allocated_claim(name, "gpu-dra-1", [])
    del claim["status"]
    claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = tolerations
    return claim


@pytest.mark.parametrize(
    ("tolerations", "passes"),
    [
        ([], False),
        ([{"key": "gpu-extender.io/unhealthy", "operator": "Exists"}], True),  # the agent's quarantined gpu-6
        ([{"key": "gpu-extender.io/unhealthy", "value": "xid-79", "effect": "NoSchedule"}], True),
        ([{"key": "gpu-extender.io/unhealthy", "value": "xid-13"}], False),  # another reason: not this GPU
        ([{"key": "gpu-extender.io/unhealthy", "operator": "Exists", "effect": "NoExecute"}], False),
        ([{"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}], True),  # the slice's gpu-7
        ([{"operator": "Exists"}], True),  # every taint
    ],
)
def test_a_claim_that_tolerates_the_taint_is_not_blocked_by_the_extender_either(
    tolerations: list[dict[str, str]], passes: bool
) -> None:
    """gpu-dra-1: gpu-0..5 claimed; gpu-6 quarantined by its agent (XID 79: the extender's rule
    gpu-extender.io/unhealthy=xid-79:NoSchedule); gpu-7 tainted gpu.nvidia.com/xid=79:NoSchedule in
    its slice (the agent reads it healthy). A one-GPU claim pod that tolerates neither has no GPU
    there; one that tolerates either taint (an operator's diagnostics) does (issue 25)."""
    api, claims, _ = fleet(agent_age_s=None, claimed=6, joined=True)
    quarantine_gpu_6(api)
    claims.upsert(RESOURCE_CLAIM_KIND, diagnostics_claim("diag", tolerations))
    answer = api.filter(claim_pod_args("diag"))
    assert answer["NodeNames"] == (["gpu-dra-1"] if passes else []), answer
    # Every other pod still sees the node as the shared view has it: nothing to give.
    claims.upsert(RESOURCE_CLAIM_KIND, diagnostics_claim("plain", []))
    assert api.filter(claim_pod_args("plain"))["NodeNames"] == []


def test_a_pod_joining_a_time_sliced_claim_is_not_failed_because_its_gpus_are_busy() -> None:
    """NVIDIA's GpuConfig.sharing (TimeSlicing, MPS) shares a claim's devices among the pods that
    reference that claim, never with another claim: a second pod of an allocated claim asks for
    nothing more (its devices are held already), so its claim's GPU being busy with the first pod's
    work fails no node for it (kube-scheduler keeps it on the claim's node)."""
    api, claims, _ = fleet(agent_age_s=0.0)
    shared = allocated_claim("shared", "gpu-dra-1", ["gpu-2"])
    shared["status"]["allocation"]["devices"]["config"] = [
        {
            "source": "FromClaim",
            "requests": ["gpus"],
            "opaque": {
                "driver": "gpu.nvidia.com",
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "GpuConfig",
                    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
                },
            },
        }
    ]
    claims.upsert(RESOURCE_CLAIM_KIND, shared)
    api.state.ingest(report("gpu-dra-1", [gpu(i, 95, 80) for i in range(8)]), NOW)  # every GPU busy
    assert api.decisions.decide(claim_pod_args("shared")).pod.gpus_needed == 0
    assert api.filter(claim_pod_args("shared"))["NodeNames"] == ["gpu-dra-1"]
    # A new claim for one GPU, on the same busy node: a GPU pod, failed.
    new = allocated_claim("new", "gpu-dra-1", [])
    del new["status"]
    claims.upsert(RESOURCE_CLAIM_KIND, new)
    assert api.decisions.decide(claim_pod_args("new")).pod.gpus_needed == 1
    assert api.filter(claim_pod_args("new"))["NodeNames"] == []


def test_an_allocated_claims_tolerations_do_not_open_a_tainted_gpu_to_the_pods_new_claim() -> None:
    """Issue 37, item 10: a pod keeps an allocated claim (on gpu-5) whose request tolerated the
    extender's quarantine taint, and asks for one more GPU through a new claim that tolerates
    nothing. Only the new claim is still to be allocated: the quarantined gpu-6 (XID 79) and the
    slice-tainted gpu-7 are not for it, so the node has no GPU to give (where the API serves no
    DeviceTaintRules, this filter is the only guard)."""
    api, claims, _ = fleet(agent_age_s=None, claimed=5, joined=True)
    quarantine_gpu_6(api)
    old = allocated_claim("old", "gpu-dra-1", ["gpu-5"])
    old["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "gpu-extender.io/unhealthy", "operator": "Exists"}
    ]
    claims.upsert(RESOURCE_CLAIM_KIND, old)
    claims.upsert(RESOURCE_CLAIM_KIND, diagnostics_claim("new", []))
    pod = {
        "metadata": {"name": "c", "namespace": "default", "uid": "uid-c"},
        "spec": {
            "resourceClaims": [{"name": "a", "resourceClaimName": "old"}, {"name": "b", "resourceClaimName": "new"}],
            "containers": [{"name": "c"}],
        },
    }
    call = parse_extender_args(json.dumps({"Pod": pod, "NodeNames": ["gpu-dra-1"]}).encode())
    assert api.decisions.decide(call).pod.gpus_needed == 1  # the new claim's; the allocated one asks nothing
    assert api.filter(call)["NodeNames"] == []
