"""Multi-pod GPU groups on a fleet of NVLink domains (issue 34), for tests/kube/test_groups.py.

The fleet: `domains` cliques (node label nvidia.com/gpu.clique) of `nodes_per_domain` Ready nodes
of 8 GPUs each; per node, seeded, some GPUs busy outside Kubernetes or unhealthy. kube-scheduler
sees 8 allocatable GPUs on every node; only the agents' reports say which are idle and healthy.
The agents are simulated in this process, as in tests/kube/burst.py: one real NodeReport per node
over a real TLS gRPC stream, with a --stale-after long enough that the data stays fresh.

The groups: `count` groups of 2-4 members of 4, 6 or 8 GPUs, each of one source:
- `lws`: LeaderWorkerSet labels (group-key, the size annotation) and the pod affinity LWS users
  write (required, topologyKey nvidia.com/gpu.clique, matchLabelKeys [group-key]);
- `coscheduling`: label scheduling.x-k8s.io/pod-group and a scheduling.x-k8s.io/v1alpha1 PodGroup
  (`spec.minMember`; its CRD is COSCHEDULING_CRD);
- `workload`: `spec.schedulingGroup.podGroupName` and a scheduling.k8s.io/v1alpha2 PodGroup (gang
  `minCount`, topology key nvidia.com/gpu.clique).
Every member of every group is created at once, in a seeded random order, before kube-scheduler
starts: one burst.

`judge` reads where they landed, per group: split across domains, members bound (in binding order)
to a node whose idle healthy GPUs less those of the members bound there before were fewer than the
member's (on a busy or unhealthy GPU), partly bound, waiting whole (no member bound).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.control_plane import GPU, Kube
from tests.kube.scene import EXTENDER_NAME, H100

CLIQUE = "nvidia.com/gpu.clique"
FLEET_LABEL = "gpu-extender.test/fleet"  # the fleet's nodes; every member selects them
GPUS_PER_NODE = 8
GIB = 1024**3
IDLE, BUSY, SICK = "idle", "busy", "unhealthy"

LWS, COSCHEDULING, WORKLOAD = "lws", "coscheduling", "workload"
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
COSCHEDULING_PATH = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
WORKLOAD_PATH = "/apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/podgroups"
GANG_GATES = "GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true"

# coscheduling's PodGroup (kubernetes-sigs/scheduler-plugins), reduced to what the extender reads.
COSCHEDULING_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
    "spec": {
        "group": "scheduling.x-k8s.io",
        "scope": "Namespaced",
        "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup", "shortNames": ["pg"]},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"minMember": {"type": "integer", "format": "int32", "minimum": 0}},
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


# -- the fleet ------------------------------------------------------------------------------------


A100_80 = {"product": "NVIDIA A100-SXM4-80GB", "label": "NVIDIA-A100-SXM4-80GB"}


@dataclass(frozen=True)
class FleetNode:
    name: str
    clique: str
    gpus: tuple[str, ...]  # IDLE, BUSY or SICK per GPU index
    product: dict[str, Any] = field(default_factory=lambda: H100)  # GFD's label and NVML's name

    @property
    def good(self) -> int:
        """GPUs a pod may be given: idle and healthy."""
        return self.gpus.count(IDLE)


@dataclass(frozen=True)
class Fleet:
    nodes: tuple[FleetNode, ...]
    label: str  # the value of FLEET_LABEL on its nodes: the members' node selector

    def by_name(self) -> dict[str, FleetNode]:
        return {n.name: n for n in self.nodes}

    def cliques(self) -> dict[str, list[FleetNode]]:
        found: dict[str, list[FleetNode]] = defaultdict(list)
        for n in self.nodes:
            found[n.clique].append(n)
        return dict(found)


def make_fleet(prefix: str, domains: int, nodes_per_domain: int, rng: random.Random) -> Fleet:
    """Per node: 55 % all idle, 25 % with 1-4 GPUs busy, 12 % with 1-2 unhealthy, 8 % all busy.
    Node names and cliques start with `prefix`, which is also the fleet's label value."""
    nodes = []
    for d in range(domains):
        clique = f"{prefix}-cluster.{d}"  # <ClusterUUID>.<cliqueId>, as GFD writes it
        for i in range(nodes_per_domain):
            roll = rng.random()
            states = [IDLE] * GPUS_PER_NODE
            if roll < 0.25:
                for index in rng.sample(range(GPUS_PER_NODE), rng.randint(1, 4)):
                    states[index] = BUSY
            elif roll < 0.37:
                for index in rng.sample(range(GPUS_PER_NODE), rng.randint(1, 2)):
                    states[index] = SICK
            elif roll < 0.45:
                states = [BUSY] * GPUS_PER_NODE
            nodes.append(FleetNode(f"{prefix}-d{d:02d}-n{i}", clique, tuple(states)))
    return Fleet(tuple(nodes), prefix)


def idle_fleet(prefix: str, cliques: dict[str, int]) -> Fleet:
    """Clique name -> that many nodes of 8 idle healthy GPUs."""
    nodes = [
        FleetNode(f"{prefix}-{clique}{i}", f"{prefix}.{clique}", (IDLE,) * GPUS_PER_NODE)
        for clique, count in cliques.items()
        for i in range(count)
    ]
    return Fleet(tuple(nodes), prefix)


def create_nodes(kube: Kube, fleet: Fleet, more: Callable[[FleetNode], dict[str, str]] | None = None) -> None:
    """Ready Nodes, 8 nvidia.com/gpu allocatable each whatever their GPUs' state (as the device
    plugin advertises a GPU busy outside Kubernetes, and one whose fault it does not see); `more`:
    a node's other labels."""
    for n in fleet.nodes:
        kube.create_node(
            n.name,
            GPUS_PER_NODE,
            {
                FLEET_LABEL: fleet.label,
                CLIQUE: n.clique,
                "nvidia.com/gpu.product": str(n.product["label"]),
                "nvidia.com/gpu.count": str(GPUS_PER_NODE),
                **(more(n) if more is not None else {}),
            },
        )


def node_report(n: FleetNode) -> pb.NodeReport:
    report = pb.NodeReport(node_name=n.name, sequence=1, agent_version="groups", driver_version="550.127.05")
    report.sample_time.seconds = int(time.time())
    for index, state in enumerate(n.gpus):
        hot = state == BUSY
        report.gpus.add(
            index=index,
            uuid=f"GPU-{n.name}-{index}",
            name=str(n.product["product"]),
            healthy=state != SICK,
            utilization_gpu_percent=90 if hot else 2,
            memory_total_bytes=80 * GIB,
            memory_used_bytes=(64 if hot else 1) * GIB,
        )
    return report


async def send_reports(target: str, ca_pem: bytes, fleet: Fleet) -> None:
    """One short stream per node (the extender ties a stream to one node), 16 at a time."""
    credentials = grpc.ssl_channel_credentials(root_certificates=ca_pem)
    options = [("grpc.ssl_target_name_override", EXTENDER_NAME)]
    async with grpc.aio.secure_channel(target, credentials, options=options) as channel:
        stub = pb_grpc.GpuStateServiceStub(channel)
        gate = asyncio.Semaphore(16)

        async def one(n: FleetNode) -> None:
            async with gate:
                call = stub.StreamNodeReports(timeout=30)
                await call.write(node_report(n))
                ack = await call.read()
                await call.done_writing()
                assert ack is not grpc.aio.EOF and ack.status == pb.ReportAck.ACCEPTED, (n.name, ack)
                await call.code()

        await asyncio.gather(*(one(n) for n in fleet.nodes))


# -- the groups -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    name: str
    source: str  # LWS, COSCHEDULING or WORKLOAD
    members: int
    gpus: int  # per member

    def pods(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.members)]


def make_groups(count: int, sources: tuple[str, ...], rng: random.Random) -> list[Group]:
    """`count` groups of 2-4 members x 4, 6 or 8 GPUs, sources in turn."""
    return [
        Group(f"g{i:02d}", sources[i % len(sources)], rng.randint(2, 4), rng.choice((4, 6, 8, 8))) for i in range(count)
    ]


def as_source(groups: list[Group], source: str) -> list[Group]:
    """The same groups (names, sizes), all of `source`."""
    return [Group(g.name, source, g.members, g.gpus) for g in groups]


def create_groups(kube: Kube, ns: str, fleet: Fleet, groups: list[Group], rng: random.Random) -> None:
    """The groups' PodGroups, then every member of every group in one shuffled order."""
    for g in groups:
        if g.source == COSCHEDULING:
            kube.create(
                COSCHEDULING_PATH.format(ns=ns),
                {
                    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {"name": g.name},
                    "spec": {"minMember": g.members},
                },
            )
        elif g.source == WORKLOAD:
            kube.create(WORKLOAD_PATH.format(ns=ns), workload_pod_group(g.name, g.members))
    members = [(g, i) for g in groups for i in range(g.members)]
    rng.shuffle(members)
    for g, i in members:
        kube.create(f"/api/v1/namespaces/{ns}/pods", member_pod(g, i, fleet.label))


def workload_pod_group(name: str, members: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": members}},
            "schedulingConstraints": {"topology": [{"key": CLIQUE}]},
        },
    }


def member_pod(g: Group, index: int, fleet_label: str, *, affinity: bool = True) -> dict[str, Any]:
    """Member `index` of `g`, for the gpu-scheduler, on the nodes of the fleet `fleet_label`;
    `affinity`: an LWS member carries the pod affinity LWS users write."""
    labels: dict[str, str] = {"app": "llm", "group": g.name}
    annotations: dict[str, str] = {}
    spec: dict[str, Any] = {
        "schedulerName": "gpu-scheduler",
        "nodeSelector": {FLEET_LABEL: fleet_label},
        "containers": [
            {"name": "main", "image": "registry.example/llm:1", "resources": {"limits": {GPU: str(g.gpus)}}}
        ],
    }
    if g.source == LWS:
        labels |= {
            "leaderworkerset.sigs.k8s.io/name": g.name,
            "leaderworkerset.sigs.k8s.io/group-index": "0",
            LWS_GROUP_KEY: f"{g.name}-key",  # LWS writes a hash; any value shared by the group
            "leaderworkerset.sigs.k8s.io/worker-index": str(index),
        }
        annotations["leaderworkerset.sigs.k8s.io/size"] = str(g.members)
        if affinity:
            spec["affinity"] = lws_affinity(g.name)
    elif g.source == COSCHEDULING:
        labels["scheduling.x-k8s.io/pod-group"] = g.name
    elif g.source == WORKLOAD:
        spec["schedulingGroup"] = {"podGroupName": g.name}
    return {"metadata": {"name": f"{g.name}-{index}", "labels": labels, "annotations": annotations}, "spec": spec}


def lws_affinity(name: str) -> dict[str, Any]:
    """What LWS users write to keep a group in one NVLink domain: the first member picks the domain
    alone, the rest must follow it. The labelSelector may not name the key matchLabelKeys names;
    kube-apiserver v1.36 merges `group-key In (<the pod's value>)` into it when the pod is created,
    so kube-scheduler v1.35.4 reads a plain selector (and honours it: no LWS group splits there)."""
    term = {
        "labelSelector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": name}},
        "matchLabelKeys": [LWS_GROUP_KEY],
        "topologyKey": CLIQUE,
    }
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


# -- where they landed ----------------------------------------------------------------------------


@dataclass
class GroupResult:
    group: Group
    nodes: list[str]  # of the bound members
    unbound_messages: list[str]  # the PodScheduled=False message of each unbound member ("" none yet)

    @property
    def bound(self) -> int:
        return len(self.nodes)


@dataclass
class Verdict:
    results: dict[str, GroupResult]
    split: list[str] = field(default_factory=list)  # groups bound in more than one domain
    on_bad_gpus: list[str] = field(default_factory=list)  # "pod -> node (left, needed; pods bound there before)"
    partly_bound: list[str] = field(default_factory=list)  # "group: k of n bound"
    partly_could_fit: list[str] = field(default_factory=list)  # partly bound while a domain could hold it
    whole: list[str] = field(default_factory=list)  # every member bound, one domain
    waiting: list[str] = field(default_factory=list)  # no member bound
    waiting_could_fit: list[str] = field(default_factory=list)  # no member bound, a domain holds it now
    # Members of waiting groups not marked unschedulable with the group's reason (GroupDoesNotFit),
    # unless no node at all has room for one member (then every node fails for its own reason).
    waiting_unexplained: list[str] = field(default_factory=list)
    # Idle healthy GPUs no pod took while a group is not whole (waiting or partly bound): the room
    # the placement left stranded (bench/bench_group_packing.py's measure); 0 when every group is.
    stranded: int = 0


def pod_states(kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube.get(f"/api/v1/namespaces/{ns}/pods")["items"]}


def unschedulable_message(pod: dict[str, Any]) -> str:
    for c in pod.get("status", {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message") or "")
    return ""


def judge(kube: Kube, ns: str, fleet: Fleet, groups: list[Group]) -> Verdict:
    pods = pod_states(kube, ns)
    nodes = fleet.by_name()
    bound = sorted(
        (p for p in pods.values() if p["spec"].get("nodeName")), key=lambda p: int(p["metadata"]["resourceVersion"])
    )
    # No kubelet touches a pod after its binding: its resourceVersion orders the bindings.
    left = {n.name: n.good for n in fleet.nodes}
    on_node: dict[str, list[str]] = defaultdict(list)  # "pod x GPUs" bound there, in binding order
    by_group = {g.name: g for g in groups}
    verdict = Verdict({})
    for p in bound:
        g = by_group[p["metadata"]["labels"]["group"]]
        node, name = p["spec"]["nodeName"], p["metadata"]["name"]
        if left[node] < g.gpus:
            before = ", ".join(on_node[node]) or "none"
            verdict.on_bad_gpus.append(
                f"{name} -> {node} ({left[node]} idle left, {g.gpus} needed; bound there before: {before})"
            )
        left[node] -= g.gpus
        on_node[node].append(f"{name} x {g.gpus}")
    for g in groups:
        members = [pods[name] for name in g.pods()]
        placed = [p["spec"]["nodeName"] for p in members if p["spec"].get("nodeName")]
        messages = [unschedulable_message(p) for p in members if not p["spec"].get("nodeName")]
        result = verdict.results[g.name] = GroupResult(g, placed, messages)
        cliques = {nodes[n].clique for n in placed}
        if len(cliques) > 1:
            verdict.split.append(f"{g.name}: {sorted(Counter(nodes[n].clique for n in placed).items())}")
        if 0 < result.bound < g.members:
            verdict.partly_bound.append(f"{g.name}: {result.bound} of {g.members} x {g.gpus} GPUs bound")
            mine = Counter(placed)
            room = {n: left[n] + mine[n] * g.gpus for n in left}  # its own members taken back
            if holding_domains(fleet, room, g):
                verdict.partly_could_fit.append(g.name)
        elif result.bound == g.members and len(cliques) == 1:
            verdict.whole.append(g.name)
        elif result.bound == 0:
            verdict.waiting.append(g.name)
            if holding_domains(fleet, left, g):
                verdict.waiting_could_fit.append(g.name)
            if any(room >= g.gpus for room in left.values()):
                verdict.waiting_unexplained += [
                    f"{g.name}: {m or 'no PodScheduled=False condition'}"
                    for m in messages
                    if "(GroupDoesNotFit)" not in m
                ]
    if verdict.waiting or verdict.partly_bound:
        verdict.stranded = sum(max(0, room) for room in left.values())
    return verdict


def holding_domains(fleet: Fleet, left: dict[str, int], g: Group) -> list[str]:
    """The domains whose nodes hold every member of `g` on the idle healthy GPUs `left`."""
    return [
        clique
        for clique, members in fleet.cliques().items()
        if sum(max(left[n.name], 0) // g.gpus for n in members) >= g.members
    ]


def settled(kube: Kube, ns: str, groups: list[Group]) -> bool:
    """Every member bound or marked unschedulable by kube-scheduler."""
    pods = pod_states(kube, ns)
    wanted = [name for g in groups for name in g.pods()]
    return all(name in pods for name in wanted) and all(
        pods[name]["spec"].get("nodeName") or unschedulable_message(pods[name]) for name in wanted
    )
