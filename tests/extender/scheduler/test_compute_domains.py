"""NVIDIA ComputeDomains (issue 53 item 4; decide/compute_domains.py): a node runs one
ComputeDomain's IMEX daemon at a time, so a pod whose claims name ComputeDomain A fails
(OtherComputeDomain, unresolvable: never passed by the no-fit fallback) on a node where B's channel
or daemon claim is allocated, and is judged as before where A's is or none is; a group of such pods
counts only the nodes free of other domains. The claims as NVIDIA's DRA driver writes them: the
domain is the `domainID` of the claim's opaque `compute-domain.nvidia.com` config (model/dra.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide.compute_domains import SHARED_CLIQUE_NOTE
from gpuextender.extender.model.dra import COMPUTE_DOMAIN_DRIVER, MAX_CLAIM_CONFIGS, parse_resource_claim
from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.wire import ExtenderArgs
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from tests.extender.builders import gpu, report

NOW = 1000.0
NS = "team-a"
CHANNEL = "ComputeDomainChannelConfig"
DAEMON = "ComputeDomainDaemonConfig"


def config(domain: Any, kind: Any = CHANNEL, driver: Any = COMPUTE_DOMAIN_DRIVER) -> dict[str, Any]:
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind, "domainID": domain}
    return {"requests": ["channel"], "opaque": {"driver": driver, "parameters": parameters}}


def cd_claim(name: str, domain: str, node: str | None = None, kind: str = CHANNEL, ns: str = NS) -> dict[str, Any]:
    """A ComputeDomain claim as the driver's template makes it; allocated on `node` (channel-0, or
    daemon-0 for a daemon's claim) when given."""
    request = "channel" if kind == CHANNEL else "daemon"
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": request, "exactly": {"deviceClassName": f"compute-domain-default-{request}.nvidia.com"}}
                ],
                "config": [config(domain, kind)],
            }
        },
    }
    if node is not None:
        obj["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": request, "driver": COMPUTE_DOMAIN_DRIVER, "pool": node, "device": f"{request}-0"}
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
        }
    return obj


def pod(name: str, claim: str | None, gpus: int = 4) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "imex", "resourceClaimName": claim}]
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"}, "spec": spec}


class Fleet:
    def __init__(self, nodes: list[str], claims: list[dict[str, Any]], **settings: Any) -> None:
        self.state = GpuState(IdleRule())
        for n in nodes:
            self.state.ingest(report(n, [gpu(i, 0, 1) for i in range(8)]), NOW)
        self.claims = ClaimLedger()
        self.claims.replace_all(RESOURCE_CLAIM_KIND, claims)
        ledger = PodLedger(("nvidia.com/gpu",))
        ledger.replace_all(POD_KIND, [])
        view = InventoryView(node_labels={n: {} for n in nodes}, allocatable_gpus=dict.fromkeys(nodes, 8))
        self.nodes = nodes
        self.api = SchedulerApi(
            self.state,
            ExtenderMetrics(self.state),
            ApiSettings(DecisionPolicy(), shortlist=0, **settings),
            inventory=lambda: view,
            clock=lambda: NOW,
            sources=ClusterSources(ledger=ledger, claims=self.claims),
        )

    def filter(self, p: dict[str, Any]) -> dict[str, Any]:
        return self.api.filter(ExtenderArgs(p, list(self.nodes), None))


def unresolvable(answer: dict[str, Any]) -> dict[str, str]:
    return {n: r.split("(")[-1].rstrip(")") for n, r in answer["FailedAndUnresolvableNodes"].items()}


def test_a_node_holding_another_domains_channel_or_daemon_fails_the_pod() -> None:
    fleet = Fleet(
        ["own", "other", "daemon", "free"],
        [
            cd_claim("w0", "A"),  # the pod's channel claim, not allocated yet
            cd_claim("a-1", "A", "own"),
            cd_claim("b-1", "B", "other"),
            cd_claim("cd-daemon-b", "B", "daemon", kind=DAEMON, ns="nvidia-dra-driver"),
        ],
    )
    answer = fleet.filter(pod("w0", "w0"))
    assert sorted(answer["NodeNames"]) == ["free", "own"]
    assert unresolvable(answer) == {"other": "OtherComputeDomain", "daemon": "OtherComputeDomain"}
    assert "one ComputeDomain per node" in answer["FailedAndUnresolvableNodes"]["other"]
    explained = fleet.api.explain(ExtenderArgs(pod("w0", "w0"), list(fleet.nodes), None))
    said = {n["node"]: n for n in explained["nodes"]}
    assert (said["other"]["result"], said["other"]["reasonCode"]) == ("fail", "OtherComputeDomain")
    assert said["free"]["result"] == "pass"


def test_a_node_holding_only_claims_of_no_compute_domain_is_judged_as_before() -> None:
    gpu_claim = cd_claim("gpus", "unused", "gpu-node")
    gpu_claim["spec"]["devices"]["config"] = []  # a GPU claim: no ComputeDomain
    fleet = Fleet(["gpu-node"], [cd_claim("w0", "A"), gpu_claim])
    assert fleet.filter(pod("w0", "w0"))["NodeNames"] == ["gpu-node"]


def test_a_group_in_cliques_skips_the_clique_another_domain_breaks() -> None:
    """Cliques x (x1, x2) and y (y1, y2, y3), a group of 2 x 8 GPUs: x would strand nothing, but x2
    runs domain B, so the group goes to y."""
    fleet = Fleet(["x1", "x2", "y1", "y2", "y3"], [cd_claim("w0", "A"), cd_claim("b-1", "B", "x2")])
    view = fleet.api.decisions._inventory()
    for n in fleet.nodes:
        view.node_labels[n]["nvidia.com/gpu.clique"] = n[0]
    member = pod("w0", "w0", gpus=8)
    member["metadata"]["labels"] = {"leaderworkerset.sigs.k8s.io/group-key": "g"}
    member["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/size": "2"}
    answer = fleet.filter(member)
    assert sorted(answer["NodeNames"]) == ["y1", "y2", "y3"]


def test_a_pod_asking_for_no_gpu_of_its_own_is_still_kept_off_another_domains_node() -> None:
    fleet = Fleet(["other", "free"], [cd_claim("w0", "A"), cd_claim("b-1", "B", "other")])
    answer = fleet.filter(pod("w0", "w0", gpus=0))
    assert answer["NodeNames"] == ["free"] and unresolvable(answer) == {"other": "OtherComputeDomain"}


def test_pods_without_a_compute_domain_claim_are_decided_as_before() -> None:
    fleet = Fleet(["other", "free"], [cd_claim("b-1", "B", "other")])
    assert sorted(fleet.filter(pod("plain", None))["NodeNames"]) == ["free", "other"]


def test_a_claim_not_listed_yet_names_no_domain() -> None:
    fleet = Fleet(["other", "free"], [cd_claim("b-1", "B", "other")])
    assert sorted(fleet.filter(pod("w0", "w0"))["NodeNames"]) == ["free", "other"]


def test_the_no_fit_fallback_never_passes_a_node_of_another_domain() -> None:
    fleet = Fleet(["other", "busy"], [cd_claim("w0", "A"), cd_claim("b-1", "B", "other")])
    fleet.state.ingest(report("busy", [gpu(i, 95, 90) for i in range(8)]), NOW)  # soft: busy GPUs
    answer = fleet.filter(pod("w0", "w0"))
    assert answer["NodeNames"] == ["busy"]  # the fallback passes the soft failure only
    assert unresolvable(answer) == {"other": "OtherComputeDomain"}


def test_a_group_counts_only_the_nodes_free_of_other_domains() -> None:
    """Two members of 8 GPUs: a, b and c hold the room, but b runs domain B: the group fits a and c."""
    fleet = Fleet(["a", "b", "c"], [cd_claim(f"w{i}", "A") for i in range(2)] + [cd_claim("b-1", "B", "b")])
    member = pod("w0", "w0", gpus=8)
    member["metadata"]["labels"] = {"leaderworkerset.sigs.k8s.io/group-key": "g"}
    member["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/size": "2"}
    answer = fleet.filter(member)
    assert sorted(answer["NodeNames"]) == ["a", "c"] and unresolvable(answer) == {"b": "OtherComputeDomain"}
    plan = fleet.api.groups.plan(f"{NS}/leaderworkerset/g")
    assert plan is not None and sorted(plan.holds) == ["a", "c"]


def test_the_ledger_tracks_domains_by_node_and_forgets_them() -> None:
    claims = ClaimLedger()
    gpus = cd_claim("gpus", "unused", "n1")
    gpus["spec"]["devices"]["config"] = []  # no ComputeDomain: not counted
    claims.replace_all(RESOURCE_CLAIM_KIND, [cd_claim("a-1", "A", "n1"), cd_claim("w0", "A"), cd_claim("b", "B"), gpus])
    assert claims.compute_domain_claims == 3
    assert claims.compute_domains_on("n1") == {"A"} and claims.compute_domains_on("n2") == frozenset()
    assert claims.compute_domains([f"{NS}/w0", f"{NS}/b", f"{NS}/gone"]) == {"A", "B"}
    assert claims.compute_domains([f"{NS}/gpus"]) == frozenset()  # a pod of GPU claims only names none
    claims.upsert(RESOURCE_CLAIM_KIND, cd_claim("b", "B", "n1"))  # allocated: no new claim
    assert claims.compute_domain_claims == 3 and claims.compute_domains_on("n1") == {"A", "B"}
    claims.delete(RESOURCE_CLAIM_KIND, cd_claim("a-1", "A", "n1"))
    assert claims.compute_domain_claims == 2 and claims.compute_domains_on("n1") == {"B"}
    plain = cd_claim("gpu", "A")
    plain["spec"]["devices"]["config"] = []
    claims.upsert(RESOURCE_CLAIM_KIND, plain)
    assert claims.compute_domain_claims == 2


@pytest.mark.parametrize(
    ("configs", "domain"),
    [
        ([config("A")], "A"),
        ([config("A", DAEMON)], "A"),
        ([config("B", driver="gpu.nvidia.com"), config("A")], "A"),  # another driver's config first
        ([config("A", kind="GpuConfig")], ""),
        ([config("A", kind=["ComputeDomainChannelConfig"])], ""),  # (an unhashable kind)
        ([config("")], ""),
        ([config(7)], ""),
        ([config("u" * 253)], "u" * 253),
        ([config("u" * 254)], ""),
        ([{"opaque": "not an object"}], ""),
        (["not an object"], ""),
        ([], ""),
        ([config("X", driver="gpu.nvidia.com")] * (MAX_CLAIM_CONFIGS - 1) + [config("A")], "A"),
    ],
)
def test_a_claims_compute_domain_is_its_opaque_configs_domain_id(configs: list[Any], domain: str) -> None:
    obj = cd_claim("c", "unused")
    obj["spec"]["devices"]["config"] = configs
    assert parse_resource_claim(obj).compute_domain == domain


def test_more_opaque_configs_than_the_api_allows_are_refused() -> None:
    obj = cd_claim("c", "A")
    obj["spec"]["devices"]["config"] = [config("A")] * (MAX_CLAIM_CONFIGS + 1)
    with pytest.raises(InvalidInput, match="at most 32"):
        parse_resource_claim(obj)


def cd_member(name: str, claim: str) -> dict[str, Any]:
    member = pod(name, claim, gpus=8)
    member["metadata"]["labels"] = {"leaderworkerset.sigs.k8s.io/group-key": "g"}
    member["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/size": "2"}
    return member


def in_cliques(nodes: list[str], claims: list[dict[str, Any]]) -> Fleet:
    fleet = Fleet(nodes, claims)
    view = fleet.api.decisions._inventory()
    for n in fleet.nodes:
        view.node_labels[n]["nvidia.com/gpu.clique"] = n[0]
    return fleet


def test_a_group_takes_a_clique_no_other_domain_uses_over_a_tighter_one_another_does() -> None:
    """NVIDIA/k8s-dra-driver-gpu #892: two ComputeDomains in one clique break each other's fabric
    memory. x (x1, x2 free; x3 runs domain B: vetoed) holds 2 x 8 exactly, y (y1-y3) strands 8:
    the group takes y anyway. Where only x holds it, x (the driver allows it; nothing else does)."""
    x, y = ["x1", "x2", "x3"], ["y1", "y2", "y3"]
    claims = [cd_claim("w0", "A"), cd_claim("b-1", "B", "x3")]
    assert sorted(in_cliques(x + y, claims).filter(cd_member("w0", "w0"))["NodeNames"]) == y
    assert sorted(in_cliques([*x, "y1"], claims).filter(cd_member("w0", "w0"))["NodeNames"]) == ["x1", "x2"]
    # The pod's own domain in a clique shares nothing with it: x3 running A, x and y alike, x first.
    own = in_cliques(x + y, [cd_claim("w0", "A"), cd_claim("a-1", "A", "x3")])
    assert sorted(own.filter(cd_member("w0", "w0"))["NodeNames"]) == x


def test_explain_says_when_a_groups_clique_holds_another_domain() -> None:
    """explain's group notes name #892 where the group's domain is one another ComputeDomain uses
    (only x holds it), and not where a domain free of others was taken."""
    x, y = ["x1", "x2", "x3"], ["y1", "y2", "y3"]
    claims = [cd_claim("w0", "A"), cd_claim("b-1", "B", "x3")]

    def notes(nodes: list[str]) -> list[str]:
        fleet = in_cliques(nodes, claims)
        group = fleet.api.explain(ExtenderArgs(cd_member("w0", "w0"), list(fleet.nodes), None))["group"]
        return [n for n in group["notes"] if "#892" in n]

    assert notes([*x, "y1"]) == [SHARED_CLIQUE_NOTE]
    assert notes(x + y) == []
